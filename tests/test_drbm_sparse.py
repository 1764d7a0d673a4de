"""The DRBM on scipy.sparse X: the same maths as dense X, without densifying X."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg import SGBayesDRBMClassifier
from skbayes_sg.diagnostics import mcse_mean
from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models import DRBMShear
from skbayes_sg.models.drbm import DRBMModel

from .test_drbm import _reference


def _sparse_problem(N=60, D=12, C=3, H=5, density=0.25, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D)) * (rng.random((N, D)) < density)
    X[0] = 0.0  # an empty row: no stored entries at all
    y = rng.integers(0, C, size=N)
    return X, y


def _pair(X, y, fit_intercept=True, operator_dtype="float64", fmt="csr"):
    kw = dict(
        n_classes=3,
        n_hidden=5,
        fit_intercept=fit_intercept,
        init_scale=1.0,
        operator_dtype=operator_dtype,
        random_state=0,
    )
    dense = DRBMModel(X, y, **kw)
    sparse = DRBMModel(sp.csr_matrix(X).asformat(fmt), y, **kw)
    theta = dense.initial_point() + 0.5 * np.random.default_rng(1).normal(size=dense.n_params)
    return dense, sparse, theta


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-11), ("float32", 2e-5)])
def test_sparse_operator_equals_dense_operator_and_explicit_matrix(fit_intercept, dtype, rtol):
    X, y = _sparse_problem()
    dense, sparse, theta = _pair(X, y, fit_intercept, dtype)
    idx = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 0, 0])  # repeats and the empty row
    gs, gd = sparse.per_example_gradients(theta, idx), dense.per_example_gradients(theta, idx)
    # The minibatch and the single-precision copy stay sparse.
    assert sp.issparse(gs.X) and sp.issparse(gs._X_op) and gs._X_op.dtype == np.dtype(dtype)
    _, G = _reference(dense, theta, X[idx], y[idx])
    rng = np.random.default_rng(2)
    v, u = rng.normal(size=dense.n_params), rng.normal(size=idx.size)
    V = np.cov(G, rowvar=False)
    products = {
        "mean": (lambda o: o.mean(), G.mean(axis=0), 1e-11),  # double precision in any case
        "matvec": (lambda o: o.matvec(v), G @ v, rtol),
        "rmatvec": (lambda o: o.rmatvec(u), G.T @ u, rtol),
        "sum_of_squares": (lambda o: o.sum_of_squares(), (G * G).sum(axis=0), rtol),
        "total_sum_of_squares": (lambda o: np.array([o.total_sum_of_squares()]), np.array([(G * G).sum()]), rtol),
        "gram": (lambda o: o.gram(), G @ G.T, rtol),
        "covariance_diag": (lambda o: o.covariance_diag(), np.diag(V), max(rtol, 1e-9)),
        "to_dense": (lambda o: o.to_dense(), G, rtol),
    }
    for name, (f, exact, tol) in products.items():
        got_sparse, got_dense = f(gs), f(gd)
        scale = np.abs(exact).max()
        np.testing.assert_allclose(got_sparse, exact, rtol=tol, atol=tol * scale, err_msg=name)
        # Sparse and dense operators: the same products up to rounding of the stored precision.
        np.testing.assert_allclose(got_sparse, got_dense, rtol=tol, atol=tol * scale, err_msg=name)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_likelihood_gradient_and_predictive_equal_dense(fmt):
    # 130 rows with H C = 26 * 60 span several blocks of the kernel.
    rng = np.random.default_rng(3)
    X = rng.random((130, 7)) * (rng.random((130, 7)) < 0.3)
    y = rng.integers(0, 26, size=130)
    kw = dict(n_classes=26, n_hidden=60, init_scale=1.0, random_state=0)
    dense, sparse = DRBMModel(X, y, **kw), DRBMModel(sp.csr_matrix(X).asformat(fmt), y, **kw)
    assert sp.issparse(sparse.X) and sparse.X.format == "csr"  # converted once, not densified
    theta = dense.initial_point()
    for idx in (None, np.array([5, 5, 0, 129, 64]), slice(10, 90)):
        ll_s, g_s = sparse.log_likelihood_and_grad(theta, idx)
        ll_d, g_d = dense.log_likelihood_and_grad(theta, idx)
        assert ll_s == pytest.approx(ll_d, rel=1e-12)
        np.testing.assert_allclose(g_s, g_d, rtol=1e-11, atol=1e-12 * np.abs(g_d).max())
    ll_ref, _ = _reference(dense, theta, X, y)
    assert sparse.log_likelihood_and_grad(theta)[0] == pytest.approx(ll_ref.sum(), rel=1e-12)
    thetas = np.stack([theta, 0.5 * theta])
    for Xq in (sp.csr_matrix(X).asformat(fmt), sp.csr_array(X)):
        lp = sparse.log_proba_draws(thetas, Xq)
        np.testing.assert_allclose(lp, dense.log_proba_draws(thetas, X), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(
            sparse.without_data().predict_draws(thetas, Xq), dense.predict_draws(thetas, X), rtol=1e-12, atol=1e-15
        )
    np.testing.assert_allclose(lp[0, np.arange(130), y], ll_ref, rtol=1e-10)


def test_sparse_minibatch_force_equals_dense_force():
    X, y = _sparse_problem()
    dense, sparse, theta = _pair(X, y)
    for scheme in ("replacement", "epochs"):  # row gathers and slices
        fd = MinibatchGradient(dense, batch_size=10, scheme=scheme)
        fs = MinibatchGradient(sparse, batch_size=10, scheme=scheme)
        rd, rs = np.random.default_rng(4), np.random.default_rng(4)
        for _ in range(3):
            force_d, _ = fd.gradient(theta, rd)
            force_s, _ = fs.gradient(theta, rs)
            np.testing.assert_allclose(force_s, force_d, rtol=1e-11, atol=1e-12 * np.abs(force_d).max())


def _classification(N=200, D=30, C=3, density=0.2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((N, D)) * (rng.random((N, D)) < density)
    y = np.argmax(X @ (3.0 * rng.normal(size=(D, C))) + rng.gumbel(size=(N, C)), axis=1)
    return X, y


def _predictive_z(dense, sparse, X):
    """``(p_sparse - p_dense) / se`` for every posterior-predictive probability, with ``se``
    from the MCSE of each fit's per-draw probabilities (chains x draws)."""
    n_chains = dense.samples_.shape[0]
    pd_ = dense.predict_proba_samples(X).reshape(n_chains, -1, X.shape[0] * dense.classes_.size)
    ps = sparse.predict_proba_samples(sp.csr_matrix(X)).reshape(pd_.shape)
    se = np.hypot(mcse_mean(pd_), mcse_mean(ps))
    assert np.all(se > 0)
    return (ps.mean(axis=(0, 1)) - pd_.mean(axis=(0, 1))) / se


