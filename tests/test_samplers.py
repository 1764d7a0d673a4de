"""SGLD, SGHMC and SGNHT against posteriors known exactly, and their shared sub-steps."""

import numpy as np
import pytest

from skbayes_sg.diagnostics import mcse_mean
from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models import LinearRegressionModel, NormalGammaModel
from skbayes_sg.samplers import SAMPLERS, SGHMC, SGLD, SGNHT, CCAdL, MCCAdL, get_sampler
from skbayes_sg.samplers._step_size import largest_curvature
from skbayes_sg.samplers._substeps import ou_euler, ou_exact, thermostat

from ._exact import CASES, Z_MAX, assert_matches_gaussian, conjugate_regression, predicted_moments, sample, worst_z

# -- sub-steps --------------------------------------------------------------------------


@pytest.mark.parametrize("friction", [0.7, -0.3, 0.0])
def test_ou_exact_moments(friction):
    """O step: e^(-g d) mean and the exact OU variance, including the g = 0 and g < 0 branches."""
    rng = np.random.default_rng(0)
    p0 = np.full(200_000, 1.5)
    p = ou_exact(p0.copy(), friction, 2.0, 0.3, rng)
    mean = 1.5 * np.exp(-friction * 0.3)
    var = 2.0 * 2 * 0.3 if friction == 0 else 2.0 * (1 - np.exp(-2 * friction * 0.3)) / friction
    se_mean, se_var = np.sqrt(var / p.size), var * np.sqrt(2 / p.size)
    assert abs(p.mean() - mean) < 5 * se_mean
    assert abs(p.var() - var) < 5 * se_var


def test_ou_exact_preserves_its_stationary_law():
    rng = np.random.default_rng(1)
    p = rng.normal(size=200_000) * np.sqrt(3.0 / 2.0)  # N(0, D / gamma) with D = 3, gamma = 2
    for _ in range(5):
        ou_exact(p, 2.0, 3.0, 0.4, rng)
    assert abs(p.var() - 1.5) < 5 * 1.5 * np.sqrt(2 / p.size)


def test_ou_euler_and_thermostat_formulas():
    rng = np.random.default_rng(2)
    p = np.full(100_000, 2.0)
    ou_euler(p, 0.5, np.full(p.size, 4.0), 0.1, rng)
    assert abs(p.mean() - 2.0 * 0.95) < 5 * np.sqrt(0.8 / p.size)
    assert abs(p.var() - 0.8) < 5 * 0.8 * np.sqrt(2 / p.size)
    q = np.array([1.0, 2.0, 2.0])
    assert thermostat(0.5, q, 0.1, 6.0, 1.0) == pytest.approx(0.5 + 0.1 * (9.0 - 3.0) / 6.0)


# -- exact Gaussian posterior -----------------------------------------------------------

# Step sizes the docstrings recommend for accuracy with minibatches: the gradient noise
# h^2 Sigma should stay small against the injected 2 h A T, i.e. h Sigma_max / (2 A T) ~ 0.1.
# The sds are compared, within their MCSE, with the sds each scheme is *predicted* to
# sample at that step (tests/_exact.py, predicted_moments): at these settings SGLD's are
# 5-6% above the posterior's (its docstring's 1 / (1 - h lambda / 2) times
# 1 + h Sigma / (2 T)), several MCSE, and SGHMC's with B^ = 0 about 4.5% above.
NOISE_RATIO = 0.1
RECOMMENDED = {
    "sgld": (SGLD(), 1.0),
    "sghmc": (SGHMC(friction=10.0), 10.0),
    "sghmc_empirical": (SGHMC(friction=10.0, noise_estimate="empirical"), 10.0),
    "sgnht": (SGNHT(friction=10.0), 10.0),
}


@pytest.mark.statistical
@pytest.mark.parametrize("name", sorted(RECOMMENDED))
def test_recovers_exact_gaussian_posterior(name):
    sampler, injected = RECOMMENDED[name]
    model, mean, cov, sigma_max = conjugate_regression()
    h = NOISE_RATIO * 2 * injected / sigma_max
    predicted = predicted_moments(sampler, model, mean, cov, h, 100)
    # "Recovers" up to the documented bias: variances inflated by about the docstrings'
    # 1 + h Sigma_max / (2 A T) = 1 + NOISE_RATIO at most (1% more for the first-order
    # discretisation), and SGLD's by 1 / (1 - h lambda_max / 2) too.
    lam_max = np.linalg.eigvalsh(np.linalg.inv(cov)).max()
    bound = 1.01 * (1 + NOISE_RATIO) / (1 - h * lam_max / 2 if name == "sgld" else 1)
    ratio = predicted.sd**2 / np.diag(cov)
    assert np.all((ratio > 0.98) & (ratio < bound)), ratio
    # SGNHT's xi starts at A and climbs to A + h sigma^2 / 2 ~ 11 (Proposition 1) over
    # ~10^4 iterations here (its mass mu = N_d makes it slow); until then the chain runs
    # ~10% hot, enough to move the sds by 2-3 MCSE, so its burn-in covers that climb.
    n_burn = 10_000 if name == "sgnht" else 1000
    draws, _ = sample(sampler, model, mean, n_iter=7000 + n_burn, n_burn=n_burn, batch_size=100, step_size=h)
    assert_matches_gaussian(draws, mean, predicted.sd)


