"""The Model interface's batched-over-paths and curvature methods.

Every method is checked three ways: the model's own (vectorised for the GLMs) against the
looped default of :class:`Model` built on the single-theta methods, against finite
differences of the log likelihood / log prior, and against its definition. The models: the
GLMs (logistic, softmax, linear regression with fixed and with sampled noise, with and
without intercept, weighted), the DRBM and NormalGamma (which use the defaults), and a
minimal user-defined model that implements only the required methods: it gets every
batched method from the base class, so a new model touches one file.
"""

import numpy as np
import pytest

from skbayes_sg.models import (
    DensePerExampleGradients,
    DRBMModel,
    LinearRegressionModel,
    LogisticModel,
    Model,
    NormalGammaModel,
    PoissonModel,
    SoftmaxModel,
)


class CauchyRegression(Model):
    """``y_i = x_i . w + Cauchy noise``, ``w ~ N(0, I)``: the required methods only (a
    likelihood that is not log-concave, so its Hessians are of either sign)."""

    def __init__(self, X, y):
        self.X, self.y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        self.n_samples, self.n_params = self.X.shape

    def _rows(self, idx):
        return (self.X, self.y) if idx is None else (self.X[idx], self.y[idx])

    def per_example_gradients(self, theta, idx):
        X, y = self._rows(idx)
        r = y - X @ theta
        return DensePerExampleGradients((2 * r / (1 + r * r))[:, None] * X)

    def log_likelihood_and_grad(self, theta, idx=None):
        X, y = self._rows(idx)
        r = y - X @ theta
        return float(-np.log1p(r * r).sum()), X.T @ (2 * r / (1 + r * r))

    def log_prior_and_grad(self, theta):
        return -0.5 * float(theta @ theta), -theta

    def predict_draws(self, thetas, X):
        return thetas @ np.asarray(X).T


def _models():
    rng = np.random.default_rng(0)
    N, D = 30, 3
    X = rng.standard_normal((N, D))
    y_bin = (rng.random(N) < 0.5).astype(float)
    y_reg = X @ [1.0, -0.5, 0.3] + 0.5 * rng.standard_normal(N)
    w = rng.random(N) * 2
    return {
        "logistic": LogisticModel(X, y_bin, alpha=0.7),
        "logistic_weighted_per_feature": LogisticModel(
            X, y_bin, alpha=[0.5, 1.0, 2.0], alpha_intercept=0.1
        ).set_sample_weight(w),
        "softmax": SoftmaxModel(X, rng.integers(0, 3, N), n_classes=3, alpha=0.7),
        "softmax_noint": SoftmaxModel(X, rng.integers(0, 3, N), n_classes=3, fit_intercept=False),
        "linear_fixed_noise": LinearRegressionModel(X, y_reg, noise_precision=2.0),
        "linear_sampled_noise": LinearRegressionModel(X, y_reg, noise_prior_shape=2.0, noise_prior_rate=3.0),
        "linear_sampled_noise_noint_weighted": LinearRegressionModel(
            X, y_reg, fit_intercept=False, noise_prior_shape=2.0, noise_prior_rate=3.0
        ).set_sample_weight(w),
        "poisson": PoissonModel(X, rng.poisson(np.exp(0.5 * X[:, 0])), alpha=0.7),
        "poisson_offset_weighted": PoissonModel(
            X, rng.poisson(np.exp(0.4 * X[:, 0])), alpha=0.7, offset=0.3 * rng.standard_normal(N)
        ).set_sample_weight(w),
        "poisson_noint": PoissonModel(X, rng.poisson(2.0, N), fit_intercept=False),
        "drbm": DRBMModel(X, rng.integers(0, 3, N), n_classes=3, n_hidden=2, operator_dtype="float64"),
        "normal_gamma": NormalGammaModel(rng.standard_normal(N) + 1.0),
        "user_cauchy": CauchyRegression(X, y_reg + rng.standard_cauchy(N)),
    }


MODELS = _models()
M, n = 4, 5


def _point(model, rng):
    theta = 0.4 * rng.standard_normal(model.n_params)
    if isinstance(model, NormalGammaModel):
        theta[1] = 1.3
    return theta


def _stack(model, seed):
    rng = np.random.default_rng(seed)
    thetas = np.stack([_point(model, rng) for _ in range(M)])
    idx = rng.integers(0, model.n_samples, (M, n))
    idx[:, 1] = idx[:, 0]  # a repeated row counts twice, as in a draw with replacement
    return thetas, idx, rng.standard_normal(thetas.shape), _point(model, rng)


