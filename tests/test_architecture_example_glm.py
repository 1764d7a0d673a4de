"""The worked examples "add a family" and "add a row source" of docs/architecture_models.rst,
kept here so that the page cannot rot (the page's literalinclude shows this file's lines).

A probit family (Bernoulli with the normal-CDF link) written against
:class:`skbayes_sg.models.Family`, checked against finite differences, a direct formula and
an exact posterior; and a row source that keeps its rows in chunks, as the partitions of a
distributed array, checked to give the models what in-memory rows give.
"""

import numpy as np
import pytest
from scipy.special import log_ndtr, ndtr

from skbayes_sg.models import GLM, Family, LogisticModel, SoftmaxModel, find_map
from skbayes_sg.multilevel import estimate
from skbayes_sg.rows import Block, RowSource
from skbayes_sg.samplers import MLSGLD


# -- family: begin
class ProbitFamily(Family):
    """``p(y = 1 | z) = Phi(z)``: with ``s = 2 y - 1``, ``log p = log Phi(s z)``."""

    def log_likelihood(self, Z, y, extra):
        return log_ndtr((2.0 * y - 1.0) * Z[..., 0])

    def _mills(self, Z, y):
        """``u = s z`` and the inverse Mills ratio ``lam = phi(u) / Phi(u)``, stable in the tails."""
        u = (2.0 * y - 1.0) * Z[..., 0]
        return u, np.exp(-0.5 * u * u - 0.5 * np.log(2 * np.pi) - log_ndtr(u))

    def gradient_terms(self, Z, y, extra):
        u, lam = self._mills(Z, y)
        return ((2.0 * y - 1.0) * lam)[..., None], None  # d log Phi(s z) / dz = s lam

    def curvature_state(self, Z, y):
        u, lam = self._mills(Z, y)
        return (lam * (u + lam))[..., None]  # -d^2 log Phi(s z) / dz^2

    def apply_curvature(self, extra, state, U, e_v):
        return -state * U, None

    def predict_draws(self, W, b, extra, X, offset=None):
        Z = np.asarray(X @ W[..., 0].T).T + b[:, :1]  # (S, n)
        return ndtr(Z)  # P(y = 1) per draw

    def log_likelihood_draws(self, W, b, extra, X, y, offset=None):
        Z = np.asarray(X @ W[..., 0].T).T + b[:, :1]
        return log_ndtr((2.0 * np.asarray(y, dtype=float) - 1.0) * Z)


def probit_model(X, y, alpha=1.0):
    return GLM(X, np.asarray(y, dtype=float), ProbitFamily(), alpha=alpha)


# -- family: end


# -- source: begin
class ChunkedRows(RowSource):
    """Rows kept in chunks, as the partitions of a distributed array.

    A gather asks each chunk once for all of its rows among the indices (one bulk request
    per chunk, the rows put back in the order asked); a full-data pass visits each chunk
    as one block, where a distributed source would run the model's function where the
    chunk lives and send back only the result.
    """

    def __init__(self, X_chunks, y_chunks):
        self.chunks = list(zip(X_chunks, y_chunks))
        self.starts = np.cumsum([0] + [len(y) for y in y_chunks])
        self.y = np.concatenate(y_chunks)  # the targets, for model.y (small next to X)

    @property
    def n_rows(self):
        return int(self.starts[-1])

    @property
    def n_features(self):
        return self.chunks[0][0].shape[1]

    def _targets(self, y):
        return y if self.y_dtype is None else y.astype(self.y_dtype)

    def gather(self, idx, *, products_only=False):
        idx = np.arange(self.n_rows)[idx] if not isinstance(idx, np.ndarray) else idx
        flat = idx.ravel()
        chunk = np.searchsorted(self.starts, flat, side="right") - 1
        X, y = np.empty((flat.size, self.n_features)), np.empty(flat.size, dtype=self.y.dtype)
        for c in np.unique(chunk):  # one request per chunk that holds some of the rows
            mine = chunk == c
            Xc, yc = self.chunks[c]
            X[mine], y[mine] = Xc[flat[mine] - self.starts[c]], yc[flat[mine] - self.starts[c]]
        X, y = X.reshape(*idx.shape, -1), y.reshape(idx.shape)  # a stack of paths keeps its shape
        return Block(X, self._targets(y), self.take_rows(self.sample_weight, idx), None)

    def block_slices(self, rows_per_block):
        return [slice(a, b) for a, b in zip(self.starts[:-1], self.starts[1:])]

    def block(self, rows):
        Xc, yc = self.chunks[int(np.searchsorted(self.starts, rows.start, side="right")) - 1]
        w = None if self.sample_weight is None else self.sample_weight[rows]
        return Block(Xc, self._targets(yc), w, None)


