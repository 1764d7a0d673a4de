"""The C step of mCCAdL: Al-Mohy & Higham's truncated Taylor ``exp(t A) b`` against
``scipy.linalg.expm`` and ``scipy.sparse.linalg.expm_multiply``."""

import numpy as np
import pytest
import scipy.linalg
from scipy.sparse.linalg import LinearOperator, expm_multiply

from skbayes_sg.models._gradients import DensePerExampleGradients
from skbayes_sg.samplers._expmv import (
    DEFAULT_TOL,
    M_MAX,
    NoiseCovariance,
    c_step,
    expmv,
    lanczos_expmv,
    select_degree,
    taylor_thetas,
)

# Al-Mohy & Higham (2011), Table 3.1: theta_m for m = 5, 10, ..., 55.
TABLE_3_1 = {
    2.0**-24: [1.3e-1, 1.0e0, 2.2e0, 3.6e0, 4.9e0, 6.3e0, 7.7e0, 9.1e0, 1.1e1, 1.2e1, 1.3e1],
    2.0**-53: [2.4e-3, 1.4e-1, 6.4e-1, 1.4e0, 2.4e0, 3.5e0, 4.7e0, 6.0e0, 7.2e0, 8.5e0, 9.9e0],
}


@pytest.mark.parametrize("tol", sorted(TABLE_3_1))
def test_thetas_match_al_mohy_higham_table(tol):
    thetas = taylor_thetas(tol, 55)
    np.testing.assert_allclose(thetas[4::5], TABLE_3_1[tol], rtol=0.05)


def test_default_thetas_are_the_computed_ones():
    # The table the C step reads at the default tolerance is the function's output, bit for bit
    # (a stale table would change every mCCAdL draw).
    from skbayes_sg.samplers._expmv import _DEFAULT_THETAS, _theta_list

    computed = taylor_thetas.__wrapped__(DEFAULT_TOL, M_MAX)
    assert np.array_equal(np.asarray(_DEFAULT_THETAS), computed)
    assert _theta_list(DEFAULT_TOL, M_MAX) == list(_DEFAULT_THETAS)


def test_select_degree_minimises_products():
    thetas = taylor_thetas(2.0**-10, 30)
    for norm in (1e-4, 0.05, 0.3, 1.0, 4.0, 20.0, 300.0):
        m, s = select_degree(norm, 2.0**-10)
        assert norm / s <= thetas[m - 1]
        brute = min(k * max(np.ceil(norm / thetas[k - 1]), 1) for k in range(1, 31))
        assert m * s == brute
    assert select_degree(0.0) == (0, 1)


def _problem(seed, n, P, spread):
    rng = np.random.default_rng(seed)
    G = rng.normal(size=(n, P)) * rng.gamma(1.0, size=P) * spread
    return DensePerExampleGradients(G), rng.normal(size=P)


@pytest.mark.parametrize("tol", [2.0**-10, 2.0**-24, 2.0**-53])
@pytest.mark.parametrize(
    "seed,n,P,scale", [(0, 30, 8, 0.01), (1, 50, 20, 0.3), (2, 200, 40, 0.2), (3, 15, 30, 2.0), (4, 400, 60, 0.002)]
)
@pytest.mark.parametrize("power", [False, True])
def test_c_step_matches_dense_expm(tol, seed, n, P, scale, power):
    """exp(-scale Sigma) p within the requested tolerance, Sigma = c V never formed."""
    grads, p = _problem(seed, n, P, 1.0)
    noise_scale = 3.0
    Sigma = noise_scale * np.cov(grads.G.T)
    exact = scipy.linalg.expm(-scale * Sigma) @ p
    eig = np.zeros(P) if power else None
    f, n_prod = c_step(p, grads, noise_scale, 1.0, scale, tol=tol, eigvec=eig, method="taylor")
    # backward error tol on ||t A|| translates into a forward error of about tol ||t A||
    bound = tol * max(1.0, np.linalg.norm(scale * Sigma, 2)) * 10
    assert np.linalg.norm(f - exact) <= bound * np.linalg.norm(p), (np.linalg.norm(f - exact), n_prod)
    assert n_prod > 0


