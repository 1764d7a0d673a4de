"""The gradient-estimator layer: control variates, importance-sampled rows, whitened
coordinates, and the curvature the preconditioner is built from."""

import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg._geometry import leverage_probabilities
from skbayes_sg.minibatch import (
    ControlVariateGradient,
    MinibatchGradient,
    RowDistribution,
    TaylorControlVariateGradient,
)
from skbayes_sg.models import (
    LinearRegressionModel,
    LogisticModel,
    Model,
    NormalGammaModel,
    SoftmaxModel,
    WhitenedModel,
)
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
        2 * g @ e, rel=1e-5
    )
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


@pytest.mark.parametrize("kind", ["skewed", "ties", "zeros", "uniform", "one_row", "lognormal", "one_heavy", "flat"])
def test_row_distribution_alias_table_is_exact(kind):
    # The table's columns give row i the mass accept_i + sum_{k: alias_k = i} (1 - accept_k),
    # which must be N p_i up to rounding: ties (equal weights), zero rows and a single row included,
    # few heavy rows among many light ones (lognormal, one_heavy) and a nearly flat p.
    rng = np.random.default_rng(5)
    N = 1 if kind == "one_row" else 997
    p = {
        "skewed": rng.random(N) ** 6,
        "ties": rng.integers(1, 4, N).astype(float),
        "zeros": np.where(rng.random(N) < 0.3, 0.0, rng.random(N)),
        "uniform": np.ones(N),
        "one_row": np.ones(N),
        "lognormal": np.exp(3.0 * rng.standard_normal(N)),
        "one_heavy": np.r_[1e4, np.ones(N - 1)],
        "flat": 1.0 + 1e-9 * rng.standard_normal(N),
    }[kind]
    dist = RowDistribution(p)
    in_place = RowDistribution(p.copy(), copy=False)  # the caller's array normalised in place: the same table
    np.testing.assert_array_equal(in_place.accept, dist.accept)
    np.testing.assert_array_equal(in_place.alias, dist.alias)
    mass = dist.accept.copy()
    np.add.at(mass, dist.alias, 1.0 - dist.accept)
    np.testing.assert_allclose(mass / N, p / p.sum(), rtol=0, atol=1e-12)
    assert np.all((dist.accept >= 0) & (dist.accept <= 1))
    if kind == "zeros":
        draws = dist.draw(rng, 200_000)
        assert not np.any(p[draws] == 0)


def test_row_distribution_chi_square():
    # Pearson's chi-square of 2e6 draws against p over 200 rows of very unequal probability.
    from scipy.stats import chi2

    rng = np.random.default_rng(6)
    p = rng.random(200) ** 3 + 1e-3
    p /= p.sum()
    n = 2_000_000
    counts = np.bincount(RowDistribution(p).draw(rng, n), minlength=p.size)
    stat = np.sum((counts - n * p) ** 2 / (n * p))
    assert chi2.sf(stat, p.size - 1) > 1e-3, stat


@pytest.mark.parametrize("cls", [ControlVariateGradient, TaylorControlVariateGradient])
@pytest.mark.parametrize("importance", [False, True])
def test_control_variate_force_is_unbiased_and_exact_at_its_centre(importance, cls):
    model = _logistic(N=600)
    theta_hat = np.full(model.n_params, 0.1)
    L = curvature_factor(model, theta_hat, "dense")
    probs = leverage_probabilities(model, theta_hat, L) if importance else None
    target = cls(model, 20, "replacement", theta_hat, row_probabilities=probs)
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
    from skbayes_sg.models._map import _map_estimate

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
    lev = sigma(
        ControlVariateGradient(
            wm,
            rows,
            "replacement",
            np.zeros(model.n_params),
            np.zeros(model.n_params),
            leverage_probabilities(model, theta_hat, L),
        )
    )
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
    # The pass that gave h cached the chains' row weights q_i = ||L' x~_i||^2 (same L): they are
    # those of their own pass, and h is the same whichever of the two came first.
    Xt = np.c_[model.X, np.ones(model.n_samples)]
    q = model.whitened_row_weights(L, None)
    np.testing.assert_allclose(q, np.sum((Xt @ L) ** 2, axis=1), rtol=1e-12)
    other = _logistic()
    np.testing.assert_array_equal(other.whitened_row_weights(L, None), q)
    np.testing.assert_array_equal(other.leverage_scores(theta, L), h)
    np.testing.assert_array_equal(model.leverage_scores(theta, L), h)


# -- forces for stacks of paths at the caller's rows (multilevel SGLD) --------------------------
KINDS = ("plain", "control_variate", "taylor")


def _estimator(kind, model, batch_size, theta_hat, probs=None):
    if kind == "plain":
        return MinibatchGradient(model, batch_size, row_probabilities=probs)
    cls = ControlVariateGradient if kind == "control_variate" else TaylorControlVariateGradient
    return cls(model, batch_size, "replacement", theta_hat, row_probabilities=probs)