def test_sparse_fit_matches_dense_fit_within_monte_carlo_error(monkeypatch):
    X, y = _classification()
    # Double precision: the coupled chains below must stay within 1e-6 for 600 iterations.
    kw = dict(n_hidden=5, sampler="sghmc", n_iter=600, n_chains=4, random_state=0, dtype="float64")
    # Sparse inputs are not centred (that would densify them): the dense fit's coordinates
    # without the inputs' shear are the sparse fit's, so the chains can be coupled.
    monkeypatch.setattr(SGBayesDRBMClassifier, "_chain_coordinates", staticmethod(lambda model: DRBMShear(None)))
    dense = SGBayesDRBMClassifier(**kw).fit(X, y)
    monkeypatch.undo()
    sparse = SGBayesDRBMClassifier(**kw).fit(sp.csr_matrix(X), y)
    # 600 probabilities: 5 standard errors each keeps a correct implementation's failure
    # rate below 1e-3 even for independent chains.
    assert np.all(np.abs(_predictive_z(dense, sparse, X)) < 5.0)
    # Same seeds: the chains see the same minibatches and noise, and the sparse and dense
    # sums differ only in rounding, so the coupled chains stay together far more tightly.
    np.testing.assert_allclose(sparse.samples_, dense.samples_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(sparse.predict_proba(sp.csr_matrix(X)), dense.predict_proba(X), rtol=1e-8)


@pytest.mark.statistical
def test_sparse_posterior_predictive_matches_independent_dense_chains():
    X, y = _classification()
    kw = dict(n_hidden=5, sampler="sghmc", n_iter=3000, n_chains=4)
    dense = SGBayesDRBMClassifier(random_state=1, **kw).fit(X, y)
    sparse = SGBayesDRBMClassifier(random_state=2, **kw).fit(sp.csr_matrix(X), y)
    assert np.all(np.abs(_predictive_z(dense, sparse, X)) < 5.0)


@pytest.mark.parametrize("sampler", ["sgld", "mccadl"])
def test_csc_and_csr_input_give_identical_draws(sampler):
    X, y = _classification(N=120, D=20)
    kw = dict(n_hidden=4, sampler=sampler, n_iter=50, n_chains=2, random_state=3)
    csr = SGBayesDRBMClassifier(**kw).fit(sp.csr_matrix(X), y)
    csc = SGBayesDRBMClassifier(**kw).fit(sp.csc_matrix(X), y)
    np.testing.assert_array_equal(csc.samples_, csr.samples_)
    np.testing.assert_array_equal(csc.predict_proba(sp.csc_matrix(X)), csr.predict_proba(sp.csr_matrix(X)))
    # Streaming and the epoch scheme keep sparse chunks sparse too.
    stream = SGBayesDRBMClassifier(batch_scheme="epochs", **kw)
    stream.partial_fit(sp.csc_matrix(X[:60]), y[:60], classes=[0, 1, 2]).partial_fit(sp.csr_matrix(X[60:]), y[60:])
    assert np.all(np.isfinite(stream.predict_proba(sp.csr_matrix(X))))


def _wide_sparse(N, D, nnz_per_row, C=3, seed=0):
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(N), nnz_per_row)
    cols = rng.integers(0, D, size=rows.size)
    X = sp.csr_matrix((rng.random(rows.size), (rows, cols)), shape=(N, D))
    X.sum_duplicates()
    return X, rng.integers(0, C, size=N)


