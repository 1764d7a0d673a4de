"""Prediction cost: the predictive in blocks of rows and draws, and ``n_predict_draws``."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError

import skbayes_sg._estimator as estimator_module
from skbayes_sg import SGBayesDRBMClassifier, SGBayesLinearRegression, SGBayesLogisticRegression, diagnostics
from skbayes_sg._estimator import BaseSGBayes

#: The documented claim of n_predict_draws="auto": MC error at most 0.05 posterior sd.
PREDICT_MCSE = 0.05


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def default_fit(cancer):
    """Every default (n_iter="auto": min bulk ESS >= 1,000), so "auto" thins the draws."""
    X, y = cancer
    # mCCAdL: a long run, whose predictive "auto" thins (HMC meets the ESS target in 500 iterations).
    return SGBayesLogisticRegression(sampler="mccadl", random_state=0).fit(X, y)


@pytest.fixture
def tiny_blocks(monkeypatch):
    """A 97-float budget: every prediction below runs in many blocks of rows and of draws."""
    monkeypatch.setattr(estimator_module, "_PREDICT_CHUNK", 97)
    monkeypatch.setattr(estimator_module, "_PREDICT_MIN_ROWS", 8)


def _multiclass_data(seed=0, n=150, classes=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    return X, np.argmax(X[:, :classes] + 0.5 * rng.normal(size=(n, classes)), axis=1)


@pytest.mark.parametrize("sparse", [False, True])
def test_blocked_predictive_equals_naive_average(cancer, tiny_blocks, sparse):
    X, y = cancer
    clf = SGBayesLogisticRegression(n_iter=200, n_chains=2, random_state=0, n_predict_draws=None).fit(X, y)
    Xq = sp.csr_matrix(X[:60]) if sparse else X[:60]
    assert len(BaseSGBayes._predict_blocks(60, 320, 2)) > 10
    naive = clf.predict_proba_samples(Xq).mean(axis=0)
    np.testing.assert_allclose(clf.predict_proba(Xq), naive, rtol=0, atol=1e-12)


def test_blocked_predictive_equals_naive_average_softmax_and_drbm(tiny_blocks):
    X, y = _multiclass_data()
    for est in (
        SGBayesLogisticRegression(n_iter=100, n_chains=2, random_state=0, n_predict_draws=None),
        SGBayesDRBMClassifier(n_hidden=4, n_iter=60, n_chains=2, random_state=0, n_predict_draws=None),
    ):
        est.fit(X, y)
        naive = est.predict_proba_samples(X[:40]).mean(axis=0)
        np.testing.assert_allclose(est.predict_proba(X[:40]), naive, rtol=0, atol=1e-12)


def test_blocked_regression_std_equals_naive(tiny_blocks):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 3))
    y = 50.0 + X @ [1.0, -2.0, 0.5] + rng.normal(size=120)  # a large mean: centring matters
    reg = SGBayesLinearRegression(n_iter=150, n_chains=2, random_state=0, n_predict_draws=None).fit(X, y)
    mu = reg._model.predict_draws(reg._flat_samples(), X[:30])
    mean, std = reg.predict(X[:30], return_std=True)
    np.testing.assert_allclose(mean, mu.mean(axis=0), rtol=0, atol=1e-12)
    naive_std = np.sqrt(mu.var(axis=0) + np.mean(1.0 / reg.noise_precision_samples_))
    np.testing.assert_allclose(std, naive_std, rtol=1e-12)
    # The mean is linear in the draws: it is the posterior mean of all of them whatever
    # n_predict_draws (only the std uses the thinned draws).
    reg.set_params(n_predict_draws=10)
    np.testing.assert_allclose(reg.predict(X[:30]), mean, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "n_rows, n_draws, n_outputs", [(1, 1, 1), (7, 4000, 2), (200_000, 4000, 2), (300, 50, 26), (10**6, 3, 1)]
)
def test_predict_blocks_cover_every_cell_once_within_budget(n_rows, n_draws, n_outputs):
    blocks = BaseSGBayes._predict_blocks(n_rows, n_draws, n_outputs)
    covered = sum((r.stop - r.start) * (d.stop - d.start) for r, d in blocks)
    assert covered == n_rows * n_draws
    assert all(r.stop <= n_rows and d.stop <= n_draws for r, d in blocks)
    assert max((r.stop - r.start) * (d.stop - d.start) for r, d in blocks) * n_outputs <= max(
        estimator_module._PREDICT_CHUNK, n_outputs
    )
    if n_draws * n_outputs * min(n_rows, estimator_module._PREDICT_MIN_ROWS) <= estimator_module._PREDICT_CHUNK:
        assert all(d == slice(0, n_draws) for _, d in blocks)  # X read once: every draw per row block


def test_n_predict_draws_int_thins_evenly_within_each_chain(cancer):
    X, y = cancer
    clf = SGBayesLogisticRegression(n_iter=300, n_chains=3, random_state=0, n_predict_draws=50).fit(X, y)
    C, S = clf.samples_.shape[:2]
    assert clf.n_predict_draws_ == 48  # rounded down to a multiple of the 3 chains
    keep = np.linspace(0, S - 1, 16).round().astype(int)
    draws = clf.predict_proba_samples(X[:20]).reshape(C, S, 20, 2)[:, keep]
    np.testing.assert_allclose(clf.predict_proba(X[:20]), draws.mean(axis=(0, 1)), rtol=0, atol=1e-12)
    clf.set_params(n_predict_draws=None)
    assert clf.n_predict_draws_ == C * S
    clf.set_params(n_predict_draws=2)  # at least one draw per chain
    assert clf.n_predict_draws_ == 3


def test_auto_keeps_every_draw_when_the_ess_is_too_low(cancer):
    X, y = cancer
    clf = SGBayesLogisticRegression(n_iter=100, n_chains=2, random_state=0).fit(X, y)
    assert np.min(clf.diagnostics_["ess"]) <= PREDICT_MCSE**-2
    assert clf.n_predict_draws_ == clf.samples_.shape[0] * clf.samples_.shape[1]


def test_auto_predictive_mc_error_is_within_its_bound(default_fit, cancer):
    """The claim behind "auto": the thinned predictive's Monte Carlo standard error is at most
    0.05 posterior sd of each probability. Checked on the predictive itself (not the
    parameters whose ESS chose the draws), with its own MCSE estimate, on every row."""
    clf = default_fit
    X, _ = cancer
    C, S = clf.samples_.shape[:2]
    ess = np.min(clf.diagnostics_["ess"])
    assert ess > 1000 and C * S >= 2000
    expected = C * int(np.ceil(1.0 / (PREDICT_MCSE**2 - 1.0 / ess) / C))
    assert clf.n_predict_draws_ == expected < C * S / 2
    p = clf.predict_proba_samples(X)[:, :, 1]
    sd = p.std(axis=0)
    rows = sd > 1e-3  # rows whose probability the posterior leaves uncertain
    assert rows.sum() > 50
    kept = p[clf._predict_index()].reshape(C, -1, X.shape[0])[:, :, rows]
    ratio = diagnostics.mcse_mean(kept) / sd[rows]
    # The estimated MCSE itself has a relative error of about 1/sqrt(2 * draws kept) ~ 3%.
    assert np.median(ratio) <= PREDICT_MCSE * 1.1
    assert np.quantile(ratio, 0.9) <= PREDICT_MCSE * 1.3
    # And the thinned average is that close to the average over every draw.
    diff = np.abs(clf.predict_proba(X)[rows, 1] - p[:, rows].mean(axis=0)) / sd[rows]
    assert np.sqrt(np.mean(diff**2)) <= PREDICT_MCSE


@pytest.mark.parametrize("value", [0, -3, 2.5, "all"])
def test_n_predict_draws_validation(cancer, value):
    X, y = cancer
    with pytest.raises(InvalidParameterError, match="n_predict_draws"):
        SGBayesLogisticRegression(n_iter=20, n_predict_draws=value).fit(X, y)


@pytest.fixture(scope="module")
def large_n_fit():
    """A concentrated posterior (4,000 rows, 4 features), where the control variate applies."""
    rng = np.random.default_rng(31)
    X = rng.normal(size=(4000, 4))
    y = (rng.random(4000) < 1.0 / (1.0 + np.exp(-(X @ [1.0, -0.5, 0.25, 0.0] + 0.3)))).astype(int)
    return SGBayesLogisticRegression(random_state=0).fit(X, y), X


def test_auto_binary_predictive_control_variate_is_the_all_draws_average(large_n_fit):
    """``n_predict_draws="auto"`` for the binary logistic regression: the tangent control variate
    on ``PREDICT_CV_DRAWS`` draws estimates the average over every draw within its own Monte
    Carlo error (estimated from the residuals of those draws), row by row; rows whose linear
    predictor spreads more get the plain average. The mean draw's probability alone, or the
    plain average of the same few draws, is many standard errors off."""
    from skbayes_sg import _classifier

    clf, X = large_n_fit
    X = np.vstack([X[:300], 60.0 * X[:5]])  # rows far out: a wide linear predictor, the plain average
    thetas, mean = clf._predict_control_variate()
    assert thetas.shape[0] == _classifier.PREDICT_CV_DRAWS < clf.n_predict_draws_
    proba = clf.predict_proba(X)
    p_all = clf.predict_proba_samples(X)[:, :, 1].mean(axis=0)
    W, b = thetas[:, :-1], thetas[:, -1]
    Z = X @ W.T + b
    m = X @ mean[:-1] + mean[-1]
    s = 1.0 / (1.0 + np.exp(-m))
    residual = 1.0 / (1.0 + np.exp(-Z)) - (s * (1.0 - s))[:, None] * (Z - m[:, None])
    spread = ((Z - m[:, None]) ** 2).mean(axis=1)
    rows = (spread <= _classifier.PREDICT_CV_VARIANCE) & (residual.std(axis=1) > 1e-6)
    wide = spread > _classifier.PREDICT_CV_VARIANCE
    assert rows.sum() > 50 and wide[-5:].all()
    se = residual.std(axis=1, ddof=1)[rows] / np.sqrt(Z.shape[1])
    t = (proba[rows, 1] - p_all[rows]) / se
    # Nearly independent draws (thinned far beyond the autocorrelation): t ~ N(0, 1) per row
    # (seen: max 4.4 over 300 rows, mean square 1.7; the wrong estimates below: 46 and 56,000).
    assert np.abs(t).max() < 6.0 and np.mean(t**2) < 4.0
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(proba[wide], clf._predict_proba_draws(X[wide]), rtol=0, atol=1e-15)
    for wrong in (s, (1.0 / (1.0 + np.exp(-Z))).mean(axis=1)):
        assert np.mean(((wrong[rows] - p_all[rows]) / se) ** 2) > 10.0
