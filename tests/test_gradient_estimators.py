"""The gradient-estimator layer: control variates, importance-sampled rows, whitened
coordinates, and the curvature the preconditioner is built from."""

import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg._geometry import leverage_probabilities
from skbayes_sg.minibatch import ControlVariateGradient, MinibatchGradient, RowDistribution
from skbayes_sg.models import LinearRegressionModel, LogisticModel, Model, SoftmaxModel, WhitenedModel
from skbayes_sg.models._gradients import DifferencePerExampleGradients, PerExampleGradients
from skbayes_sg.preconditioning import curvature_factor


def _logistic(N=400, D=4, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    X[:, 0] = rng.random(N) < 0.03  # a rare binary feature: the case leverage sampling is for
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ rng.normal(size=D)))).astype(int)
    return LogisticModel(sp.csr_matrix(X) if sparse else X, y)


MODELS = {
    "logistic": lambda: _logistic(),
    "logistic_sparse": lambda: _logistic(sparse=True),
    "linear_sampled_noise": lambda: LinearRegressionModel(*_xy(1), noise_precision=None),
    "softmax": lambda: SoftmaxModel(_xy(2)[0], np.arange(300) % 3, n_classes=3),
}


def _xy(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(300, 3))
    return X, X @ [1.0, -1.0, 0.5] + rng.normal(size=300)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradient_differences_match_two_evaluations(name):
    model = MODELS[name]()
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=model.n_params) * 0.3, rng.normal(size=model.n_params) * 0.3
    rows = rng.integers(0, model.n_samples, 25)
    fast = model.per_example_gradient_differences(a, b, rows)
    slow = DifferencePerExampleGradients(model.per_example_gradients(a, rows), model.per_example_gradients(b, rows))
    np.testing.assert_allclose(fast.to_dense(), slow.to_dense(), atol=1e-12)
    np.testing.assert_allclose(fast.to_dense(), PerExampleGradients.to_dense(fast), atol=1e-12)
    np.testing.assert_allclose(fast.mean(), slow.mean(), atol=1e-12)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_closed_form_hessians_match_hessian_vector_products(name):
    model = MODELS[name]()
    theta = np.random.default_rng(1).normal(size=model.n_params) * 0.3
    H = Model.hessian(model, theta)
    np.testing.assert_allclose(model.hessian(theta), H, atol=1e-9 * np.abs(H).max())
    np.testing.assert_allclose(model.hessian_diagonal(theta), np.diag(H), atol=1e-9 * np.abs(H).max())


