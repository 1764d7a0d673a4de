"""Exact posteriors and chain helpers shared by the statistical tests."""

import numpy as np

from skbayes_sg._chains import run_chains
from skbayes_sg.diagnostics import mcse_mean
from skbayes_sg.models import LinearRegressionModel


def conjugate_regression(N=400, D=3, n_batch=100, seed=0, tau=1.0, alpha=1.0):
    """Bayesian linear regression with known noise and its exact Gaussian posterior.

    The intercept is a column of ones under the same ``N(0, 1/alpha)`` prior, so the
    posterior is ``N(m, S)``, ``S = (tau Xa'Xa + alpha I)^-1``, ``m = tau S Xa'y``.

    Returns
    -------
    model, mean, cov, sigma_max
        ``sigma_max`` is the largest diagonal entry of the minibatch gradient-noise
        covariance ``Sigma = N^2 / n Cov_i[g_i]`` at the posterior mean.
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    y = X @ rng.normal(size=D) + 0.5 + rng.normal(size=N) / np.sqrt(tau)
    model = LinearRegressionModel(X, y, noise_precision=tau, alpha=alpha)
    Xa = np.column_stack([X, np.ones(N)])
    cov = np.linalg.inv(tau * Xa.T @ Xa + alpha * np.eye(D + 1))
    mean = tau * cov @ Xa.T @ y
    V = model.per_example_gradients(mean, slice(None)).covariance_diag()
    return model, mean, cov, float(N * N / n_batch * V.max())


def sample(sampler, model, start, n_iter, n_burn, batch_size, step_size, n_chains=4, thin=1, seed=1):
    """Draws (n_chains, n_draws, P) and per-draw stats of ``n_chains`` chains from ``start``."""
    results = run_chains(sampler, model, [np.asarray(start, float)] * n_chains, n_iter, n_burn, thin, None,
                         batch_size, "replacement", np.random.SeedSequence(seed).spawn(n_chains),
                         step_size=step_size)
    draws = np.stack([r.draws for r in results])
    stats = {k: np.stack([r.stats[k] for r in results]) for k in results[0].stats}
    return draws, stats


def assert_matches_gaussian(draws, mean, sd, z_max=4.5, sd_rtol=0.15):
    """Posterior means within ``z_max`` Monte Carlo standard errors, sds within ``sd_rtol``."""
    flat = draws.reshape(-1, draws.shape[-1])
    mcse = mcse_mean(draws)
    z = (flat.mean(axis=0) - mean) / mcse
    assert np.all(np.abs(z) < z_max), f"means off by {z} MCSE"
    ratio = flat.std(axis=0) / sd
    assert np.all(np.abs(ratio - 1) < sd_rtol), f"sd ratios {ratio}"