def test_expmv_generic_matrix_with_shift():
    """The generic routine on a symmetric indefinite matrix with a large trace."""
    rng = np.random.default_rng(5)
    B = rng.normal(size=(25, 25))
    A = -(B @ B.T) / 10 - 3.0 * np.eye(25)
    b = rng.normal(size=25)
    shifted = A - np.trace(A) / 25 * np.eye(25)
    f, _ = expmv(0.7, lambda v: A @ v, b, np.trace(A), np.linalg.norm(shifted, 2), tol=2.0**-53)
    np.testing.assert_allclose(f, scipy.linalg.expm(0.7 * A) @ b, rtol=1e-12, atol=1e-13)


def test_noise_covariance_operator():
    grads, v = _problem(7, 40, 12, 1.0)
    cov = NoiseCovariance(grads, 5.0, coef=-0.5)
    Sigma = -0.5 * 5.0 * np.cov(grads.G.T)
    np.testing.assert_allclose(cov.matvec(v), Sigma @ v, rtol=1e-12)
    assert cov.trace() == pytest.approx(np.trace(Sigma), rel=1e-12)
    u = np.ones(12) / np.sqrt(12)
    lam, _ = cov.largest_eigenvalue(u, n_iter=200, rtol=1e-10)
    assert lam == pytest.approx(np.abs(np.linalg.eigvalsh(Sigma)).max(), rel=1e-6)


def test_fewer_products_than_scipy_expm_multiply_at_equal_accuracy():
    """scipy's expm_multiply on a LinearOperator (double precision, onenormest) against
    ours at double precision: same accuracy, fewer products with Sigma."""
    grads, p = _problem(11, 300, 50, 1.0)
    noise_scale, scale = 2.0, 0.05
    Sigma = noise_scale * np.cov(grads.G.T)
    exact = scipy.linalg.expm(-scale * Sigma) @ p
    cov = NoiseCovariance(grads, noise_scale, -scale)
    count = [0]

    def mv(v):
        count[0] += 1
        return cov.matvec(np.ravel(v))

    def mm(V):
        count[0] += V.shape[1]
        return np.column_stack([cov.matvec(V[:, j]) for j in range(V.shape[1])])

    op = LinearOperator((50, 50), matvec=mv, rmatvec=mv, matmat=mm, dtype=float)
    ref = expm_multiply(op, p, traceA=cov.trace())
    scipy_products = count[0]
    ours, n_prod = c_step(p, grads, noise_scale, 1.0, scale, tol=2.0**-53, eigvec=np.zeros(50), method="taylor")
    err_ours = np.linalg.norm(ours - exact) / np.linalg.norm(exact)
    err_scipy = np.linalg.norm(ref - exact) / np.linalg.norm(exact)
    assert err_ours <= max(10 * err_scipy, 1e-13)
    assert n_prod < scipy_products


def test_underestimated_norm_is_caught_by_term_growth():
    """A norm estimate 20x too small would pick s = 1 and a low degree, and the truncated
    series of exp(-x) at large x grows without bound; the growth check restarts it."""
    grads, p = _problem(3, 15, 30, 1.0)
    Sigma = 3.0 * np.cov(grads.G.T)
    cov = NoiseCovariance(grads, 3.0, -2.0)
    A = -2.0 * Sigma
    shifted = A - np.trace(A) / 30 * np.eye(30)
    true_norm = np.linalg.norm(shifted, 2)
    exact = scipy.linalg.expm(A) @ p
    f, _ = expmv(1.0, cov.matvec, p, np.trace(A), true_norm / 20, tol=2.0**-24, norm_bound=10 * true_norm)
    assert np.linalg.norm(f - exact) <= 1e-5 * np.linalg.norm(p)