@pytest.mark.statistical
@pytest.mark.parametrize("name", sorted(CASES))
def test_samples_its_predicted_stationary_law(name):
    """Means, sds, and the thermostat's mean xi or SGHMC's kinetic temperature, each within
    Z_MAX of its MCSE from the scheme's predicted stationary law, at settings where every
    ingredient of the scheme matters (tests/test_mutation.py: off by 20%, each fails this)."""
    case = CASES[name]
    z, (_, _, summaries) = case.z()
    worst, where = worst_z(z)
    assert worst < Z_MAX, f"{name}: {where} off by {worst:.1f} MCSE ({z})"
    if name == "sghmc_empirical":
        # The prediction assumes A T - B^ is never clipped; a handful of clipped
        # coordinate-iterations in ~10^4 (heavy-tailed minibatch variances) are immaterial.
        assert sum(s["noise_clipped"] for s in summaries) < 1e-3 * case.n_iter * 4


@pytest.mark.statistical
def test_sgld_temperature_scales_the_posterior_variance():
    """At temperature T the chain samples pi^(1/T): for a Gaussian, variance times T (up to
    the predicted discretisation and gradient-noise bias, which shrinks as T grows)."""
    model, mean, cov, sigma_max = conjugate_regression()
    h = NOISE_RATIO * 2 * 2.0 / sigma_max
    sampler = SGLD(temperature=2.0)
    predicted = predicted_moments(sampler, model, mean, cov, h, 100)
    lam_max = np.linalg.eigvalsh(np.linalg.inv(cov)).max()
    ratio = predicted.sd**2 / (2.0 * np.diag(cov))
    assert np.all((ratio > 1) & (ratio < (1 + NOISE_RATIO) / (1 - h * lam_max / 2))), ratio
    draws, _ = sample(sampler, model, mean, n_iter=8000, n_burn=1000, batch_size=100, step_size=h)
    assert_matches_gaussian(draws, mean, predicted.sd)


def test_wrong_force_sign_is_caught_by_the_gaussian_check():
    """The posterior check has teeth: a sampler that ignores the data fails it."""
    model, mean, cov, sigma_max = conjugate_regression()
    prior_only = LinearRegressionModel(model.X[:1] * 0, model.y[:1] * 0, noise_precision=1.0)
    h = NOISE_RATIO * 2 / sigma_max
    draws, _ = sample(SGLD(), prior_only, mean, n_iter=1500, n_burn=500, batch_size=None, step_size=h)
    with pytest.raises(AssertionError):
        assert_matches_gaussian(draws, mean, np.sqrt(np.diag(cov)))


# -- the predicted stationary moments themselves --------------------------------------------


def test_predicted_sgld_law_without_gradient_noise_is_the_closed_form():
    """Full-data SGLD on N(m, S): variance 1 / (lambda (1 - h lambda / 2)) per eigen-direction."""
    model, mean, cov, _ = conjugate_regression()
    lam, V = np.linalg.eigh(np.linalg.inv(cov))
    h = 1.0 / lam.max()
    exact = (V * (1.0 / (lam * (1 - h * lam / 2)))) @ V.T
    predicted = predicted_moments(SGLD(), model, mean, cov, h, None)
    np.testing.assert_allclose(predicted.sd, np.sqrt(np.diag(exact)), rtol=1e-10)


