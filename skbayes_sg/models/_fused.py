"""The full-data force of a one-output GLM for a stack of chains, as two products per chain.

When every chain's gradient is the full data (small N), a step's gradient needs no row
gather and no per-row bookkeeping. In the coordinates ``z`` of a whitened model,
``theta = m + L z``, the linear predictor is ``eta = X~ theta = X~ m + (X~ L) z`` with
``X~ = [X, 1]`` (the intercept column), so with ``A = X~ L`` formed once a chain's force is

``eta = A z + eta0``, ``r = family residual(eta)``, ``F = A' r - Q z + b``

where the Gaussian prior's gradient in ``z``, ``L' (-Lambda (m + L z))``, is the constant
``b = -L' Lambda m`` and the matrix ``Q = L' Lambda L``. Unwhitened models are the case
``L = I``, ``m = 0``. Each chain's products are matrix-vector products of its own row (a
stacked ``matmul``, which numpy runs as one BLAS product per row; not one matrix-matrix
product over the chains): a product over a stack of rows rounds differently with the
stack's height, and the chains' draws must not depend on how they are grouped into
processes (``n_jobs``).
"""

import weakref

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from ..rows._array import ArrayRows
from .glm.logistic import LogisticFamily

#: Largest ``A`` (bytes) the fused force forms; beyond it the chains use their own estimators.
MAX_BYTES = 2**27

_CACHE = weakref.WeakKeyDictionary()
_NO_EXTRA = np.empty(0)


class FusedForce:
    """``F(z)`` of the log posterior for each row of a stack ``Z`` (C, P) (see the module).

    Parameters
    ----------
    A : ndarray of shape (N, P)
        ``X~ L``.
    eta0 : ndarray of shape (N,)
        ``X~ m`` plus the rows' offsets.
    y, w : ndarray of shape (N,), w None without sample weights
    family : Family
    Q : ndarray of shape (P, P), or (P,) for a diagonal
    b : ndarray of shape (P,)
    """

    def __init__(self, A, eta0, y, w, family, Q, b):
        N, P = A.shape
        # A dense Q rides in the second product: [r, z] @ [A; -Q], one product per chain.
        AQ = np.vstack([A, -Q]) if Q.ndim == 2 else A
        # The trajectories' products carry the constants as a last row, [z, 1] @ [A'; eta0']
        # and [r, z, 1] @ [A; -Q; b], saving a pass over eta and one over the force; the SG
        # samplers' products read the leading rows, as before.
        self._At1 = np.vstack([A.T, eta0[None, :]])
        self._AQb = np.vstack([AQ, b[None, :]])
        self.At, self.AQ = self._At1[:P], self._AQb[:-1]
        self.eta0, self.y, self.w, self.family, self.Q, self.b, self.N = eta0, y, w, family, Q, b, N
        self._logistic = type(family) is LogisticFamily
        self._buf = self._work = self._hbuf = self._zbuf = None
        self._half = None

    def _linear_predictors(self, Z):
        """The work buffer (C, N + P) and its first ``N`` columns filled with the linear
        predictors ``eta`` of the rows of ``Z`` (C, P)."""
        C, N = Z.shape[0], self.N
        buf = self._buf
        if buf is None or buf.shape[0] != C:
            buf = self._buf = np.empty((C, self.AQ.shape[0]))
        eta = buf[:, :N]
        # Stacked (C, 1, P) @ (P, N): numpy calls the same BLAS product row by row.
        np.matmul(Z[:, None, :], self.At, out=eta[:, None, :])
        eta += self.eta0
        return buf, eta

    def __call__(self, Z, out):
        """The forces at the rows of ``Z`` (C, P), written into ``out`` (C, P)."""
        buf, eta = self._linear_predictors(Z)
        # The SG samplers' full-data path: the logistic residual through scipy's expit, as the
        # family's gradient_terms computes it (their draws stay as they were).
        if self._logistic:
            expit(eta, out=eta)
            np.subtract(self.y, eta, out=eta)
        else:
            self._residuals(Z, eta)
        return self._products(Z, out, buf)

    def leapfrog_force(self, Z, out):
        """:meth:`__call__` for the exact sampler's trajectories: for the logistic family the
        residual is ``-tanh(eta / 2) / 2`` plus a constant that rides in the product, one
        elementwise pass where ``expit`` takes five (the elementwise work dominates at small
        ``N``), in single precision (:class:`_HalfLogistic`)."""
        if self._logistic:
            return self._half_logistic().force(Z, out)
        buf, eta = self._trajectory_predictors(Z)
        self._residuals(Z, eta)
        return self._trajectory_products(Z, out, buf)

    def _half_logistic(self):
        """The :class:`_HalfLogistic` products of the trajectories, formed on first use (only the
        exact sampler's trajectories read them)."""
        if self._half is None:
            self._half = _HalfLogistic(self)
        return self._half

    def _trajectory_predictors(self, Z):
        """:meth:`_linear_predictors` for the trajectories, ``eta0`` added in the product."""
        C, P = Z.shape
        buf, zbuf = self._hbuf, self._zbuf
        if buf is None or buf.shape[0] != C:
            buf = self._hbuf = np.empty((C, self._AQb.shape[0]))
            zbuf = self._zbuf = np.empty((C, P + 1))
            buf[:, -1] = zbuf[:, -1] = 1.0
        zbuf[:, :P] = Z
        eta = buf[:, : self.N]
        np.matmul(zbuf[:, None, :], self._At1, out=eta[:, None, :])
        return buf, eta

    def _trajectory_products(self, Z, out, buf):
        """:meth:`_products` for the trajectories, ``b`` added in the product."""
        N = self.N
        if self.w is not None:
            buf[:, :N] *= self.w
        if self.Q.ndim == 2:
            buf[:, N:-1] = Z
        np.matmul(buf[:, None, :], self._AQb, out=out[:, None, :])
        if self.Q.ndim == 1:
            out -= self.Q * Z
        return out

    def _residuals(self, Z, eta):
        """The family's residuals of the linear predictors ``eta``, in place."""
        eta[...] = self.family.gradient_terms(eta[..., None], self.y, Z[:, Z.shape[1] :])[0][..., 0]

    def _products(self, Z, out, buf):
        """The forces from the residuals in the first ``N`` columns of ``buf``."""
        N = self.N
        eta = buf[:, :N]
        if self.w is not None:
            eta *= self.w
        if self.Q.ndim == 2:
            buf[:, N:] = Z
        np.matmul(buf[:, None, :], self.AQ, out=out[:, None, :])
        if self.Q.ndim == 1:
            out -= self.Q * Z
        out += self.b
        return out

    def log_posterior_and_force(self, Z, out):
        """The forces at the rows of ``Z`` (C, P) into ``out``, and each row's log posterior, shape (C,).

        The log likelihood from the linear predictors (for the logistic family in double
        precision, beside the force's single-precision pass: :class:`_HalfLogistic`), the
        Gaussian prior's ``-z' Q z / 2 + b' z`` from ``Z`` alone (the log posterior is up to a
        constant: the prior's ``-m' Lambda m / 2`` is dropped); the force is
        :meth:`leapfrog_force`'s, bit for bit. For the exact samplers' accept test
        (:class:`~skbayes_sg.samplers.HMC`). Row by row, as the force, so that a chain's value
        does not depend on the stack's height.
        """
        if self._logistic:
            half = self._half_logistic()
            log_lik = half.log_likelihood(Z)
            half.force(Z, out)
        else:
            buf, eta = self._trajectory_predictors(Z)
            # No extra parameters (fused_force refuses them): one empty vector serves every row.
            terms = self.family.log_likelihood(eta[..., None], self.y, _NO_EXTRA)
            self._residuals(Z, eta)
            if self.w is not None:
                terms = terms * self.w
            log_lik = terms.sum(axis=1)
            self._trajectory_products(Z, out, buf)
        # Row by row (a reduction along each contiguous row, a stacked matmul, a per-row
        # einsum), so that a chain's value does not depend on the stack's height.
        Qz = np.matmul(self.Q, Z[:, :, None])[:, :, 0] if self.Q.ndim == 2 else self.Q * Z
        Qz *= -0.5
        Qz += self.b
        return log_lik + np.einsum("ij,ij->i", Z, Qz)


