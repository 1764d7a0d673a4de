"""The centred diagonal whitening of a GLM with intercepts: ``L = T diag(s) E``, O(P) to apply.

A diagonal whitening ``L = diag(H)^-1/2`` leaves the correlations of the posterior. For a
GLM with an intercept, one of them is the intercept's with every coefficient: the Hessian's
intercept column ``H_{ja} = sum_i w_i x_ij`` is ``H_aa`` times the curvature-weighted mean of
feature ``j``, and summed over many features that coupling dominates. On wide sparse
binary data (``benchmarks/wide_sparse_diag.py``: D = 2,000 features, 20 ones a row) the
diagonally whitened Hessian has one eigenvalue of 20.7 (the intercept moving with the sum
of the coefficients) and one of 0.0008, a condition number of 27,000, and mCCAdL ran to its
iteration ceiling. Centring the predictors for the intercept, as brms does by default,
removes that coupling: with ``alpha' = alpha + mu . beta`` (``mu_j = H_ja / H_aa``), the
Hessian in ``(beta, alpha')`` has no intercept-coefficient block at the MAP, and whitening
its diagonal leaves a condition number of 90 on that data. What remains is one direction
no diagonal sees (every row has about 20 ones, so the coefficients' sum is nearly the
intercept's column; one-hot groups do the same): ``E = I + V diag(c) V'``, from a few
Lanczos eigenpairs, maps such directions to unit curvature, and the condition number is 2.8
(the dense whitening's is 1, at ``O(P^2)`` per product and ``O(P^3)`` once).

``T`` maps ``(beta, alpha')`` to ``(beta, alpha = alpha' - mu . beta)``, per output ``k``
of a GLM with ``K`` outputs (``alpha_k = alpha'_k - sum_j mu_jk W_jk``): a unit lower
triangular matrix with the intercepts last. ``s`` is ``diag(T' H T)^-1/2``. ``L``, ``L'``
and ``L^-1`` each cost O(P r) for a correction of rank ``r`` (at most 8).
"""

import numpy as np
from scipy.linalg import eigh

from ..preconditioning import OUTLIER_RANK, OUTLIER_RATIO, floored_curvatures, intercept_layout
from ._gradients import TransformedPerExampleGradients
from ._whitened import WhitenedModel