def _loglik(model, theta, rows):
    return model.log_likelihood_and_grad(theta, rows)[0]


def _fd_grad(f, theta, eps=1e-6):
    return np.array([(f(theta + eps * e) - f(theta - eps * e)) / (2 * eps) for e in np.eye(theta.size)])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_paths_match_the_looped_defaults(name):
    model = MODELS[name]
    thetas, idx, V, theta0 = _stack(model, 1)
    tol = {"rtol": 1e-10, "atol": 1e-10}
    np.testing.assert_allclose(model.grad_log_prior_paths(thetas), Model.grad_log_prior_paths(model, thetas), **tol)
    np.testing.assert_allclose(model.loglik_grad_paths(thetas, idx), Model.loglik_grad_paths(model, thetas, idx), **tol)
    np.testing.assert_allclose(
        model.loglik_hvp_paths(thetas, V, idx), Model.loglik_hvp_paths(model, thetas, V, idx), **tol
    )
    ref = Model.taylor_remainder_paths(model, thetas, theta0, idx)
    np.testing.assert_allclose(model.taylor_remainder_paths(thetas, theta0, idx), ref, **tol)
    cache = model.taylor_cache(theta0)
    np.testing.assert_allclose(model.taylor_remainder_paths(thetas, theta0, idx, cache), ref, **tol)
    theta = thetas[0]
    np.testing.assert_allclose(
        model.log_prior_hessian(theta), Model.log_prior_hessian(model, theta), rtol=1e-6, atol=1e-6
    )
    # Full-data scores at a stack of draws (the KSD's): one pass, the per-point gradients.
    np.testing.assert_allclose(
        model.grad_log_posterior_draws(thetas), Model.grad_log_posterior_draws(model, thetas), **tol
    )