class _HalfLogistic:
    """The exact sampler's logistic force and log likelihood from half linear predictors.

    With ``u = eta / 2`` the logistic residual is ``y - expit(eta) = (y - 1/2) - tanh(u) / 2``,
    so the force ``A' (w r) - Q z + b`` is ``[tanh(u), z, 1] @ [-A w / 2; -Q; b + A' w (y - 1/2)]``:
    the constant part joins ``b`` and the halving joins ``A``, leaving one elementwise pass
    (``tanh``) between the two products.

    The force is computed in single precision (its ``-Q z`` of a diagonal ``Q`` in double).
    It only steers the trajectories: the integrator is volume-preserving and reversible for
    any force that is a fixed function of the point (each kick is a shear, the rotation is
    exact; Neal 2011, Sections 3.1.3 and 5.5.1), and the Metropolis test compares the
    double-precision log posterior, so the chains' stationary distribution is the posterior
    whatever the force's rounding, which moves the energy error by about ``1e-6``, far below
    the integrator's. Both :meth:`force` and :meth:`FusedForce.log_posterior_and_force` compute
    it by the one function, so a point's force does not depend on which computed it. In single
    precision the two products and the ``tanh`` take about 60% of their double-precision time
    at breast cancer's size.

    The log likelihood's terms are ``y eta - log(1 + e^eta) = (2 y - 1) u - |u| -
    log1p(e^(-2 |u|))``, in double precision and stable for every ``u``. The second product's
    matrix is held in Fortran order, whose BLAS kernel is the faster one for this shape. Row by
    row, as :class:`FusedForce`: a chain's values do not depend on the stack's height.
    """

    def __init__(self, fused):
        N = fused.N
        A = fused.AQ[:N]
        w = np.ones(N) if fused.w is None else fused.w
        self.N, self.Q, self.w = N, fused.Q, fused.w
        # [z, 1] @ [A' / 2; eta0' / 2]: the half predictors, eta0 in the product.
        self._At1 = 0.5 * fused._At1
        self._At1_32 = self._At1.astype(np.float32)
        rows = [-0.5 * w[:, None] * A]
        if fused.Q.ndim == 2:
            rows.append(-fused.Q)
        rows.append((fused.b + A.T @ (w * (fused.y - 0.5)))[None, :])
        self._Bt32 = np.asfortranarray(np.vstack(rows), dtype=np.float32)
        self._c = w * (2.0 * fused.y - 1.0)
        self._C = None

    def _buffers(self, C, P):
        """Work arrays for a stack of ``C`` rows: the double and single ``[z, 1]``, the double
        ``u`` and its scratch, the single ``[tanh(u), z, 1]`` and the single forces."""
        if self._C != C:
            self._C = C
            self._z64, self._z32 = np.empty((C, P + 1)), np.empty((C, P + 1), dtype=np.float32)
            self._z64[:, -1] = self._z32[:, -1] = 1.0
            self._u64, self._work = np.empty((C, self.N)), np.empty((C, self.N))
            self._buf32 = np.empty((C, self._Bt32.shape[0]), dtype=np.float32)
            self._buf32[:, -1] = 1.0
            self._out32 = np.empty((C, P), dtype=np.float32)

    def force(self, Z, out):
        """The forces at the rows of ``Z`` (C, P), in single precision, written into ``out``."""
        C, P = Z.shape
        self._buffers(C, P)
        z, buf, N = self._z32, self._buf32, self.N
        z[:, :P] = Z
        u = buf[:, :N]
        np.matmul(z[:, None, :], self._At1_32, out=u[:, None, :])
        np.tanh(u, out=u)
        if self.Q.ndim == 2:
            buf[:, N:-1] = Z
        np.matmul(buf[:, None, :], self._Bt32, out=self._out32[:, None, :])
        out[...] = self._out32
        if self.Q.ndim == 1:
            out -= self.Q * Z
        return out

    def log_likelihood(self, Z):
        """Each row's log likelihood at the rows of ``Z`` (C, P), in double precision."""
        C, P = Z.shape
        self._buffers(C, P)
        z, u, e = self._z64, self._u64, self._work
        z[:, :P] = Z
        np.matmul(z[:, None, :], self._At1, out=u[:, None, :])
        np.abs(u, out=e)
        dot = np.matmul(u[:, None, :], self._c[:, None])[:, 0, 0]
        abs_u = e.sum(axis=1) if self.w is None else np.matmul(e[:, None, :], self.w[:, None])[:, 0, 0]
        np.multiply(e, -2.0, out=e)
        np.exp(e, out=e)
        np.log1p(e, out=e)
        soft = e.sum(axis=1) if self.w is None else np.matmul(e[:, None, :], self.w[:, None])[:, 0, 0]
        return dot - abs_u - soft


