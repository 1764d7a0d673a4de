"""Models: log densities against direct formulas, gradients against finite differences,
per-example gradient operators against their dense matrices."""

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit

from skbayes_sg.models import (
    LinearRegressionModel,
    LogisticModel,
    NormalGammaModel,
    PoissonModel,
    SoftmaxModel,
)

RNG = np.random.default_rng(12345)
X = RNG.normal(size=(40, 5))


def _models():
    y_bin = (RNG.random(40) < 0.4).astype(float)
    y_cls = RNG.integers(0, 4, size=40)
    y_reg = X @ RNG.normal(size=5) + RNG.normal(size=40)
    y_count = RNG.poisson(np.exp(0.3 * X[:, 0] - 0.2 * X[:, 1] + 0.5))
    offset = RNG.normal(size=40)
    return {
        "poisson": PoissonModel(X, y_count, alpha=0.7),
        "poisson_offset_noint": PoissonModel(X, y_count, alpha=1.5, fit_intercept=False, offset=offset),
        "logistic": LogisticModel(X, y_bin, alpha=0.7),
        "logistic_noint": LogisticModel(X, y_bin, alpha=2.0, fit_intercept=False),
        "softmax": SoftmaxModel(X, y_cls, n_classes=4, alpha=1.3),
        "linreg_sampled_tau": LinearRegressionModel(X, y_reg, alpha=0.5, noise_prior_shape=2.0, noise_prior_rate=3.0),
        "linreg_fixed_tau": LinearRegressionModel(X, y_reg, alpha=0.5, noise_precision=2.5),
        "linreg_noint": LinearRegressionModel(X, y_reg, fit_intercept=False, noise_precision=1.0),
        "normal_gamma": NormalGammaModel(RNG.normal(size=40)),
        "poisson_offset": PoissonModel(X, y_count, alpha=0.8, offset=RNG.normal(scale=0.5, size=40)),
        "poisson_noint": PoissonModel(X, y_count, fit_intercept=False, alpha_intercept=3.0),
    }


MODELS = _models()


def _point(model, rng):
    if isinstance(model, NormalGammaModel):
        return np.array([0.3, 1.7])
    return 0.4 * rng.normal(size=model.n_params)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradient_matches_finite_differences(name):
    model = MODELS[name]
    theta = _point(model, np.random.default_rng(1))
    _, grad = model.log_posterior_and_grad(theta)
    eps = 1e-6
    fd = np.array(
        [
            (model.log_posterior(theta + eps * e) - model.log_posterior(theta - eps * e)) / (2 * eps)
            for e in np.eye(model.n_params)
        ]
    )
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_per_example_operator_matches_dense(name):
    model = MODELS[name]
    rng = np.random.default_rng(2)
    theta = _point(model, rng)
    idx = rng.integers(0, model.n_samples, size=17)
    ops = model.per_example_gradients(theta, idx)
    G = ops.to_dense()
    assert G.shape == (17, model.n_params)
    # Rows are the per-example log-likelihood gradients: their sum is the minibatch gradient.
    _, g_sum = model.log_likelihood_and_grad(theta, idx)
    np.testing.assert_allclose(G.sum(axis=0), g_sum, rtol=1e-10, atol=1e-10)
    v = rng.normal(size=model.n_params)
    u = rng.normal(size=17)
    np.testing.assert_allclose(ops.mean(), G.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(ops.matvec(v), G @ v, atol=1e-10)
    np.testing.assert_allclose(ops.rmatvec(u), G.T @ u, atol=1e-10)
    np.testing.assert_allclose(ops.sum_of_squares(), (G**2).sum(axis=0), rtol=1e-10, atol=1e-12)
    V = np.cov(G, rowvar=False)
    np.testing.assert_allclose(ops.covariance_diag(), np.diag(V), rtol=1e-8, atol=1e-12)


def test_logistic_log_likelihood_is_bernoulli_and_stable():
    model = MODELS["logistic"]
    theta = _point(model, np.random.default_rng(3))
    W, b, _ = model.unpack(theta)
    p = expit(X @ W[:, 0] + b[0])
    direct = stats.bernoulli.logpmf(model.y, p).sum()
    assert model.log_likelihood_and_grad(theta)[0] == pytest.approx(direct, rel=1e-12)
    # Extreme linear predictors: no overflow, log-likelihood finite, gradient bounded.
    big = LogisticModel(np.array([[1.0], [-1.0]]), np.array([0.0, 1.0]), fit_intercept=False)
    ll, g = big.log_likelihood_and_grad(np.array([800.0]))
    assert ll == pytest.approx(-1600.0)
    assert np.all(np.isfinite(g))


def test_softmax_log_likelihood_is_categorical():
    model = MODELS["softmax"]
    theta = _point(model, np.random.default_rng(4))
    P = model.predict_draws(theta[None], X)[0]
    direct = np.log(P[np.arange(40), model.y]).sum()
    assert model.log_likelihood_and_grad(theta)[0] == pytest.approx(direct, rel=1e-12)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)


