"""Discriminative restricted Boltzmann machine (Larochelle & Bengio 2008).

The non-linear classifier of the CCAdL paper (Shang et al. 2015, section 4.3) and the
mCCAdL paper (Wei & Shang 2026, section 3.3). With ``H`` hidden units, ``D`` features and
``C`` classes, the free energy of class ``y`` is

    F_y(x) = d_y + sum_j softplus(o_jy(x)),     o_jy(x) = c_j + U_jy + W_j . x,

and ``p(y | x) = exp(F_y) / sum_y* exp(F_y*)`` (the hidden units summed out exactly).

Parameter layout (flat ``theta``): ``W`` (H x D) row-major, ``U`` (H x C) row-major, then
``c`` (H) and ``d`` (C) when ``fit_intercept``; ``P = H D + H C + H + C`` (letter with
``H = 100``: 4,326, the papers' Table 2). Prior: isotropic Gaussian of precision ``alpha``
on every parameter.

Per-example gradient of ``log p(y_i | x_i)``: with ``r_iy = [y = y_i] - p(y | x_i)`` and
``A_ijy = r_iy sigmoid(o_jy(x_i))``, ``a_ij = sum_y A_ijy``,

    dW_j = a_ij x_i,   dU_jy = A_ijy,   dc_j = a_ij,   dd_y = r_iy,

so the ``n x P`` matrix of a minibatch is held as ``X`` (n, D), ``A`` (n, H, C), ``a`` (n, H)
and ``r`` (n, C): memory O(n H C + n D), and every operator product is a contraction of
these (:class:`DRBMPerExampleGradients`).

Sparse X (scipy.sparse, held as CSR): minibatches are sparse row gathers, and every
product with X is a sparse-dense product ``X @ M`` or ``X.T @ M`` with ``M`` of H columns,
O(nnz H); no dense copy of X, nor of a minibatch of it, is made. The ``(n, H, C)`` kernel
is dense whatever X is.

Numerics: the ``(n, H, C)`` pre-activations are processed in blocks of rows that fit in
cache (every elementwise pass then stays out of main memory, which halves the cost on
letter), laid out (rows, C, H) so that broadcasts and sums over hidden units run along
contiguous rows. One ``tanh`` of ``u = o / 2`` gives both
``softplus(o) = u + |u| + log 2 - log(1 + |tanh u|)`` and ``sigmoid(o) = (1 + tanh u) / 2``,
stable for any ``o`` (``1 + |tanh u|`` lies in [1, 2]), where the textbook forms need an
exponential and a logarithm each; ``sum_j u_jy`` is summed before broadcasting. Class
probabilities use a stable log-sum-exp. The elementwise passes run in the model's
``dtype`` (single precision halves their memory traffic and doubles their SIMD width),
with the sums within a block of rows; the input-layer product ``X W'``, the free energies'
log-sum-exp, the sums across blocks and the products with ``X`` stay double.
"""

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from ..rows import as_row_source
from ._base import Model, RowData, largest_abs
from ._gradients import PerExampleGradients, row_sq_norms
from .glm import class_codes

# Elements of one (rows, H, C) block of temporaries: ~0.5 MB, small enough for L2 cache.
_BLOCK_ELEMENTS = 2**16
# Rows per outer block of the full-data likelihood (bounds the (rows, H) arrays it keeps).
_OUTER_ROWS = 4096
_LOG2 = float(np.log(2.0))
# Largest |o / 2| the single-precision kernel takes (float32 overflows at 3.4e38); beyond
# it a call falls back to double.
_FLOAT32_LIMIT = 1e30


#: Largest ``D max|X|`` the float32 operators take: float32's range with a margin for sums.
_FLOAT32_SAFE = float(np.finfo(np.float32).max) / 1e3


def _max_abs(v):
    """``max |v|`` of a dense array without the temporary ``|v|`` (two reductions, no copy)."""
    return max(float(v.max()), -float(v.min())) if v.size else 0.0


def _op_scale(v, dtype):
    """Factor that brings ``v`` to max-abs 1 before a single-precision product (1 in double)."""
    if dtype == np.float64:
        return 1.0
    m = _max_abs(v)
    return m if 0.0 < m < np.inf else 1.0


def _as_csr(X):
    """``X`` unchanged if dense; sparse ``X`` as CSR (row gathers and ``X @ M`` are cheap)."""
    if sp.issparse(X) and X.format != "csr":
        return X.tocsr()
    return X