def test_predicted_gradient_noise_bias_is_the_docstrings():
    """Small h: gradient noise adds ~ h Sigma / (2 T) to SGLD's relative variance (SGLD
    docstring) and ~ h Sigma / (2 A T) to SGHMC's (SGHMC docstring), and B^ cancels it.

    In the small-h limit the added covariance X solves ``H X + X H = h Sigma`` (per unit of
    ``T`` or ``A T``), so ``X / S`` lies between Sigma's extreme eigenvalues times ``h / 2``.
    B^ only removes Sigma's diagonal; its small off-diagonal part stays.
    """
    model, mean, cov, sigma_max = conjugate_regression()
    var = np.diag(cov)
    Sigma = 400**2 / 100 * np.cov(model.per_example_gradients(mean, slice(None)).to_dense().T, bias=True)
    lo, hi = np.linalg.eigvalsh(Sigma)[[0, -1]] / sigma_max
    h, A = 1e-3 / sigma_max, 10.0
    samplers = ((SGLD(), 1.0), (SGHMC(friction=A), A), (SGHMC(friction=A, noise_estimate="empirical"), A))
    for sampler, scale in samplers:
        added = (
            predicted_moments(sampler, model, mean, cov, h, 100).sd ** 2
            - predicted_moments(sampler, model, mean, cov, h, None).sd ** 2
        )
        excess = added / var / (h * sigma_max / (2 * scale))
        if getattr(sampler, "noise_estimate", None) == "empirical":
            assert np.all(np.abs(excess) < 0.05), excess
        else:
            assert np.all((excess > lo) & (excess < hi)), (sampler, excess, lo, hi)


@pytest.mark.parametrize(
    "sampler", [SGNHT(friction=10.0), CCAdL(friction=10.0), MCCAdL(friction=10.0)], ids=["sgnht", "ccadl", "mccadl"]
)
def test_predicted_xi_is_propositions_1_and_2(sampler):
    """Small h: xi - A -> h sigma^2 / 2 for SGNHT (Proposition 1, sigma^2 the mean of
    Sigma's diagonal), while the covariance control removes it (Proposition 2: xi -> A);
    the remaining O(h) is the discretisation's. The posterior is then exact."""
    model, mean, cov, _ = conjugate_regression()
    h = 1e-3 / np.sqrt(np.linalg.eigvalsh(np.linalg.inv(cov)).max())
    predicted = predicted_moments(sampler, model, mean, cov, h, 100)
    sigma2 = 400**2 / 100 * model.per_example_gradients(mean, slice(None)).to_dense().var(axis=0).mean()
    shift = predicted.xi - 10.0
    if isinstance(sampler, SGNHT):
        assert shift == pytest.approx(h * sigma2 / 2, rel=0.1)
    else:
        assert abs(shift) < 0.1 * h * sigma2 / 2
    assert np.all(np.abs(predicted.sd / np.sqrt(np.diag(cov)) - 1) < 1e-3)


# -- SGNHT: Proposition 1 of the CCAdL paper ----------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("h, A", [(0.002, 1.0), (0.005, 2.0)])
def test_sgnht_thermostat_settles_at_proposition_1_value(h, A):
    """With isotropic constant gradient noise Sigma = sigma^2 I, xi -> A + beta h sigma^2 / 2.

    Balanced one-hot groups with unit within-group variance make the noise covariance
    ``(N^2/n) p v I`` (up to an O(1/N) term in theta), so Proposition 1 applies; the kinetic
    temperature must settle at T = 1.
    """
    K, per, n = 4, 100, 20
    N = K * per
    rng = np.random.default_rng(0)
    e = rng.normal(size=(K, per))
    e = (e - e.mean(1, keepdims=True)) / e.std(1, keepdims=True)
    y = (e + np.arange(K)[:, None]).ravel()
    X = np.eye(K)[np.repeat(np.arange(K), per)]
    model = LinearRegressionModel(X, y, noise_precision=1.0, alpha=1e-3, fit_intercept=False)
    sigma2 = N * N / n / K
    _, stats = sample(
        SGNHT(friction=A),
        model,
        np.arange(K, dtype=float),
        n_iter=30_000,
        n_burn=5000,
        batch_size=n,
        step_size=h,
        n_chains=4,
        thin=10,
    )
    xi, kinetic = stats["xi"], stats["kinetic_temperature"]
    expected = A + h * sigma2 / 2
    assert abs(xi.mean() - expected) < 4 * mcse_mean(xi)
    assert abs(kinetic.mean() - 1.0) < 4 * mcse_mean(kinetic)


# -- Normal-Gamma example (CCAdL paper section 4.1) ----------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize("sampler", [SGHMC(friction=10.0), SGNHT(friction=10.0)], ids=["sghmc", "sgnht"])
def test_normal_gamma_marginals(sampler):
    """At h = 0.001, A = 10 (the paper's most accurate setting) both match the closed form."""
    model = NormalGammaModel(np.random.default_rng(2015).normal(size=100))
    mu_post, gamma_post = model.posterior()
    start = [mu_post.mean(), gamma_post.mean()]
    draws, _ = sample(sampler, model, start, n_iter=24_000, n_burn=4000, batch_size=10, step_size=1e-3, thin=5)
    assert_matches_gaussian(draws, [mu_post.mean(), gamma_post.mean()], [mu_post.std(), gamma_post.std()])