@pytest.mark.parametrize("name", sorted(MODELS))
def test_paths_match_finite_differences(name):
    model = MODELS[name]
    thetas, idx, V, theta0 = _stack(model, 2)
    grads = model.loglik_grad_paths(thetas, idx)
    hvps = model.loglik_hvp_paths(thetas, V, idx)
    priors = model.grad_log_prior_paths(thetas)
    eps = 1e-6
    for m in range(M):
        t, rows, v = thetas[m], idx[m], V[m]
        np.testing.assert_allclose(
            grads[m], _fd_grad(lambda s, rows=rows: _loglik(model, s, rows), t), rtol=1e-6, atol=1e-6
        )
        np.testing.assert_allclose(
            priors[m], _fd_grad(lambda s: model.log_prior_and_grad(s)[0], t), rtol=1e-6, atol=1e-6
        )
        fd_hv = (
            model.log_likelihood_and_grad(t + eps * v, rows)[1] - model.log_likelihood_and_grad(t - eps * v, rows)[1]
        ) / (2 * eps)
        np.testing.assert_allclose(hvps[m], fd_hv, rtol=1e-5, atol=1e-5)
        # A path's single-theta HVP is the same product.
        np.testing.assert_allclose(hvps[m], model.loglik_hvp(t, v, rows), rtol=1e-10, atol=1e-10)
    # Eq. 11's remainder is its definition, from finite differences of the gradient.
    rem = model.taylor_remainder_paths(thetas, theta0, idx)
    for m in range(M):
        rows, d = idx[m], thetas[m] - theta0
        g = model.log_likelihood_and_grad(thetas[m], rows)[1]
        g0 = model.log_likelihood_and_grad(theta0, rows)[1]
        h = np.linalg.norm(d) * eps
        Hd = (
            model.log_likelihood_and_grad(theta0 + eps * d, rows)[1]
            - model.log_likelihood_and_grad(theta0 - eps * d, rows)[1]
        ) / (2 * eps)
        np.testing.assert_allclose(rem[m], g - g0 - Hd, rtol=1e-5, atol=1e-5 * max(1.0, h))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dense_hessians_match_finite_differences(name):
    model = MODELS[name]
    theta = _point(model, np.random.default_rng(3))
    eps = 1e-6
    H_ll = model.loglik_hessian(theta)
    H_post = model.posterior_hessian(theta)
    fd_ll = np.stack(
        [
            (model.log_likelihood_and_grad(theta + eps * e)[1] - model.log_likelihood_and_grad(theta - eps * e)[1])
            / (2 * eps)
            for e in np.eye(model.n_params)
        ],
        axis=1,
    )
    fd_post = np.stack(
        [
            (model.grad_log_posterior(theta + eps * e) - model.grad_log_posterior(theta - eps * e)) / (2 * eps)
            for e in np.eye(model.n_params)
        ],
        axis=1,
    )
    np.testing.assert_allclose(H_ll, fd_ll, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(H_post, fd_post, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(H_post, H_post.T)
    # The sampler-facing curvature (Hessian of the negative log posterior) agrees.
    np.testing.assert_allclose(H_post, -model.hessian(theta), rtol=1e-5, atol=1e-5)
    # Column blocks of any width give the same matrix.
    np.testing.assert_allclose(model.loglik_hessian(theta, chunk=1), H_ll, rtol=1e-12, atol=1e-12)


def test_paths_reject_mismatched_stacks():
    model = MODELS["logistic"]
    with pytest.raises(ValueError, match="paths"):
        model.loglik_grad_paths(np.zeros((3, model.n_params)), np.zeros((2, 4), dtype=int))
    with pytest.raises(ValueError, match="paths"):
        MODELS["user_cauchy"].loglik_grad_paths(np.zeros((3, 3)), np.zeros((2, 4), dtype=int))


def test_sparse_rows_give_the_dense_paths():
    import scipy.sparse as sp

    dense = MODELS["softmax"]
    sparse = SoftmaxModel(sp.csr_matrix(dense.X), dense.y, n_classes=3, alpha=0.7)
    thetas, idx, V, theta0 = _stack(dense, 4)
    tol = {"rtol": 1e-12, "atol": 1e-12}
    np.testing.assert_allclose(sparse.loglik_grad_paths(thetas, idx), dense.loglik_grad_paths(thetas, idx), **tol)
    np.testing.assert_allclose(sparse.loglik_hvp_paths(thetas, V, idx), dense.loglik_hvp_paths(thetas, V, idx), **tol)
    np.testing.assert_allclose(
        sparse.taylor_remainder_paths(thetas, theta0, idx), dense.taylor_remainder_paths(thetas, theta0, idx), **tol
    )


@pytest.mark.parametrize("diagonal", [False, True])
@pytest.mark.parametrize("name", ["linear_sampled_noise_noint_weighted", "softmax", "user_cauchy"])
def test_whitened_model_forwards_the_paths_in_its_coordinates(name, diagonal):
    from skbayes_sg.models import WhitenedModel

    model = MODELS[name]
    rng = np.random.default_rng(5)
    P = model.n_params
    L = 0.5 + rng.random(P) if diagonal else np.tril(0.3 * rng.standard_normal((P, P))) + np.eye(P)
    wm = WhitenedModel(model, 0.1 * rng.standard_normal(P), L)
    zs, idx, V, z0 = _stack(wm, 6)
    # The base class's loops over the whitened single-theta methods are the reference.
    loose = {"rtol": 1e-6, "atol": 1e-6} if name == "user_cauchy" else {"rtol": 1e-9, "atol": 1e-9}
    np.testing.assert_allclose(wm.grad_log_prior_paths(zs), Model.grad_log_prior_paths(wm, zs), rtol=1e-12)
    np.testing.assert_allclose(
        wm.loglik_grad_paths(zs, idx), Model.loglik_grad_paths(wm, zs, idx), rtol=1e-10, atol=1e-10
    )
    np.testing.assert_allclose(wm.loglik_hvp_paths(zs, V, idx), Model.loglik_hvp_paths(wm, zs, V, idx), **loose)
    np.testing.assert_allclose(
        wm.taylor_remainder_paths(zs, z0, idx, wm.taylor_cache(z0)),
        Model.taylor_remainder_paths(wm, zs, z0, idx),
        **loose,
    )
    np.testing.assert_allclose(wm.loglik_hessian(z0), Model.loglik_hessian(wm, z0), **loose)
    np.testing.assert_allclose(
        wm.grad_log_posterior_draws(zs), Model.grad_log_posterior_draws(wm, zs), rtol=1e-10, atol=1e-10
    )
    np.testing.assert_allclose(wm.posterior_hessian(z0), Model.posterior_hessian(wm, z0), rtol=1e-5, atol=1e-5)
