"""The linear estimators as scikit-learn users meet them."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_iris, make_regression
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from skbayes_sg import DivergenceError, SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg.samplers import SGHMC, SGLD, SGNHT, MCCAdL

FAST = dict(n_iter=300, n_chains=2, random_state=0)


def _expected_failed_checks(estimator):
    # Weights and repeated rows give the same posterior and the same log density to
    # rounding, but the check shuffles the weighted rows: sums in another order differ in
    # the last bit, and 300 iterations of a chaotic sampler amplify that to ~1e-6 in the
    # predictions, above the check's rtol of 1e-7; the default full-data kernel (HMC) can
    # flip an accept decision on such a difference (tests/test_sample_weight.py compares
    # the posteriors, HMC's included).
    reason = "stochastic sampler: weighted and repeated rows agree in distribution, not to 1e-7"
    return {
        "check_sample_weight_equivalence_on_dense_data": reason,
        "check_sample_weight_equivalence_on_sparse_data": reason,
    }


@parametrize_with_checks(
    [SGBayesLogisticRegression(**FAST), SGBayesLinearRegression(**FAST)], expected_failed_checks=_expected_failed_checks
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def regression():
    X, y, coef = make_regression(n_samples=300, n_features=5, noise=1.0, coef=True, random_state=0)
    return StandardScaler().fit_transform(X), (y - y.mean()) / y.std()


# -- fitted attributes ------------------------------------------------------------------


def test_classifier_attributes_and_predictive(cancer):
    X, y = cancer
    labels = np.where(y == 1, "benign", "malignant")
    # mCCAdL: its draws' ESS keeps every draw in predict_proba's average, which the check below
    # compares with the mean of all of them (HMC's nearly independent draws get thinned).
    clf = SGBayesLogisticRegression(sampler="mccadl", n_iter=500, burn_in=0.2, n_chains=3, random_state=0)
    clf.fit(X, labels)
    assert list(clf.classes_) == ["benign", "malignant"]
    P = X.shape[1] + 1
    assert clf.samples_.shape == (3, 400, P)
    assert clf.coef_.shape == (1, X.shape[1]) and clf.intercept_.shape == (1,)
    assert clf.coef_samples_.shape == (1200, 1, X.shape[1])
    assert clf.intercept_samples_.shape == (1200, 1)
    np.testing.assert_allclose(clf.coef_, clf.coef_samples_.mean(axis=0))
    proba = clf.predict_proba(X[:7])
    samples = clf.predict_proba_samples(X[:7])
    assert samples.shape == (1200, 7, 2)
    np.testing.assert_allclose(proba, samples.mean(axis=0))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(X[:7])), proba)
    assert clf.score(X, labels) > 0.95
    d = clf.diagnostics_
    assert d["ess"].shape == (P,) and d["rhat"].shape == (P,)
    # 569 rows x 31 parameters: a full gradient is as cheap as an iteration's overhead, so
    # batch_size="auto" uses the full data; mCCAdL evaluates the force once at the start,
    # then once per iteration, and has no C step without minibatch noise.
    assert d["batch_size"] is None and d["gradient"] == "full" and d["preconditioner"] == "dense"
    assert d["n_grad_evals"] == 3 * (1 + 500) * X.shape[0]
    assert d["step_size"] == pytest.approx(0.2) and d["lambda_max"] == 1.0
    # With minibatches: one minibatch per iteration, the force's, whose per-example gradients
    # also give the C step's Sigma under control variates (MCCAdL's sigma_estimate="auto"),
    # each a control-variate difference (two gradient evaluations per row).
    mini = SGBayesLogisticRegression(n_iter=50, n_chains=2, batch_size=200, random_state=0).fit(X, y)
    d = mini.diagnostics_
    assert d["gradient"] == "control_variate" and d["noise_eigenvalue"] > 0
    assert d["n_grad_evals"] == 2 * (1 + 50) * 200 * 2
    # ...and one more, independent, per iteration for Sigma with sigma_estimate="independent".
    mini = SGBayesLogisticRegression(
        sampler=MCCAdL(sigma_estimate="independent"), n_iter=50, n_chains=2, batch_size=200, random_state=0
    ).fit(X, y)
    assert mini.diagnostics_["n_grad_evals"] == 2 * (1 + 2 * 50) * 200 * 2
    assert clf.n_iter_ == 500


def test_diagnostics_match_arviz_on_the_fitted_draws(cancer):
    az = pytest.importorskip("arviz")
    X, y = cancer
    clf = SGBayesLogisticRegression(n_iter=400, n_chains=3, random_state=0).fit(X, y)
    for j in (0, 7, X.shape[1]):
        draws = clf.samples_[:, :, j]
        assert clf.diagnostics_["rhat"][j] == pytest.approx(float(az.rhat(draws)), rel=1e-8)
        assert clf.diagnostics_["ess"][j] == pytest.approx(float(az.ess(draws)), rel=1e-8)


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_verbose_progress_bar_does_not_change_the_draws(cancer, capsys, n_jobs):
    X, y = cancer
    kw = dict(sampler="mccadl", n_iter=100, n_chains=2, random_state=0, n_jobs=n_jobs)
    quiet = SGBayesLogisticRegression(verbose=0, **kw).fit(X, y)
    assert capsys.readouterr().err == ""
    loud = SGBayesLogisticRegression(verbose=1, **kw).fit(X, y)
    err = capsys.readouterr().err
    assert "MCCAdL, 2 chains" in err and "200/200" in err
    np.testing.assert_array_equal(quiet.samples_, loud.samples_)


def test_plain_progress_bar_without_tqdm(monkeypatch, capsys):
    import builtins

    from skbayes_sg._progress import progress_bar

    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    with progress_bar(400, "SGHMC, 4 chains") as bar:
        bar.update(100)
        bar.update(300)
    line = capsys.readouterr().err.split("\r")[-1]
    assert line.startswith("SGHMC, 4 chains: 400/400 iterations (100%)") and "it/s" in line


def test_multiclass_attributes():
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clf = SGBayesLogisticRegression(n_iter=400, n_chains=2, random_state=0).fit(X, y)
    assert clf.coef_.shape == (3, 4) and clf.intercept_.shape == (3,)
    # HMC from draws of the Laplace approximation discards 10% (burn_in="auto").
    assert clf.coef_samples_.shape == (720, 3, 4)
    assert clf.predict_proba_samples(X[:5]).shape == (720, 5, 3)
    assert clf.score(X, y) > 0.9


def test_regressor_attributes_and_predictive(regression):
    X, y = regression
    # mCCAdL: every draw in the predictive's average (as above).
    reg = SGBayesLinearRegression(sampler="mccadl", n_iter=600, burn_in=0.2, n_chains=2, random_state=0).fit(X, y)
    assert reg.coef_.shape == (5,) and isinstance(reg.intercept_, float)
    assert reg.coef_samples_.shape == (960, 5) and reg.intercept_samples_.shape == (960,)
    assert reg.noise_precision_samples_.shape == (960,)
    mean, std = reg.predict(X[:4], return_std=True)
    mu = reg.coef_samples_ @ X[:4].T + reg.intercept_samples_[:, None]
    np.testing.assert_allclose(mean, mu.mean(axis=0))
    np.testing.assert_allclose(std**2, mu.var(axis=0) + np.mean(1 / reg.noise_precision_samples_))
    ys = reg.sample_y(X[:4], n_samples=3, random_state=0)
    assert ys.shape == (4, 3)
    np.testing.assert_array_equal(ys, reg.sample_y(X[:4], n_samples=3, random_state=0))
    assert reg.score(X, y) > 0.99


def test_regressor_noise_precision_fixed_or_sampled(regression):
    X, y = regression
    resid_var = 1.0 - SGBayesLinearRegression(n_iter=200, n_chains=1, random_state=0).fit(X, y).score(X, y)
    sampled = SGBayesLinearRegression(n_iter=1500, n_chains=2, random_state=0).fit(X, y)
    # The noise precision's posterior sits near 1 / residual variance.
    assert sampled.noise_precision_ == pytest.approx(1.0 / resid_var, rel=0.3)
    assert sampled.noise_precision_samples_.std() > 0
    fixed = SGBayesLinearRegression(n_iter=300, n_chains=1, noise_precision=3.0, random_state=0).fit(X, y)
    assert fixed.noise_precision_ == 3.0 and fixed.samples_.shape[-1] == 6
    np.testing.assert_array_equal(fixed.noise_precision_samples_, 3.0)


def test_predictive_std_matches_exact_posterior_predictive():
    """With the noise known and small steps, return_std is the conjugate predictive sd."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = X @ [1.0, -2.0] + 0.3 + rng.normal(size=200)
    reg = SGBayesLinearRegression(
        sampler=SGLD(step_size=2e-4),
        noise_precision=1.0,
        batch_size=None,
        n_iter=6000,
        n_chains=4,
        random_state=0,
        normalize_y=False,
        alpha_intercept=1.0,
    ).fit(X, y)
    Xa = np.column_stack([X, np.ones(200)])
    S = np.linalg.inv(Xa.T @ Xa + np.eye(3))
    Xq = np.array([[0.0, 0.0], [3.0, -3.0]])
    Xqa = np.column_stack([Xq, np.ones(2)])
    exact_sd = np.sqrt(np.einsum("ij,jk,ik->i", Xqa, S, Xqa) + 1.0)
    _, sd = reg.predict(Xq, return_std=True)
    np.testing.assert_allclose(sd, exact_sd, rtol=0.02)


