"""The Poisson family (log link) and the GLM's per-row offset."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from skbayes_sg.models import PoissonModel
from skbayes_sg.models.glm import poisson

RNG = np.random.default_rng(7)
X = RNG.normal(size=(60, 3))
EXPOSURE = RNG.uniform(0.5, 3.0, 60)
Y = RNG.poisson(EXPOSURE * np.exp(0.4 * X[:, 0] - 0.3 * X[:, 2] + 0.2))


def _model(**kw):
    return PoissonModel(X, Y, offset=np.log(EXPOSURE), **kw)


def test_log_likelihood_is_poisson_with_exposure():
    model = _model(alpha=0.5)
    theta = np.array([0.3, -0.1, 0.2, 0.4])
    mu = EXPOSURE * np.exp(X @ theta[:3] + theta[3])
    ll, _ = model.log_likelihood_and_grad(theta)
    assert ll == pytest.approx(stats.poisson.logpmf(Y, mu).sum(), rel=1e-12)
    lp, _ = model.log_posterior_and_grad(theta)
    assert lp - ll == pytest.approx(-0.5 * 0.5 * theta @ theta, rel=1e-12)
    np.testing.assert_allclose(
        model.log_likelihood_draws(theta[None], X, Y, offset=np.log(EXPOSURE))[0], stats.poisson.logpmf(Y, mu)
    )
    np.testing.assert_allclose(model.predict_draws(theta[None], X, offset=np.log(EXPOSURE))[0], mu, rtol=1e-12)
    np.testing.assert_allclose(model.predict_mean(np.stack([theta, theta]), np.array([0.5, 0.5]), X), mu / EXPOSURE)


def test_offset_is_an_intercept_per_row():
    """A constant offset c is the intercept moved by c: the same log likelihood and gradient."""
    theta = np.array([0.3, -0.1, 0.2, 0.4])
    shifted = PoissonModel(X, Y, offset=np.full(60, 0.7))
    plain = PoissonModel(X, Y)
    moved = theta + np.array([0, 0, 0, 0.7])
    for a, b in zip(shifted.log_likelihood_and_grad(theta), plain.log_likelihood_and_grad(moved)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    idx = np.array([4, 9, 9, 30])
    np.testing.assert_allclose(
        shifted.per_example_gradients(theta, idx).to_dense(), plain.per_example_gradients(moved, idx).to_dense()
    )


def test_sparse_and_memmapped_rows_give_the_dense_values(tmp_path):
    theta = np.array([0.3, -0.1, 0.2, 0.4])
    v = RNG.normal(size=4)
    mapped = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=float, shape=X.shape)
    mapped[:] = X
    dense = _model()
    for other in (
        PoissonModel(sp.csr_matrix(X), Y, offset=np.log(EXPOSURE)),
        PoissonModel(mapped, Y, offset=np.log(EXPOSURE)),
    ):
        for a, b in zip(other.log_likelihood_and_grad(theta), dense.log_likelihood_and_grad(theta)):
            np.testing.assert_allclose(a, b, rtol=1e-12)
        np.testing.assert_allclose(other.loglik_hvp(theta, v), dense.loglik_hvp(theta, v), rtol=1e-12)
        np.testing.assert_allclose(other.hessian(theta), dense.hessian(theta), rtol=1e-12)


def test_exponential_is_clipped_far_out_only():
    """Below the clip the gradient is exact (finite differences agree); far out the log
    likelihood, gradient and curvature stay finite instead of overflowing to inf / NaN."""
    model = PoissonModel(np.array([[1.0], [2.0]]), np.array([3.0, 0.0]))
    theta = np.array([300.0, 0.0])  # eta up to 600: e^600 is finite, the clip not reached
    _, g = model.log_likelihood_and_grad(theta)
    assert g[0] == pytest.approx(3.0 * 1 - np.exp(300.0) - 2 * np.exp(600.0), rel=1e-12)
    far = np.array([1000.0, 0.0])
    with np.errstate(all="raise"):
        ll, g = model.log_likelihood_and_grad(far)
        H = model.hessian(far)
    assert np.isfinite(ll) and np.all(np.isfinite(g)) and np.all(np.isfinite(H))
    assert ll < -1e300 and g[0] < 0


def test_counts_and_offsets_are_checked():
    with pytest.raises(ValueError, match="non-negative counts"):
        PoissonModel(X, -Y)
    with pytest.raises(ValueError, match="non-negative counts"):
        PoissonModel(X, np.where(np.arange(60) == 3, np.nan, Y))
    with pytest.raises(ValueError, match="offset has shape"):
        PoissonModel(X, Y, offset=np.zeros(59))
    with pytest.raises(ValueError, match="offset contains NaN"):
        PoissonModel(X, Y, offset=np.where(np.arange(60) == 5, np.nan, 0.0))


def test_family_module_is_small():
    """The worked example of the family seam: a family and its model in ~120 lines."""
    with open(poisson.__file__) as f:
        assert len(f.read().splitlines()) <= 125