def _row_terms(kind, model, theta, rows, theta_hat):
    """Per-row terms of each estimator's noisy part, from its definition, one row at a time:
    ``g_i(theta)`` (plain), ``g_i(theta) - g_i(theta_hat)`` (Baker et al.'s eq. 3) and
    that minus ``H_i(theta_hat) (theta - theta_hat)`` (Nagapetyan et al.'s eq. 11), with the
    model's own Hessian-vector products (exact for the GLMs)."""
    terms = []
    for i in rows:
        i = np.array([i])
        term = model.log_likelihood_and_grad(theta, i)[1]
        if kind != "plain":
            term = term - model.log_likelihood_and_grad(theta_hat, i)[1]
        if kind == "taylor":
            term = term - model.loglik_hvp(theta_hat, theta - theta_hat, i)
        terms.append(term)
    return np.array(terms)


def _definition_force(kind, model, theta, rows, theta_hat, weights):
    """The force from its definition: prior, exact part at ``theta_hat``, and ``N / n`` times
    the rows' terms, each weighted by ``weights``."""
    N, n = model.n_samples, len(rows)
    force = model.log_prior_and_grad(theta)[1] + N / n * (weights @ _row_terms(kind, model, theta, rows, theta_hat))
    if kind != "plain":
        force += model.log_likelihood_and_grad(theta_hat)[1]
    if kind == "taylor":
        force += model.loglik_hvp(theta_hat, theta - theta_hat)
    return force


def _path_problem(name, seed=7):
    if name == "normal_gamma":  # no vectorised kernel: the per-path fallbacks
        model = NormalGammaModel(np.random.default_rng(seed).normal(1.0, 0.5, 200))
        return model, np.array([1.0, 3.0]), 0.1
    return MODELS[name](), np.full(MODELS[name]().n_params, 0.1), 0.3


@pytest.mark.parametrize("importance", [False, True])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(MODELS) + ["normal_gamma"])
def test_path_forces_are_each_paths_force_at_its_rows(name, kind, importance):
    model, theta_hat, spread = _path_problem(name)
    rng = np.random.default_rng(8)
    N, P, M, n = model.n_samples, model.n_params, 5, 7
    probs = rng.random(N) + 0.2 if importance else None
    target = _estimator(kind, model, n, theta_hat, probs)
    thetas = theta_hat + spread * rng.normal(size=(M, P))
    rows = target.draw_rows(rng, M)
    assert rows.shape == (M, n)
    weights = 1.0 / (N * target._rows_dist.p) if importance else np.ones(N)
    before = target.n_grad_evals
    F = target.gradient_paths(thetas, rows)
    assert target.n_grad_evals - before == (1 if kind == "plain" else 2) * M * n
    # The model's loglik_hvp is a central difference outside the GLMs.
    tol = 1e-6 if name == "normal_gamma" else 1e-9
    for m in range(M):
        ref = _definition_force(kind, model, thetas[m], rows[m], theta_hat, weights[rows[m]])
        np.testing.assert_allclose(F[m], ref, rtol=tol, atol=tol * np.abs(ref).max())
    # Full data (rows=None): every estimator is the exact gradient of the log posterior.
    full = target.gradient_paths(thetas[:2], None)
    exact = np.stack([model.grad_log_posterior(t) for t in thetas[:2]])
    np.testing.assert_allclose(full, exact, rtol=tol, atol=tol * np.abs(exact).max())


@pytest.mark.parametrize("kind", KINDS)
def test_single_vector_gradient_is_the_path_force_at_its_rows(kind):
    """``gradient`` (per-example operators) and ``gradient_paths`` (vectorised kernels) are
    one force: at the rows ``gradient`` drew, they agree, and so does the operator's sum."""
    model = _logistic()
    theta_hat = np.full(model.n_params, 0.1)
    target = _estimator(kind, model, 9, theta_hat)
    theta = theta_hat + 0.3 * np.random.default_rng(9).normal(size=model.n_params)
    # gradient() queues a block of minibatches from its generator and takes the first.
    rows = target.draw_rows(np.random.default_rng(10), target._block)[0]
    force, grads = target.gradient(theta, np.random.default_rng(10))
    np.testing.assert_allclose(force, target.gradient_paths(theta[None], rows[None])[0], rtol=1e-12, atol=1e-10)
    ref = _definition_force(kind, model, theta, rows, theta_hat, np.ones(rows.size))
    np.testing.assert_allclose(force, ref, rtol=1e-10, atol=1e-10)
    # The operator the noise-aware samplers see holds the rows' terms, whose noise is the force's.
    np.testing.assert_allclose(grads.to_dense(), _row_terms(kind, model, theta, rows, theta_hat), atol=1e-10)


def test_taylor_remainders_are_second_order_in_the_distance_to_the_centre():
    """Eq. 11's per-row remainders shrink as ``t^2`` along ``theta_hat + t v``, the
    first-order differences as ``t``: the Taylor force's noise vanishes faster near the MAP."""
    model = _logistic()
    theta_hat = np.full(model.n_params, 0.1)
    v = np.random.default_rng(11).normal(size=model.n_params)
    rows = np.arange(50)
    for cls, order in ((ControlVariateGradient, 1), (TaylorControlVariateGradient, 2)):
        target = cls(model, 50, "replacement", theta_hat)
        size = [np.linalg.norm(target._per_example(theta_hat + t * v, rows).to_dense()) for t in (1e-2, 5e-3)]
        assert size[0] / size[1] == pytest.approx(2.0**order, rel=0.05), (cls.__name__, size)
