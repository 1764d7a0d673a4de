"""gadMALA's chains advanced together: the stacked full-data log posterior equals each chain's
own pass bit for bit, so the batched fit draws exactly what the chains draw one at a time,
whatever ``n_jobs``."""

import numpy as np
import pytest

from skbayes_sg import SGBayesLogisticRegression, SGBayesPoissonRegressor
from skbayes_sg.diagnostics import mcse_mean
from skbayes_sg.models import LinearRegressionModel, LogisticModel, PoissonModel, WhitenedModel
from skbayes_sg.models._stacked_posterior import stacked_log_posterior
from skbayes_sg.samplers import GadMALA, GadRWM

from ._exact import Z_MAX, importance_summary, mcse_sd, t_proposal


def _models(X, y):
    rng = np.random.default_rng(0)
    n, D = X.shape
    weighted = LogisticModel(X, y, alpha=np.linspace(0.5, 2.0, D), fit_intercept=True, alpha_intercept=0.3)
    weighted.set_sample_weight(rng.uniform(0.2, 3.0, n))
    counts = rng.poisson(np.exp(0.2 * X[:, 0]))
    return {
        "logistic": LogisticModel(X, y, alpha=0.5, fit_intercept=True),
        "logistic-no-intercept": LogisticModel(np.asfortranarray(X[:, :7]), y, alpha=2.0, fit_intercept=False),
        "logistic-weighted-array-prior": weighted,
        "poisson-offset": PoissonModel(X[:, :5], counts, alpha=1.0, offset=rng.uniform(-0.5, 0.5, n)),
        "linreg-fixed-noise": LinearRegressionModel(X[:, :4], X[:, 5], alpha=1.0, noise_precision=2.0),
    }


NAMES = ["logistic", "logistic-no-intercept", "logistic-weighted-array-prior", "poisson-offset", "linreg-fixed-noise"]


@pytest.mark.parametrize("name", NAMES)
def test_stacked_log_posterior_is_each_rows_own_pass_bit_for_bit(cancer, name):
    model = _models(*cancer)[name]
    stacked = stacked_log_posterior(model)
    assert stacked is not None
    rng = np.random.default_rng(3)
    thetas = 0.3 * rng.standard_normal((5, model.n_params))
    log_p, grads = stacked(thetas, np.empty(5), np.empty_like(thetas))
    for c, theta in enumerate(thetas):
        lp, g = model.log_posterior_and_grad(theta.copy())
        assert log_p[c] == lp
        np.testing.assert_array_equal(grads[c], g)


def test_stacked_log_posterior_declines_what_it_cannot_reproduce(cancer):
    X, y = cancer
    model = LogisticModel(X, y, alpha=1.0, fit_intercept=True)
    P = model.n_params
    assert stacked_log_posterior(WhitenedModel(model, np.zeros(P), np.ones(P))) is None
    # A sampled noise precision is an extra parameter.
    assert stacked_log_posterior(LinearRegressionModel(X[:, :4], X[:, 5], alpha=1.0, noise_precision=None)) is None


def _fit(X, y, sampler="gadmala", monkeypatch=None, batched=True, **kw):
    if not batched:
        monkeypatch.setattr(SAMPLERS[sampler], "batched", lambda self, grads: False)
    clf = SGBayesLogisticRegression(sampler=sampler, batch_size=None, n_iter=300, random_state=4, **kw)
    with pytest.warns(Warning):  # 300 iterations: too short for the convergence checks
        clf.fit(X, y)
    return clf