# -- source: end


def _probit_data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 1))
    y = (rng.random(n) < ndtr(0.3 + 0.9 * X[:, 0])).astype(float)
    return X, y


def test_probit_family_matches_its_formula_and_finite_differences():
    X, y = _probit_data()
    model = probit_model(X, y, alpha=0.5)
    theta, eps = np.array([0.7, -0.2]), 1e-6
    ll, grad = model.log_likelihood_and_grad(theta)
    p = ndtr(X[:, 0] * theta[0] + theta[1])
    assert ll == pytest.approx(np.sum(y * np.log(p) + (1 - y) * np.log1p(-p)), rel=1e-12)
    E = np.eye(2)
    fd = np.array(
        [(model.log_posterior(theta + eps * e) - model.log_posterior(theta - eps * e)) / (2 * eps) for e in E]
    )
    np.testing.assert_allclose(model.grad_log_posterior(theta), fd, rtol=1e-6)
    fd_H = np.stack(
        [(model.grad_log_posterior(theta + eps * e) - model.grad_log_posterior(theta - eps * e)) / (2 * eps) for e in E]
    )
    np.testing.assert_allclose(-model.hessian(theta), fd_H, rtol=1e-5, atol=1e-6)
    rows = np.array([3, 3, 17, 150])
    ops = model.per_example_gradients(theta, rows)
    np.testing.assert_allclose(ops.to_dense().sum(axis=0), model.log_likelihood_and_grad(theta, rows)[1], rtol=1e-12)


@pytest.mark.statistical
def test_probit_posterior_mean_by_multilevel_sgld_matches_quadrature():
    X, y = _probit_data()
    model = probit_model(X, y)
    theta_map, _ = find_map(model)
    sd = np.sqrt(np.diag(np.linalg.inv(model.hessian(theta_map))))
    grid = np.linspace(-8.0, 8.0, 201)
    A, B = np.meshgrid(theta_map[0] + sd[0] * grid, theta_map[1] + sd[1] * grid, indexing="ij")
    T = np.column_stack([A.ravel(), B.ravel()])
    log_post = log_ndtr((2 * y - 1)[:, None] * (X @ T[:, :1].T + T[:, 1])).sum(axis=0) - 0.5 * (T**2).sum(axis=1)
    w = np.exp(log_post - log_post.max())
    mean = (w / w.sum()) @ T
    result = estimate(MLSGLD(target_rmse=0.1), model, random_state=0)
    assert np.all(np.abs(result.estimate - mean) < 4 * result.rmse)


@pytest.mark.parametrize("make", [LogisticModel, lambda X, y: SoftmaxModel(X, y, n_classes=3)])
def test_chunked_rows_give_what_in_memory_rows_give(make):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((90, 4))
    y = rng.integers(0, 3 if make is not LogisticModel else 2, 90)
    chunks = ChunkedRows(np.split(X, [20, 55]), np.split(y, [20, 55]))
    a, b = make(X, y), make(chunks, None)
    w = rng.random(90)
    a.set_sample_weight(w)
    b.set_sample_weight(w)
    theta, v = 0.3 * rng.standard_normal(a.n_params), rng.standard_normal(a.n_params)
    idx = rng.integers(0, 90, 25)
    for f in (
        lambda m: m.log_likelihood_and_grad(theta)[1],
        lambda m: m.log_likelihood_and_grad(theta, idx)[1],
        lambda m: m.per_example_gradients(theta, idx).to_dense(),
        lambda m: m.per_example_gradient_differences(theta, 0.5 * theta, idx).to_dense(),
        lambda m: m.loglik_hvp(theta, v),
        lambda m: m.hessian(theta),
        lambda m: m.loglik_grad_paths(np.stack([theta, -theta]), np.stack([idx, idx[::-1]])),
    ):
        np.testing.assert_allclose(f(b), f(a), rtol=1e-12, atol=1e-12)
    assert b.y is chunks.y and b.n_samples == 90


def test_a_row_source_holds_its_own_targets():
    chunks = ChunkedRows([np.zeros((3, 2))], [np.zeros(3)])
    with pytest.raises(ValueError, match="holds its own targets"):
        LogisticModel(chunks, np.zeros(3))