class CentredScaling:
    """The factor ``L = T diag(s) E`` of the centred diagonal whitening, applied in O(P r).

    ``E = I + V diag(c) V'`` corrects the few directions, if any, that the centred diagonal
    leaves far from unit curvature (``V`` orthonormal, ``r`` columns; ``E = I`` without them).

    Parameters
    ----------
    s : ndarray of shape (P,)
        Scales of the centred coordinates ``(W, alpha', extra)``.
    mu : ndarray of shape (D, K)
        The centring: ``alpha_k = alpha'_k - sum_j mu_jk W_jk``. The weights ``W`` (D, K)
        are ``theta[:D * K]`` row-major, the intercepts ``theta[D * K : D * K + K]`` (the
        :class:`~skbayes_sg.models.glm.GLM` layout); any extra coordinates follow, unchanged.
    V : ndarray of shape (P, r), optional
        Orthonormal directions of the correction.
    c : ndarray of shape (r,), optional
        ``lambda^-1/2 - 1`` for the curvatures ``lambda`` of ``T diag(s)``'s whitening along
        ``V``, so that ``E`` maps them to 1; each ``c > -1``.
    """

    def __init__(self, s, mu, V=None, c=None):
        self.s = np.asarray(s, dtype=float)
        self.mu = np.asarray(mu, dtype=float)
        D, K = self.mu.shape
        self._a = slice(D * K, D * K + K)  # the intercepts' positions in theta
        self.V = np.zeros((self.s.size, 0)) if V is None else np.asarray(V, dtype=float)
        self.c = np.zeros(0) if c is None else np.asarray(c, dtype=float)

    @property
    def nbytes(self):
        return self.s.nbytes + self.mu.nbytes + self.V.nbytes + self.c.nbytes

    def _correct(self, v, c):
        """``(I + V diag(c) V') v`` for ``v`` (P,) or a stack of rows (M, P), a new array."""
        if not self.c.size:
            return np.array(v, dtype=float)
        return v + ((v @ self.V) * c) @ self.V.T

    def _weights(self, u):
        """The weights ``W`` (..., D, K) of ``u`` (..., P)."""
        D, K = self.mu.shape
        return u[..., : D * K].reshape(*u.shape[:-1], D, K)

    def _coupling(self, u):
        """``sum_j mu_jk W_jk`` of ``u`` (..., P), shape (..., K)."""
        return np.einsum("...jk,jk->...k", self._weights(u), self.mu)

    def scaled(self, v):
        """``T (s v)``, the factor without its correction ``E``, for ``v`` (P,) or (M, P)."""
        out = self.s * np.asarray(v, dtype=float)
        out[..., self._a] -= self._coupling(out)
        return out

    def scaled_transpose(self, g):
        """``s T' g``, the transpose of :meth:`scaled`, for ``g`` (P,) or (M, P)."""
        out = np.array(g, dtype=float)
        D, K = self.mu.shape
        lead = out.shape[:-1]
        out[..., : D * K] -= (self.mu * out[..., self._a][..., None, :]).reshape(*lead, D * K)
        out *= self.s
        return out

    def left(self, v):
        """``L v = T (s E v)`` for ``v`` of shape (P,) or a stack of rows (M, P)."""
        v = np.asarray(v, dtype=float)
        return self.scaled(self._correct(v, self.c) if self.c.size else v)

    def right(self, g):
        """``L' g = E s T' g`` for ``g`` of shape (P,) or a stack of rows (M, P)."""
        out = self.scaled_transpose(g)
        return self._correct(out, self.c) if self.c.size else out

    def solve(self, d):
        """``L^-1 d = T^-1 d / s`` for ``d`` of shape (P,) or (M, P)."""
        out = np.array(d, dtype=float)
        out[..., self._a] += self._coupling(out)
        out /= self.s
        # E^-1 = I + V diag(1 / (1 + c) - 1) V' for orthonormal V.
        return self._correct(out, 1.0 / (1.0 + self.c) - 1.0) if self.c.size else out

    def dense(self):
        """``L`` as a (P, P) lower-triangular matrix (for the dense curvature in ``z``)."""
        return self.left(np.eye(self.s.size)).T

    def congruent(self, H):
        """``L' H L`` for a (P, P) matrix ``H``."""
        return self.right(self.right(H).T)

    def row_weights(self, X):
        """``q_i = ||L' x~_i||^2`` of a one-output GLM's rows ``X`` (n, D), ``x~_i = (x_i, 1, 0...)``.

        ``u_i = diag(s) T' x~_i = s (x_i - mu, 1, 0)`` has ``||u_i||^2 = sum_j s_j^2 (x_ij -
        mu_j)^2 + s_a^2``, which expands into products with ``X`` and ``X^2`` (sparse rows stay
        sparse); ``L' x~_i = E u_i`` adds ``sum_r (2 c_r + c_r^2) (V_r' u_i)^2``.
        """
        D = self.mu.shape[0]
        s, mu = self.s, self.mu[:, 0]
        s2 = s[:D] ** 2
        X2 = X.multiply(X) if hasattr(X, "multiply") else X * X
        q = np.asarray(X2 @ s2).ravel()
        q -= 2.0 * np.asarray(X @ (s2 * mu)).ravel()
        q += float(s2 @ (mu * mu)) + s[D] ** 2
        if self.c.size:
            SV = s[:D, None] * self.V[:D]  # (D, r)
            Vu = np.asarray(X @ SV) - mu @ SV + s[D] * self.V[D]  # V' u_i, shape (n, r)
            q += (Vu * Vu) @ (2.0 * self.c + self.c * self.c)
        return q