def test_linear_regression_log_density_with_jacobian():
    model = MODELS["linreg_sampled_tau"]
    theta = _point(model, np.random.default_rng(5))
    W, b, extra = model.unpack(theta)
    tau = np.exp(extra[0])
    mean = X @ W[:, 0] + b[0]
    loglik = stats.norm.logpdf(model.y, mean, 1 / np.sqrt(tau)).sum()
    # Prior in s = log tau: Gamma(a, rate b) density times the Jacobian tau.
    log_prior_s = stats.gamma.logpdf(tau, a=2.0, scale=1 / 3.0) + np.log(tau)
    log_prior_w = stats.norm.logpdf(theta[:-1], 0, 1 / np.sqrt(0.5)).sum()
    lp = model.log_posterior(theta)
    # Equal up to the normalising constants the model drops (which do not depend on theta).
    theta2 = _point(model, np.random.default_rng(6))
    W2, b2, extra2 = model.unpack(theta2)
    tau2 = np.exp(extra2[0])
    direct2 = (
        stats.norm.logpdf(model.y, X @ W2[:, 0] + b2[0], 1 / np.sqrt(tau2)).sum()
        + stats.gamma.logpdf(tau2, a=2.0, scale=1 / 3.0)
        + np.log(tau2)
        + stats.norm.logpdf(theta2[:-1], 0, 1 / np.sqrt(0.5)).sum()
    )
    direct = loglik + log_prior_s + log_prior_w
    assert lp - model.log_posterior(theta2) == pytest.approx(direct - direct2, rel=1e-10)


def test_exact_hessian_vector_product_of_linear_regression():
    model = MODELS["linreg_fixed_tau"]
    theta = _point(model, np.random.default_rng(7))
    Xa = np.column_stack([X, np.ones(40)])
    H = 2.5 * Xa.T @ Xa + 0.5 * np.eye(6)
    v = np.random.default_rng(8).normal(size=6)
    np.testing.assert_allclose(model.hessian_vector_product(theta, v), H @ v, rtol=1e-10)


def test_finite_difference_hessian_vector_product():
    model = MODELS["logistic"]
    theta = _point(model, np.random.default_rng(9))
    W, b, _ = model.unpack(theta)
    p = expit(X @ W[:, 0] + b[0])
    Xa = np.column_stack([X, np.ones(40)])
    H = Xa.T @ (Xa * (p * (1 - p))[:, None]) + 0.7 * np.eye(6)
    v = np.random.default_rng(10).normal(size=6)
    np.testing.assert_allclose(model.hessian_vector_product(theta, v), H @ v, rtol=1e-6)