# -- reproducibility -----------------------------------------------------------------------


def test_same_random_state_same_draws_whatever_n_jobs(cancer):
    X, y = cancer
    kw = dict(n_iter=200, n_chains=3, random_state=42)
    a = SGBayesLogisticRegression(n_jobs=1, **kw).fit(X, y)
    b = SGBayesLogisticRegression(n_jobs=2, **kw).fit(X, y)
    np.testing.assert_array_equal(a.samples_, b.samples_)
    c = SGBayesLogisticRegression(n_jobs=1, **{**kw, "random_state": 43}).fit(X, y)
    assert not np.array_equal(a.samples_, c.samples_)
    # Chains are independent streams, not copies of each other.
    assert not np.array_equal(a.samples_[0], a.samples_[1])


def test_epoch_scheme_reproducible_and_accurate(cancer):
    X, y = cancer
    kw = dict(n_iter=400, n_chains=2, random_state=1, batch_scheme="epochs")
    a = SGBayesLogisticRegression(**kw).fit(X, y)
    b = SGBayesLogisticRegression(**kw).fit(X, y)
    np.testing.assert_array_equal(a.samples_, b.samples_)
    assert a.score(X, y) > 0.95


# -- warm start -------------------------------------------------------------------------------


def test_warm_start_continues_the_chains(cancer):
    X, y = cancer
    # mCCAdL: one full-data gradient per iteration (HMC takes a varying number).
    kw = dict(sampler="mccadl", n_iter=200, burn_in=0.2, n_chains=2, warm_start=True, random_state=0)
    clf = SGBayesLogisticRegression(**kw)
    clf.fit(X, y)
    first = clf.samples_.copy()
    states = [s.theta.copy() for s in clf._chain_states]
    evals = clf.diagnostics_["n_grad_evals"]
    clf.fit(X, y)
    assert clf.n_iter_ == 400
    assert clf.samples_.shape == (2, 160 + 200, X.shape[1] + 1)
    np.testing.assert_array_equal(clf.samples_[:, :160], first)
    # The continuation reuses each chain's last force: exactly one (full-data) force per
    # iteration.
    assert clf.diagnostics_["n_grad_evals"] == evals + 2 * 200 * X.shape[0]
    # The continuation starts where each chain stopped: its first step is a small move.
    step = np.linalg.norm(clf.samples_[:, 160] - np.array(states), axis=1)
    spread = np.linalg.norm(first.std(axis=1), axis=1)
    assert np.all(step < 3 * spread)
    cold = clone(clf).set_params(warm_start=False).fit(X, y)
    assert cold.n_iter_ == 200