@pytest.mark.parametrize("rho", [0.5, 10.0, 60.0, 300.0])
@pytest.mark.parametrize("tol", [2.0**-6, 2.0**-24])
def test_lanczos_matches_dense_expm_with_far_fewer_products(rho, tol):
    """exp(A) b for a negative semidefinite A with ||A|| = rho, to the requested tolerance."""
    rng = np.random.default_rng(int(rho))
    P = 120
    G = rng.normal(size=(3 * P, P)) * rng.gamma(0.5, size=P)
    A = -(G.T @ G)
    A *= rho / np.linalg.norm(A, 2)
    b = rng.normal(size=P)
    exact = scipy.linalg.expm(A) @ b
    f, k = lanczos_expmv(1.0, lambda v: A @ v, b, tol=tol)
    assert np.linalg.norm(f - exact) <= 2 * tol * np.linalg.norm(exact) + 1e-12 * np.linalg.norm(b)
    _, k_taylor = expmv(1.0, lambda v: A @ v, b, np.trace(A), np.linalg.norm(A - np.trace(A) / P * np.eye(P), 2), tol)
    if rho >= 10:
        assert k < k_taylor / 2


def test_c_step_lanczos_on_a_minibatch_covariance():
    grads, p = _problem(3, 15, 30, 1.0)
    Sigma = 3.0 * np.cov(grads.G.T)
    scale = 2.0  # ||scale Sigma|| in the hundreds: where "auto" picks Lanczos
    exact = scipy.linalg.expm(-scale * Sigma) @ p
    for method in ("lanczos", "auto"):
        f, n_prod = c_step(p, grads, 3.0, 1.0, scale, tol=2.0**-24, method=method)
        assert np.linalg.norm(f - exact) <= 1e-6 * np.linalg.norm(p)
        assert n_prod <= 30


@pytest.mark.parametrize("k", [1, 2, 7, 25])
def test_lanczos_tridiagonal_solver_is_scipys_bit_for_bit(k):
    """The Lanczos step's direct LAPACK call returns what ``scipy.linalg.eigh_tridiagonal``
    does (its default driver, without its checks), so the C step's draws are unchanged."""
    from skbayes_sg.samplers._expmv import _eigh_tridiagonal

    rng = np.random.default_rng(k)
    d, e = rng.normal(size=k), np.abs(rng.normal(size=k - 1))
    w, v = _eigh_tridiagonal(d, e)
    w_ref, v_ref = scipy.linalg.eigh_tridiagonal(d, e)
    np.testing.assert_array_equal(w, w_ref)
    np.testing.assert_array_equal(v, v_ref)
    T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    np.testing.assert_allclose(T @ v, v * w, atol=1e-12 * max(1.0, np.abs(T).max()))