def test_normal_gamma_posterior_matches_paper_closed_form():
    x = np.random.default_rng(11).normal(size=100)
    model = NormalGammaModel(x)
    mu_post, gamma_post = model.posterior()
    # The closed form is the normalised density: compare with log posterior differences.
    grid = [np.array([0.1, 0.9]), np.array([-0.2, 1.2])]
    lp = [model.log_posterior(t) for t in grid]
    N, xbar = 100, x.mean()
    beta_N = 1 + 0.5 * ((x - xbar) ** 2).sum() + N * xbar**2 / (2 * (1 + N))
    joint = [
        stats.norm.logpdf(m, N * xbar / (N + 1), 1 / np.sqrt((1 + N) * g))
        + stats.gamma.logpdf(g, a=1 + N / 2, scale=1 / beta_N)
        for m, g in grid
    ]
    assert lp[0] - lp[1] == pytest.approx(joint[0] - joint[1], rel=1e-10)
    assert gamma_post.mean() == pytest.approx((1 + N / 2) / beta_N)
    assert mu_post.mean() == pytest.approx(N * xbar / (N + 1))


def test_without_data_keeps_predictive():
    model = MODELS["softmax"]
    theta = _point(model, np.random.default_rng(12))
    light = model.without_data()
    assert light.X is None and model.X is not None
    np.testing.assert_array_equal(light.predict_draws(theta[None], X), model.predict_draws(theta[None], X))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_loglik_hvp_matches_finite_differences_of_the_gradient(name):
    model = MODELS[name]
    rng = np.random.default_rng(13)
    theta = _point(model, rng)
    v = rng.normal(size=model.n_params)
    idx = rng.integers(0, model.n_samples, size=15)
    eps = 1e-6
    for rows in (idx, None):
        fd = (
            model.log_likelihood_and_grad(theta + eps * v, rows)[1]
            - model.log_likelihood_and_grad(theta - eps * v, rows)[1]
        ) / (2 * eps)
        np.testing.assert_allclose(model.loglik_hvp(theta, v, rows), fd, rtol=1e-5, atol=1e-6)
    # The posterior's Hessian-vector product (negated, prior included) likewise.
    fd = -(model.grad_log_posterior(theta + eps * v) - model.grad_log_posterior(theta - eps * v)) / (2 * eps)
    np.testing.assert_allclose(model.hessian_vector_product(theta, v), fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["logistic", "softmax", "linreg_sampled_tau", "poisson"])
def test_per_example_hvp_rows(name):
    model = MODELS[name]
    rng = np.random.default_rng(14)
    theta, v = _point(model, rng), rng.normal(size=model.n_params)
    idx = np.array([3, 8, 8, 21])
    H_rows = model.per_example_hvp(theta, v, idx).to_dense()
    for k, i in enumerate(idx):
        np.testing.assert_allclose(H_rows[k], model.loglik_hvp(theta, v, np.array([i])), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["logistic", "softmax", "linreg_sampled_tau", "linreg_noint", "poisson"])
def test_total_sum_of_squares_is_trace_of_GtG(name):
    model = MODELS[name]
    rng = np.random.default_rng(15)
    theta = _point(model, rng)
    for rows in (rng.integers(0, model.n_samples, 12), slice(5, 17), None):
        ops = model.per_example_gradients(theta, rows)
        G = ops.to_dense()
        assert ops.total_sum_of_squares() == pytest.approx(float((G**2).sum()), rel=1e-12)
    # The cached mean is shared, so it must not be writable.
    with pytest.raises(ValueError, match="read-only"):
        ops.mean()[0] = 1.0


def test_row_norms_are_lazy_and_operators_pickle_without_the_model():
    import pickle

    model = LogisticModel(X, (np.arange(40) % 2).astype(float))
    theta = _point(model, np.random.default_rng(16))
    ops = model.per_example_gradients(theta, np.arange(10))
    assert model._row_sq_cache is None  # a sampler that never asks for tr(Sigma) never pays
    expected = ops.total_sum_of_squares()
    assert model._row_sq_cache is not None
    restored = pickle.loads(pickle.dumps(ops))
    assert restored.total_sum_of_squares() == pytest.approx(expected, rel=1e-12)
    assert len(pickle.dumps(ops)) < X.nbytes  # ten rows, not the model's forty


