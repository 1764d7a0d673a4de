"""CCAdL (Shang et al. 2015, Algorithm 1): exact Gaussian posterior, thermostat equilibrium,
the moving-average covariance estimate, and the Normal-Gamma comparison of its Table 1."""

import numpy as np
import pytest
from sklearn.base import clone

from skbayes_sg._chains import ChainSpec, run_chain
from skbayes_sg.diagnostics import ess_bulk, mcse_mean
from skbayes_sg.minibatch import GradientSpec, MinibatchGradient
from skbayes_sg.models import LinearRegressionModel, LogisticModel, NormalGammaModel
from skbayes_sg.samplers import SGHMC, SGNHT, CCAdL, get_sampler
from skbayes_sg.samplers.ccadl import MAX_FULL_PARAMS, _empirical_covariance


def _linreg_problem(seed=0, N=200, D=2, tau=1.0, alpha=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    y = X @ np.array([1.0, -0.5])[:D] + 0.3 + rng.normal(size=N) / np.sqrt(tau)
    model = LinearRegressionModel(X, y, alpha=alpha, noise_precision=tau)
    Xa = np.column_stack([X, np.ones(N)])  # intercept as a column of ones, same prior
    S = np.linalg.inv(tau * Xa.T @ Xa + alpha * np.eye(D + 1))
    m = tau * S @ Xa.T @ y
    return model, m, S


def _run(sampler, model, start, n_iter, batch_size, seeds, h):
    sampler = clone(sampler).set_params(step_size=h)
    results = [
        run_chain(
            ChainSpec(sampler, model, n_iter, n_iter // 5, 1, n_iter, GradientSpec(batch_size)),
            start,
            np.random.SeedSequence(s),
        )
        for s in seeds
    ]
    draws = np.stack([r.draws for r in results])
    stats = {k: np.stack([r.stats[k] for r in results])[..., None] for k in results[0].stats}
    return draws, stats


def _check_gaussian(draws, m, S, stats, friction, temperature=1.0):
    mean = draws.reshape(-1, draws.shape[-1]).mean(0)
    assert np.all(np.abs(mean - m) < 4 * mcse_mean(draws)), (mean, m, mcse_mean(draws))
    # sd: MCSE of a variance estimate is about var * sqrt(2 / ESS) for a Gaussian.
    var = draws.reshape(-1, draws.shape[-1]).var(0)
    se_var = np.diag(S) * np.sqrt(2.0 / ess_bulk(draws))
    assert np.all(np.abs(var - np.diag(S)) < 4 * se_var + 0.03 * np.diag(S)), (var, np.diag(S))
    # Proposition 2: xi ~ A and p'p / N_d ~ 1/beta at equilibrium.
    for name, target in (("xi", friction), ("kinetic_temperature", temperature)):
        x = stats[name]
        assert abs(x.mean() - target) < 4 * mcse_mean(x)[0] + 0.01 * target, (name, x.mean())


@pytest.mark.statistical
@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_recovers_gaussian_posterior_of_linear_regression(covariance):
    model, m, S = _linreg_problem()
    sampler = CCAdL(friction=1.0, covariance=covariance)
    sampler.validate()
    h, _ = sampler.resolve_step_size(model, m)
    draws, stats = _run(sampler, model, m, 12000, 20, range(4), h)
    _check_gaussian(draws, m, S, stats, friction=1.0)


def test_wrong_covariance_sign_is_detected():
    """The test above must fail when the covariance control is wrong: flipping its sign
    pumps energy in, and the thermostat settles far above A."""
    model, m, _ = _linreg_problem()

    class Flipped(CCAdL):
        def step(self, state, grad_estimator, rng):
            grad_estimator.noise_scale = -abs(grad_estimator.noise_scale)
            return super().step(state, grad_estimator, rng)

    sampler = Flipped(friction=1.0, covariance="diag")
    h, _ = sampler.resolve_step_size(model, m)
    _, stats = _run(sampler, model, m, 3000, 20, [0], h)
    assert stats["xi"].mean() > 1.5


def test_full_data_is_adaptive_langevin():
    """With full-data gradients Sigma = 0 and CCAdL reduces to SGNHT exactly."""
    model, m, _ = _linreg_problem()
    a, _ = _run(CCAdL(step_size=0.005), model, m, 200, None, [3], 0.005)
    b, _ = _run(SGNHT(step_size=0.005), model, m, 200, None, [3], 0.005)
    np.testing.assert_array_equal(a, b)


def test_moving_average_is_mean_of_empirical_covariances():
    """eq. 18 with kappa_t = 1/t: I^_t is the plain average of V(theta_1..t)."""
    model, m, _ = _linreg_problem()
    rng = np.random.default_rng(0)
    for kind in ("full", "diag"):
        sampler = CCAdL(step_size=0.002, covariance=kind)
        grad_estimator = MinibatchGradient(model, 20)
        state = sampler.init_state(m, grad_estimator, rng)
        Vs = []
        record = MinibatchGradient.gradient

        def spy(self, theta, rng_):
            force, grads = record(self, theta, rng_)  # noqa: B023 (called within this iteration)
            G = grads.to_dense()
            Vs.append(np.cov(G.T) if kind == "full" else G.var(axis=0, ddof=1))  # noqa: B023
            return force, grads

        grad_estimator.gradient = spy.__get__(grad_estimator)
        for _ in range(5):
            state, _ = sampler.step(state, grad_estimator, rng)
        np.testing.assert_allclose(state.I_hat, np.mean(Vs, axis=0), rtol=1e-10, atol=1e-12)


def test_dense_covariance_matches_operator():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 4))
    model = LogisticModel(X, (rng.random(30) < 0.5).astype(float))
    grads = model.per_example_gradients(rng.normal(size=5), np.arange(30))
    np.testing.assert_allclose(_empirical_covariance(grads), np.cov(grads.to_dense().T), atol=1e-12)