@pytest.mark.parametrize("whiten", ["none", "dense", "diag"])
def test_compact_covariance_is_the_rows_covariance(whiten):
    """Sigma held as a P x P matrix (reused over many C steps) equals the operator through the
    rows, for a GLM's per-example gradients in theta and in whitened coordinates."""
    from skbayes_sg.models._gradients import LinearPerExampleGradients, TransformedPerExampleGradients

    rng = np.random.default_rng(11)
    n, D = 60, 7
    X, R = rng.normal(size=(n, D)), rng.normal(size=(n, 1))
    grads = LinearPerExampleGradients(X, R, True)
    P = D + 1
    if whiten == "dense":
        grads = TransformedPerExampleGradients(grads, np.tril(rng.normal(size=(P, P))) + 3 * np.eye(P))
    elif whiten == "diag":
        grads = TransformedPerExampleGradients(grads, rng.gamma(2.0, size=P))
    G = grads.to_dense()
    Sigma = -0.25 * 7.0 * np.cov(G.T)
    rows, compact = NoiseCovariance(grads, 7.0, -0.25), NoiseCovariance(grads, 7.0, -0.25)
    assert compact.compact(10**4) and compact.is_compact
    v = rng.normal(size=P)
    np.testing.assert_allclose(compact.matvec(v), Sigma @ v, rtol=1e-12)
    np.testing.assert_allclose(compact.matvec(v), rows.matvec(v), rtol=1e-12)
    assert compact.trace() == pytest.approx(rows.trace(), rel=1e-12)
    # The C step through the explicit matrix: scipy's expm within the backward-error tolerance.
    for scale, tol in ((0.01, 2.0**-6), (0.3, 2.0**-24), (4.0, 2.0**-53)):
        exact = scipy.linalg.expm(-scale / 0.25 * -Sigma) @ v
        f, n_prod = c_step(v, compact, 7.0, 1.0, scale, tol=tol)
        assert n_prod == 1
        bound = tol * max(1.0, np.linalg.norm(scale / 0.25 * Sigma, 2)) * 10
        assert np.linalg.norm(f - exact) <= bound * np.linalg.norm(v)


def test_blended_covariance_is_the_running_average():
    """blend: (1 - w) previous + w new, matrix and trace; rescaled: another coef and noise scale."""
    (g1, v), (g2, _) = _problem(21, 50, 6, 1.0), _problem(22, 50, 6, 1.0)
    a, b = NoiseCovariance(g1, 2.0, -0.5), NoiseCovariance(g2, 2.0, -0.5)
    assert a.compact(10**4) and b.compact(10**4)
    expected = 0.75 * (-0.5 * 2.0 * np.cov(g1.G.T)) + 0.25 * (-0.5 * 2.0 * np.cov(g2.G.T))
    b.blend(a, 0.25)
    np.testing.assert_allclose(b.matvec(v), expected @ v, rtol=1e-12)
    assert b.trace() == pytest.approx(np.trace(expected), rel=1e-12)
    c = b.rescaled(-1.5, 4.0)
    np.testing.assert_allclose(c.matvec(v), 6.0 * expected @ v, rtol=1e-12)
    assert c.trace() == pytest.approx(6.0 * np.trace(expected), rel=1e-12)


def test_compact_only_when_the_products_pay_for_the_gram_matrix():
    """a9a's size (n = 500, P = 124): the Gram matrix is worth about a dozen products through
    the rows, so a covariance used for a few products stays an operator."""
    from skbayes_sg.models._gradients import LinearPerExampleGradients

    rng = np.random.default_rng(3)
    grads = LinearPerExampleGradients(rng.normal(size=(500, 123)), rng.normal(size=(500, 1)), True)
    assert not NoiseCovariance(grads, 1.0, -1.0).compact(4)
    assert NoiseCovariance(grads, 1.0, -1.0).compact(64)


def test_compact_exponential_of_a_large_or_diverged_covariance():
    """||t Sigma|| far beyond the Taylor range: the exponential by eigendecomposition, exact;
    a non-finite covariance (a diverged chain) gives NaN at once rather than a huge scaling."""
    grads, v = _problem(31, 80, 10, 30.0)
    cov = NoiseCovariance(grads, 50.0, -1.0)
    assert cov.compact(10**4)
    Sigma = 50.0 * np.cov(grads.G.T)
    assert np.linalg.norm(Sigma, 2) > 1e4
    f, _ = c_step(v, cov, 50.0, 1.0, 1.0)
    np.testing.assert_allclose(f, scipy.linalg.expm(-Sigma) @ v, atol=1e-12 * np.linalg.norm(v))
    G = grads.G.copy()
    G[3, 2] = np.inf
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf in the centring, as a chain would
        bad = NoiseCovariance(DensePerExampleGradients(G), 50.0, -1.0)
        bad.compact(10**4)
        assert not np.isfinite(c_step(v, bad, 50.0, 1.0, 1.0)[0]).any()