@pytest.mark.parametrize("name", ["logistic", "softmax", "linreg_sampled_tau", "linreg_noint", "poisson"])
def test_gradient_differences_from_the_cached_centre_are_two_evaluations(name, tmp_path):
    """In-memory X: the centre's residuals come from a per-row cache, gathered per minibatch.
    Every kind of row index gets its own rows' terms; a new centre replaces the cache; the
    same model on memory-mapped X keeps no cache and gives the same differences; a first
    call gives bit for bit what later calls give."""
    model = MODELS[name]
    rng = np.random.default_rng(17)
    theta, centre, other = _point(model, rng), _point(model, rng), _point(model, rng)
    mapped = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=float, shape=X.shape)
    mapped[:] = X
    kwargs = {"alpha": model.alpha, "fit_intercept": model.fit_intercept}
    if name == "softmax":
        kwargs["n_classes"] = model.n_outputs
    if name.startswith("linreg"):
        kwargs.update(
            noise_precision=model.noise_precision,
            noise_prior_shape=model.noise_prior_shape,
            noise_prior_rate=model.noise_prior_rate,
        )
    if name == "poisson":
        kwargs["offset"] = model.offset
    on_disk = type(model)(mapped, model.y, **kwargs)
    for c in (centre, other, centre):
        for rows in (rng.integers(0, model.n_samples, 12), slice(5, 17), None):
            diff = model.per_example_gradient_differences(theta, c, rows).to_dense()
            expected = (
                model.per_example_gradients(theta, rows).to_dense() - model.per_example_gradients(c, rows).to_dense()
            )
            np.testing.assert_allclose(diff, expected, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(
                on_disk.per_example_gradient_differences(theta, c, rows).to_dense(), expected, rtol=1e-12, atol=1e-12
            )
        assert model._centre_cache[0] == np.asarray(c).tobytes() and model._centre_cache[1] is not None
    assert on_disk._centre_cache is None
    # The first call at a centre reads the same pass over all rows as every later one, so
    # a difference never depends on the calls before it (a chain continued in a new process
    # repeats one run bit for bit).
    fresh = type(model)(X, model.y, **kwargs)
    first = fresh.per_example_gradient_differences(theta, centre, slice(0, 5)).to_dense()
    assert fresh._centre_cache[1] is not None
    np.testing.assert_array_equal(first, model.per_example_gradient_differences(theta, centre, slice(0, 5)).to_dense())


@pytest.mark.parametrize("kind", ["dense", "diag"])
def test_whitened_model_follows_a_position_moved_in_place(kind):
    """The samplers drift their position in place: the whitened model's memo of ``theta``
    must follow the values, not the array, and the fixed centre must stay mapped."""
    from skbayes_sg.models import WhitenedModel
    from skbayes_sg.preconditioning import curvature_factor

    model = MODELS["logistic"]
    rng = np.random.default_rng(18)
    m = _point(model, rng)
    wm = WhitenedModel(model, m, curvature_factor(model, m, kind))
    z, z_hat = rng.normal(size=model.n_params), rng.normal(size=model.n_params)
    rows = rng.integers(0, model.n_samples, 15)
    for _ in range(3):
        got = wm.per_example_gradient_differences(z, z_hat, rows)
        prior = wm.grad_log_prior(z)
        fresh = WhitenedModel(model, m, wm.L)
        np.testing.assert_array_equal(
            got.to_dense(), fresh.per_example_gradient_differences(z.copy(), z_hat.copy(), rows).to_dense()
        )
        np.testing.assert_array_equal(prior, fresh.grad_log_prior(z.copy()))
        z += 0.3 * rng.normal(size=z.size)  # a drift, in place


@pytest.mark.parametrize(
    "values, dtype",
    [
        ((0.0, 1.0), np.uint8),  # binary / one-hot
        ((0.0, 17.0, 255.0), np.uint8),  # small counts
        ((-1.0, 0.0, 1.0), np.int8),  # +-1 codes
        ((-128.0, 127.0), np.int8),
        ((0.0, 256.0), None),  # beyond a byte
        ((-1.0, 200.0), None),  # signed and beyond int8
        ((0.0, 0.5), None),  # not integers
    ],
)
def test_minibatch_rows_come_from_an_exact_one_byte_copy(values, dtype, tmp_path):
    """Small-integer features are gathered from a one-byte copy; the rows, and so every
    product, are X's bit for bit. Other X, and memory-mapped X, gather from X itself."""
    rng = np.random.default_rng(19)
    Xv = rng.choice(values, size=(60, 4))
    Xv[np.arange(len(values)), 0] = values  # every value present
    y = (rng.random(60) < 0.5).astype(float)
    model = LogisticModel(Xv, y)
    rows = rng.integers(0, 60, 25)
    X_rows, y_rows, _, _ = model.rows.gather(rows)
    assert X_rows.dtype == Xv.dtype
    np.testing.assert_array_equal(X_rows, Xv[rows])
    np.testing.assert_array_equal(y_rows, y[rows])
    source = model.rows.gather_source()
    assert (source is None) if dtype is None else (source.dtype == dtype and source.flags.c_contiguous)
    theta = _point(model, rng)
    wide = LogisticModel(Xv, y)
    wide.rows.narrow = False  # gathers from X itself
    for ops, ref in (
        (model.per_example_gradients(theta, rows), wide.per_example_gradients(theta, rows)),
        (
            model.per_example_gradient_differences(theta, 0 * theta, rows),
            wide.per_example_gradient_differences(theta, 0 * theta, rows),
        ),
    ):
        np.testing.assert_array_equal(ops.mean(), ref.mean())
        np.testing.assert_array_equal(ops.matvec(theta), ref.matvec(theta))
    assert model.without_data().rows is None
    mapped = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=float, shape=Xv.shape)
    mapped[:] = Xv
    on_disk = LogisticModel(mapped, y)
    np.testing.assert_array_equal(on_disk.rows.gather(rows).X, Xv[rows])
    assert not hasattr(on_disk.rows, "gather_source") and not on_disk.rows.keeps_row_state