@pytest.mark.statistical
def test_normal_gamma_sghmc_runs_hot_at_large_step_as_in_table_1():
    """SGHMC with B^ = 0 cannot shed the minibatch noise at h = 0.01, A = 1 (paper's Table 1),
    while SGNHT's thermostat does for mu: the comparison the CCAdL paper makes."""
    model = NormalGammaModel(np.random.default_rng(2015).normal(size=100))
    mu_post, gamma_post = model.posterior()
    start = [mu_post.mean(), gamma_post.mean()]
    kw = dict(n_iter=10_000, n_burn=2000, batch_size=10, step_size=1e-2, thin=5, n_chains=2)
    hmc, _ = sample(SGHMC(friction=1.0), model, start, **kw)
    nht, _ = sample(SGNHT(friction=1.0), model, start, **kw)
    assert hmc[..., 0].std() > 1.5 * mu_post.std()
    assert abs(nht[..., 0].std() / mu_post.std() - 1) < 0.2


# -- SGHMC noise estimate -------------------------------------------------------------------


def test_sghmc_empirical_noise_estimate_is_half_h_sigma_and_clips():
    model, mean, _, sigma_max = conjugate_regression()
    sampler = SGHMC(step_size=0.01, friction=1e-3, noise_estimate="empirical")
    grad_estimator = MinibatchGradient(model, 100)
    rng = np.random.default_rng(0)
    state = sampler.init_state(mean, grad_estimator, rng)
    state, info = sampler.step(state, grad_estimator, rng)
    # h Sigma / 2 with Sigma ~ 1e3 dwarfs A T = 1e-3 on every coordinate: all clipped.
    assert state.noise_clipped == model.n_params
    assert state.summary() == {"noise_clipped": model.n_params}
    assert info.kinetic_temperature == pytest.approx(state.p @ state.p / model.n_params)


# -- step size -----------------------------------------------------------------------------


def test_largest_curvature_is_the_top_hessian_eigenvalue():
    model, mean, cov, _ = conjugate_regression(D=5)
    lam = largest_curvature(model, mean)
    assert lam == pytest.approx(np.linalg.eigvalsh(np.linalg.inv(cov)).max(), rel=1e-3)


@pytest.mark.parametrize("cls, order", [(SGLD, 1), (SGHMC, 2), (SGNHT, 2)])
def test_auto_step_size_follows_curvature_scaling(cls, order):
    """Four times the data quadruples lambda_max: h shrinks 4x (first order) or 2x (second)."""
    small, mean_s, _, _ = conjugate_regression(N=300, seed=3)
    X4, y4 = np.tile(small.X, (4, 1)), np.tile(small.y, 4)
    big = LinearRegressionModel(X4, y4, noise_precision=1.0, alpha=1e-9)
    small = LinearRegressionModel(small.X, small.y, noise_precision=1.0, alpha=1e-9)
    h_small, info = cls().resolve_step_size(small, mean_s)
    h_big, _ = cls().resolve_step_size(big, mean_s)
    assert h_small / h_big == pytest.approx(4.0 ** (1.0 / order), rel=1e-3)
    assert h_small == pytest.approx(cls._auto_step_constant / info["lambda_max"] ** (1.0 / order))
    assert cls(step_size=0.123).resolve_step_size(small, mean_s) == (0.123, {})


# -- hyperparameter validation ------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        SGLD(step_size=0),
        SGLD(step_size=-1e-3),
        SGHMC(friction=0.0),
        SGNHT(friction=-1),
        SGNHT(thermal_mass=0),
        SGLD(temperature=float("nan")),
        SGHMC(noise_estimate="full"),
        SGLD(step_size="big"),
    ],
)
def test_bad_hyperparameters_raise(bad):
    with pytest.raises(ValueError, match=type(bad).__name__):
        get_sampler(bad)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_hyperparameter_has_a_constraint(name):
    # validate() checks only the hyperparameters named in _parameter_constraints.
    cls = SAMPLERS[name]
    assert set(cls._parameter_constraints) == set(cls().get_params(deep=False)), name
    with pytest.raises(ValueError, match=rf"parameter of {cls.__name__} must be .* Got True instead"):
        get_sampler(cls(**{next(iter(cls._parameter_constraints)): True}))


def test_get_sampler_by_name_and_errors():
    assert isinstance(get_sampler("SGHMC"), SGHMC)
    with pytest.raises(ValueError, match="Unknown sampler 'nuts'"):
        get_sampler("nuts")
    with pytest.raises(TypeError, match="sampler must be"):
        get_sampler(3.0)