def _xt_dot(X, M):
    """``M.T @ X``, shape (k, D), for ``M`` (n, k): ``X.T @ M`` transposed when X is sparse
    (a sparse-dense product, O(nnz k)), a BLAS product when dense."""
    if sp.issparse(X):
        return np.asarray(X.T @ M).T
    return M.T @ X


class DRBMPerExampleGradients(PerExampleGradients):
    """Structured per-example gradients of the discriminative RBM (never the n x P matrix).

    Example ``i`` has gradient ``g_i = [vec(a_i x_i'), vec(A_i), a_i, r_i]`` (see
    :mod:`skbayes_sg.models.drbm`). Each product costs one pass over ``A`` (n, H, C) and
    an ``(n, D) x (D, H)`` matrix product: ``matvec`` is
    ``sum_j a_ij (W_j . x_i + c_j) + sum_jy A_ijy U_jy + r_i . d`` and ``rmatvec`` is
    ``[(a * u)' X, u' A, u' a, u' r]``, both O(n (H C + H D)).

    With sparse ``X`` the W-parts of the products are sparse-dense products, O(nnz H)
    instead of O(n D H): ``matvec`` contracts ``X W'`` (n, H) with ``a`` and ``rmatvec``
    forms ``X' (a * u)``, so neither makes a dense (n, D) array.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n, D)
        Minibatch features (sparse: CSR).
    A : ndarray of shape (n, H, C), float64 or float32
        ``A_ijy = r_iy sigmoid(o_jy(x_i))``, the gradients of ``U``. In float32 the
        products (``matvec``, ``rmatvec``) run in single precision, two to three times
        as fast (they are bound by memory bandwidth), with relative error ~1e-6;
        ``mean`` (from ``A_sum``) and the row sums of ``sum_of_squares`` stay double.
    a : ndarray of shape (n, H)
        ``a_ij = sum_y A_ijy``, the gradients of ``c`` (and of ``W`` through ``x_i``).
    r : ndarray of shape (n, C)
        Residuals ``[y = y_i] - p(y | x_i)``, the gradients of ``d``.
    fit_intercept : bool
        Whether the parameter vector holds the biases ``c`` and ``d``.
    A_sum : ndarray of shape (H, C), optional
        ``sum_i A_i``, when the caller already has it (saves a pass over ``A``).
    A_kernel : ndarray of shape (n, C, H), optional
        With ``A=None``: the same values in the kernel's layout, copied into ``A`` (in
        ``dtype``) only when a product first needs it. An operator used for its
        :meth:`mean` alone (the force of a sampler whose noise estimate comes from another
        minibatch) then never pays for the transposed copy.
    dtype : numpy dtype, optional
        ``A``'s dtype when it is built from ``A_kernel``.
    """

    def __init__(self, X, A, a, r, fit_intercept=True, A_sum=None, A_kernel=None, dtype=None):
        self.X = X
        self._A, self._A_kernel = A, A_kernel
        self.a = a
        self.r = r
        self.fit_intercept = bool(fit_intercept)
        if A is not None:
            n, H, C = A.shape
            dtype = A.dtype
        else:
            n, C, H = A_kernel.shape
        # Not kept as an attribute: a numpy dtype object is not among the types skops.io loads
        # without being told to trust them (a fitted estimator's chain states hold operators);
        # the stored arrays carry it (``_a_op.dtype``).
        dtype = np.dtype(dtype)
        D = X.shape[1]
        self._dims = (H, D, C)
        self.n_batch = n
        self.n_params = H * D + H * C + ((H + C) if fit_intercept else 0)
        # Copies of a and X in the stored precision for the W-parts of the products.
        self._a_op = a.astype(dtype, copy=False)
        self._sparse = sp.issparse(X)
        if self._sparse:
            # Stays sparse: a single-precision copy of the minibatch's non-zeros only.
            self._X_op = _as_csr(X).astype(dtype, copy=False)
        else:
            self._X_op = np.asarray(X, dtype=dtype)
        self._A_sum = A_sum
        self._mean = None

    @property
    def A(self):
        """``A`` (n, H, C), copied from the kernel's (n, C, H) layout on first use."""
        if self._A is None:
            n, C, H = self._A_kernel.shape
            A = np.empty((n, H, C), dtype=self._a_op.dtype)
            A[...] = self._A_kernel.transpose(0, 2, 1)
            self._A, self._A_kernel = A, None
        return self._A

    @A.setter
    def A(self, value):
        self._A, self._A_kernel = value, None

    @property
    def _A2(self):
        """(n, H C) view of ``A``: the U-contractions become matrix-vector products (BLAS)."""
        return self.A.reshape(self.n_batch, -1)

    def _parts(self, v):
        H, D, C = self._dims
        W = v[: H * D].reshape(H, D)
        pos = H * D
        U = v[pos : pos + H * C]
        pos += H * C
        if self.fit_intercept:
            return W, U, v[pos : pos + H], v[pos + H :]
        return W, U, None, None

    def _join(self, w, u, c, d):
        out = np.empty(self.n_params)
        H, D, C = self._dims
        out[: H * D] = w.ravel()
        out[H * D : H * D + H * C] = u.ravel()
        if self.fit_intercept:
            out[H * D + H * C : H * D + H * C + H] = c
            out[H * D + H * C + H :] = d
        return out

    def mean(self):
        """Mean gradient ``(1/n) sum_i g_i``, shape (P,); cached (samplers ask more than once)."""
        if self._mean is None:
            n = self.n_batch
            A_sum = self._A_sum if self._A_sum is not None else self._A2.sum(axis=0, dtype=np.float64)
            self._mean = self._join(_xt_dot(self.X, self.a), A_sum, self.a.sum(axis=0), self.r.sum(axis=0))
            self._mean /= n
        return self._mean.copy()

    def matvec(self, v):
        """``G @ v``, shape (n,), in O(n (H C + H D))."""
        W, U, c, d = self._parts(np.asarray(v, dtype=float))
        dt = self._a_op.dtype
        # Both products in the stored precision (float64 operands against float32 arrays
        # would copy the arrays to float64), on v scaled to max |v| = 1 so that float32
        # cannot overflow where float64 would not (|A| <= 1, |a| <= H).
        scale = _op_scale(v, dt)
        if self._sparse:
            # sum_j a_ij (W_j . x_i): the sparse product X W' (n, H) costs O(nnz H) and
            # no dense (n, D) array is formed.
            XW = self._X_op @ np.ascontiguousarray((W / scale).T, dtype=dt)
            out = np.einsum("nh,nh->n", self._a_op, XW).astype(float)
        else:
            # sum_j a_ij W_j . x_i = x_i . (a_i W): contracts over D (small) instead of H.
            out = np.einsum("nd,nd->n", self._a_op @ (W / scale).astype(dt), self._X_op).astype(float)
        out += self._A2 @ (U / scale).astype(dt)
        out *= scale
        if c is not None:
            out += self.a @ c
            out += self.r @ d
        return out

    def rmatvec(self, u):
        """``G.T @ u``, shape (P,), in O(n (H C + H D))."""
        u = np.asarray(u, dtype=float)
        dt = self._a_op.dtype
        scale = _op_scale(u, dt)
        u_op = (u / scale).astype(dt)
        if self._sparse:
            # sum_i u_i a_ij x_i = (X' (a * u))': O(nnz H), X stays sparse.
            w = np.asarray(self._X_op.T @ (self._a_op * u_op[:, None])).T
        else:
            w = self._a_op.T @ (self._X_op * u_op[:, None])
        c = u @ self.a if self.fit_intercept else None
        d = u @ self.r if self.fit_intercept else None
        out = self._join(w, u_op @ self._A2, c, d)
        out[: out.size - (self._dims[0] + self._dims[2] if self.fit_intercept else 0)] *= scale
        return out

    def scale_rows(self, c):
        """The operator of the rows ``c_i g_i`` (importance-sampled minibatches), in place:
        every factor of ``g_i`` (``A_i``, ``a_i``, ``r_i``) is linear in ``r_i``. The U-part
        of :meth:`mean` is then summed (in double) from the stored, scaled ``A``."""
        c = np.asarray(c, dtype=float)
        self.A *= c.astype(self.A.dtype)[:, None, None]
        self.a *= c[:, None]
        self.r *= c[:, None]
        self._a_op = self.a.astype(self.A.dtype, copy=False)
        self._A_sum = None
        self._mean = None
        return self

    def gram(self):
        """``G G'``, shape (n, n): the per-example gradients' inner products, never ``G`` itself.

        ``g_i . g_k = (a_i . a_k)(x_i . x_k (+ 1)) + A_i : A_k (+ r_i . r_k)``, O(n^2 (H C + D)),
        with ``A`` in whichever layout it is held (the Frobenius products do not depend on
        it) in the stored precision. mCCAdL's C step works in these ``n`` dimensions when
        ``n`` is below ``P`` (:mod:`skbayes_sg.samplers._row_space`).
        """
        A = self._A if self._A is not None else self._A_kernel
        A2 = A.reshape(self.n_batch, -1)
        out = np.asarray(A2 @ A2.T, dtype=np.float64)
        # The W-part from the stored-precision copies of X and a, as the products use them.
        X, a = self._X_op, self._a_op
        XX = X @ X.T
        XX = XX.toarray() if sp.issparse(XX) else XX
        aa = a @ a.T
        if self.fit_intercept:
            out += aa
            out += self.r @ self.r.T
        aa *= XX
        out += aa
        return out

    def total_sum_of_squares(self):
        """``sum_i ||g_i||^2`` (a scalar), the trace of ``G'G`` that mCCAdL's C step needs.

        ``||g_i||^2 = ||a_i||^2 ||x_i||^2 + ||A_i||^2 (+ ||a_i||^2 + ||r_i||^2)``: O(n (H C + D)),
        without the per-coordinate vector of :meth:`sum_of_squares` (whose W-part is an
        (H, n) x (n, D) product). ``A`` is read in whichever layout it is held (the kernel's
        is not transposed for this), its squares in the stored precision, summed in double.
        """
        a2 = np.einsum("nh,nh->n", self.a, self.a)
        A = self._A if self._A is not None else self._A_kernel
        total = float(a2 @ row_sq_norms(self.X)) + float(np.square(A).sum(dtype=np.float64))
        if self.fit_intercept:
            total += float(a2.sum()) + float(np.einsum("ny,ny->", self.r, self.r))
        return total

    def sum_of_squares(self):
        """Per-coordinate ``sum_i g_i**2``, shape (P,): ``(a^2)' (X^2)``, ``sum_i A_i^2``, ..."""
        a2 = self.a * self.a
        if self._A2.dtype == np.float64:
            u = np.einsum("nk,nk->k", self._A2, self._A2)
        else:
            # Squares in the stored precision, their sum over rows in double.
            u = np.square(self._A2).sum(axis=0, dtype=np.float64)
        c = a2.sum(axis=0) if self.fit_intercept else None
        d = np.einsum("ny,ny->y", self.r, self.r) if self.fit_intercept else None
        X2 = self.X.multiply(self.X) if self._sparse else self.X * self.X
        return self._join(_xt_dot(X2, a2), u, c, d)


