"""The kernel Stein discrepancy: its kernel, the scores a fit stores, the scorer, the bias check."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbayes_sg import _stein
from skbayes_sg.drbm import SGBayesDRBMClassifier
from skbayes_sg.exceptions import GradientNoiseWarning
from skbayes_sg.linear_model import SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg.metrics import kernel_stein_discrepancy, ksd_scorer
from skbayes_sg.samplers import SGLD


def _ksd(x, s):
    return _stein.ksd_from_kernel(_stein.imq_stein_kernel(x, s))


def _regression(N=2000, D=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    return X, X @ rng.standard_normal(D) + rng.standard_normal(N)


# -- the kernel -----------------------------------------------------------------------
def test_stein_identity_holds_at_exact_draws():
    """``E_{x ~ p} k_p(x, y) = 0`` for every ``y``: each row mean of the Stein kernel matrix
    of exact draws is zero within its Monte Carlo error (a wrong sign or factor in any of
    the kernel's four terms breaks this)."""
    rng = np.random.default_rng(0)
    mu, sd = np.array([1.0, -2.0, 0.5]), np.array([0.5, 2.0, 1.0])
    x = mu + sd * rng.standard_normal((1500, 3))
    K = _stein.imq_stein_kernel(x, -(x - mu) / sd**2, c=1.3)
    off = K - np.diag(np.diag(K))
    means = off.sum(axis=1) / (K.shape[0] - 1)
    se = off.std(axis=1) / np.sqrt(K.shape[0] - 1)
    assert np.max(np.abs(means[:50]) / se[:50]) < 4.5


def test_ksd_of_exact_draws_goes_to_zero():
    """For independent exact draws of N(0, I_P), ``E KSD^2 = E k_p(x, x) / m = 2 P / m`` (c = 1):
    the KSD halves when the draws quadruple."""
    rng = np.random.default_rng(1)
    P = 3
    values = []
    for m in (100, 400, 1600):
        reps = [_ksd(x, -x) for x in rng.standard_normal((5, m, P))]
        values.append(np.sqrt(np.mean(np.square(reps))))
        assert abs(values[-1] ** 2 * m / (2 * P) - 1) < 0.5
    assert values[0] > 1.6 * values[1] > 2.56 * values[2]


@pytest.mark.parametrize("wrong", ["shifted_mean", "scaled_sd"])
def test_ksd_is_larger_for_wrong_draws(wrong):
    """Draws with the mean shifted by half an sd, or with the sd 1.5x too large, have a KSD
    well above the exact draws' (for every one of several replicates)."""
    rng = np.random.default_rng(2)
    P, m = 3, 800
    for _ in range(3):
        x = rng.standard_normal((m, P))
        bad = x + 0.5 if wrong == "shifted_mean" else 1.5 * x
        assert _ksd(bad, -bad) > 2.0 * _ksd(x, -x)


def test_ksd_with_a_wrong_sign_score_fails():
    """The score's sign matters: exact draws scored with ``+x`` instead of ``-x`` are far off."""
    x = np.random.default_rng(3).standard_normal((500, 3))
    assert _ksd(x, x) > 5 * _ksd(x, -x)


def test_bootstrap_is_calibrated_on_independent_exact_draws():
    """The wild bootstrap's p-values of exact independent draws are uniform (5% below 0.05
    within binomial error), and those of shifted draws are below the bias level."""
    rng = np.random.default_rng(4)
    n_rep = 200
    ps = []
    for r in range(n_rep):
        x = rng.standard_normal((100, 3))
        ps.append(_stein.bootstrap_pvalue(_stein.imq_stein_kernel(x, -x), n_bootstrap=199, seed=r))
    frac = np.mean(np.array(ps) <= 0.05)
    assert abs(frac - 0.05) < 4 * np.sqrt(0.05 * 0.95 / n_rep)
    x = rng.standard_normal((200, 3)) + 0.5
    assert _stein.bootstrap_pvalue(_stein.imq_stein_kernel(x, -x)) <= _stein.BIAS_LEVEL


@pytest.mark.parametrize("m", [5, 64, 65, 300])
def test_blockwise_statistics_equal_the_kernel_matrix(m):
    """The fit's KSD and its bias test's kernel come from row blocks of the symmetric Stein
    kernel (the upper blocks counted twice), never the (m, m) matrix: they must equal the
    matrix's mean and its kept rows and columns, for sizes below, at and across a block."""
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, 4))
    s = -1.3 * x + 0.2
    keep = _stein.thinned_index(4, m // 4, max(2, m // 3))
    for c, beta in ((1.0, -0.5), (0.7, -0.3)):
        K = _stein.imq_stein_kernel(x, s, c, beta)
        ksd, K_keep = _stein.stein_statistics(x, s, keep, c, beta)
        assert ksd == pytest.approx(_stein.ksd_from_kernel(K), rel=1e-12)
        np.testing.assert_allclose(K_keep, K[np.ix_(keep, keep)], rtol=1e-12, atol=1e-12)
    assert _stein.stein_statistics(x, s)[1] is None


def test_kernel_argument_errors():
    x = np.zeros((4, 2))
    with pytest.raises(ValueError, match="same shape"):
        _stein.imq_stein_kernel(x, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="beta"):
        _stein.imq_stein_kernel(x, x, beta=-1.5)
    with pytest.raises(ValueError, match="c must be positive"):
        _stein.imq_stein_kernel(x, x, c=0.0)


def test_thinned_index_spreads_over_every_chain():
    idx = _stein.thinned_index(4, 1000, 100)
    assert idx.size == 100
    chains = idx // 1000
    assert np.all(np.bincount(chains) == 25)
    assert idx[0] == 0 and idx[24] == 999  # first and last draw of the first chain
    assert np.array_equal(_stein.thinned_index(2, 10, 100), np.arange(20))


# -- the scores a fit stores ----------------------------------------------------------
def test_fit_scores_are_the_posterior_score_in_whitened_coordinates():
    """A conjugate linear regression whitened at the MAP by its exact Hessian is N(0, I) in
    the chains' coordinates: the stored score at every draw is exactly ``-z``."""
    X, y = _regression(N=300, D=3)
    est = SGBayesLinearRegression(noise_precision=1.0, n_iter=500, random_state=0).fit(X, y)
    stein = est._stein
    assert stein["coordinates"] == "whitened"
    np.testing.assert_allclose(stein["s"], -stein["x"], atol=1e-6 * np.abs(stein["x"]).max())


def test_fit_scores_in_scaled_coordinates():
    """Chains in theta (no preconditioner): the KSD's coordinates are theta scaled by the
    root of the posterior's diagonal curvature, where a Gaussian posterior's score is
    ``-A (x - b)`` with ``A`` the Hessian of unit diagonal, symmetric positive definite."""
    X, y = _regression(N=500, D=3)
    X = X * [1.0, 100.0, 0.01]  # units that the scaling must remove
    est = SGBayesLinearRegression(
        sampler=SGLD(step_size=1e-8, preconditioner="none"),
        gradient="minibatch",
        batch_size=100,
        noise_precision=1.0,
        normalize_y=False,
        n_iter=300,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    x, s = est._stein["x"], est._stein["s"]
    assert est._stein["coordinates"] == "scaled"
    design = np.column_stack([x, np.ones(len(x))])
    coef = np.linalg.lstsq(design, s, rcond=None)[0]
    A = -coef[:-1].T
    np.testing.assert_allclose(A, A.T, atol=1e-6)
    np.testing.assert_allclose(np.diag(A), 1.0, rtol=1e-6)
    assert np.all(np.linalg.eigvalsh(A) > 0)


def test_ksd_is_invariant_to_feature_units():
    """Whitened at the MAP, a fit on features in other units runs the same chains in ``z``:
    the KSD is the same."""
    X, y = load_breast_cancer(return_X_y=True)
    a = SGBayesLogisticRegression(n_iter=1000, random_state=0).fit(X, y)
    b = SGBayesLogisticRegression(n_iter=1000, random_state=0).fit(X * 1000.0, y)
    assert kernel_stein_discrepancy(a) == pytest.approx(kernel_stein_discrepancy(b), rel=0.02)


def test_exact_fit_ksd_is_at_its_floor():
    """Near-independent draws of the exact posterior (whitened: N(0, I)) give ``KSD^2`` about
    ``2 P / m`` (the diagonal's mean, see the kernel tests)."""
    X, y = _regression(N=300, D=3)
    est = SGBayesLinearRegression(noise_precision=1.0, n_iter=4000, random_state=0).fit(X, y)
    m, P = est._stein["x"].shape
    assert est.diagnostics_["ksd"] ** 2 * m / (2 * P) < 2.0
    assert est.diagnostics_["ksd"] == pytest.approx(kernel_stein_discrepancy(est))
    assert kernel_stein_discrepancy(est, c=2.0) != pytest.approx(kernel_stein_discrepancy(est))
    assert "kernel Stein discrepancy" in str(est.summary())
    restored = pickle.loads(pickle.dumps(est))  # keeps the default kernel's KSD only
    assert kernel_stein_discrepancy(restored) == est.diagnostics_["ksd"]
    with pytest.raises(ValueError, match="pickled"):
        kernel_stein_discrepancy(restored, c=2.0)


# -- the scorer -----------------------------------------------------------------------
def _sgld_regression(h):
    return SGBayesLinearRegression(
        sampler=SGLD(step_size=h, preconditioner="none"),
        gradient="minibatch",
        batch_size=200,
        noise_precision=1.0,
        normalize_y=False,
        fit_intercept=False,
        n_iter=3000,
        random_state=0,
    )


def test_ksd_scorer_in_grid_search_picks_an_unbiased_step():
    """Over steps from good to biased (the sd 2.4x too large at 3e-4) on a conjugate
    regression, GridSearchCV(scoring=ksd_scorer) picks the small step; scored by MSE the
    settings are indistinguishable."""
    X, y = _regression()
    grid = [SGLD(step_size=h, preconditioner="none") for h in (3e-5, 3e-4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search = GridSearchCV(
            _sgld_regression(3e-5), {"sampler": grid}, scoring=ksd_scorer, cv=KFold(2, shuffle=True, random_state=0)
        ).fit(X, y)
    assert search.best_params_["sampler"].step_size == 3e-5
    assert np.all(search.cv_results_["mean_test_score"] < 0)


def test_ksd_scorer_in_multi_metric_scoring_and_pipelines():
    X, y = load_breast_cancer(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), SGBayesLogisticRegression(n_iter=500, random_state=0))
    res = cross_validate(pipe, X, y, cv=2, scoring={"ksd": ksd_scorer, "log_loss": "neg_log_loss"})
    assert np.all(res["test_ksd"] < 0) and np.all(res["test_log_loss"] < 0)
    pipe.fit(X, y)
    assert ksd_scorer(pipe, X, y) == -pipe[-1].diagnostics_["ksd"]


def test_ksd_errors_name_the_problem():
    with pytest.raises(ValueError, match="not fitted"):
        kernel_stein_discrepancy(SGBayesLogisticRegression())
    X, y = load_breast_cancer(return_X_y=True)
    drbm = SGBayesDRBMClassifier(n_hidden=2, n_iter=50, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        drbm.fit(X[:100] / X.max(axis=0), y[:100])
    with pytest.raises(ValueError, match="multimodal"):
        ksd_scorer(drbm, X, y)


# -- the bias check -------------------------------------------------------------------
def _silent_fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientNoiseWarning)
        return est.fit(X, y)


def _exact_draws_pvalue(est):
    """The bias test on the KSD draws a fit kept, as the fit would have run it."""
    ess = float(np.min(est.diagnostics_["ess"]))
    return _stein.fit_ksd(est._stein["x"], est._stein["s"], ess, est.samples_.shape[0])[1]


def test_bias_check_is_silent_on_exact_default_fits():
    # The small default fits run HMC, Metropolis-adjusted: the fit skips the test (its
    # stationary distribution is the posterior), but the test, run on those exact draws,
    # must not reject them.
    X, y = load_breast_cancer(return_X_y=True)
    est = _silent_fit(SGBayesLogisticRegression(random_state=0), X, y)
    assert "ksd_pvalue" not in est.diagnostics_ and est.diagnostics_["ksd"] > 0
    assert _exact_draws_pvalue(est) > _stein.BIAS_LEVEL
    X, y = _regression()
    est = _silent_fit(SGBayesLinearRegression(random_state=0), X, y)
    assert "ksd_pvalue" not in est.diagnostics_
    assert _exact_draws_pvalue(est) > _stein.BIAS_LEVEL
    # Past the exact sampler's size (N (P + 30) > 2e6) the default is minibatch mCCAdL, whose
    # fit runs the test.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60_000, 10))
    y = (rng.random(60_000) < 1 / (1 + np.exp(-X @ rng.standard_normal(10)))).astype(int)
    est = _silent_fit(SGBayesLogisticRegression(random_state=0), X, y)
    assert est.diagnostics_["ksd_pvalue"] > _stein.BIAS_LEVEL


def test_bias_check_warns_on_a_biased_fit():
    """SGLD with plain gradients at a step the minibatch noise inflates (sds 2.4x), started
    at zeros so that no MAP is computed and the predicted-noise check has no probe: the KSD
    test warns, naming the step size."""
    X, y = _regression()
    with pytest.warns(GradientNoiseWarning, match="Stein discrepancy.*Decrease step_size"):
        est = _sgld_regression(3e-4).set_params(init="zeros").fit(X, y)
    assert est.diagnostics_["ksd_pvalue"] <= _stein.BIAS_LEVEL


def test_partial_fit_reports_the_ksd_of_each_call_on_its_own_budget():
    """Each partial_fit call scores its own draws, with a budget from its own gradient work
    (not the stream's running total)."""
    X, y = _regression(N=1000, D=3)
    est = SGBayesLinearRegression(n_iter=200, batch_size=50, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        spent = 0
        for part in np.array_split(np.arange(1000), 4):
            est.partial_fit(X[part], y[part])
            this_call, spent = est.diagnostics_["n_grad_evals"] - spent, est.diagnostics_["n_grad_evals"]
            stored = est.samples_.shape[0] * est.samples_.shape[1]
            assert np.isfinite(est.diagnostics_["ksd"])
            m = _stein.n_ksd_draws(stored, this_call, part[-1] + 1)
            # ceil(m / n_chains) draws of every chain
            assert est._stein["x"].shape[0] == _stein.thinned_index(est.n_chains, stored // est.n_chains, m).size


@pytest.mark.parametrize("sampler", ["hmc", "mccadl"])
def test_the_ksd_scored_beside_the_summary_is_the_one_scored_after(sampler, monkeypatch):
    # With a second core (n_jobs=2) the KSD of each block's draws is computed in a thread while
    # the summary decides whether to stop; with n_jobs=1 it is scored after. The chains' draws
    # do not depend on n_jobs, so neither may the KSD nor its bias test, bit for bit; the
    # thread's result must be the one used, and a block the run goes on from must not lend
    # its draws' KSD to the next (mCCAdL on 100 rows: several blocks).
    from skbayes_sg._fit import _ksd

    used = []
    result = _ksd.SpeculativeKSD.result

    def record(self, thetas, n_grad):
        out = result(self, thetas, n_grad)
        used.append(out is not None)
        return out

    monkeypatch.setattr(_ksd.SpeculativeKSD, "result", record)
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)[:100]
    y = y[:100]
    fits = {}
    for n_jobs in (1, 2):
        batch = None if sampler == "hmc" else 20
        est = SGBayesLogisticRegression(sampler=sampler, random_state=3, n_jobs=n_jobs, batch_size=batch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits[n_jobs] = est.fit(X, y)
    one, two = fits[1], fits[2]
    np.testing.assert_array_equal(one.samples_, two.samples_)
    assert used == [True]
    if sampler == "mccadl":
        assert len(two.diagnostics_["n_iter_blocks"]) > 1
        assert two.diagnostics_["ksd_pvalue"] == one.diagnostics_["ksd_pvalue"]
    assert two.diagnostics_["ksd"] == one.diagnostics_["ksd"]
    np.testing.assert_array_equal(two._stein["s"], one._stein["s"])