@pytest.mark.parametrize("name", ["logistic", "softmax", "linreg_sampled_tau", "poisson"])
def test_an_offset_moves_the_predictive_as_the_intercept_does(name):
    """A constant offset c in every predictive (draws, mean, log likelihood) is the intercepts
    moved by c; in training, the likelihood and its gradient likewise."""
    model = MODELS[name]
    rng = np.random.default_rng(21)
    thetas = np.stack([_point(model, rng) for _ in range(3)])
    K, D = model.n_outputs, model.n_features
    moved = thetas.copy()
    moved[:, D * K : D * K + K] += 0.7
    c = np.full(X.shape[0], 0.7)
    y = model.y
    np.testing.assert_allclose(model.predict_draws(thetas, X, c), model.predict_draws(moved, X), rtol=1e-12)
    weights = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(model.predict_mean(thetas, weights, X, c), model.predict_mean(moved, weights, X))
    np.testing.assert_allclose(
        model.log_likelihood_draws(thetas, X, y, c), model.log_likelihood_draws(moved, X, y), rtol=1e-12
    )
    if name == "poisson":  # the model whose constructor takes an offset
        shifted, base = PoissonModel(X, y, offset=c), PoissonModel(X, y)
        for a, b in zip(shifted.log_likelihood_and_grad(thetas[0]), base.log_likelihood_and_grad(moved[0])):
            np.testing.assert_allclose(a, b, rtol=1e-12)