class DRBMModel(RowData, Model):
    """Bayesian discriminative restricted Boltzmann machine.

    ``p(y | x) = exp(F_y(x)) / sum_y* exp(F_y*(x))`` with the free energy
    ``F_y(x) = d_y + sum_j softplus(c_j + U_jy + W_j . x)`` (Larochelle & Bengio 2008; CCAdL
    paper section 4.3, mCCAdL paper section 3.3) and an isotropic Gaussian prior
    ``N(0, alpha^-1 I)`` on every parameter.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (N, D)
        Training features (``None`` for a prediction-only copy). Sparse X is held as
        CSR (other formats are converted once) and never densified.
    y : ndarray of shape (N,)
        Integer class codes ``0..C-1``, kept in their integer dtype.
    n_classes : int
        ``C``.
    n_hidden : int, default=100
        ``H``, the number of hidden units.
    alpha : float, default=1.0
        Prior precision of every parameter.
    fit_intercept : bool, default=True
        Whether the model has the hidden biases ``c`` and class biases ``d``.
    init_scale : float, default=0.1
        Standard deviation of the random starting weights: ``W`` and ``U`` are drawn
        i.i.d. ``N(0, init_scale^2)``, ``c`` and ``d`` start at zero. Random weights break
        the symmetry between hidden units: at ``W = U = 0`` every hidden unit has the same
        gradient, and the gradients of ``W`` and ``c`` vanish (``sum_y r_iy = 0``), so a
        zero start is a saddle that only injected noise can leave.
    operator_dtype : {"float32", "float64"}, default="float32"
        Precision in which the per-example gradients of ``U``, the ``(n, H, C)`` array,
        are stored for the operator products of :meth:`per_example_gradients`
        (covariance products of CCAdL / mCCAdL). The mean gradient (the force) is always
        double precision. ``"float32"`` halves the memory and roughly halves the cost of
        each covariance product, at a relative error ~1e-6 in the products, far below the
        Monte Carlo error of the covariance estimate itself.
    dtype : {"float64", "float32"}, default="float64"
        Precision of the ``(n, H, C)`` kernel (free energies, sigmoids, ``A``); the
        input-layer product ``X W'``, the class log-sum-exp, the force and everything
        the sampler keeps stay double. ``"float32"`` runs the elementwise passes about
        twice as fast (half the memory traffic, twice the SIMD width), at a relative
        error ~1e-6 in the log likelihood and its gradient, far below the minibatch
        noise; ``"float32"`` also stores the operator in single precision whatever
        ``operator_dtype`` says. Parameters whose pre-activations exceed ``1e30`` fall
        back to double for that call.
    random_state : int, numpy Generator, SeedSequence or None, default=None
        Seed of the random starting point returned by :meth:`initial_point` (drawn once,
        so repeated calls agree).

    Attributes
    ----------
    n_samples : int
        ``N``.
    n_params : int
        ``P = H D + H C (+ H + C)``.
    n_features, n_hidden, n_classes : int
        ``D``, ``H``, ``C``.
    """

    _supports_sample_weight = True

    def __init__(
        self,
        X,
        y,
        *,
        n_classes,
        n_hidden=100,
        alpha=1.0,
        fit_intercept=True,
        init_scale=0.1,
        operator_dtype="float32",
        dtype="float64",
        random_state=None,
    ):
        # Class codes are used only as indices: uint8 codes serve as they are. Gathers read X
        # itself (no one-byte copy: the input-layer products dominate a step, not the gather).
        self.rows = as_row_source(_as_csr(X), class_codes(y), compact=False)
        self.n_classes = int(n_classes)
        self.n_hidden = int(n_hidden)
        self.n_features = int(X.shape[1])
        self.n_samples = int(X.shape[0])
        self.alpha = float(alpha)
        self.fit_intercept = bool(fit_intercept)
        self.init_scale = float(init_scale)
        self.operator_dtype = np.dtype(operator_dtype)
        if self.operator_dtype not in (np.float64, np.float32):
            raise ValueError(f"operator_dtype must be 'float64' or 'float32'; got {operator_dtype!r}.")
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float64, np.float32):
            raise ValueError(f"dtype must be 'float64' or 'float32'; got {dtype!r}.")
        if self.dtype == np.float32:
            self.operator_dtype = self.dtype
        if self.operator_dtype == np.float32 and largest_abs(self.X) * max(1, X.shape[1]) > _FLOAT32_SAFE:
            # Features this large overflow single precision in the per-example products
            # (|X W| <= D max|X| with W scaled to max |W| = 1); double precision keeps them.
            self.operator_dtype = np.dtype(np.float64)
        H, D, C = self.n_hidden, self.n_features, self.n_classes
        self.n_params = H * D + H * C + ((H + C) if self.fit_intercept else 0)
        self._theta0 = self.random_point(np.random.default_rng(random_state))

    # -- parameter layout ----------------------------------------------------------
    @property
    def operator_dtype(self):
        """The per-example operator's ``numpy.dtype`` (float32 or float64)."""
        return np.dtype(self._operator_dtype)

    @operator_dtype.setter
    def operator_dtype(self, value):
        # Kept by name: a fitted estimator holds this model, and a numpy dtype object is
        # not among the types skops.io loads without being told to trust them.
        self._operator_dtype = np.dtype(value).name

    @property
    def dtype(self):
        """The ``numpy.dtype`` of the likelihood's (n, H, C) kernel (float32 or float64)."""
        return np.dtype(self._dtype)

    @dtype.setter
    def dtype(self, value):
        self._dtype = np.dtype(value).name  # by name, as operator_dtype

    def unpack(self, theta):
        """Split ``theta`` (P,) or a stack (S, P) into views ``(W, U, c, d)``.

        Shapes (..., H, D), (..., H, C), (..., H) and (..., C); ``c`` and ``d`` are zeros
        without ``fit_intercept``.
        """
        theta = np.asarray(theta)
        H, D, C = self.n_hidden, self.n_features, self.n_classes
        lead = theta.shape[:-1]
        W = theta[..., : H * D].reshape(*lead, H, D)
        pos = H * D
        U = theta[..., pos : pos + H * C].reshape(*lead, H, C)
        pos += H * C
        if self.fit_intercept:
            c = theta[..., pos : pos + H]
            d = theta[..., pos + H : pos + H + C]
        else:
            c, d = np.zeros((*lead, H)), np.zeros((*lead, C))
        return W, U, c, d

    def param_names(self, feature_names=None, class_names=None):
        """Names in ``theta``'s order: ``W[h, feature]``, ``U[h, class]``, ``c[h]``, ``d[class]``."""
        H = self.n_hidden
        feats = [f"x{j}" for j in range(self.n_features)] if feature_names is None else [str(f) for f in feature_names]
        classes = [str(k) for k in (range(self.n_classes) if class_names is None else class_names)]
        names = [f"W[{j}, {f}]" for j in range(H) for f in feats] + [f"U[{j}, {k}]" for j in range(H) for k in classes]
        if self.fit_intercept:
            names += [f"c[{j}]" for j in range(H)] + [f"d[{k}]" for k in classes]
        return names

    def random_point(self, rng, scale=None):
        """A random starting point: ``W``, ``U`` i.i.d. ``N(0, scale^2)``, biases zero.

        Parameters
        ----------
        rng : numpy.random.Generator
        scale : float, optional
            Standard deviation of the weights; default ``init_scale``.

        Returns
        -------
        theta : ndarray of shape (P,)
        """
        theta = np.zeros(self.n_params)
        n_w = self.n_hidden * (self.n_features + self.n_classes)
        theta[:n_w] = (self.init_scale if scale is None else scale) * rng.standard_normal(n_w)
        return theta

    def initial_point(self):
        """The model's seeded random start (see ``init_scale``), shape (P,)."""
        return self._theta0.copy()

    # -- the shared kernel ---------------------------------------------------------
    def _block_rows(self):
        return max(1, _BLOCK_ELEMENTS // (self.n_hidden * self.n_classes))

    def _halves(self, W, U, c, X):
        """Half pre-activations ``B / 2`` (n, H) and ``U' / 2`` (C, H) in the kernel's dtype.

        Single precision falls back to double for parameters whose pre-activations would
        overflow it (``|o| > 1e30``; ``1e3 x`` a typical scale still passes in single).
        """
        B = np.asarray(X @ W.T)  # sparse X: a sparse-dense product, O(nnz H)
        B += c
        B *= 0.5
        Uh = 0.5 * U.T
        dt = self.dtype
        if dt != np.float64 and _max_abs(B) + _max_abs(Uh) > _FLOAT32_LIMIT:
            dt = np.dtype(np.float64)
        return B.astype(dt, copy=False), np.ascontiguousarray(Uh, dtype=dt)

    def _free_energy_block(self, Bh, Uh, d, t1, t2, t3):
        """Free energies ``F`` (k, C), in double, of a block of rows with half inputs ``Bh`` (k, H).

        With ``u = o / 2`` and ``t = tanh(u)``, one transcendental pass gives both
        ``softplus(o) = u + |u| + log 2 - log(1 + |t|)`` and ``sigmoid(o) = (1 + t) / 2``,
        stable for any ``o`` (``1 + |t|`` lies in [1, 2]); ``sum_j u_jy`` is summed from
        ``Bh`` and ``Uh`` before broadcasting. The temporaries ``t1, t2, t3`` are (k, C, H):
        with the hidden units innermost every broadcast and every sum over them runs along
        contiguous rows of H elements (in (k, H, C) the inner loops have C elements and
        cost about twice as much). Leaves ``t`` in ``t2`` for the sigmoid.
        """
        np.add(Bh[:, None, :], Uh, out=t1)  # u_yj = o_jy / 2
        np.tanh(t1, out=t2)
        np.abs(t1, out=t1)
        np.abs(t2, out=t3)
        np.log1p(t3, out=t3)
        t1 -= t3
        F = np.einsum("kch->kc", t1).astype(np.float64)
        F += Bh.sum(axis=1, dtype=np.float64)[:, None]
        F += Uh.sum(axis=1, dtype=np.float64) + d + Bh.shape[1] * _LOG2
        return F

    def _batch(self, theta, X, y, A_out=None, w=None, u_shift=0.0):
        """Log likelihood terms and gradient factors of rows ``X``, ``y`` (each row's scaled by
        its likelihood weight ``w`` when given).

        Returns ``ll`` (n,), ``a`` (n, H), ``r`` (n, C) and ``A_sum`` (H, C); writes ``A``
        into ``A_out`` (n, H, C) when given. ``A_out="kernel"`` (rows in one block only):
        returns ``A`` as a fifth value, in the kernel's (n, C, H) layout, without the copy.
        ``u_shift`` ``s`` returns the gradients of ``U`` in the sheared coordinates of
        :class:`~skbayes_sg.models.ShearedDRBM` (``d~ = d + s sum_j U_j``): ``A - s r``
        (``a`` stays ``sum_y A``, the gradient of ``c``).
        """
        W, U, c, d = self.unpack(theta)
        n = X.shape[0]
        H, C = self.n_hidden, self.n_classes
        Bh, Uh = self._halves(W, U, c, X)
        m = max(1, min(n, self._block_rows()))
        keep = isinstance(A_out, str)
        if keep and m < n:
            raise ValueError("A_out='kernel' takes rows that fit in one block.")
        # The second temporary ends as A: with keep, an array of its own that the operator keeps.
        T = np.empty((2 if keep else 3, m, C, H), dtype=Bh.dtype)
        T2 = np.empty((m, C, H), dtype=Bh.dtype) if keep else T[2]
        ll = np.empty(n)
        a = np.empty((n, H))
        r = np.empty((n, C))
        A_sum = np.zeros((C, H))
        for s in range(0, n, m):
            e = min(s + m, n)
            k = e - s
            t1, t2 = T[0, :k], T2[:k]
            F = self._free_energy_block(Bh[s:e], Uh, d, t1, t2, T[1, :k])
            rows = np.arange(k)
            F -= F.max(axis=1, keepdims=True)
            prob = np.exp(F)
            Z = prob.sum(axis=1)
            ll[s:e] = F[rows, y[s:e]] - np.log(Z)
            rb = r[s:e]
            np.divide(prob, -Z[:, None], out=rb)
            rb[rows, y[s:e]] += 1.0
            if w is not None:
                # A row's weight scales its log likelihood and so r, A = r sigmoid(o) and a.
                ll[s:e] *= w[s:e]
                rb *= w[s:e, None]
            # A = r sigmoid(o) = (r / 2)(1 + t), built while the block is in cache.
            Ak = t2  # (k, C, H)
            Ak += 1.0
            Ak *= (0.5 * rb)[:, :, None].astype(Ak.dtype, copy=False)
            a[s:e] = np.einsum("kch->kh", Ak)
            if u_shift:
                Ak -= (u_shift * rb)[:, :, None].astype(Ak.dtype, copy=False)
            A_sum += Ak.sum(axis=0)
            if A_out is not None and not keep:
                A_out[s:e] = Ak.transpose(0, 2, 1)
        if keep:
            return ll, a, r, np.ascontiguousarray(A_sum.T), T2[:n]
        return ll, a, r, np.ascontiguousarray(A_sum.T)

    # -- likelihood and prior ------------------------------------------------------
    def per_example_gradients(self, theta, idx):
        """Structured per-example gradients of the rows ``idx`` (see :class:`DRBMPerExampleGradients`)."""
        return self._operator(theta, self.rows.gather(idx))

    def _operator(self, theta, block, u_shift=0.0):
        """The per-example gradients of a gathered ``block`` of rows (see :meth:`_batch`)."""
        X, y, w, _ = block
        if X.shape[0] <= self._block_rows():
            # One block (a minibatch): the operator transposes the kernel's A when a product
            # first needs it, and an operator used for its mean alone never does.
            _, a, r, A_sum, A_kernel = self._batch(theta, X, y, A_out="kernel", w=w, u_shift=u_shift)
            return DRBMPerExampleGradients(
                X, None, a, r, self.fit_intercept, A_sum=A_sum, A_kernel=A_kernel, dtype=self.operator_dtype
            )
        A = np.empty((X.shape[0], self.n_hidden, self.n_classes), dtype=self.operator_dtype)
        _, a, r, A_sum = self._batch(theta, X, y, A_out=A, w=w, u_shift=u_shift)
        return DRBMPerExampleGradients(X, A, a, r, self.fit_intercept, A_sum=A_sum)

    def log_likelihood_and_grad(self, theta, idx=None):
        """Summed log likelihood of rows ``idx`` (all if None) and its gradient, in O(rows H C) time.

        Rows are processed in blocks (the row source's for all rows), so memory stays bounded
        on any ``N``.
        """
        return self._log_likelihood_and_grad(theta, idx)

    def _log_likelihood_and_grad(self, theta, idx, rows=None, u_shift=0.0):
        """:meth:`log_likelihood_and_grad` of the rows as ``rows(block)`` returns each gathered
        block (as gathered if None), with :meth:`_batch`'s ``u_shift``."""

        def sums(block):
            return self._sums(theta, block if rows is None else rows(block), u_shift)

        if idx is None:
            ll, gW, gU, gc, gd = self.rows.reduce_blocks(sums, _OUTER_ROWS)
        else:
            ll, gW, gU, gc, gd = sums(self.rows.gather(idx))
        grad = np.concatenate([gW.ravel(), gU.ravel()] + ([gc, gd] if self.fit_intercept else []))
        return ll, grad

    def _sums(self, theta, block, u_shift=0.0):
        """The log likelihood and the gradient's parts ``(gW, gU, gc, gd)`` summed over a block."""
        X, y, w, _ = block
        H, D, C = self.n_hidden, self.n_features, self.n_classes
        gW, gU, gc, gd = np.zeros((H, D)), np.zeros((H, C)), np.zeros(H), np.zeros(C)
        total = 0.0
        for s in range(0, X.shape[0], _OUTER_ROWS):
            Xb = X[s : s + _OUTER_ROWS]
            ll, a, r, A_sum = self._batch(
                theta, Xb, y[s : s + _OUTER_ROWS], w=None if w is None else w[s : s + _OUTER_ROWS], u_shift=u_shift
            )
            total += float(ll.sum())
            gW += _xt_dot(Xb, a)
            gU += A_sum
            gc += a.sum(axis=0)
            gd += r.sum(axis=0)
        return total, gW, gU, gc, gd

    def log_prior_and_grad(self, theta):
        """Log density of ``N(0, alpha^-1 I)`` (up to a constant) and its gradient."""
        return -0.5 * self.alpha * float(theta @ theta), -self.alpha * theta

    # -- predictive ---------------------------------------------------------------------
    def log_proba_draws(self, thetas, X):
        """Log class probabilities ``log p(y | x, theta_s)``, shape (S, n, C).

        Computed in blocks of rows, so the memory beyond the output is O(block H C).
        ``X`` may be sparse; it is then never densified. The per-draw products ``X W'``
        use one BLAS thread, as the fit does: they are small, and on a busy machine
        threaded BLAS made prediction four times slower (digits, 540 rows, two cores
        under load); one thread also makes predictions bit-identical on every machine.
        """
        with threadpool_limits(limits=1, user_api="blas"):
            return self._log_proba_draws(thetas, X)

    def _log_proba_draws(self, thetas, X):
        thetas = np.atleast_2d(np.asarray(thetas, dtype=float))
        X = _as_csr(X).astype(float, copy=False) if sp.issparse(X) else np.asarray(X, dtype=float)
        n = X.shape[0]
        H, C = self.n_hidden, self.n_classes
        out = np.empty((thetas.shape[0], n, C))
        m = max(1, min(n, self._block_rows()))
        T = np.empty((3, m, C, H), dtype=self.dtype)
        for s_idx, theta in enumerate(thetas):
            W, U, c, d = self.unpack(theta)
            Bh, Uh = self._halves(W, U, c, X)
            Ts = T if Bh.dtype == T.dtype else np.empty((3, m, C, H))
            for s in range(0, n, m):
                e = min(s + m, n)
                k = e - s
                F = self._free_energy_block(Bh[s:e], Uh, d, Ts[0, :k], Ts[1, :k], Ts[2, :k])
                F -= F.max(axis=1, keepdims=True)
                F -= np.log(np.exp(F).sum(axis=1, keepdims=True))
                out[s_idx, s:e] = F
        return out

    def predict_draws(self, thetas, X):
        """Class probabilities under each draw, shape (S, n, C) (computed in row blocks)."""
        out = self.log_proba_draws(thetas, X)
        return np.exp(out, out=out)

    def log_likelihood_draws(self, thetas, X, y):
        """``log p(y_i | x_i, theta_s)``, shape (S, n), for class codes ``y``."""
        out = self.log_proba_draws(thetas, X)
        return out[:, np.arange(out.shape[1]), np.asarray(y, dtype=np.intp)]
