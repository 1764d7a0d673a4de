"""The worked example of docs/architecture_models.rst, kept here so that the page cannot rot.

A Bayesian Poisson regression written against :class:`skbayes_sg.models.Model` with the
required methods only, then sampled by mCCAdL through the chain driver and estimated by
multilevel SGLD (which uses the batched path methods and Hessians the base class derives
from the required ones). Both are checked against the exact posterior mean and sd from a
quadrature grid, with tolerances from their Monte Carlo errors. Keep the class below in
sync with the page (the page's literalinclude shows this file's lines).
"""

import numpy as np
import pytest

from skbayes_sg._chains import ChainSpec, run_chains
from skbayes_sg.diagnostics import mcse_mean
from skbayes_sg.minibatch import GradientSpec
from skbayes_sg.models import DensePerExampleGradients, Model, find_map
from skbayes_sg.multilevel import estimate
from skbayes_sg.samplers import MLSGLD, MCCAdL


# -- example: begin
class PoissonRegression(Model):
    """``y_i ~ Poisson(exp(x_i . w + b))`` with a ``N(0, 1 / alpha)`` prior on ``w`` and ``b``."""

    def __init__(self, X, y, alpha=1.0):
        self.X = np.column_stack([np.asarray(X, dtype=float), np.ones(len(X))])  # b is last
        self.y = np.asarray(y, dtype=float)
        self.alpha = float(alpha)
        self.n_samples, self.n_params = self.X.shape

    def _rows(self, idx):
        return (self.X, self.y) if idx is None else (self.X[idx], self.y[idx])

    def per_example_gradients(self, theta, idx):
        X, y = self._rows(idx)
        return DensePerExampleGradients((y - np.exp(X @ theta))[:, None] * X)

    def log_likelihood_and_grad(self, theta, idx=None):
        X, y = self._rows(idx)
        z = X @ theta
        mu = np.exp(z)
        return float(y @ z - mu.sum()), X.T @ (y - mu)  # up to the constant -sum log y_i!

    def log_prior_and_grad(self, theta):
        return -0.5 * self.alpha * float(theta @ theta), -self.alpha * theta

    def predict_draws(self, thetas, X):
        Xa = np.column_stack([np.asarray(X, dtype=float), np.ones(len(X))])
        return np.exp(thetas @ Xa.T)  # the rate exp(x . w + b) per draw, (S, n)


# -- example: end


def _problem():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 1))
    y = rng.poisson(np.exp(0.5 + 0.8 * X[:, 0]))
    return PoissonRegression(X, y)


def _exact_moments(model):
    """Posterior mean and sd of (w, b) by quadrature on a 201 x 201 grid of +-8 Laplace sds."""
    theta_map, _ = find_map(model)
    sd = np.sqrt(np.diag(np.linalg.inv(-model.posterior_hessian(theta_map))))
    grid = np.linspace(-8.0, 8.0, 201)
    A, B = np.meshgrid(theta_map[0] + sd[0] * grid, theta_map[1] + sd[1] * grid, indexing="ij")
    T = np.column_stack([A.ravel(), B.ravel()])
    Z = model.X @ T.T
    log_post = model.y @ Z - np.exp(Z).sum(axis=0) - 0.5 * model.alpha * (T**2).sum(axis=1)
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    mean = w @ T
    return theta_map, mean, np.sqrt(w @ (T - mean) ** 2)


def test_example_gradients_and_derived_curvature_match_finite_differences():
    model = _problem()
    theta, eps = np.array([0.7, 0.4]), 1e-6
    E = np.eye(model.n_params)
    fd = np.array(
        [(model.log_posterior(theta + eps * e) - model.log_posterior(theta - eps * e)) / (2 * eps) for e in E]
    )
    np.testing.assert_allclose(model.grad_log_posterior(theta), fd, rtol=1e-6)
    rows = np.array([3, 3, 17, 250])
    np.testing.assert_allclose(
        model.per_example_gradients(theta, rows).mean() * rows.size,
        model.log_likelihood_and_grad(theta, rows)[1],
        rtol=1e-12,
    )
    # Derived by the base class: the Hessian of the log posterior, exactly X' diag(mu) X + alpha I here.
    mu = np.exp(model.X @ theta)
    exact = -(model.X.T * mu) @ model.X - model.alpha * E
    np.testing.assert_allclose(model.posterior_hessian(theta), exact, rtol=1e-6)
    np.testing.assert_allclose(
        model.loglik_grad_paths(np.stack([theta, 2 * theta]), np.stack([rows, rows])),
        [model.log_likelihood_and_grad(t, rows)[1] for t in (theta, 2 * theta)],
        rtol=1e-12,
    )


@pytest.mark.statistical
def test_example_sampled_with_mccadl_matches_the_exact_posterior():
    model = _problem()
    theta_map, mean, sd = _exact_moments(model)
    # -- fit: begin
    lam = np.linalg.eigvalsh(-model.posterior_hessian(theta_map))[-1]  # stiffest curvature
    spec = ChainSpec(
        MCCAdL(step_size=0.2 / np.sqrt(lam)),
        model,
        n_iter=5000,
        n_burn=1000,
        gradient=GradientSpec(batch_size=30),  # minibatches of 30 rows (None: full data)
    )
    chains = run_chains(spec, starts=[theta_map] * 4, seeds=np.random.SeedSequence(0).spawn(4))
    draws = np.stack([c.draws for c in chains])  # (chains, draws, P)
    # -- fit: end
    flat = draws.reshape(-1, model.n_params)
    assert np.all(np.abs(flat.mean(axis=0) - mean) < 4 * mcse_mean(draws))
    np.testing.assert_allclose(flat.std(axis=0), sd, rtol=0.1)
    rate = model.predict_draws(draws[0], np.array([[0.0], [1.0]]))
    assert rate.shape == (draws.shape[1], 2) and np.all(rate > 0)


@pytest.mark.statistical
def test_example_estimated_with_multilevel_sgld_matches_the_exact_posterior():
    model = _problem()
    _, mean, sd = _exact_moments(model)
    # -- multilevel: begin
    result = estimate(MLSGLD(target_rmse=0.1), model, random_state=0)
    # -- multilevel: end
    assert np.all(np.abs(result.estimate - mean) < 4 * result.rmse)
    assert np.all(result.rmse < 0.2 * sd)