def fused_force(model):
    """The :class:`FusedForce` of ``model`` (a GLM or a whitened GLM), or None where it does not
    apply: several outputs or extra parameters, rows not held as an array, or an ``A`` above
    :data:`MAX_BYTES`. Built once per model object."""
    try:
        hit = _CACHE.get(model)
    except TypeError:  # a model that cannot be weakly referenced or hashed: not cached
        return _build(model)
    if hit is None:
        hit = _CACHE[model] = (_build(model),)
    return hit[0]


def _build(model):
    base, m, L = model, None, None
    if hasattr(model, "to_theta") and hasattr(model, "model"):
        base, m, L = model.model, model.m, model.L
        if not isinstance(L, np.ndarray):
            return None  # a structured factor (CentredScaling): the chains' own O(P) products
    rows = getattr(base, "rows", None)
    family = getattr(base, "family", None)
    if family is None or not isinstance(rows, ArrayRows) or base.n_outputs != 1 or base._n_extra:
        return None
    N, P = base.n_samples, base.n_params
    if N * P * 8 > MAX_BYTES:
        return None
    X = rows.X
    X = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=float)
    Xt = np.hstack([X, np.ones((N, 1))]) if base.fit_intercept else X
    prec = np.broadcast_to(np.asarray(base.prior_precision, dtype=float), (P,))
    if L is None:
        A, eta0, Q, b = Xt, np.zeros(N), prec.copy(), np.zeros(P)
    elif L.ndim == 1:
        A, eta0, Q, b = Xt * L, Xt @ m, L * prec * L, -L * (prec * m)
    else:
        A, eta0, Q, b = Xt @ L, Xt @ m, L.T @ (prec[:, None] * L), -L.T @ (prec * m)
    if rows.offset is not None:
        eta0 = eta0 + rows.offset
    y = rows.y if rows.y_dtype is None else rows.y.astype(rows.y_dtype)
    w = None if rows.sample_weight is None else np.asarray(rows.sample_weight, dtype=float)
    return FusedForce(np.ascontiguousarray(A), eta0, y, w, family, Q, b)
