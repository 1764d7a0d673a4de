"""Sparse minibatches of one-hot / small-integer features (skbayes_sg.rows.EllRows)."""

import pickle

import numpy as np
import pytest

from skbayes_sg.models import LinearRegressionModel, LogisticModel
from skbayes_sg.models._gradients import TransformedPerExampleGradients
from skbayes_sg.rows import EllRows


def _data(values, seed=0):
    rng = np.random.default_rng(seed)
    X = (rng.random((400, 40)) < 0.08) * rng.choice(values, size=(400, 40))
    X[0] = 0.0  # a row with no nonzero
    return X.astype(float), (rng.random(400) < 0.4).astype(float)


@pytest.mark.parametrize("values", [[1], [1, 2, 3], [-2, 1]])
@pytest.mark.parametrize("cls", [LogisticModel, LinearRegressionModel])
def test_operator_matches_dense_rows(values, cls):
    X, y = _data(values)
    sparse, dense = cls(X, y), cls(X, y)
    dense.rows.ell = False
    rng = np.random.default_rng(1)
    theta = 0.3 * rng.standard_normal(sparse.n_params)
    idx = rng.integers(0, 400, 64)
    for rows in (idx, slice(100, 164)):
        a, b = sparse.per_example_gradients(theta, rows), dense.per_example_gradients(theta, rows)
        assert isinstance(a.X, EllRows) and isinstance(b.X, np.ndarray)
        v, u = rng.standard_normal(sparse.n_params), rng.standard_normal(64)
        np.testing.assert_allclose(a.mean(), b.mean(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(a.matvec(v), b.matvec(v), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(a.rmatvec(u), b.rmatvec(u), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(a.sum_of_squares(), b.sum_of_squares(), rtol=1e-12)
        np.testing.assert_allclose(a.total_sum_of_squares(), b.total_sum_of_squares(), rtol=1e-12)
        np.testing.assert_allclose(a.to_dense(), b.to_dense(), rtol=1e-12, atol=1e-14)
        L = np.tril(rng.standard_normal((sparse.n_params,) * 2))
        ta, tb = TransformedPerExampleGradients(a, L), TransformedPerExampleGradients(b, L)
        np.testing.assert_allclose(ta.sum_of_squares(), tb.sum_of_squares(), rtol=1e-11)
        # A pickled operator (a chain state shipped to a worker) multiplies as before.
        c = pickle.loads(pickle.dumps(a))
        np.testing.assert_array_equal(c.matvec(v), a.matvec(v))
        np.testing.assert_array_equal(c.total_sum_of_squares(), a.total_sum_of_squares())


def test_dense_features_keep_dense_rows():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((200, 10)), (rng.random(200) < 0.5).astype(float)
    assert isinstance(LogisticModel(X, y).per_example_gradients(np.zeros(11), np.arange(5)).X, np.ndarray)
    Xd = (rng.random((200, 10)) < 0.5).astype(float)  # binary but dense: the dense rows are cheaper
    assert isinstance(LogisticModel(Xd, y).per_example_gradients(np.zeros(11), np.arange(5)).X, np.ndarray)