SAMPLERS = {"gadmala": GadMALA, "gadrwm": GadRWM}


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_batched_chains_draw_what_each_chain_draws_alone(cancer, monkeypatch, sampler):
    X, y = cancer
    calls = []
    cls = SAMPLERS[sampler]
    step_batch = cls.step_batch
    monkeypatch.setattr(cls, "step_batch", lambda self, *a: calls.append(1) or step_batch(self, *a))
    batched = _fit(X, y, sampler)
    assert len(calls) == batched.n_iter_  # every iteration of the 4 chains in one call
    with monkeypatch.context() as m:
        alone = _fit(X, y, sampler, m, batched=False)
    np.testing.assert_array_equal(batched.samples_, alone.samples_)
    assert batched.diagnostics_["acceptance_rate"] == alone.diagnostics_["acceptance_rate"]
    assert batched.diagnostics_["n_grad_evals"] == alone.diagnostics_["n_grad_evals"]
    np.testing.assert_array_equal(_fit(X, y, sampler, n_jobs=2).samples_, batched.samples_)


def test_batched_poisson_with_exposure_draws_what_each_chain_draws_alone(monkeypatch):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 3))
    exposure = rng.uniform(0.5, 2.0, 300)
    y = rng.poisson(exposure * np.exp(0.2 + X @ [0.3, -0.2, 0.1]))

    def fit():
        reg = SGBayesPoissonRegressor(sampler="gadmala", batch_size=None, n_iter=300, random_state=1)
        with pytest.warns(Warning):
            reg.fit(X, y, exposure=exposure)
        return reg.samples_

    batched = fit()
    monkeypatch.setattr(GadMALA, "batched", lambda self, grads: False)
    np.testing.assert_array_equal(batched, fit())


def _logistic_reference(X, y, alpha=1.0, n_draws=20_000, df=7, seed=0):
    """Posterior means and sds of logistic regression (``N(0, 1 / alpha)`` on weights and
    intercept, the intercept last) with their MCSEs, by self-normalised importance sampling
    from a multivariate t at the MAP with the Laplace covariance, in plain numpy (independent
    of skbayes_sg's models and samplers); as ``_exact.poisson_reference``."""
    Xa = np.column_stack([X, np.ones(len(y))])
    P = Xa.shape[1]

    def log_post(theta):
        z = Xa @ theta
        return float(y @ z - np.logaddexp(0.0, z).sum() - 0.5 * alpha * theta @ theta)

    theta = np.zeros(P)
    for _ in range(50):  # Newton: the log posterior is concave
        s = 1.0 / (1.0 + np.exp(-(Xa @ theta)))
        H = Xa.T @ (Xa * (s * (1 - s))[:, None]) + alpha * np.eye(P)
        theta = theta + np.linalg.solve(H, Xa.T @ (y - s) - alpha * theta)
    draws, log_q = t_proposal(theta, H, n_draws, df, seed)
    return importance_summary(draws, np.array([log_post(t) for t in draws]) - log_q)


@pytest.mark.statistical
def test_batched_default_fit_is_exact_on_a_logistic_posterior(cancer, monkeypatch):
    # gadMALA at the estimator's defaults (its chains batched) against the importance-sampled
    # posterior: each mean and sd within Z_MAX of the fit's and the reference's Monte Carlo
    # errors combined.
    X, y = cancer
    X = X[:, :6]
    calls = []
    step_batch = GadMALA.step_batch
    monkeypatch.setattr(GadMALA, "step_batch", lambda self, *a: calls.append(1) or step_batch(self, *a))
    # alpha = alpha_intercept = 1.0: the reference's N(0, 1) prior on every coefficient.
    clf = SGBayesLogisticRegression(
        sampler="gadmala", batch_size=None, alpha=1.0, alpha_intercept=1.0, random_state=0
    ).fit(X, y)
    assert calls
    mean_ref, sd_ref, mcse_mean_ref, mcse_sd_ref, ess = _logistic_reference(X, y)
    assert ess > 10_000
    draws = clf.samples_
    flat = draws.reshape(-1, draws.shape[-1])
    z_mean = (flat.mean(axis=0) - mean_ref) / np.hypot(mcse_mean(draws), mcse_mean_ref)
    z_sd = (flat.std(axis=0, ddof=1) - sd_ref) / np.hypot(mcse_sd(draws), mcse_sd_ref)
    assert np.all(np.abs(z_mean) < Z_MAX), z_mean
    assert np.all(np.abs(z_sd) < Z_MAX), z_sd