class CentredPerExampleGradients(TransformedPerExampleGradients):
    """:class:`TransformedPerExampleGradients` for the factor ``L`` of a :class:`CentredScaling`.

    The rows are ``L' g_i = s T' g_i``: the weights' entries ``g_ijk - mu_jk g_iak`` (minus
    the intercept's multiple), then the intercepts' and extra entries, all scaled by ``s``.
    """

    def _left(self, v):
        return self.L.left(v)

    def _right(self, w):
        return self.L.right(w)

    def sum_of_squares(self):
        # Columns of B = G T diag(s) first: sum_i (g_ijk - mu_jk g_iak)^2 = ss_jk - 2 mu_jk
        # <g_.jk, g_.ak> + mu_jk^2 ss_ak, the cross terms G' (G e_ak), one product each way per
        # output; then of B E = B + (B V) diag(c) V', from Y = B V (r products): never an
        # explicit n x P matrix.
        inner, L = self.inner, self.L
        ss = np.array(inner.sum_of_squares(), dtype=float)
        D, K = L.mu.shape
        a = np.arange(D * K, D * K + K)
        cross = np.empty((D, K))
        for k in range(K):
            e = np.zeros(self.n_params)
            e[a[k]] = 1.0
            cross[:, k] = L._weights(inner.rmatvec(inner.matvec(e)))[:, k]
        ss_a = ss[a]
        ss[: D * K] += (L.mu * (L.mu * ss_a - 2.0 * cross)).ravel()
        ss *= L.s * L.s
        if L.c.size:
            V, c = L.V, L.c
            Y = np.column_stack([inner.matvec(L.scaled(V[:, r])) for r in range(c.size)])  # B V
            BtY = np.column_stack([L.scaled_transpose(inner.rmatvec(Y[:, r])) for r in range(c.size)])
            ss += 2.0 * np.einsum("pr,pr,r->p", V, BtY, c) + np.einsum("pr,ps,rs->p", V * c, V * c, Y.T @ Y)
        return ss

    def _minibatch_row_weights(self, inner):
        return self.L.row_weights(inner.X)

    def gram_dims(self):
        return None  # no explicit Gram matrix: the products through the rows are O(n D + P)

    def centred_gram(self):
        return self.L.congruent(self.inner.centred_gram())

    def to_dense(self):
        return self.L.right(self.inner.to_dense())


class CentredWhitenedModel(WhitenedModel):
    """A GLM in the coordinates ``z`` of ``theta = m + L z``, ``L`` a :class:`CentredScaling`.

    :class:`WhitenedModel` with its products by ``L``, ``L'`` and ``L^-1`` the factor's O(P)
    ones; per-example gradients are :class:`CentredPerExampleGradients`.
    """

    _per_example_type = CentredPerExampleGradients

    def __init__(self, model, m, L):
        # The base class converts L to an array; the factor takes that array's place, and every
        # method that reads L is overridden here.
        super().__init__(model, m, np.empty(0))
        self.L = L

    def to_theta(self, z):
        return self.m + self.L.left(z)

    def from_theta(self, theta):
        return self.L.solve(np.asarray(theta, dtype=float) - self.m)

    def _right(self, g):
        return self.L.right(g)

    def _left(self, v):
        return self.L.left(v)

    def _left_rows(self, V):
        return self.L.left(V)

    def _congruent(self, H):
        return self.L.congruent(H)