def test_covariance_choice_and_validation():
    assert get_sampler("ccadl").covariance == "auto"
    with pytest.raises(ValueError, match="covariance"):
        get_sampler(CCAdL(covariance="banded"))
    sampler = CCAdL(step_size=0.1, covariance="full")
    model = LogisticModel(np.zeros((10, MAX_FULL_PARAMS)), np.zeros(10))
    with pytest.raises(ValueError, match="P <= 500"):
        sampler.init_state(np.zeros(model.n_params), MinibatchGradient(model, 5), np.random.default_rng(0))
    state = CCAdL(step_size=0.1).init_state(
        np.zeros(model.n_params), MinibatchGradient(model, 5), np.random.default_rng(0)
    )
    assert state.covariance == "diag" and state.I_hat.shape == (model.n_params,)


def _density_rmse(draws, dist, n_bins=40):
    lo, hi = dist.ppf([0.001, 0.999])
    edges = np.linspace(lo, hi, n_bins + 1)
    counts, _ = np.histogram(draws, edges)
    density = counts / (draws.size * (edges[1] - edges[0]))
    return float(np.sqrt(np.mean((density - dist.pdf(0.5 * (edges[1:] + edges[:-1]))) ** 2)))


@pytest.mark.statistical
def test_normal_gamma_beats_sgnht_and_sghmc():
    """CCAdL paper section 4.1 / Table 1 at h = 0.01, A = 1 (N = 100, n = 10): the
    parameter-dependent noise biases SGNHT and SGHMC; CCAdL's marginals are closer."""
    x = np.random.default_rng(2015).normal(size=100)
    model = NormalGammaModel(x)
    post = model.posterior()
    h, n_iter = 0.01, 30000
    rmse = {}
    for sampler in (SGHMC(step_size=h), SGNHT(step_size=h), CCAdL(step_size=h)):
        draws, _ = _run(sampler, model, np.array([0.0, 1.0]), n_iter, 10, [7], h)
        d = draws[0]
        rmse[type(sampler).__name__] = max(_density_rmse(d[:, j], post[j]) for j in range(2))
    assert rmse["CCAdL"] < 0.6 * rmse["SGNHT"] < 0.6 * rmse["SGHMC"], rmse