@pytest.mark.parametrize("kind", ["dense", "diag"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_whitened_model_is_the_chain_rule_and_its_operator_is_G_L(name, kind):
    model = MODELS[name]()
    rng = np.random.default_rng(2)
    m = rng.normal(size=model.n_params) * 0.2
    L = curvature_factor(model, m, kind)
    wm = WhitenedModel(model, m, L)
    z = rng.normal(size=model.n_params)
    theta = wm.to_theta(z)
    np.testing.assert_allclose(wm.from_theta(theta), z, atol=1e-10)
    Lm = np.diag(L) if kind == "diag" else L
    lp, g = wm.log_posterior_and_grad(z)
    lp0, g0 = model.log_posterior_and_grad(theta)
    assert lp == pytest.approx(lp0)
    np.testing.assert_allclose(g, Lm.T @ g0, rtol=1e-10, atol=1e-10)
    # Finite differences in z.
    e = rng.normal(size=model.n_params) * 1e-6
    assert wm.log_posterior_and_grad(z + e)[0] - wm.log_posterior_and_grad(z - e)[0] == pytest.approx(
        2 * g @ e, rel=1e-5)
    # Whitened, the curvature is I (dense) or has a unit diagonal (diag); away from a mode an
    # indefinite Hessian is whitened by |H|, so its eigenvalues are +-1.
    Hz = Lm.T @ model.hessian(m) @ Lm
    if kind == "dense":
        np.testing.assert_allclose(np.abs(np.linalg.eigvalsh(0.5 * (Hz + Hz.T))), 1.0, atol=1e-8)
    else:
        np.testing.assert_allclose(np.abs(np.diag(Hz)), 1.0, atol=1e-8)
    # The per-example operator in z is G L, and its trace-of-covariance shortcut is exact.
    rows = rng.integers(0, model.n_samples, 30)
    ops = wm.per_example_gradients(z, rows)
    G = model.per_example_gradients(theta, rows).to_dense()
    np.testing.assert_allclose(ops.to_dense(), G @ Lm, atol=1e-10)
    v, u = rng.normal(size=model.n_params), rng.normal(size=30)
    np.testing.assert_allclose(ops.matvec(v), G @ Lm @ v, atol=1e-10)
    np.testing.assert_allclose(ops.rmatvec(u), Lm.T @ G.T @ u, atol=1e-10)
    np.testing.assert_allclose(ops.total_sum_of_squares(), np.sum((G @ Lm) ** 2), rtol=1e-10)
    np.testing.assert_allclose(ops.sum_of_squares(), np.sum((G @ Lm) ** 2, axis=0), rtol=1e-10, atol=1e-12)
    # Importance weights scale the rows.
    c = rng.random(30) + 0.5
    np.testing.assert_allclose(ops.scale_rows(c).to_dense(), (G @ Lm) * c[:, None], atol=1e-10)


def test_row_distribution_draws_its_probabilities():
    rng = np.random.default_rng(3)
    p = rng.random(500) ** 4
    p /= p.sum()
    draws = RowDistribution(p).draw(rng, 1_000_000)
    freq = np.bincount(draws, minlength=500) / draws.size
    z = (freq - p) / np.sqrt(p * (1 - p) / draws.size)
    assert np.abs(z).max() < 5.0


@pytest.mark.parametrize("importance", [False, True])
def test_control_variate_force_is_unbiased_and_exact_at_its_centre(importance):
    model = _logistic(N=600)
    theta_hat = np.full(model.n_params, 0.1)
    L = curvature_factor(model, theta_hat, "dense")
    probs = leverage_probabilities(model, theta_hat, L) if importance else None
    target = ControlVariateGradient(model, 20, "replacement", theta_hat, row_probabilities=probs)
    rng = np.random.default_rng(4)
    exact_hat = model.grad_log_posterior(theta_hat)
    np.testing.assert_allclose(target.gradient(theta_hat, rng)[0], exact_hat, atol=1e-10)
    theta = theta_hat + 0.3 * rng.normal(size=model.n_params)
    forces = np.array([target.gradient(theta, rng)[0] for _ in range(4000)])
    exact = model.grad_log_posterior(theta)
    z = (forces.mean(0) - exact) / (forces.std(0) / np.sqrt(len(forces)))
    assert np.abs(z).max() < 4.5, z
    # The operator's covariance is the force's: noise_scale * V matches the draws' covariance.
    V = np.mean([np.diag(np.cov(target.gradient(theta, rng)[1].to_dense().T)) for _ in range(2000)], axis=0)
    np.testing.assert_allclose(target.noise_scale * V, forces.var(0), rtol=0.15)


def test_leverage_sampling_and_control_variates_shrink_the_noise():
    """The plain minibatch's noise grows like N/n; the control variate's does not, and
    leverage sampling evens it out across the rare feature's direction."""
    model = _logistic(N=4000)
    from skbayes_sg._estimator import _map_estimate

    theta_hat = _map_estimate(model)
    L = curvature_factor(model, theta_hat, "dense")
    wm = WhitenedModel(model, theta_hat, L)
    z = np.random.default_rng(5).normal(size=model.n_params)
    from skbayes_sg.samplers._step_size import largest_noise_eigenvalue

    def sigma(target):
        grads = target.noise_gradients(z, np.random.default_rng(6))
        return largest_noise_eigenvalue(grads, model.n_samples**2 / 50)

    rows = 1000  # below N: a probe of the minibatch distribution, not the full data
    plain = sigma(MinibatchGradient(wm, rows))
    cv = sigma(ControlVariateGradient(wm, rows, "replacement", np.zeros(model.n_params), np.zeros(model.n_params)))
    lev = sigma(ControlVariateGradient(wm, rows, "replacement", np.zeros(model.n_params), np.zeros(model.n_params),
                                       leverage_probabilities(model, theta_hat, L)))
    assert cv < 0.2 * plain and lev < 0.5 * cv, (plain, cv, lev)


def test_leverages_are_the_hat_matrix_diagonal():
    model = _logistic()
    theta = np.full(model.n_params, 0.05)
    L = curvature_factor(model, theta, "dense")
    h = model.leverage_scores(theta, L)
    H = model.hessian(theta)
    # sum_i w_i x_i' H^-1 x_i = tr(H^-1 (H - alpha I)) = P - alpha tr(H^-1)
    assert h.sum() == pytest.approx(model.n_params - model.alpha * np.trace(np.linalg.inv(H)))
    assert np.all(h > 0) and np.all(h < 1)