def test_warm_start_keeps_memory_bounded(cancer):
    X, y = cancer
    kw = dict(n_iter=300, burn_in=0.2, n_chains=1, warm_start=True, max_draws=100, random_state=0)
    clf = SGBayesLogisticRegression(**kw).fit(X, y)
    assert clf.samples_.shape[1] == 80 and clf.diagnostics_["thin"] == 3
    clf.fit(X, y)
    # 540 iterations after burn-in: the grid coarsens from 3 to 6 (a multiple, so the draws
    # kept so far stay evenly spaced), as one fit of 600 iterations would thin them.
    assert clf.samples_.shape[1] == 90 and clf.diagnostics_["thin"] == 6


def test_max_draws_raises_thinning(cancer):
    X, y = cancer
    clf = SGBayesLogisticRegression(n_iter=1000, burn_in=0, n_chains=1, max_draws=100, random_state=0)
    clf.fit(X, y)
    assert clf.samples_.shape == (1, 100, 31) and clf.diagnostics_["thin"] == 10


# -- divergence ---------------------------------------------------------------------------------


def test_divergence_raises_with_sampler_step_and_iteration(cancer):
    X, y = cancer
    clf = SGBayesLogisticRegression(sampler=SGHMC(step_size=50.0), n_iter=200, n_chains=2, random_state=0)
    with pytest.raises(DivergenceError, match=r"SGHMC diverged.*step_size=50.*smaller step_size") as info:
        clf.fit(X, y)
    assert info.value.sampler == "SGHMC" and info.value.step_size == 50.0
    assert 1 <= info.value.iteration <= 200
    assert "increase the friction" in str(info.value)