def centred_factor(model, theta_hat):
    """The centred diagonal whitening ``L = T diag(s)`` of a GLM with intercepts at ``theta_hat``.

    ``mu_jk = H_{jk,a_k} / H_{a_k a_k}`` (the features' curvature-weighted means, from the
    Hessian's intercept columns: one exact Hessian-vector product per output) removes the
    intercepts' coupling to the coefficients in the Hessian at ``theta_hat``; ``s`` is
    ``diag(T' H T)^-1/2``, whose coefficient entries are ``H_jj - mu_j^2 H_aa`` (see
    :mod:`skbayes_sg.models._centred`). Cost: the diagonal's pass and ``K`` Hessian-vector
    products, O(N D K), and O(P) to apply. Curvatures are floored as in
    :func:`~skbayes_sg.preconditioning.curvature_factor`; where an intercept's curvature is not positive (a posterior
    not log-concave there) its coefficients are not centred.

    Returns
    -------
    CentredScaling
    """
    D, K = intercept_layout(model)
    with np.errstate(over="ignore", invalid="ignore"):
        d = model.hessian_diagonal(theta_hat)
        cols = np.empty((D, K))
        h_a = np.empty(K)
        for k in range(K):
            e = np.zeros(model.n_params)
            e[D * K + k] = 1.0
            col = model.hessian_vector_product(theta_hat, e)
            cols[:, k] = col[: D * K].reshape(D, K)[:, k]
            h_a[k] = col[D * K + k]
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(cols)) and np.all(np.isfinite(h_a))):
        raise ValueError(
            "The curvature of the log posterior at the MAP is not finite; standardise the "
            "features or use preconditioner='none'."
        )
    positive = h_a > 0
    mu = np.where(positive, cols / np.where(positive, h_a, 1.0), 0.0)
    d = d.copy()
    # diag(T' H T): H_jj - 2 mu_j H_ja + mu_j^2 H_aa = H_jj - mu_j H_ja with these mu.
    d[: D * K] -= (mu * cols).ravel()
    centred = CentredScaling(1.0 / np.sqrt(floored_curvatures(np.abs(d))), mu)
    V, lam = outlying_curvatures(model, theta_hat, centred)
    if not lam.size:
        return centred
    return CentredScaling(centred.s, mu, V, 1.0 / np.sqrt(lam) - 1.0)


def outlying_curvatures(model, theta_hat, factor):
    """``(V (P, r), lambda (r,))``: the eigenpairs of ``A = L' H L`` (``L`` the ``factor``) whose
    curvature lies outside ``[1 / OUTLIER_RATIO, OUTLIER_RATIO]``, at most ``OUTLIER_RANK`` at
    each end of the spectrum.

    Centring and scaling leave directions that no diagonal sees, such as sums of binary
    features that add up to a constant in every row (one-hot groups; on the wide sparse
    benchmark's rows of 20 features each, curvature 0.016 against a bulk in [0.51, 1.46]).
    Lanczos (ARPACK, from a fixed start, so the same data give the same factor) finds them
    from Hessian-vector products, each one pass over the data: 50-100 of them, a fraction
    of a second on that benchmark.
    """
    from scipy.sparse.linalg import ArpackError, LinearOperator, eigsh

    P = model.n_params
    empty = np.zeros((P, 0)), np.zeros(0)
    k = 2 * OUTLIER_RANK
    if P <= 4 * k:
        lam, V = eigh(factor.congruent(model.hessian(theta_hat)))
    else:
        op = LinearOperator(
            (P, P),
            matvec=lambda v: factor.right(model.hessian_vector_product(theta_hat, factor.left(v.ravel()))),
            dtype=float,
        )
        v0 = np.random.default_rng(0).standard_normal(P)
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                lam, V = eigsh(op, k=k, which="BE", v0=v0, ncv=min(P, 4 * k), tol=1e-3, maxiter=20 * P)
        except ArpackError:  # no convergence within maxiter included: no correction then
            return empty
    if not np.all(np.isfinite(lam)):
        return empty
    order = np.argsort(lam)
    lam, V = lam[order], V[:, order]
    low = np.flatnonzero((lam > 0) & (lam < 1.0 / OUTLIER_RATIO))[:OUTLIER_RANK]
    high = np.flatnonzero(lam > OUTLIER_RATIO)[::-1][:OUTLIER_RANK]
    keep = np.concatenate([low, high])
    return V[:, keep], lam[keep]
