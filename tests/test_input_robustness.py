"""Issue 20: inputs a new user may feed the estimators end in a fit with finite predictions
or a ValueError naming the problem and the fix; no numpy/scipy warning and no C library's
message reaches the user. The issue's four reproducers, then one test per bad outcome
class that the fuzz sweep (tests/test_property.py, benchmarks/fuzz_sweep.py) found.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from skbayes_sg import DivergenceError, SGBayesDRBMClassifier, SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg.models import LinearRegressionModel
from skbayes_sg.models._map import _map_estimate
from skbayes_sg.samplers import MLSGLD, SGHMC, SGLD
from skbayes_sg.samplers._substeps import ou_exact


@pytest.fixture
def strict(capfd):
    """Numpy/scipy warnings are errors (the library's ConvergenceWarning is allowed); on
    exit nothing may have been written to file descriptors 1 and 2 (LAPACK prints there)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)


# -- the issue's reproducers -------------------------------------------------------------------


def test_issue_1_features_of_size_1e300_raise_a_clear_error_and_print_nothing(strict):
    X = np.random.default_rng(0).standard_normal((2, 3)) * 1e300
    for init in ("zeros", "map"):
        with pytest.raises(ValueError, match="features of size .*Standardise the features"):
            SGBayesLogisticRegression(n_iter=20, init=init).fit(X, [0, 1])


def test_issue_2_thin_beyond_the_kept_iterations_is_a_clear_error(strict):
    X = np.random.default_rng(0).standard_normal((2, 3))
    with pytest.raises(ValueError, match="thin=50: no draw would be kept"):
        SGBayesLogisticRegression(n_iter=20, thin=50).fit(X, [0, 1])


def test_issue_3_one_chain_one_draw_fits_with_only_the_librarys_warning():
    X = np.random.default_rng(0).standard_normal((2, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = SGBayesLogisticRegression(n_iter=20, n_chains=1, max_draws=1, random_state=0).fit(X, [0, 1])
    assert [w.category for w in caught] == [ConvergenceWarning], [str(w.message) for w in caught]
    assert "too few to assess convergence" in str(caught[0].message)
    assert np.isfinite(clf.predict_proba(X)).all()


def test_issue_4_drbm_on_features_of_size_1e150_fits_finitely(strict):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 3)) * 1e150
    clf = SGBayesDRBMClassifier(n_hidden=3, n_iter=20, n_chains=2, random_state=0).fit(X, rng.integers(0, 2, 20))
    assert np.isfinite(clf.predict_proba(X)).all()


# -- found by the fuzz sweep -------------------------------------------------------------------


@pytest.mark.parametrize("Estimator", [SGBayesLogisticRegression, SGBayesLinearRegression, SGBayesDRBMClassifier])
def test_features_holding_both_infinities_give_sklearns_error_without_numpy_warning(Estimator, strict):
    # sklearn's finiteness check sums X first: inf + -inf is NaN and numpy warned
    # "invalid value encountered in reduce" before sklearn's own ValueError.
    X = np.array([[np.inf, 1.0], [-np.inf, 2.0], [0.0, 3.0], [1.0, 4.0]])
    with pytest.raises(ValueError, match="Input X contains infinity"):
        Estimator(n_iter=5).fit(X, [0, 1, 0, 1])
    fitted = Estimator(n_iter=5, n_chains=1, random_state=0).fit(
        np.nan_to_num(X, posinf=1.0, neginf=-1.0), [0, 1, 0, 1]
    )
    with pytest.raises(ValueError, match="Input X contains infinity"):
        fitted.predict(X)