def test_sgld_divergence_advice_names_no_friction(cancer):
    # SGLD has no friction: its divergence advice must not tell the user to increase one.
    X, y = cancer
    clf = SGBayesLogisticRegression(sampler=SGLD(step_size=100.0), n_iter=400, n_chains=1, random_state=0)
    with pytest.raises(DivergenceError, match=r"SGLD diverged.*smaller step_size.*standardise the features") as info:
        clf.fit(X, y)
    assert "friction" not in str(info.value)
    with pytest.raises(NotFittedError):
        clf.predict(X)


def test_divergence_crosses_process_boundary(cancer):
    X, y = cancer
    # |1 - h alpha| = 99: the prior's pull alone overflows within a few hundred steps.
    clf = SGBayesLogisticRegression(sampler=SGLD(step_size=100.0), n_iter=400, n_chains=2, n_jobs=2, random_state=0)
    with pytest.raises(DivergenceError) as info:
        clf.fit(X, y)
    assert info.value.sampler == "SGLD"


# -- sklearn composition -----------------------------------------------------------------------


def test_pipeline_clone_and_pickle(cancer):
    X, y = cancer
    pipe = make_pipeline(StandardScaler(), SGBayesLogisticRegression(sampler=SGHMC(friction=2.0), **FAST))
    pipe.fit(X, y)
    twin = clone(pipe)
    assert twin[-1].sampler.friction == 2.0 and twin[-1].sampler is not pipe[-1].sampler
    restored = pickle.loads(pickle.dumps(pipe))
    np.testing.assert_array_equal(restored.predict_proba(X[:5]), pipe.predict_proba(X[:5]))
    # The fitted estimator carries neither the training data nor a second copy of the draws.
    assert restored[-1]._model.X is None
    assert len(pickle.dumps(pipe[-1])) < 1.2 * pipe[-1].samples_.nbytes


def test_grid_search_over_sampler_step_size(cancer):
    X, y = cancer
    grid = GridSearchCV(SGBayesLogisticRegression(sampler=SGHMC(), **FAST), {"sampler__step_size": [1e-3, 1e-2]}, cv=2)
    grid.fit(X, y)
    assert grid.best_params_["sampler__step_size"] in (1e-3, 1e-2)
    assert grid.best_estimator_.diagnostics_["step_size"] == grid.best_params_["sampler__step_size"]


def test_grid_search_over_sampler_itself(regression):
    X, y = regression
    grid = GridSearchCV(SGBayesLinearRegression(**FAST), {"sampler": ["sgld", "sghmc", SGNHT(friction=5.0)]}, cv=2)
    grid.fit(X, y)
    assert len(grid.cv_results_["params"]) == 3
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("Est", [SGBayesLogisticRegression, SGBayesLinearRegression])
@pytest.mark.parametrize(
    "X, y, error, match",
    [
        ([[0.0, np.nan], [1.0, 2.0]], [0, 1], ValueError, "NaN"),
        ([[0.0, np.inf], [1.0, 2.0]], [0, 1], ValueError, "infinity"),
        ([0.0, 1.0, 2.0], [0, 1, 0], ValueError, "2D array"),
        (np.empty((0, 3)), [], ValueError, "0 sample"),
        ([["a", "b"], ["c", "d"]], [0, 1], ValueError, "could not convert"),
        ([[0.0, 1.0], [1.0, 2.0], [2.0, 2.0]], [0, 1], ValueError, "inconsistent numbers of samples"),
    ],
)
def test_bad_data_raises(Est, X, y, error, match):
    with pytest.raises(error, match=match):
        Est(**FAST).fit(X, y)


def test_bad_targets():
    X = np.random.default_rng(0).normal(size=(10, 2))
    with pytest.raises(ValueError, match="only one class"):
        SGBayesLogisticRegression(**FAST).fit(X, np.zeros(10))
    with pytest.raises(ValueError, match="Unknown label type"):
        SGBayesLogisticRegression(**FAST).fit(X, np.linspace(0, 1, 10))
    with pytest.raises(ValueError, match="NaN"):
        SGBayesLinearRegression(**FAST).fit(X, np.r_[np.nan, np.zeros(9)])
    with pytest.raises(ValueError, match="could not convert|numeric"):
        SGBayesLinearRegression(**FAST).fit(X, np.array(["a"] * 10))