def _peak_bytes(f):
    tracemalloc.start()
    try:
        f()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_operator_products_never_densify_the_minibatch():
    # A dense copy of one 500-row minibatch would be 80 MB (40 MB in float32), and so
    # would the (n, D) product a W that a dense-style matvec forms; the sparse path needs
    # a few vectors of P = 100,000 numbers.
    X, y = _wide_sparse(N=2000, D=20_000, nnz_per_row=5)
    model = DRBMModel(X, y, n_classes=3, n_hidden=5, random_state=0)
    assert sp.issparse(model.X)
    sparse_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    assert model.__sizeof__() < sparse_bytes + y.nbytes + 10_000
    theta = model.initial_point()
    v = np.random.default_rng(0).normal(size=model.n_params)
    idx = np.random.default_rng(1).integers(0, 2000, size=500)

    def step():
        grads = model.per_example_gradients(theta, idx)
        grads.mean()
        grads.rmatvec(grads.matvec(v))
        grads.covariance_diag()
        model.log_likelihood_and_grad(theta)
        model.log_proba_draws(theta[None], X[:500])

    step()  # warm up scipy's lazily built helpers outside the measurement
    peak = _peak_bytes(step)
    assert peak < 12e6, f"peak allocation {peak / 1e6:.1f} MB: X or a minibatch of it was densified"


def test_fit_memory_scales_with_the_nonzeros_not_the_dense_size():
    # Dense, this X would take 20,000 x 2,000 x 8 bytes = 320 MB; it holds 40,000 non-zeros.
    X, y = _wide_sparse(N=20_000, D=2_000, nnz_per_row=2)
    clf = SGBayesDRBMClassifier(n_hidden=5, sampler="sghmc", n_iter=20, n_chains=1, max_draws=5, random_state=0)
    peak = _peak_bytes(lambda: clf.fit(X, y).predict_proba(X))
    assert peak < 32e6, f"peak allocation {peak / 1e6:.1f} MB against 320 MB dense: X was densified"