def test_unscaled_targets_get_the_noise_precision_mode_not_a_point_short_of_it():
    # Targets of size 1e20 put log tau's mode at -87; Newton moves about 1 a step along it and
    # stopped at -50 after its 50 iterations, so the chains started 37 units from the mode
    # with a step size set there and diverged (CCAdL, SGNHT). An unconverged Newton now
    # hands over to L-BFGS.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 4))
    y = np.full(12, 1e20)
    model = LinearRegressionModel(X, y, alpha=0.01, fit_intercept=False, noise_prior_shape=1000.0, noise_prior_rate=0.3)
    theta = _map_estimate(model)
    # The conditional mode of s = log tau given w: (a + n/2) = (b + rr/2) e^s.
    rr = np.sum((y - X @ theta[:-1]) ** 2)
    assert theta[-1] == pytest.approx(np.log((1000.0 + 6) / (0.3 + rr / 2)), abs=1e-3)
    reg = SGBayesLinearRegression(
        sampler="ccadl",
        n_iter=26,
        n_chains=1,
        batch_size=11,
        random_state=309,
        alpha=0.01,
        fit_intercept=False,
        noise_prior_shape=1000.0,
        noise_prior_rate=0.3,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mean, std = reg.fit(X, y).predict(X, return_std=True)
    assert np.isfinite(mean).all() and np.isfinite(std).all()


def test_targets_whose_squares_overflow_name_the_targets(strict):
    # Sampled in their own units, targets of 2.5e150 overflow the likelihood: the error
    # names them. The default standardises them (normalize_y) and fits.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 4))
    y = 2.5e150 * (1 + 0.1 * rng.standard_normal(12))
    with pytest.raises(ValueError, match=r"targets of size 2\.\d+e\+150.*Standardise the targets.*normalize_y=True"):
        SGBayesLinearRegression(n_iter=20, normalize_y=False).fit(X, y)
    mean, std = SGBayesLinearRegression(n_iter=200, random_state=0).fit(X, y).predict(X, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(std > 0)
    assert np.all(np.abs(mean / 2.5e150 - 1) < 0.5)


def test_a_runaway_noise_precision_is_a_divergence_not_infinite_predictive_std():
    # log tau ran to -1e10 under an explicit SGHMC step on unscaled features: finite, so the
    # chains' check passed, but tau = exp(s) underflowed to 0 and predict(return_std=True)
    # gave an infinite std.
    X = np.array([[-1.6e20], [-1.8e20], [4.6e19], [-4.8e19]])
    reg = SGBayesLinearRegression(
        sampler=SGHMC(step_size=1e-8, preconditioner="none"),
        alpha=1.0,  # per unit of x (alpha="auto" would put 1e40 on the weights: they diverge first)
        n_iter=30,
        n_chains=1,
        init="zeros",
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.raises(
            DivergenceError, match=r"diverged in the noise precision by iteration \d+ .*hold noise_precision fixed"
        ) as info:
            reg.fit(X, np.full(4, 2.5e8))
    # The iteration is named, as in every other divergence, and lies within the run.
    assert 1 <= info.value.iteration <= 30
    with pytest.raises(NotFittedError):
        reg.predict(X)


def test_a_runaway_thermostat_is_a_divergence_not_an_overflow_error():
    # mCCAdL's exact O step took math.exp of -xi h / 2 with the thermostat xi run away
    # (DRBM, features of size 1e19, a flat prior): OverflowError "math range error".
    p = np.ones(3)
    with np.errstate(invalid="ignore", over="ignore"):
        ou_exact(p, -1e308, 1.0, 0.5, np.random.default_rng(0))
    assert not np.isfinite(p).all()
    X = np.array([[1.26e19], [-1.32e19], [6.40e19], [1.05e19]])
    clf = SGBayesDRBMClassifier(
        sampler="mccadl",
        n_iter=6,
        n_chains=1,
        random_state=0,
        alpha=1e-12,
        fit_intercept=False,
        n_hidden=1,
        init_scale=0.01,
        max_draws=None,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DivergenceError, match="standardise the features"):
            clf.fit(X, [2, 1, 1, 0])


def test_an_ill_conditioned_posterior_is_a_clear_error_for_multilevel_auto_horizon(monkeypatch):
    # Duplicated features under a flat prior: the auto horizon m = 4 lam_max / lam_min was
    # millions of steps per path on 10 rows, a fit that never returned.
    from skbayes_sg import multilevel

    def no_paths(*args, **kwargs):
        raise AssertionError("the multilevel paths started")

    monkeypatch.setattr(multilevel, "CoupledSGLD", no_paths)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((10, 3))
    X[:, 2] = X[:, 1]
    with pytest.raises(ValueError, match="horizon='auto' would run .* steps per path.*ill-conditioned"):
        SGBayesLogisticRegression(sampler="mlsgld", alpha=1e-12).fit(X, rng.integers(0, 2, 10))


def test_a_proposal_whose_noise_precision_underflows_is_rejected_quietly(strict):
    # gadRWM under a flat noise prior proposed log tau below -745: exp underflowed to 0 and
    # numpy warned "divide by zero encountered in log" from the log likelihood.
    model = LinearRegressionModel(np.zeros((1, 1)), np.array([-1.3e-9]), fit_intercept=False)
    lp, _ = model.log_posterior_and_grad(np.array([0.0, -800.0]))
    assert lp == -np.inf
    reg = SGBayesLinearRegression(
        sampler="gadrwm",
        n_iter=1,
        batch_size=None,
        n_chains=1,
        random_state=0,
        init="zeros",
        alpha=1e-12,
        fit_intercept=False,
        max_draws=None,
        noise_prior_shape=1e-12,
        noise_prior_rate=1e-12,
    )
    assert np.isfinite(reg.fit(np.zeros((1, 1)), [-1.3e-9]).predict(np.zeros((1, 1)))).all()


@pytest.mark.parametrize("sampler", ["sgld", "sghmc", "sgnht", "ccadl"])
def test_init_zeros_starts_the_noise_precision_near_its_mode_for_unscaled_targets(sampler):
    # From log tau = 0 with targets of size 132 the first step (set by the curvature at the
    # mode) threw log tau to -870 and beyond: every sampler diverged. (normalize_y=False: the
    # targets in their own units; standardised, they would be of size 1.)
    reg = SGBayesLinearRegression(
        sampler=sampler,
        init="zeros",
        n_iter=10,
        batch_size=None,
        n_chains=1,
        random_state=0,
        fit_intercept=False,
        noise_prior_shape=1.0,
        noise_prior_rate=1.0,
        normalize_y=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(np.zeros((1, 1)), [-132.0])
        mean, std = reg.predict(np.zeros((1, 1)), return_std=True)
    assert np.isfinite(mean).all() and np.isfinite(std).all()
    # The start is the conditional mode given w = 0: log((a + N/2) / (b + ||y||^2 / 2)).
    start = reg._initial_points(reg._build_model(np.zeros((1, 1)), np.array([-132.0])))
    assert start[0, -1] == pytest.approx(np.log(1.5 / (1.0 + 132.0**2 / 2)))


def test_a_diverging_multilevel_path_is_a_divergence_without_numpy_overflow_warnings(strict):
    # MLSGLD paths at an explicit step on unscaled features overflowed, and numpy's
    # "overflow encountered in exp/multiply" reached the user before the DivergenceError.
    rng = np.random.default_rng(0)
    X = rng.lognormal(0.0, 3.0, (8, 2)) * 1000
    reg = SGBayesLinearRegression(
        sampler=MLSGLD(step_size=1e-3, horizon=50, max_levels=2, n_initial=19), random_state=0
    )
    with pytest.raises(DivergenceError, match="MLSGLD diverged"):
        reg.fit(X, rng.standard_normal(8))


def test_mlsgld_max_levels_below_the_starting_levels_names_the_parameter():
    # It failed inside the estimate with "need integers 0 <= min_levels <= max_levels; got 2, 1",
    # naming min_levels, which MLSGLD does not have; now MLSGLD's constraints name the range.
    X = np.random.default_rng(0).standard_normal((10, 2))
    with pytest.raises(ValueError, match=r"'max_levels' parameter of MLSGLD must be an int in the range \[2, inf\)"):
        SGBayesLogisticRegression(sampler=MLSGLD(max_levels=1)).fit(X, np.arange(10) % 2)


def test_minibatch_noise_that_overflows_is_a_clear_error_without_numpy_warnings(strict):
    # DRBM on features of size 1e100 with minibatches: the power iteration for the gradient
    # noise's largest eigenvalue overflowed ("overflow encountered in dot") on its way; the
    # DRBM (no preconditioner) then diverges, with the advice to standardise.
    X = np.array([[-4e100, 5e100], [5e100, -5e100], [3e100, -1e100]])
    clf = SGBayesDRBMClassifier(
        sampler="ccadl",
        n_iter=22,
        batch_size=2,
        gradient="control_variate",
        n_chains=3,
        random_state=967,
        alpha=3.0,
        fit_intercept=False,
        n_hidden=3,
        init_scale=0.3,
    )
    with pytest.raises((ValueError, DivergenceError), match="standardise the features"):
        clf.fit(X, [0, -3, -6])


def test_a_dataframe_without_columns_names_the_missing_features():
    # sklearn's validation failed with numpy's "at least one array or dtype is required".
    pd = pytest.importorskip("pandas")
    with pytest.raises(ValueError, match=r"0 feature\(s\) \(shape=\(3, 0\)\) while a minimum of 1 is required"):
        SGBayesLogisticRegression(n_iter=5).fit(pd.DataFrame(np.zeros((3, 0))), [0, 1, 0])


def test_the_drbm_refuses_multilevel_samplers_naming_the_fix(strict):
    # MLSGLD on the DRBM ran for minutes on 10 rows (the fuzz sweep's one bad class): a clear
    # error instead.
    from skbayes_sg import SGBayesDRBMClassifier

    X = np.random.default_rng(0).standard_normal((10, 2))
    with pytest.raises(ValueError, match="does not support multilevel samplers.*sampler='mccadl'"):
        SGBayesDRBMClassifier(sampler=MLSGLD(horizon=50, max_levels=2), n_hidden=3).fit(X, np.arange(10) % 2)


def test_a_divergence_under_a_nearly_flat_prior_names_the_prior():
    # Separable rows and alpha = 1e-6: the posterior's tail runs far past the curvature at
    # the mode, and the thermostat diverged with advice to shrink the step, which cannot
    # help. The message now names the prior and the fix.
    X, y = np.array([[1.0], [1.0], [1.0], [0.0], [0.0]]), np.array([1, 1, 1, 0, 0])
    est = SGBayesLogisticRegression(
        sampler="sgnht",
        n_iter=8,
        n_chains=1,
        alpha=1e-6,
        fit_intercept=False,
        batch_scheme="epochs",
        batch_size=None,
        class_weight="balanced",
        random_state=0,
    )
    with pytest.raises(DivergenceError, match=r"prior is nearly flat \(smallest alpha = 1e-06\).*larger alpha"):
        est.fit(X, y)


def test_a_continuation_under_max_draws_1_keeps_a_draw(strict):
    # A warm start coarsens the record's grid to respect max_draws; for max_draws=1 the
    # coarsest multiple of the first part's thinning fell past the run's end and no draw
    # was left (ZeroDivisionError in the posterior mean).
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 3)), rng.normal(size=12)
    est = SGBayesLinearRegression(
        sampler="sghmc",
        n_iter=22,
        thin=5,
        n_chains=1,
        warm_start=True,
        max_draws=1,
        noise_precision=0.3,
        random_state=3500,
    )
    est.fit(X, y).fit(X, y)
    assert est.samples_.shape[1] == 1
    mean, std = est.predict(X, return_std=True)
    assert np.isfinite(mean).all() and np.isfinite(std).all()


def test_the_feature_scale_check_is_quiet_for_features_near_1e300(strict):
    # The standardise advice measures the features' sd spread; features of 1e300 overflowed
    # its squares (numpy warnings in a DRBM fit's warning path).
    from skbayes_sg._fit._messages import feature_scale_spread

    Z = np.random.default_rng(0).normal(size=(5000, 3))
    X = Z * np.array([1.0, 10.0, 1e300])
    assert feature_scale_spread(X) == pytest.approx(1e300 * Z[:, 2].std() / Z[:, 0].std(), rel=1e-6)


def test_features_near_1e300_give_a_value_error_from_the_adaptive_samplers(strict):
    # gadRWM's starting proposal is the curvature at the start, whose products with features
    # near 1e300 overflowed with numpy's warning before the library's error.
    rng = np.random.default_rng(0)
    X = rng.integers(0, 5, (8, 3)).astype(float) * 1e300
    with pytest.raises(ValueError, match="not finite"):
        SGBayesLogisticRegression(
            sampler="gadrwm", n_iter=14, init="zeros", alpha=1e8, fit_intercept=False, batch_size=None
        ).fit(X, np.arange(8) % 2)


def test_the_feature_scale_spread_of_tiny_and_huge_columns_is_infinite_quietly(strict):
    from skbayes_sg._fit._messages import feature_scale_spread

    assert feature_scale_spread(np.c_[[1e-300, 0.0, 3e-300], [1e300, 0.0, 2e300]]) == np.inf


def test_a_divergence_from_a_far_random_start_names_init_scale():
    # The Euler thermostats (SGNHT, CCAdL) diverged from DRBM weights of scale 1000, with
    # advice to shrink the step; the cause is the start, and the message now says so.
    X, y = np.array([[1.0], [1.0], [0.0], [1.0], [0.0]]), np.array([1, 1, 0, 1, 0])
    est = SGBayesDRBMClassifier(
        sampler="sgnht",
        n_iter=16,
        n_hidden=1,
        init_scale=1000.0,
        alpha=3.0,
        batch_size=None,
        n_chains=2,
        random_state=19658,
    )
    with pytest.raises(DivergenceError, match=r"init_scale=1000.*use a smaller init_scale"):
        est.fit(X, y)


def test_a_multilevel_estimate_over_its_budget_is_a_value_error_naming_the_fixes(strict):
    # MLSGLD on lognormal features x1000 asked for minutes of paths to reach its target
    # (the sweep's last bad class); over max_grad_evals it now stops before the round.
    rng = np.random.default_rng(0)
    X, y = rng.lognormal(0, 3, (10, 3)) * 1000, np.arange(10) % 2
    sampler = MLSGLD(horizon=5, max_levels=3, n_initial=10, step_size=0.001, target_rmse=1.0, max_grad_evals=1e5)
    with pytest.raises(
        ValueError,
        match=r"would need about .* per-example gradient evaluations.*max_grad_evals="
        r"1e\+05.*Increase target_rmse, standardise the features",
    ):
        SGBayesLogisticRegression(sampler=sampler, init="zeros", alpha=1000.0, batch_size=None).fit(X, y)
    with pytest.raises(ValueError, match="max_grad_evals"):
        SGBayesLogisticRegression(sampler=MLSGLD(max_grad_evals=-1.0)).fit(X, y)


def test_a_papers_step_on_standardised_targets_names_the_units_and_the_papers_setting():
    # Issue 30 item 8: with normalize_y=True an explicit step is in standardised-y units, where
    # the curvature is y_scale_**2 (~100) times that of the raw y; a paper's h = 5e-3 on a
    # N = 1e4, D = 100 regression with y sd ~10 then diverges, and the error must say why and
    # how to reproduce the paper's setting, which runs.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((10_000, 100))
    y = X @ np.full(100, 0.6) + 8 * rng.standard_normal(10_000)
    kw = dict(n_iter=300, n_chains=1, batch_size=100, noise_precision=1 / 64, random_state=0)
    with pytest.raises(DivergenceError, match=r"standardised-y units since normalize_y=True.*normalize_y=False"):
        SGBayesLinearRegression(sampler=SGLD(step_size=5e-3), **kw).fit(X, y)
    paper = SGBayesLinearRegression(
        sampler=SGLD(step_size=5e-3, preconditioner="none"), gradient="minibatch", normalize_y=False, **kw
    ).fit(X, y)
    assert np.all(np.isfinite(paper.coef_)) and np.abs(paper.coef_ - 0.6).max() < 1.0
