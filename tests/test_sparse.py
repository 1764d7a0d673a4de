"""Sparse X: the same posterior as dense X, through the same operators."""

import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg.diagnostics import mcse_mean
from skbayes_sg.models import LinearRegressionModel, LogisticModel, PoissonModel, SoftmaxModel

RNG = np.random.default_rng(0)
XD = RNG.normal(size=(300, 6)) * (RNG.random((300, 6)) < 0.3)


@pytest.mark.parametrize(
    "make",
    [
        lambda X, y: LogisticModel(X, (y > 0).astype(float)),
        lambda X, y: SoftmaxModel(X, (np.abs(y) * 2).astype(int) % 3, n_classes=3),
        lambda X, y: LinearRegressionModel(X, y),
        lambda X, y: PoissonModel(X, np.round(np.abs(y) * 3), offset=0.1 * y),
    ],
    ids=["logistic", "softmax", "linear", "poisson"],
)
def test_sparse_operators_equal_dense(make):
    y = XD @ RNG.normal(size=6) + RNG.normal(size=300)
    dense, sparse = make(XD, y), make(sp.csr_matrix(XD), y)
    theta = 0.3 * RNG.normal(size=dense.n_params)
    v = RNG.normal(size=dense.n_params)
    idx = RNG.integers(0, 300, 40)
    a, b = dense.per_example_gradients(theta, idx), sparse.per_example_gradients(theta, idx)
    for f in (
        lambda o: o.mean(),
        lambda o: o.matvec(v),
        lambda o: o.sum_of_squares(),
        lambda o: o.rmatvec(np.arange(40.0)),
    ):
        np.testing.assert_allclose(f(b), f(a), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        sparse.log_posterior_and_grad(theta)[1], dense.log_posterior_and_grad(theta)[1], rtol=1e-10
    )
    np.testing.assert_allclose(
        sparse.predict_draws(theta[None], sp.csr_matrix(XD)), dense.predict_draws(theta[None], XD), rtol=1e-10
    )


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_fit_follows_the_dense_chain(fmt):
    y = (XD @ RNG.normal(size=6) > 0).astype(int)
    kw = dict(n_iter=60, n_chains=2, random_state=0)
    dense = SGBayesLogisticRegression(**kw).fit(XD, y)
    sparse = SGBayesLogisticRegression(**kw).fit(sp.csr_matrix(XD).asformat(fmt), y)
    # Same random streams; only the order of floating-point sums differs.
    np.testing.assert_allclose(sparse.samples_, dense.samples_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(sparse.predict_proba(sp.csr_matrix(XD)), dense.predict_proba(XD), rtol=1e-6)


@pytest.mark.statistical
def test_sparse_posterior_matches_dense_within_monte_carlo_error():
    y = XD @ [1.0, -1.0, 0.5, 0.0, 2.0, -0.5] + RNG.normal(size=300)
    kw = dict(noise_precision=1.0, n_iter=4000, n_chains=4)
    dense = SGBayesLinearRegression(random_state=1, **kw).fit(XD, y)
    sparse = SGBayesLinearRegression(random_state=2, **kw).fit(sp.csr_matrix(XD), y)
    diff = sparse.samples_.reshape(-1, 7).mean(0) - dense.samples_.reshape(-1, 7).mean(0)
    se = np.hypot(mcse_mean(sparse.samples_), mcse_mean(dense.samples_))
    assert np.all(np.abs(diff) < 4.5 * se)
