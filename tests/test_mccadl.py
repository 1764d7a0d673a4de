"""mCCAdL (Wei & Shang 2026, Algorithm 1, BAODCDOAB): exact Gaussian posterior, thermostat
equilibrium, one gradient per iteration, and the Normal-Gamma comparison of CCAdL's Table 1."""

import numpy as np
import pytest
from sklearn.base import clone

from skbayes_sg import SGBayesLinearRegression
from skbayes_sg._chains import ChainSpec, run_chain
from skbayes_sg.diagnostics import ess_bulk, mcse_mean
from skbayes_sg.minibatch import GradientSpec, MinibatchGradient
from skbayes_sg.models import LinearRegressionModel, NormalGammaModel
from skbayes_sg.samplers import SGHMC, SGNHT, MCCAdL, get_sampler


def _linreg_problem(seed=0, N=200, D=2, tau=1.0, alpha=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    y = X @ np.array([1.0, -0.5])[:D] + 0.3 + rng.normal(size=N) / np.sqrt(tau)
    model = LinearRegressionModel(X, y, alpha=alpha, noise_precision=tau)
    Xa = np.column_stack([X, np.ones(N)])  # intercept as a column of ones, same prior
    S = np.linalg.inv(tau * Xa.T @ Xa + alpha * np.eye(D + 1))
    m = tau * S @ Xa.T @ y
    return X, y, model, m, S


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
    return draws, stats, results


@pytest.mark.statistical
@pytest.mark.parametrize("method", ["auto", "lanczos"])
def test_recovers_gaussian_posterior_of_linear_regression(method):
    _, _, model, m, S = _linreg_problem()
    sampler = MCCAdL(friction=1.0, expm_method=method)
    h, _ = sampler.resolve_step_size(model, m)
    # n = 50: with tiny batches the shared-minibatch bias (see MCCAdL Notes) shows.
    draws, stats, _ = _run(sampler, model, m, 12000, 50, range(4), h)
    flat = draws.reshape(-1, draws.shape[-1])
    assert np.all(np.abs(flat.mean(0) - m) < 4 * mcse_mean(draws))
    # MCSE of a variance is about var sqrt(2 / ESS) for a Gaussian; 3% allows the O(h^2)
    # discretisation bias at the auto step size.
    se_var = np.diag(S) * np.sqrt(2.0 / ess_bulk(draws))
    assert np.all(np.abs(flat.var(0) - np.diag(S)) < 4 * se_var + 0.03 * np.diag(S))
    # Proposition 2 of the CCAdL paper / eq. 9: xi ~ A and p'p / N_d ~ 1/beta.
    for name, target in (("xi", 1.0), ("kinetic_temperature", 1.0)):
        x = stats[name]
        assert abs(x.mean() - target) < 4 * mcse_mean(x)[0], (name, x.mean())


@pytest.mark.statistical
def test_estimator_with_mccadl_and_temperature():
    """Through the estimator, and at temperature T = 2: the draws have covariance T S and
    the kinetic temperature settles at T."""
    X, y, _, m, S = _linreg_problem(seed=1)
    T = 2.0
    est = SGBayesLinearRegression(
        sampler=MCCAdL(temperature=T, friction=1.0),
        noise_precision=1.0,
        n_iter=8000,
        n_chains=3,
        batch_size=50,
        random_state=0,
        init="map",
        normalize_y=False,
        alpha_intercept=1.0,
    )
    est.fit(X, y)
    draws = est.samples_
    flat = draws.reshape(-1, draws.shape[-1])
    assert np.all(np.abs(flat.mean(0) - m) < 4 * mcse_mean(draws))
    se_var = T * np.diag(S) * np.sqrt(2.0 / ess_bulk(draws))
    assert np.all(np.abs(flat.var(0) - T * np.diag(S)) < 4 * se_var + 0.03 * T * np.diag(S))
    assert est.diagnostics_["c_step_products_per_iter"] > 0


def test_wrong_c_step_is_detected():
    """Dropping the C step (SGNHT with the BAODDOAB splitting) leaves the gradient noise
    undamped: xi then settles well above A, so the xi check above has power."""
    _, _, model, m, _ = _linreg_problem()

    class NoC(MCCAdL):
        def step(self, state, grad_estimator, rng):
            scale, grad_estimator.noise_scale = grad_estimator.noise_scale, 0.0
            out = super().step(state, grad_estimator, rng)
            grad_estimator.noise_scale = scale
            return out

    sampler = NoC(friction=1.0)
    h, _ = sampler.resolve_step_size(model, m)
    _, stats, _ = _run(sampler, model, m, 4000, 20, [0], h)
    assert stats["xi"].mean() > 3.0


def test_one_force_per_iteration():
    _, _, model, m, _ = _linreg_problem()
    n_iter, n = 50, 20
    _, _, results = _run(MCCAdL(step_size=0.01, sigma_estimate="same"), model, m, n_iter, n, [0], 0.01)
    # one evaluation at initialisation, then one per iteration (the paper's reuse)
    assert results[0].n_grad_evals == (n_iter + 1) * n
    # ...and one more minibatch per iteration for an independent Sigma refreshed every iteration
    _, _, results = _run(MCCAdL(step_size=0.01, sigma_refresh=1), model, m, n_iter, n, [0], 0.01)
    assert results[0].n_grad_evals == (2 * n_iter + 1) * n
    # ...or every sigma_refresh iterations (the default with plain minibatch gradients: 64)
    from skbayes_sg.samplers.mccadl import AUTO_SIGMA_REFRESH

    for refresh, n_sigma in ((7, 8), ("auto", -(-n_iter // AUTO_SIGMA_REFRESH))):
        _, _, results = _run(MCCAdL(step_size=0.01, sigma_refresh=refresh), model, m, n_iter, n, [0], 0.01)
        assert results[0].n_grad_evals == (n_iter + 1 + n_sigma) * n


def test_full_data_is_symmetric_adaptive_langevin():
    """Full data: Sigma = 0, C is the identity, and the scheme has no C products."""
    _, _, model, m, _ = _linreg_problem()
    _, stats, results = _run(MCCAdL(step_size=0.01), model, m, 300, None, [0], 0.01)
    assert results[0].summary["c_step_products_per_iter"] == 0
    assert results[0].summary["c_step_lanczos_fraction"] == 0
    assert np.isfinite(stats["xi"]).all()


def test_chain_summary_says_which_method_the_c_step_used():
    """The share of C steps that went to Lanczos: all of them when asked for, none with the
    Taylor series, and none under "auto" at the auto step, where ||h Sigma~|| is small."""
    _, _, model, m, _ = _linreg_problem()
    fractions = {}
    for method in ("lanczos", "taylor", "auto"):
        sampler = MCCAdL(expm_method=method)
        h, _ = sampler.resolve_step_size(model, m)
        _, _, results = _run(sampler, model, m, 200, 20, [0], h)
        fractions[method] = results[0].summary["c_step_lanczos_fraction"]
    assert fractions == {"lanczos": 1.0, "taylor": 0.0, "auto": 0.0}


def test_reproducible_and_registered():
    assert isinstance(get_sampler("mccadl"), MCCAdL)
    with pytest.raises(ValueError, match="expm_tol"):
        get_sampler(MCCAdL(expm_tol=2.0))
    _, _, model, m, _ = _linreg_problem()
    a = _run(MCCAdL(step_size=0.01), model, m, 100, 20, [5], 0.01)[0]
    b = _run(MCCAdL(step_size=0.01), model, m, 100, 20, [5], 0.01)[0]
    np.testing.assert_array_equal(a, b)


def test_xi_zero_branch():
    """Algorithm 1, lines 8-9: with xi = 0 the O step is p + sqrt(h A / beta) R (no NaN)."""
    _, _, model, m, _ = _linreg_problem()
    sampler = MCCAdL(step_size=0.01)
    rng = np.random.default_rng(0)
    grad_estimator = MinibatchGradient(model, 20)
    state = sampler.init_state(m, grad_estimator, rng)
    state.xi = 0.0
    state, info = sampler.step(state, grad_estimator, rng)
    assert np.isfinite(state.p).all() and np.isfinite(state.xi) and info.xi == state.xi


def _density_rmse(draws, dist, n_bins=40):
    lo, hi = dist.ppf([0.001, 0.999])
    edges = np.linspace(lo, hi, n_bins + 1)
    counts, _ = np.histogram(draws, edges)
    density = counts / (draws.size * (edges[1] - edges[0]))
    return float(np.sqrt(np.mean((density - dist.pdf(0.5 * (edges[1:] + edges[:-1]))) ** 2)))


@pytest.mark.statistical
def test_normal_gamma_beats_sgnht_and_sghmc():
    """CCAdL paper section 4.1 / Table 1 at h = 0.01, A = 1 (N = 100, n = 10)."""
    x = np.random.default_rng(2015).normal(size=100)
    model = NormalGammaModel(x)
    post = model.posterior()
    h, n_iter = 0.01, 30000
    rmse = {}
    for sampler in (SGHMC(step_size=h), SGNHT(step_size=h), MCCAdL(step_size=h)):
        draws, _, _ = _run(sampler, model, np.array([0.0, 1.0]), n_iter, 10, [7], h)
        d = draws[0]
        rmse[type(sampler).__name__] = max(_density_rmse(d[:, j], post[j]) for j in range(2))
    assert rmse["MCCAdL"] < 0.6 * rmse["SGNHT"] < 0.6 * rmse["SGHMC"], rmse


def test_far_too_large_step_raises_divergence_error_not_a_numerical_one():
    """At 12x the auto step the chain blows up; the user must get DivergenceError."""
    from skbayes_sg import DivergenceError

    rng = np.random.default_rng(0)
    P = 5
    cov = 0.5 ** np.abs(np.subtract.outer(np.arange(P), np.arange(P)))
    X = rng.multivariate_normal(np.zeros(P), cov, size=2000)
    y = X @ rng.normal(size=P) + rng.normal(scale=0.5, size=2000)
    reg = SGBayesLinearRegression(
        sampler=MCCAdL(step_size=0.0178, preconditioner="none"),
        batch_size=100,
        noise_precision=4.0,
        gradient="minibatch",
        normalize_y=False,
        fit_intercept=False,
        n_iter=5000,
        n_chains=2,
        random_state=0,
    )
    with pytest.raises(DivergenceError, match="MCCAdL diverged"):
        reg.fit(X, y)


@pytest.mark.statistical
def test_sigma_from_an_independent_minibatch_removes_the_correlation_bias():
    """Issue 21: Normal-Gamma (N = 100, n = 10) at h = 0.02, whose per-example gradients are
    skewed. Sigma from the force's own minibatch shifts the mean of gamma by ~7%, 15-20 MCSE
    (the h^2 N^2 kappa_3 / n^2 bias of Algorithm 1); from an independent minibatch the
    means and sds are within Monte Carlo error of the exact posterior."""
    from ._exact import mcse_sd

    x = np.random.default_rng(7).normal(size=100)
    model = NormalGammaModel(x)
    post = model.posterior()
    mean = np.array([d.mean() for d in post])
    sd = np.array([d.std() for d in post])
    h, n_iter = 0.02, 10000
    z = {}
    for source in ("same", "independent"):
        draws, _, _ = _run(
            MCCAdL(step_size=h, sigma_estimate=source), model, np.array([0.0, 1.0]), n_iter, 10, [0, 1, 2], h
        )
        flat = draws.reshape(-1, 2)
        z[source] = np.concatenate([(flat.mean(0) - mean) / mcse_mean(draws), (flat.std(0) - sd) / mcse_sd(draws)])
    assert np.all(np.abs(z["independent"]) < 4.0), z
    assert z["same"][1] > 8.0, z  # the mean of gamma, pushed up by the correlation


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "always", None])
def test_bad_sigma_refresh_raises(bad):
    match = r"'sigma_refresh' parameter of MCCAdL must be an int in the range \[1, inf\) or a str among \{'auto'\}"
    with pytest.raises(ValueError, match=match):
        MCCAdL(sigma_refresh=bad).validate()


def test_sigma_refresh_auto_follows_the_gradient_estimator():
    """'auto': with control-variate gradients (the estimators' default) a fresh Sigma minibatch
    every iteration, draw for draw what sigma_refresh=1 gives; with plain minibatch gradients one
    every AUTO_SIGMA_REFRESH iterations, averaged over the last SIGMA_WINDOW."""
    from skbayes_sg.samplers.mccadl import AUTO_SIGMA_REFRESH

    X, y, model, m, _ = _linreg_problem(N=400)
    fits = {}
    for refresh in ("auto", 1):
        # An independent Sigma under control variates, which sigma_estimate="auto" would not use.
        fits[refresh] = SGBayesLinearRegression(
            sampler=MCCAdL(sigma_estimate="independent", sigma_refresh=refresh),
            noise_precision=1.0,
            batch_size=40,
            n_iter=400,
            n_chains=1,
            random_state=3,
        ).fit(X, y)
    np.testing.assert_array_equal(fits["auto"].samples_, fits[1].samples_)
    assert fits["auto"].diagnostics_["gradient"] == "control_variate"
    assert fits["auto"].diagnostics_["sigma_minibatches_per_iter"] == 1.0
    _, _, results = _run(MCCAdL(step_size=0.01), model, m, 640, 20, [0], 0.01)
    assert results[0].summary["sigma_minibatches_per_iter"] == 640 / AUTO_SIGMA_REFRESH / 640


def test_reused_sigma_gives_the_same_draws_whatever_n_jobs():
    """A compact, averaged Sigma travels in the chain state (to joblib workers and back between
    progress chunks) and gives the draws of one process."""
    X, y, _, _, _ = _linreg_problem(N=1000)
    draws = [
        SGBayesLinearRegression(
            sampler=MCCAdL(),
            gradient="minibatch",
            batch_size=50,
            noise_precision=1.0,
            n_iter=300,
            n_chains=2,
            random_state=4,
            **kw,
        )
        .fit(X, y)
        .samples_
        for kw in ({"n_jobs": 1}, {"n_jobs": 2}, {"n_jobs": 2, "verbose": 1})
    ]
    np.testing.assert_array_equal(draws[0], draws[1])
    np.testing.assert_array_equal(draws[0], draws[2])


def test_sigma_estimate_auto_follows_the_gradient_estimator():
    """'auto': Sigma from the force's own minibatch ("same") with control-variate gradients (the
    estimators' default), from an independent minibatch with plain minibatch gradients, draw
    for draw what the explicit option gives; an explicit option is kept whatever the gradients."""
    from skbayes_sg.minibatch import ControlVariateGradient

    X, y, model, m, _ = _linreg_problem(N=400)
    plain = MinibatchGradient(model, 40)
    cv = ControlVariateGradient(model, 40, theta_hat=m)
    assert MCCAdL().sigma_estimate == "auto"
    assert MCCAdL().sigma_source(cv) == "same"
    assert MCCAdL().sigma_source(plain) == "independent"
    for source in ("independent", "lagged", "same"):
        assert MCCAdL(sigma_estimate=source).sigma_source(cv) == source
        assert MCCAdL(sigma_estimate=source).sigma_source(plain) == source
    for gradient, resolved, per_iter in (("auto", "same", 0.0), ("minibatch", "independent", None)):
        fits = {}
        for source in ("auto", resolved):
            fits[source] = SGBayesLinearRegression(
                sampler=MCCAdL(sigma_estimate=source),
                gradient=gradient,
                noise_precision=1.0,
                batch_size=40,
                n_iter=400,
                n_chains=1,
                random_state=3,
            ).fit(X, y)
        np.testing.assert_array_equal(fits["auto"].samples_, fits[resolved].samples_)
        assert fits["auto"].diagnostics_["gradient"] == ("control_variate" if gradient == "auto" else "minibatch")
        if per_iter is not None:  # no Sigma minibatch at all
            assert fits["auto"].diagnostics_["sigma_minibatches_per_iter"] == per_iter
        else:
            assert fits["auto"].diagnostics_["sigma_minibatches_per_iter"] > 0


@pytest.mark.statistical
def test_large_data_default_takes_twice_the_step_and_stays_exact():
    # Past the exact sampler's bound (N (P + 30) > 2e6), whitened at the MAP, the default's
    # curvature constant doubles (h = 0.4): the draws must still match the posterior, here its
    # Laplace approximation (at N = 60,000 and P = 11 off by about 1/sqrt(N / P) = 0.014 sd,
    # allowed 0.02 sd in quadrature with each MCSE).
    from scipy.special import expit

    from skbayes_sg import SGBayesLogisticRegression
    from skbayes_sg.models import find_map

    from ._exact import Z_MAX, mcse_sd

    rng = np.random.default_rng(3)
    X = rng.standard_normal((60_000, 10))
    y = (rng.random(60_000) < expit(X @ (0.5 * rng.standard_normal(10)) + 0.3)).astype(int)
    est = SGBayesLogisticRegression(random_state=0).fit(X, y)
    d = est.diagnostics_
    assert d["gradient"] == "control_variate" and d["preconditioner"] == "dense"
    assert d["step_size"] == pytest.approx(2 * MCCAdL._auto_step_constant)  # the noise cap is far
    model = est._build_model(X, y)
    theta_map, _ = find_map(model)
    sd = np.sqrt(np.diag(np.linalg.inv(model.hessian(theta_map))))
    draws = est.samples_
    flat = draws.reshape(-1, draws.shape[-1])
    z_mean = (flat.mean(axis=0) - theta_map) / np.hypot(mcse_mean(draws), 0.02 * sd)
    z_sd = (flat.std(axis=0, ddof=1) - sd) / np.hypot(mcse_sd(draws), 0.02 * sd)
    assert np.abs(z_mean).max() < Z_MAX and np.abs(z_sd).max() < Z_MAX, (z_mean, z_sd)
    # Below the bound the same sampler keeps its constant.
    small = SGBayesLogisticRegression(sampler="mccadl", n_iter=200, random_state=0).fit(X[:5000], y[:5000])
    assert small.diagnostics_["step_size"] == pytest.approx(MCCAdL._auto_step_constant)


def test_auto_batch_is_sized_for_the_large_data_step():
    # Past the exact bound the curvature step is 0.4; rare binary features make the control
    # variate's noise cap h below that at 200 rows. batch_size="auto" grows the minibatch until
    # the noise no longer caps the step the chains take (not the 0.2 of smaller data), since
    # every halving of h doubles the iterations the same ESS needs.
    from scipy.special import expit

    from skbayes_sg import SGBayesLogisticRegression

    rng = np.random.default_rng(0)
    X = (rng.random((40_000, 40)) < np.geomspace(0.003, 0.5, 40)).astype(float)
    y = (rng.random(40_000) < expit(X @ rng.standard_normal(40) - 1)).astype(int)
    fixed = SGBayesLogisticRegression(batch_size=200, n_iter=20, random_state=0).fit(X, y).diagnostics_
    assert fixed["step_size"] < 0.9 * 2 * MCCAdL._auto_step_constant  # the noise caps h at 200 rows
    auto = SGBayesLogisticRegression(n_iter=20, random_state=0).fit(X, y).diagnostics_
    assert auto["batch_size"] > 200
    assert auto["step_size"] == pytest.approx(2 * MCCAdL._auto_step_constant)
    assert auto["predicted_noise_error"] <= MCCAdL._noise_tolerance


def test_auto_burn_in_is_short_only_for_chains_started_at_the_laplace_approximation():
    # Whitened densely at the MAP, the chains start at draws of the Laplace approximation:
    # 5% of the run; a diagonal or no whitening, or another init, keeps the papers' 20%.
    from skbayes_sg import SGBayesLogisticRegression
    from skbayes_sg._estimator import AUTO_BURN_IN
    from skbayes_sg.preconditioning import MAX_DENSE_PARAMS

    est = SGBayesLogisticRegression()
    policy = lambda sampler, P, **kw: est.set_params(**kw)._run_policy(sampler, P)[0]  # noqa: E731
    assert policy(MCCAdL(), 124) == MCCAdL._dense_map_burn_in == 0.05
    assert policy(MCCAdL(preconditioner="dense", step_size=0.1), 124) == 0.05
    assert policy(MCCAdL(), MAX_DENSE_PARAMS + 1) == AUTO_BURN_IN
    assert policy(MCCAdL(step_size=0.1), 124) == AUTO_BURN_IN
    assert policy(MCCAdL(preconditioner="diag"), 124) == AUTO_BURN_IN
    assert policy(MCCAdL(), 124, init="zeros") == AUTO_BURN_IN
    assert policy(MCCAdL(), 124, init="map", burn_in=0.3) == 0.3
    # The DRBM keeps "auto" in theta (no whitening at one of its many modes), whatever its size.
    from skbayes_sg import SGBayesDRBMClassifier

    assert SGBayesDRBMClassifier(n_hidden=2)._run_policy(MCCAdL(), 200)[0] == AUTO_BURN_IN