@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"sampler": "nuts"}, ValueError, "Unknown sampler 'nuts'"),
        ({"sampler": 3}, TypeError, "'sampler' parameter"),
        (
            {"sampler": SGLD(step_size=-1.0)},
            ValueError,
            r"'step_size' parameter of SGLD must be a float in the range \(0",
        ),
        (
            {"sampler": SGHMC(friction=0.0)},
            ValueError,
            r"'friction' parameter of SGHMC must be a float in the range \(0",
        ),
        ({"burn_in": 300}, ValueError, "burn_in must be below n_iter"),
        ({"burn_in": 1.5}, ValueError, "'burn_in' parameter"),
        ({"n_iter": 0}, ValueError, "'n_iter' parameter"),
        ({"thin": 0}, ValueError, "'thin' parameter"),
        ({"n_chains": 0}, ValueError, "'n_chains' parameter"),
        ({"batch_size": 0}, ValueError, "'batch_size' parameter"),
        ({"batch_scheme": "sequential"}, ValueError, "'batch_scheme' parameter"),
        ({"alpha": 0.0}, ValueError, "'alpha' parameter"),
        ({"init": "random"}, ValueError, "'init' parameter"),
        ({"init": np.zeros(7)}, ValueError, r"init array has shape \(7,\)"),
        ({"init": np.full(3, np.nan)}, ValueError, "init contains NaN"),
    ],
)
def test_bad_parameters_raise(params, error, match):
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = np.arange(20) % 2
    with pytest.raises(error, match=match):
        SGBayesLogisticRegression(**{**FAST, **params}).fit(X, y)


def test_batch_size_larger_than_data_is_clipped_with_warning():
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = np.arange(20) % 2
    with pytest.warns(UserWarning, match="batch_size=50 is larger than the number of samples"):
        clf = SGBayesLogisticRegression(batch_size=50, **FAST).fit(X, y)
    assert clf.diagnostics_["batch_size"] == 20


def test_predict_before_fit_and_wrong_features(cancer):
    X, y = cancer
    with pytest.raises(NotFittedError):
        SGBayesLogisticRegression().predict_proba(X)
    with pytest.raises(NotFittedError):
        SGBayesLinearRegression().predict(X)
    clf = SGBayesLogisticRegression(**FAST).fit(X, y)
    with pytest.raises(ValueError, match="has 3 features, but SGBayesLogisticRegression is expecting 30"):
        clf.predict(X[:, :3])
    with pytest.raises(ValueError, match="expecting 30"):
        clf.predict_proba_samples(X[:, :3])


def test_features_whose_products_overflow_give_a_clear_error():
    # Issue 20: X of size 1e300 leaked numpy overflow warnings and an error that advised
    # init='zeros', which does not help (the MAP also sets the preconditioner).
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 3)) * 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="Standardise the features"):
            SGBayesLogisticRegression(n_iter=20, init="zeros").fit(X, [0, 1])


def _documented(cls, section):
    """``{name: entry text}`` of a numpydoc section of ``cls``'s docstring."""
    import re

    doc = cls.__doc__
    start = doc.index(f"\n    {section}\n    {'-' * len(section)}\n") + len(section) * 2 + 11
    end = re.search(r"\n\n    \w[\w ]*\n    -+\n", doc[start:])
    text = doc[start : start + end.start()] if end else doc[start:]
    parts = re.split(r"^    (\w+) : ", text, flags=re.M)[1:]
    return dict(zip(parts[::2], parts[1::2]))


# Entries the estimators document differently on purpose (the DRBM's run-length defaults and
# random start, the linear models' priors) or that the DRBM extends.
_OWN_DOC = {
    "sampler",  # the DRBM keeps mCCAdL as its default; the linear models take "auto"
    "n_iter",
    "batch_size",
    "max_draws",
    "init",
    "alpha",
    "alpha_intercept",
    "fit_intercept",
    "coef_",
    "intercept_",
    "coef_samples_",
    "intercept_samples_",
    "diagnostics_",
}


@pytest.mark.parametrize("section", ["Parameters", "Attributes"])
def test_shared_entries_are_documented_alike(section):
    # The estimators' docstrings are written out in full; the entries they share must not drift apart.
    from skbayes_sg import SGBayesDRBMClassifier

    docs = [
        _documented(cls, section) for cls in (SGBayesLogisticRegression, SGBayesLinearRegression, SGBayesDRBMClassifier)
    ]
    assert len(docs[0]) > 5
    for name in set().union(*docs) - _OWN_DOC:
        texts = {d[name] for d in docs if name in d}
        assert len(texts) == 1, name
