"""Generalised linear models: binary logistic, multinomial softmax, Gaussian linear regression.

Parameter layout (flat ``theta``): the ``D x K`` weight matrix ``W`` row-major, then ``K``
intercepts when ``fit_intercept``, then any extra coordinates (the log noise precision
of linear regression). ``K = 1`` for binary logistic and linear regression.

Prior: independent Gaussians ``N(0, 1 / alpha_j)`` on the weights and ``N(0, 1 /
alpha_intercept)`` on the intercepts. ``alpha`` is a float (isotropic, as in the papers) or
one precision per feature (per class and feature for several outputs); ``alpha_intercept``
defaults to ``alpha``, the papers' prior on *all* weights. The intercept is never left flat:
with separable data a flat intercept gives an improper posterior.
"""

import mmap

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_expit, logsumexp, softmax

from . import _gradients
from ._base import Model, as_paths
from ._gradients import EllRows, LinearPerExampleGradients, row_sq_norms

# Elements of the (rows, K) arrays of one block of a full-data pass (log likelihood,
# gradient, Hessian-vector products): the predictor, residuals and curvature weights of a
# block of 2**16 rows (K = 1) take a few MiB whatever N, where those of a whole memmapped X
# took tens of bytes a row. The block's features are a view, never a copy. Blocks stay
# large (a9a is one block) because each block makes a few BLAS calls, and a threaded BLAS
# call costs milliseconds of synchronisation on a machine whose cores are busy.
_BLOCK_ELEMENTS = 2**16


def _memory_mapped(X):
    """Whether dense ``X`` lives in a memory map (a ``numpy.memmap`` or a view of one, as
    ``validate_data`` returns for a memmap)."""
    while isinstance(X, np.ndarray):
        if isinstance(X, np.memmap):
            return True
        X = X.base
    return isinstance(X, mmap.mmap)


def _row_block(X, rows):
    """Rows ``rows`` (a slice with step 1) of dense or CSR ``X`` as a view, not a copy.

    Slicing a CSR matrix copies the block's entries, and so does its constructor given
    views that are small parts of their arrays (scipy prunes them); a matrix whose arrays
    are set to slices of X's shares them (only the block's row pointers are new).
    """
    if not sp.issparse(X):
        return X[rows]
    start, stop = rows.start, min(rows.stop, X.shape[0])
    a, b = X.indptr[start], X.indptr[stop]
    block = type(X)((stop - start, X.shape[1]), dtype=X.dtype)
    block.data, block.indices, block.indptr = X.data[a:b], X.indices[a:b], X.indptr[start : stop + 1] - a
    return block


def _transpose(X):
    """``X.T``; for CSR ``X``, a CSC matrix over the same arrays.

    scipy's transpose goes through the constructor, which copies the arrays of a row
    block from :func:`_row_block` (views of a small part of X's): every ``X.T @ r`` of a
    full-data pass would copy the block's entries, a quarter of its time.
    """
    if not (sp.issparse(X) and X.format == "csr"):
        return X.T
    csc = sp.csc_matrix if isinstance(X, sp.spmatrix) else sp.csc_array
    T = csc((X.shape[1], X.shape[0]), dtype=X.dtype)
    T.data, T.indices, T.indptr = X.data, X.indices, X.indptr
    return T


def class_codes(y):
    """Integer class codes kept in their own dtype; other dtypes converted to ``intp``.

    The classifiers pass codes in the smallest unsigned dtype that holds them (one byte a
    row below 256 classes); widening them to int64 or float64 for the whole data would be
    8 bytes a row, the largest allocation of a fit on memmapped X. Models whose kernels
    compute with another dtype convert each minibatch's codes in ``_rows``.
    """
    if y is None:
        return None
    y = np.asarray(y)
    return y if y.dtype.kind in "iu" else y.astype(np.intp)


#: Rows per block of the scan that decides whether X has a one-byte copy (float
#: temporaries of a few MiB whatever D).
_SCAN_ELEMENTS = 2**19


def prior_precisions(alpha, alpha_intercept, n_features, n_outputs, fit_intercept):
    """Validate a GLM's prior precisions and lay them out like ``theta``'s weights.

    Returns ``(alpha, alpha_intercept, prior_precision)``: ``alpha`` a float or an array of
    shape (D,) or (K, D) (the shape of ``coef_``), ``alpha_intercept`` a float (``alpha`` when None),
    and ``prior_precision`` the precision of each of the first ``D K (+ K)`` coordinates of
    ``theta``: a float when they all share one (the papers' isotropic prior, whose
    arithmetic then stays that of a scalar, draw for draw) and an array of that length
    otherwise.

    Raises
    ------
    ValueError
        If ``alpha`` has another shape, or a precision is not positive and finite.
    """
    D, K = n_features, n_outputs
    a = np.array(alpha, dtype=float)  # a copy: the model's prior must not follow later edits of the caller's
    if a.ndim == 0:
        a = float(a)
    elif a.shape not in ((D,), (K, D)):
        shapes = f"(n_features,) = ({D},)" + (f" or (n_classes, n_features) = ({K}, {D})" if K > 1 else "")
        raise ValueError(
            f"alpha has shape {a.shape}; expected a float (one prior precision for every weight) or an array "
            f"of shape {shapes}: one precision per feature{' (and class)' if K > 1 else ''}, 1 / s_j^2 for a "
            "prior sd s_j."
        )
    if not (np.all(np.isfinite(a)) and np.all(a > 0)):
        raise ValueError(f"alpha must hold positive, finite prior precisions; got {alpha!r}.")
    b = a if alpha_intercept is None else alpha_intercept
    if np.ndim(b) != 0:
        raise ValueError(f"alpha_intercept must be a float when alpha is an array; got {alpha_intercept!r}.")
    b = float(b)
    if not (np.isfinite(b) and b > 0):
        raise ValueError(f"alpha_intercept must be a positive, finite precision; got {alpha_intercept!r}.")
    if np.ndim(a) == 0 and (b == a or not fit_intercept):
        return a, b, a
    # theta's weights are W (D, K) row-major: coordinate j K + k is feature j of output k.
    weights = np.broadcast_to(a.T if np.ndim(a) == 2 else np.reshape(a, (-1, 1)), (D, K)).ravel()
    if fit_intercept:
        weights = np.concatenate([weights, np.full(K, b)])
    weights.flags.writeable = False
    return a, b, weights


def _weigh(w, R, extra=None):
    """``(R, extra)`` with each row scaled by its likelihood weight ``w`` (n,) (or (M, n) for
    a stack of paths), in place; as given when ``w`` is None."""
    if w is not None:
        R *= w[..., None]
        if extra is not None:
            extra *= w[..., None]
    return R, extra


class _GLM(Model):
    _data_attributes = (
        "X",
        "y",
        "_row_sq_cache",
        "_row_weight_cache",
        "_centre_cache",
        "_narrow_X",
        "_ell_X",
        "sample_weight",
    )
    _supports_sample_weight = True
    _row_sq_cache = None
    _row_weight_cache = None
    #: One-byte copy of X that minibatches gather from (see :meth:`_gather_source`); False
    #: once X is known to have none.
    _narrow_X = None
    #: ``(cols, vals or None)``: X's nonzeros in padded form for sparse minibatches (see
    #: :meth:`_minibatch_rows`); False once X is known not to suit them.
    _ell_X = None
    #: ``(theta_hat bytes, R_hat (N, K), extra_hat (N, k) or None)``: the per-example
    #: gradient terms of all rows at a control variate's centre (see
    #: :meth:`_centre_terms`).
    _centre_cache = None
    _cache_row_norms = True
    _n_extra = 0
    #: ``-prior_precision`` padded with zeros to P, for a per-coefficient prior's gradient.
    _negative_precision = None
    #: dtype of the targets the likelihood kernels compute with (``_rows`` converts to it).
    _y_dtype = np.float64

    def __init__(self, X, y, *, alpha=1.0, fit_intercept=True, n_outputs=1, alpha_intercept=None):
        self.X = X
        self.y = y
        self.fit_intercept = bool(fit_intercept)
        self.n_features = X.shape[1]
        self.n_outputs = n_outputs
        self.n_samples = X.shape[0]
        K = n_outputs
        self.n_params = self.n_features * K + (K if fit_intercept else 0) + self._n_extra
        self.alpha, self.alpha_intercept, self.prior_precision = prior_precisions(
            alpha, alpha_intercept, self.n_features, K, self.fit_intercept
        )
        # Decided here, on the caller's X: in joblib's process workers X arrives memory-mapped
        # whatever it was, and they should cache as the caller would (see _row_sq_norms).
        self._cache_row_norms = not _memory_mapped(X)

    # -- parameter layout ----------------------------------------------------------
    def unpack(self, theta):
        """Split ``theta`` (P,) or a stack (S, P) into ``(W, b, extra)``.

        ``W`` has shape (..., D, K), ``b`` (..., K) (zeros without intercept) and
        ``extra`` (..., n_extra).
        """
        theta = np.asarray(theta)
        D, K = self.n_features, self.n_outputs
        lead = theta.shape[:-1]
        W = theta[..., : D * K].reshape(*lead, D, K)
        pos = D * K
        if self.fit_intercept:
            b = theta[..., pos : pos + K]
            pos += K
        else:
            b = np.zeros((*lead, K))
        return W, b, theta[..., pos:]

    def param_names(self, feature_names=None, class_names=None):
        """Names in ``theta``'s order: ``coef[feature]`` (``coef[class, feature]`` for
        several outputs), ``intercept`` (``intercept[class]``) and the extra coordinates."""
        D, K = self.n_features, self.n_outputs
        feats = [f"x{d}" for d in range(D)] if feature_names is None else [str(f) for f in feature_names]
        if K == 1:
            names = [f"coef[{f}]" for f in feats] + (["intercept"] if self.fit_intercept else [])
        else:
            classes = [str(c) for c in (range(K) if class_names is None else class_names)]
            names = [f"coef[{c}, {f}]" for f in feats for c in classes]
            names += [f"intercept[{c}]" for c in classes] if self.fit_intercept else []
        return names + self._extra_names()

    def _extra_names(self):
        return []

    def _draw_predictors(self, thetas, X):
        """Linear predictors of a stack of draws, shape (n, S, K): one (n, D) @ (D, S K)
        product (sparse X too), intercepts added in place."""
        W, b, _ = self.unpack(np.atleast_2d(thetas))
        S, D, K = W.shape
        Z = np.asarray(X @ W.transpose(1, 0, 2).reshape(D, S * K)).reshape(-1, S, K)
        Z += b
        return Z

    def _linear_predictor(self, theta, X):
        D, K = self.n_features, self.n_outputs
        if K == 1:
            # Hot path of every minibatch step: a matrix-vector product (gemv, cheaper than
            # a one-column gemm) on a view of theta, no unpacking.
            z = X @ theta[:D]
            if self.fit_intercept:
                z += theta[D]
            return z[:, None]
        W, b, _ = self.unpack(theta)
        return X @ W + b

    def _rows(self, idx):
        if idx is None:
            X, y = self.X, self.y
        elif isinstance(idx, np.ndarray) and isinstance(self.X, np.ndarray):
            # np.take gathers rows markedly faster than fancy indexing; the gather is
            # the dominant cost of a minibatch step on large X, and it is memory-bound, so
            # rows are read from the one-byte copy when there is one (the cast back is exact).
            narrow = self._gather_source()
            if narrow is None:
                X = np.take(self.X, idx, axis=0)
            else:
                X = np.take(narrow, idx, axis=0).astype(self.X.dtype)
            y = np.take(self.y, idx, axis=0)
        else:
            X, y = self.X[idx], self.y[idx]
        # Compactly stored class codes become the kernels' dtype here, minibatch by minibatch.
        return X, y.astype(self._y_dtype, copy=False)

    def _minibatch_rows(self, idx):
        """:meth:`_rows` for the per-example gradient operators of a one-output GLM.

        When X is in memory, integer-valued in a byte and sparse (at most a quarter of its
        columns nonzero in any row, as one-hot features are), the rows come as an
        :class:`~._gradients.EllRows` of their nonzeros: the gather reads ``n k`` indices
        instead of ``n D`` bytes and needs no cast to ``n D`` floats, and each product with
        the minibatch costs ``O(n k)``. On a9a at batch 500 that takes 17 us off a gradient
        of 48. The products agree with the dense ones to the last bits (summation order).
        """
        if self.n_outputs == 1 and (isinstance(idx, np.ndarray) or (isinstance(idx, slice) and idx.step is None)):
            ell = self._ell_X
            if ell is None:
                ell = self._ell_X = self._ell_copy()
            if ell is not False:
                cols, vals = ell
                if isinstance(idx, slice):  # an epochs block: views, no copy
                    X, y = EllRows(cols[idx], None if vals is None else vals[idx], self.n_features), self.y[idx]
                else:
                    # The ndarray.take methods, not np.take: the same gather without
                    # fromnumeric's wrapper (half a microsecond a call, two calls every step).
                    X = EllRows(
                        cols.take(idx, axis=0),
                        None if vals is None else vals.take(idx, axis=0),
                        self.n_features,
                    )
                    y = self.y.take(idx, axis=0)
                return X, y.astype(self._y_dtype, copy=False)
        return self._rows(idx)

    def _ell_copy(self):
        """:meth:`_minibatch_rows`'s arrays ``(cols (N, k) int32, vals (N, k) or None)``, or False."""
        narrow = self._gather_source() if isinstance(self.X, np.ndarray) else None
        if narrow is None or _gradients._csr_matvec is None:
            return False
        N, D = narrow.shape
        counts = np.count_nonzero(narrow, axis=1)
        k = int(counts.max()) if N else 0
        if k == 0 or 4 * k > D:
            return False
        rows, cols_nz = np.nonzero(narrow)
        slot = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
        # The kernels' index type: int32 unless a full-data product's N k entries overflow it.
        cols = np.full((N, k), D, dtype=np.int32 if N * k < 2**31 - 1 else np.int64)
        cols[rows, slot] = cols_nz
        values = narrow[rows, cols_nz]
        vals = None
        if (values != 1).any():
            vals = np.zeros((N, k))
            vals[rows, slot] = values
        return cols, vals

    def _gather_source(self):
        """A copy of X in one byte a feature (uint8 or int8) when that holds it exactly, else None.

        One-hot, binary and small count features (a9a's, say) are exact in a byte, and a
        random minibatch's gather then reads an eighth of the memory: on a9a at batch 500 it
        took a third of an SGHMC step and more when other processes compete for memory
        bandwidth. The rows cast back to X's dtype are X's rows bit for bit, so nothing
        sampled changes. Decided on the first gather by a scan of X in blocks; costs N D
        bytes (an eighth of float64 X). Not for memory-mapped X, whose fits keep no per-row
        state (see :meth:`_row_sq_norms`).
        """
        narrow = self._narrow_X
        if narrow is None:
            narrow = self._narrow_X = self._narrow_copy() if self._cache_row_norms else False
        return None if narrow is False else narrow

    def _narrow_copy(self):
        """:meth:`_gather_source`'s copy, or False."""
        X = self.X
        if X.dtype.kind != "f" or X.ndim != 2 or X.size == 0:
            return False
        lo, hi = np.inf, -np.inf
        step = max(1, _SCAN_ELEMENTS // X.shape[1])
        for start in range(0, X.shape[0], step):
            B = X[start : start + step]
            lo, hi = min(lo, float(B.min())), max(hi, float(B.max()))
            if lo < -128 or hi > 255 or (lo < 0 and hi > 127) or not np.array_equal(B, np.floor(B)):
                return False
        return X.astype(np.uint8 if lo >= 0 else np.int8, order="C")

    def _row_sq_norms(self, idx, X):
        """``||x_i||^2`` of the rows ``idx`` (features ``X``), for samplers that need tr(Sigma).

        In-memory X: gathered (O(n)) from the norms of all rows, computed on the first
        request; they take 8 bytes a row, at most 1/D of X itself, and spare mCCAdL 5-10% of
        its iteration time on a9a. Memory-mapped X (the model's at construction):
        computed from the minibatch, O(n D) like its gradient, since a cache would be the
        one allocation of the fit that grows with N while X stays on disk.
        """
        cache = self._row_sq_cache
        if cache is None:
            if not self._cache_row_norms:
                return row_sq_norms(X)
            cache = self._row_sq_cache = self._all_row_sq_norms()
        return cache if idx is None else cache[idx]

    def whitened_row_weights(self, L, idx):
        """``q_i = ||L' x~_i||^2`` of the rows ``idx`` for a one-output GLM, or None.

        ``x~_i`` is the row's gradient direction in ``theta`` (features, then 1 for the
        intercept, 0 for extra coordinates), so a whitened per-example gradient
        ``L' g_i = r_i L' x~_i`` has squared norm ``r_i^2 q_i``: the trace that mCCAdL's C
        step needs in whitened coordinates then costs O(n), not O(n P^2). Cached for all
        rows on first use (O(N D P) once, N floats) for in-memory X; computed per minibatch
        for memory-mapped X, whose fits keep no per-row state.
        """
        if self.n_outputs != 1:
            return None
        cache = self._row_weight_cache
        if cache is not None and cache[0] is L:
            return cache[1] if idx is None else cache[1][idx]
        if not self._cache_row_norms:
            X, _ = self._rows(idx)
            return self._row_weights_of(L, X)
        q = np.empty(self.n_samples)
        for rows in self._block_slices():
            X = self.X if rows is None else _row_block(self.X, rows)
            q[slice(None) if rows is None else rows] = self._row_weights_of(L, X)
        self._row_weight_cache = (L, q)
        return q if idx is None else q[idx]

    def _row_weights_of(self, L, X):
        D = self.n_features
        if L.ndim == 1:
            # Diagonal L: ||L' x~_i||^2 = sum_j L_j^2 x~_ij^2.
            X2 = X.multiply(X) if sp.issparse(X) else X * X
            q = np.asarray(X2 @ (L[:D] * L[:D])).ravel()
            return q + L[D] ** 2 if self.fit_intercept else q
        XL = np.asarray(X @ L[:D])
        if self.fit_intercept:
            XL += L[D]
        return np.einsum("np,np->n", XL, XL)

    def leverage_scores(self, theta, L):
        """Statistical leverages ``h_i = w_i x~_i' L L' x~_i`` of the rows at ``theta``, shape (N,).

        With ``L L' = H^-1`` at the MAP these are the diagonal of the hat matrix of the
        Laplace approximation (they sum to about the number of parameters the data
        determine), and ``w_i h_i``-proportional sampling is what makes the control-variate
        gradient's noise even across directions (see
        :class:`skbayes_sg.minibatch.ControlVariateGradient`). ``w_i`` sums the curvature
        weights over the outputs.
        """
        h = np.empty(self.n_samples)
        for rows in self._block_slices():
            if rows is None:
                X, y = self._rows(None)
            else:
                X, y = _row_block(self.X, rows), self.y[rows].astype(self._y_dtype, copy=False)
            w = self._predictor_weights(theta, X, y, self._weights_of(rows)).sum(axis=1)
            h[slice(None) if rows is None else rows] = w * self._row_weights_of(L, X)
        return h

    def _all_row_sq_norms(self):
        # By blocks: X.multiply(X) of a whole sparse X would copy all its entries.
        out = np.empty(self.n_samples)
        for rows in self._block_slices():
            out[slice(None) if rows is None else rows] = row_sq_norms(
                self.X if rows is None else _row_block(self.X, rows)
            )
        return out

    def _block_rows(self):
        """Rows per block of a full-data pass (see ``_BLOCK_ELEMENTS``)."""
        return max(1, _BLOCK_ELEMENTS // self.n_outputs)

    def _block_slices(self):
        """Row slices of the blocks of a full-data pass; ``[None]`` for one block of all rows.

        Full-data passes sum over blocks, so what they allocate is bounded by a block
        instead of growing with N. Sparse formats other than CSR are passed whole (a row
        block of them would be a conversion).
        """
        X = self.X
        N, m = self.n_samples, self._block_rows()
        if N <= m or (sp.issparse(X) and X.format != "csr"):
            return [None]
        return [slice(start, start + m) for start in range(0, N, m)]

    def _data_blocks(self):
        """``(X_b, y_b)`` over all rows, block by block (see :meth:`_block_slices`)."""
        for rows in self._block_slices():
            if rows is None:
                yield self._rows(None)
            else:
                yield _row_block(self.X, rows), self.y[rows].astype(self._y_dtype, copy=False)

    def _weighted_blocks(self):
        """``(X_b, y_b, w_b)`` over all rows, block by block; ``w_b`` None when unweighted."""
        for rows, (X, y) in zip(self._block_slices(), self._data_blocks()):
            yield X, y, self._weights_of(rows)

    # -- prior ------------------------------------------------------------------------
    def log_prior_and_grad(self, theta):
        n_w = self.n_params - self._n_extra
        w = theta[:n_w]
        prec = self.prior_precision
        lp = -0.5 * prec * float(w @ w) if np.ndim(prec) == 0 else -0.5 * float(w @ (prec * w))
        return lp, self.grad_log_prior(theta)

    def grad_log_prior(self, theta):
        """Gradient of the log prior: ``-prior_precision * w`` on the weights and intercepts
        (of ``theta`` (P,) or of each row of a stack (M, P))."""
        prec = self.prior_precision
        # The float test first: np.ndim costs half a microsecond, and this runs every step.
        if isinstance(prec, float) or np.ndim(prec) == 0:
            grad = theta * -prec
        else:
            # One multiply, as the scalar's: the force of every iteration includes it.
            neg = self._negative_precision
            if neg is None or neg.size != theta.shape[-1]:
                neg = self._negative_precision = np.concatenate([-prec, np.zeros(self._n_extra)])
            grad = theta * neg
        if self._n_extra:
            grad[..., -self._n_extra :] = 0.0
        return grad

    # -- likelihood -------------------------------------------------------------------
    def _residuals(self, Z, y):
        """``d loglik_i / dZ_i``, shape (n, K), for the linear predictor Z (n, K)."""
        raise NotImplementedError

    def _log_likelihood_terms(self, Z, y):
        """Per-example log likelihood (n,) for the linear predictor Z (n, K)."""
        raise NotImplementedError

    def _gradient_terms(self, theta, X, y):
        """``(R, extra)`` of the per-example gradients of the rows ``X, y`` (see
        :class:`LinearPerExampleGradients`): residuals (n, K) and extra coordinates or None."""
        return self._residuals(self._linear_predictor(theta, X), y), None

    def per_example_gradients(self, theta, idx):
        X, y = self._minibatch_rows(idx)
        R, extra = _weigh(self._weights_of(idx), *self._gradient_terms(theta, X, y))
        return LinearPerExampleGradients(
            X, R, self.fit_intercept, extra, row_sq_norms=lambda: self._row_sq_norms(idx, X)
        )

    def per_example_gradient_differences(self, theta, theta_hat, idx):
        """``g_i(theta) - g_i(theta_hat)`` for the rows ``idx``, as one operator.

        The differences of a GLM's per-example gradients share the rows' features: only the
        residuals differ, so the operator is a :class:`LinearPerExampleGradients` with
        ``R(theta) - R(theta_hat)``, one gather of the minibatch for both points.
        """
        X, y = self._minibatch_rows(idx)
        R, extra = self._gradient_terms(theta, X, y)
        R_hat, extra_hat = self._centre_terms(theta_hat, idx, X, y)
        R -= R_hat
        if extra is not None:
            extra -= extra_hat
        # The centre's terms are cached unweighted; the weights scale the difference.
        R, extra = _weigh(self._weights_of(idx), R, extra)
        return LinearPerExampleGradients(
            X, R, self.fit_intercept, extra, row_sq_norms=lambda: self._row_sq_norms(idx, X)
        )

    def _centre_terms(self, theta_hat, idx, X, y):
        """:meth:`_gradient_terms` at the control variate's centre ``theta_hat`` for the rows ``idx``.

        The centre is fixed for a whole chain, so for in-memory X its residuals ``R_hat`` (and
        extra terms) are computed once for all rows, one pass by blocks, and every minibatch
        gathers its rows' (O(n K)) instead of recomputing them (a product with X and the link,
        O(n D K): a third of a control-variate step on a9a). N K floats, K / D of X; not for
        memory-mapped X, whose fits keep no per-row state (see :meth:`_row_sq_norms`).
        """
        if not self._cache_row_norms:
            return self._gradient_terms(theta_hat, X, y)
        theta_hat = np.asarray(theta_hat, dtype=float)
        key = theta_hat.tobytes()
        cache = self._centre_cache
        if cache is None or cache[0] != key:
            # Every call, the first included, reads the one pass over all rows: terms
            # computed on a gathered minibatch can differ from the pass's in the last bit
            # (another BLAS kernel for another shape), which would make the draws depend on
            # which call came first (a fit continued in parts would not repeat one fit).
            cache = self._centre_cache = (key, *self._all_gradient_terms(theta_hat))
        _, R_all, extra_all = cache
        if idx is None:
            return R_all, extra_all
        if isinstance(idx, slice):
            return R_all[idx], None if extra_all is None else extra_all[idx]
        return np.take(R_all, idx, axis=0), None if extra_all is None else np.take(extra_all, idx, axis=0)

    def _all_gradient_terms(self, theta):
        """:meth:`_gradient_terms` of all rows, block by block: ``(R (N, K), extra (N, k) or None)``."""
        R_all = np.empty((self.n_samples, self.n_outputs))
        extra_all = np.empty((self.n_samples, self._n_extra)) if self._n_extra else None
        for rows, (X, y) in zip(self._block_slices(), self._data_blocks()):
            rows = slice(None) if rows is None else rows
            R, extra = self._gradient_terms(theta, X, y)
            R_all[rows] = R
            if extra_all is not None:
                extra_all[rows] = extra
        # Shared by every later minibatch: read-only, so no caller can alter the centre.
        for a in (R_all, extra_all):
            if a is not None:
                a.flags.writeable = False
        return R_all, extra_all

    def _curvature(self, theta, Z, y, U, e_v):
        """Second derivatives of the log likelihood in the linear predictor, applied.

        Given the predictor ``Z`` (n, K), the direction's change of predictor ``U`` (n, K) and
        of the extra coordinates ``e_v`` (k,), return ``(S, Se)``: the directional derivative
        of the residuals ``d loglik / dZ`` (n, K) and of the extra per-example gradients
        (n, k) or None. Then ``H_i v = [x_i S_i', S_i, Se_i]``, the same structure as the
        per-example gradients. Stacks of paths work alike: ``theta`` (M, P), ``Z`` and ``U``
        (M, n, K), ``e_v`` (M, k).
        """
        return self._apply_curvature(theta, self._curvature_state(Z, y), U, e_v)

    def _curvature_state(self, Z, y):
        """What :meth:`_apply_curvature` needs of each row at the predictor ``Z`` (..., n, K)
        (kept per row at a Taylor expansion point, see :meth:`taylor_cache`)."""
        raise NotImplementedError

    def _apply_curvature(self, theta, state, U, e_v):
        """``(S, Se)`` of :meth:`_curvature` from the rows' :meth:`_curvature_state`."""
        raise NotImplementedError

    def per_example_hvp(self, theta, v, idx):
        """Per-example Hessian-vector products ``H_i v`` of the log likelihood, as an operator.

        Rows of the returned :class:`LinearPerExampleGradients` are ``H_i v`` for the rows
        ``idx``; its ``mean() * n_batch`` is their sum. Exact, O(n D K).
        """
        X, y = self._rows(idx)
        S, Se = _weigh(self._weights_of(idx), *self._hvp_terms(theta, v, X, y))
        return LinearPerExampleGradients(X, S, self.fit_intercept, Se)

    def _hvp_terms(self, theta, v, X, y):
        """``(S, Se)`` of :meth:`_curvature` for the rows ``X, y`` and direction ``v``."""
        Z = self._linear_predictor(theta, X)
        W_v, b_v, e_v = self.unpack(v)
        U = X @ W_v + (b_v if self.fit_intercept else 0.0)
        return self._curvature(theta, Z, y, np.asarray(U), e_v)

    def _hvp_sum(self, theta, v, X, y, w=None):
        """``sum_i w_i H_i v`` over the rows ``X, y``: the operator's ``mean() * n`` without its
        transpose of X (see :func:`_transpose`)."""
        S, Se = _weigh(w, *self._hvp_terms(theta, v, X, y))
        D, K = self.n_features, self.n_outputs
        out = np.empty(self.n_params)
        out[: D * K] = np.asarray(_transpose(X) @ S).ravel()
        pos = D * K
        if self.fit_intercept:
            out[pos : pos + K] = S.sum(axis=0)
            pos += K
        if Se is not None:
            out[pos:] = Se.sum(axis=0)
        return out

    def loglik_hvp(self, theta, v, idx=None):
        """``sum_{i in idx} (Hess log p(y_i | x_i, theta)) v`` over rows ``idx``, exactly.

        With ``idx=None`` (all rows, as the ``"auto"`` step size's Lanczos iteration asks)
        the sum runs over blocks of rows, so its memory does not grow with N.
        """
        if idx is None:
            out = np.zeros(self.n_params)
            for X, y, w in self._weighted_blocks():
                out += self._hvp_sum(theta, v, X, y, w)
            return out
        ops = self.per_example_hvp(theta, v, idx)
        return ops.mean() * ops.n_batch

    def hessian_vector_product(self, theta, v, eps=None):
        """Exact Hessian of the negative log posterior times ``v`` (one pass over the data)."""
        out = -self.loglik_hvp(theta, v)
        n_w = self.n_params - self._n_extra
        out[:n_w] += self.prior_precision * v[:n_w]
        if self._n_extra:
            out[n_w:] -= self._extra_prior_hvp(theta, v)
        return out

    def _extra_prior_hvp(self, theta, v):
        return np.zeros(self._n_extra)

    def _predictor_weights(self, theta, X, y, sample_weight=None):
        """``w_ik = -d^2 loglik_i / dz_ik^2``, shape (n, K): the curvature of each example in
        its own linear predictor (``s (1 - s)`` for the logistic, ``tau`` for the Gaussian),
        times the row's likelihood weight when given."""
        Z = self._linear_predictor(theta, X)
        n, K = Z.shape
        e_v = np.zeros(self._n_extra)
        W = np.empty((n, K))
        for k in range(K):
            U = np.zeros((n, K))
            U[:, k] = 1.0
            W[:, k] = -self._curvature(theta, Z, y, U, e_v)[0][:, k]
        if sample_weight is not None:
            W *= sample_weight[:, None]
        return W

    def _extra_hessian_columns(self, theta, H):
        """Fill the rows and columns of the extra coordinates of ``H`` by Hessian-vector products."""
        P = self.n_params
        for j in range(P - self._n_extra, P):
            e = np.zeros(P)
            e[j] = 1.0
            col = self.hessian_vector_product(theta, e)
            H[:, j] = col
            H[j, :] = col

    def hessian(self, theta):
        """Dense Hessian of the negative log posterior, ``X~' diag(w) X~ + diag(prior_precision)`` for one
        output (one pass over row blocks, O(N D^2)), the extra coordinates by products.
        Several outputs fall back on Hessian-vector products."""
        if self.n_outputs != 1:
            return self._hessian_multi(theta)
        D, P = self.n_features, self.n_params
        n_w = P - self._n_extra
        H = np.zeros((P, P))
        for X, y, sw in self._weighted_blocks():
            w = self._predictor_weights(theta, X, y, sw)[:, 0]
            if sp.issparse(X):
                XtWX = np.asarray((X.T @ sp.diags(w) @ X).todense())
                Xtw = np.asarray(X.T @ w).ravel()
            else:
                Xw = X * w[:, None]
                XtWX = X.T @ Xw
                Xtw = Xw.sum(axis=0)
            H[:D, :D] += XtWX
            if self.fit_intercept:
                H[:D, D] += Xtw
                H[D, :D] += Xtw
                H[D, D] += w.sum()
        H[np.arange(n_w), np.arange(n_w)] += self.prior_precision
        if self._n_extra:
            self._extra_hessian_columns(theta, H)
        return H

    def _hessian_multi(self, theta):
        """Dense Hessian for several outputs: ``sum_i x~_i x~_i' (x) W_i + diag(prior_precision)``.

        ``W_i[k, l] = -d^2 loglik_i / dz_k dz_l`` (``s_k (delta_kl - s_l)`` for the softmax);
        with ``x~_i = [x_i, 1]`` the coordinate ``(j, k)`` of ``theta`` is ``j K + k`` for the
        weights and the intercepts alike, so the Hessian is the ``(D+1, K, D+1, K)`` array of
        the ``K (K + 1) / 2`` products ``X~' diag(W_kl) X~``, one pass over row blocks.
        """
        if self._n_extra:
            return super().hessian(theta)
        D, K = self.n_features, self.n_outputs
        Dt = D + (1 if self.fit_intercept else 0)
        H4 = np.zeros((Dt, K, Dt, K))
        e_v = np.zeros(0)
        for X, y, sw in self._weighted_blocks():
            Xt = X.toarray() if sp.issparse(X) else np.asarray(X)
            if self.fit_intercept:
                Xt = np.hstack([Xt, np.ones((Xt.shape[0], 1))])
            Z = self._linear_predictor(theta, X)
            n = Z.shape[0]
            for k in range(K):
                U = np.zeros((n, K))
                U[:, k] = 1.0
                Wk = -self._curvature(theta, Z, y, U, e_v)[0]  # column l: W_i[l, k]
                if sw is not None:
                    Wk *= sw[:, None]
                for l in range(k, K):
                    A = Xt.T @ (Xt * Wk[:, l : l + 1])
                    H4[:, l, :, k] += A
                    if l != k:
                        H4[:, k, :, l] += A.T
        H = H4.reshape(Dt * K, Dt * K)
        H[np.diag_indices_from(H)] += self.prior_precision
        return H

    def hessian_diagonal(self, theta):
        """Diagonal of the Hessian, ``sum_i w_ik x_ij^2 + prior_precision``, O(N D K) over row blocks."""
        D, K, P = self.n_features, self.n_outputs, self.n_params
        n_w = P - self._n_extra
        diag = np.zeros(P)
        for X, y, sw in self._weighted_blocks():
            W = self._predictor_weights(theta, X, y, sw)
            X2 = X.multiply(X) if sp.issparse(X) else X * X
            diag[: D * K] += np.asarray(X2.T @ W).ravel()
            if self.fit_intercept:
                diag[D * K : D * K + K] += W.sum(axis=0)
        diag[:n_w] += self.prior_precision
        for j in range(n_w, P):
            e = np.zeros(P)
            e[j] = 1.0
            diag[j] = self.hessian_vector_product(theta, e)[j]
        return diag

    # -- many paths at once (multilevel SGLD), vectorised ------------------------------
    # For a GLM example ``i`` the log likelihood depends on ``theta`` only through the linear
    # predictor ``z_i = x_i W + b`` (K,) and the extra coordinates, so with ``x~_i = (x_i, 1)``
    # ``g_i = x~_i (x) r_i`` and ``H_i v = x~_i (x) S_i`` (see :meth:`_curvature`): every
    # stack of sums below is two batched minibatch products, O(M n P), with the residuals
    # and curvature of the per-example methods above.
    def _path_rows(self, idx):
        """Minibatch features (M, n, D) and targets (M, n) for row indices (M, n)."""
        X = self.X
        if sp.issparse(X):
            Xb = X[idx.ravel()].toarray().reshape(*idx.shape, self.n_features)
        else:
            Xb = X[idx]
        return Xb, self.y[idx].astype(self._y_dtype, copy=False)

    def _path_predictor(self, thetas, Xb):
        """Linear predictors (M, n, K) of a stack ``thetas`` (M, P) at rows ``Xb`` (M, n, D)."""
        W, b, _ = self.unpack(thetas)
        return np.matmul(Xb, W) + b[:, None, :]

    def _path_gradient_terms(self, thetas, Z, y):
        """:meth:`_gradient_terms` of each path's rows from their predictors ``Z`` (M, n, K)."""
        M, n, K = Z.shape
        return self._residuals(Z.reshape(M * n, K), y.reshape(M * n)).reshape(M, n, K), None

    def _path_sums(self, Xb, R, extra=None):
        """``sum_i x~_i (x) R_i`` (and ``sum_i extra_i``) over each path's rows, shape (M, P)."""
        M = Xb.shape[0]
        parts = [np.matmul(Xb.transpose(0, 2, 1), R).reshape(M, -1)]
        if self.fit_intercept:
            parts.append(R.sum(axis=1))
        if extra is not None:
            parts.append(extra.sum(axis=1))
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]

    def grad_log_prior_paths(self, thetas):
        return self.grad_log_prior(np.atleast_2d(np.asarray(thetas, dtype=float)))

    def loglik_grad_paths(self, thetas, idx):
        thetas, idx = as_paths(thetas, idx)
        Xb, yb = self._path_rows(idx)
        Z = self._path_predictor(thetas, Xb)
        return self._path_sums(Xb, *_weigh(self._weights_of(idx), *self._path_gradient_terms(thetas, Z, yb)))

    def loglik_hvp_paths(self, thetas, V, idx):
        V = np.atleast_2d(np.asarray(V, dtype=float))
        thetas = np.broadcast_to(np.asarray(thetas, dtype=float), V.shape)
        thetas, idx = as_paths(thetas, idx)
        Xb, yb = self._path_rows(idx)
        W_v, b_v, e_v = self.unpack(V)
        U = np.matmul(Xb, W_v) + b_v[:, None, :]
        S, Se = self._curvature(thetas, self._path_predictor(thetas, Xb), yb, U, e_v)
        return self._path_sums(Xb, *_weigh(self._weights_of(idx), S, Se))

    def taylor_cache(self, theta0):
        """Per-row predictor, gradient terms and curvature state at ``theta0``, unweighted
        (:meth:`taylor_remainder_paths` applies the row weights): one full-data pass per
        expansion point, after which each remainder needs only the minibatch at theta."""
        t0 = np.asarray(theta0, dtype=float)[None]
        Xb, yb = self._path_rows(np.arange(self.n_samples)[None])
        Z0 = self._path_predictor(t0, Xb)
        R0, E0 = self._path_gradient_terms(t0, Z0, yb)
        return Z0[0], R0[0], None if E0 is None else E0[0], self._curvature_state(Z0, yb)[0]

    def taylor_remainder_paths(self, thetas, theta0, idx, cache=None):
        thetas, idx = as_paths(thetas, idx)
        theta0 = np.asarray(theta0, dtype=float)
        Z0_all, R0_all, E0_all, C0_all = self.taylor_cache(theta0) if cache is None else cache
        Xb, yb = self._path_rows(idx)
        Z = self._path_predictor(thetas, Xb)
        R, E = self._path_gradient_terms(thetas, Z, yb)
        # The predictor is linear in theta: the direction theta - theta0 moves it by Z - Z0.
        n_w = self.n_params - self._n_extra
        S, Se = self._apply_curvature(
            np.broadcast_to(theta0, thetas.shape), C0_all[idx], Z - Z0_all[idx], (thetas - theta0)[:, n_w:]
        )
        R -= R0_all[idx]
        R -= S
        E = None if E is None else E - E0_all[idx] - Se
        # The cache holds the unweighted terms at theta0: the weights scale the remainder.
        return self._path_sums(Xb, *_weigh(self._weights_of(idx), R, E))

    def log_prior_hessian(self, theta):
        """Exact Hessian of the log prior: ``-prior_precision`` on the diagonal of the weights
        (and the extra coordinates' own prior curvature)."""
        P = self.n_params
        n_w = P - self._n_extra
        H = np.zeros((P, P))
        H[np.arange(n_w), np.arange(n_w)] = -self.prior_precision
        for j in range(n_w, P):
            e = np.zeros(P)
            e[j] = 1.0
            H[n_w:, j] = self._extra_prior_hvp(theta, e)
        return H

    def log_likelihood_and_grad(self, theta, idx=None):
        """Summed log likelihood of rows ``idx`` (all rows if None) and its gradient (P,).

        All rows are processed in blocks (see :meth:`_data_blocks`): the pass's memory is
        bounded by a block, not N, which matters on memmapped X (the MAP start and the
        exact samplers make such passes).
        """
        if idx is not None:
            return self._loglik_and_grad_rows(theta, *self._rows(idx), self._weights_of(idx))
        total, grad = 0.0, np.zeros(self.n_params)
        for X, y, w in self._weighted_blocks():
            ll, g = self._loglik_and_grad_rows(theta, X, y, w)
            total += ll
            grad += g
        return total, grad

    def _loglik_and_grad_rows(self, theta, X, y, w=None):
        """Log likelihood summed over the rows ``X, y`` (weighted by ``w`` when given) and its gradient."""
        Z = self._linear_predictor(theta, X)
        ll, R = self._log_likelihood_terms(Z, y), self._residuals(Z, y)
        if w is not None:
            ll = ll * w
            R *= w[:, None]
        grad_w = _transpose(X) @ R
        parts = [np.asarray(grad_w).ravel()]
        if self.fit_intercept:
            parts.append(R.sum(axis=0))
        return float(ll.sum()), np.concatenate(parts)


class LogisticModel(_GLM):
    """Bayesian binary logistic regression.

    ``p(y_i = 1 | x_i, w, b) = sigmoid(x_i . w + b)`` with labels encoded as 0 / 1 and an
    Gaussian prior ``N(0, 1 / alpha_j)`` on each weight and ``N(0, 1 / alpha_intercept)`` on ``b``.
    The log likelihood ``y z - log(1 + e^z)`` is evaluated with a stable log-sigmoid.

    Parameters
    ----------
    X : array of shape (N, D)
    y : array of shape (N,) with values in {0, 1}
        Kept as given if of an integer or boolean dtype (the compact codes of the
        classifiers), else as float64.
    alpha : float or array of shape (D,), default=1.0
        Prior precision of the weights: one for all, or one per feature.
    alpha_intercept : float or None, default=None
        Prior precision of the intercept; None gives it ``alpha`` (a float), the papers' prior.
    fit_intercept : bool, default=True
    """

    def __init__(self, X, y, *, alpha=1.0, fit_intercept=True, alpha_intercept=None):
        if y is not None:
            y = np.asarray(y)
            y = y if y.dtype.kind in "biu" else y.astype(np.float64)
        super().__init__(X, y, alpha=alpha, fit_intercept=fit_intercept, n_outputs=1, alpha_intercept=alpha_intercept)

    def _residuals(self, Z, y):
        return (y - expit(Z[:, 0]))[:, None]

    def _curvature_state(self, Z, y):
        s = expit(Z)
        return s * (1.0 - s)

    def _apply_curvature(self, theta, state, U, e_v):
        return -state * U, None

    def _loglik_and_grad_rows(self, theta, X, y, w=None):
        # Fused: one exp(-|z|) serves the stable log-likelihood and the residual, the whole
        # cost of a full-data evaluation besides the two products with X (the exact
        # samplers call this every iteration).
        z = self._linear_predictor(theta, X)[:, 0]
        e = np.exp(-np.abs(z))
        r = y - np.where(z >= 0, 1.0, e) / (1.0 + e)
        if w is None:
            ll = float(y @ z) - float(np.maximum(z, 0.0).sum()) - float(np.log1p(e).sum())
        else:
            ll = float(w @ (y * z - np.maximum(z, 0.0) - np.log1p(e)))
            r *= w
        grad = np.empty(self.n_params)
        D = self.n_features
        grad[:D] = _transpose(X) @ r
        if self.fit_intercept:
            grad[D] = r.sum()
        return ll, grad

    def _log_likelihood_terms(self, Z, y):
        z = Z[:, 0]
        # y z - log(1 + e^z) = log s(z) - (1 - y) z, with the stable log-sigmoid.
        return log_expit(z) - (1.0 - y) * z

    def predict_draws(self, thetas, X):
        """Class probabilities per draw, shape (S, n, 2)."""
        W, b, _ = self.unpack(thetas)
        z = (X @ W[..., 0].T).T + b[:, :1]
        p1 = expit(z)
        return np.stack([1.0 - p1, p1], axis=-1)

    def predict_mean(self, thetas, weights, X):
        """Weighted average over draws of the class probabilities, shape (n, 2): one
        (n, D) @ (D, S) product, the sigmoid in place, and one (n, S) @ (S,) product; the
        (S, n, 2) stack of :meth:`predict_draws` is never formed."""
        W, b, _ = self.unpack(np.atleast_2d(thetas))
        # -z from the negated (small) weights, then 1 / (1 + e^-z) in three in-place passes:
        # 2.4x faster than scipy's expit, which the elementwise work dominates, and as
        # accurate (relative error ~1e-16, also for tiny probabilities); e^-z overflows to
        # inf below z = -709, where the probability is 0 to double precision anyway.
        Z = np.asarray(X @ -W[..., 0].T)
        Z -= b[:, 0]
        with np.errstate(over="ignore"):
            np.exp(Z, out=Z)
        Z += 1.0
        p1 = np.reciprocal(Z, out=Z) @ weights
        return np.stack([weights.sum() - p1, p1], axis=-1)

    def log_likelihood_draws(self, thetas, X, y):
        """``log p(y_i | x_i, theta_s)``, shape (S, n), for labels ``y`` in {0, 1}."""
        Z = self._draw_predictors(thetas, X)[:, :, 0]
        return (log_expit(Z) - (1.0 - np.asarray(y, dtype=float))[:, None] * Z).T


class SoftmaxModel(_GLM):
    """Bayesian multinomial (softmax) logistic regression over ``K`` classes.

    ``p(y_i = k | x_i) = softmax(x_i W + b)_k``, with the over-complete parametrisation of
    one weight vector per class (identified by the prior, as in scikit-learn's
    multinomial ``LogisticRegression``) and independent Gaussian priors of precision
    ``alpha`` (per class and feature, or one for all) on the weights and ``alpha_intercept``
    on the intercepts. Stable log-sum-exp.

    Parameters
    ----------
    X : array of shape (N, D)
    y : array of shape (N,) of integer class codes 0..K-1
        Kept in its integer dtype (the classifiers' codes are one byte a row).
    n_classes : int
    alpha : float or array of shape (D,) or (K, D), default=1.0
        Prior precision of the weights: one for all, or one per feature (and class: the shape of ``coef_``).
    alpha_intercept : float or None, default=None
        Prior precision of the intercepts; None gives it ``alpha`` (a float), the papers' prior.
    fit_intercept : bool, default=True
    """

    _y_dtype = np.intp

    def __init__(self, X, y, *, n_classes, alpha=1.0, fit_intercept=True, alpha_intercept=None):
        super().__init__(
            X,
            class_codes(y),
            alpha=alpha,
            fit_intercept=fit_intercept,
            n_outputs=int(n_classes),
            alpha_intercept=alpha_intercept,
        )

    def _residuals(self, Z, y):
        R = -softmax(Z, axis=1)
        R[np.arange(Z.shape[0]), y] += 1.0
        return R

    def _log_likelihood_terms(self, Z, y):
        return Z[np.arange(Z.shape[0]), y] - logsumexp(Z, axis=1)

    def _curvature_state(self, Z, y):
        return softmax(Z, axis=-1)

    def _apply_curvature(self, theta, p, U, e_v):
        # Hessian of the log-softmax likelihood in z is -(diag(p) - p p').
        pU = p * U
        return -(pU - p * pU.sum(axis=-1, keepdims=True)), None

    def predict_draws(self, thetas, X):
        """Class probabilities per draw, shape (S, n, K)."""
        W, b, _ = self.unpack(thetas)
        S, D, K = W.shape
        # One (n, D) @ (D, S K) product, which a sparse X supports too.
        Z = np.asarray(X @ W.transpose(1, 0, 2).reshape(D, S * K)).reshape(-1, S, K).transpose(1, 0, 2)
        return softmax(Z + b[:, None, :], axis=-1)

    def predict_mean(self, thetas, weights, X):
        """Weighted average over draws of the class probabilities, shape (n, K)."""
        Z = self._draw_predictors(thetas, X)
        return np.einsum("nsk,s->nk", softmax(Z, axis=-1), weights)

    def log_likelihood_draws(self, thetas, X, y):
        """``log p(y_i | x_i, theta_s)``, shape (S, n), for class codes ``y``."""
        Z = self._draw_predictors(thetas, X)
        y = np.asarray(y, dtype=np.intp)
        return (Z[np.arange(Z.shape[0]), :, y] - logsumexp(Z, axis=-1)).T


class LinearRegressionModel(_GLM):
    """Bayesian linear regression with Gaussian noise.

    ``y_i ~ N(x_i . w + b, 1 / tau)``, priors ``N(0, 1 / alpha_j)`` on the weights and
    ``N(0, 1 / alpha_intercept)`` on ``b``. With ``noise_precision`` a float, ``tau`` is held fixed. With
    ``noise_precision=None`` the last coordinate of ``theta`` is ``s = log tau``, with
    ``tau ~ Gamma(noise_prior_shape, noise_prior_rate)``; the change of variables adds the
    Jacobian ``log |d tau / d s| = s``, so the prior on ``s`` is
    ``a s - b e^s`` (up to a constant).

    Parameters
    ----------
    X : array of shape (N, D)
    y : array of shape (N,)
    alpha : float or array of shape (D,), default=1.0
        Prior precision of the weights: one for all, or one per feature.
    alpha_intercept : float or None, default=None
        Prior precision of the intercept; None gives it ``alpha`` (a float), the papers' prior.
    fit_intercept : bool, default=True
    noise_precision : float or None, default=None
    noise_prior_shape, noise_prior_rate : float, default=1e-6
        Gamma prior on ``tau`` (shape, rate), as ``BayesianRidge``'s ``alpha_1, alpha_2``.
    """

    def __init__(
        self,
        X,
        y,
        *,
        alpha=1.0,
        fit_intercept=True,
        noise_precision=None,
        noise_prior_shape=1e-6,
        noise_prior_rate=1e-6,
        alpha_intercept=None,
    ):
        self.noise_precision = None if noise_precision is None else float(noise_precision)
        self.noise_prior_shape = float(noise_prior_shape)
        self.noise_prior_rate = float(noise_prior_rate)
        self._n_extra = 0 if noise_precision is not None else 1
        super().__init__(
            X,
            None if y is None else np.asarray(y, dtype=float),
            alpha=alpha,
            fit_intercept=fit_intercept,
            n_outputs=1,
            alpha_intercept=alpha_intercept,
        )

    def _extra_names(self):
        return ["log_noise_precision"] if self.noise_precision is None else []

    def tau(self, theta):
        """Noise precision of ``theta`` (P,) or of each draw in a stack (S, P)."""
        if self.noise_precision is not None:
            theta = np.asarray(theta)
            return np.full(theta.shape[:-1], self.noise_precision) if theta.ndim > 1 else self.noise_precision
        return np.exp(np.asarray(theta)[..., -1])

    def log_prior_and_grad(self, theta):
        lp, grad = super().log_prior_and_grad(theta)
        if self.noise_precision is None:
            s = theta[-1]
            a, b = self.noise_prior_shape, self.noise_prior_rate
            lp += a * s - b * np.exp(s)
        return lp, grad

    def grad_log_prior(self, theta):
        """Gradient of the log prior: the weights' Gaussian and, when ``tau`` is sampled, the
        Gamma prior on ``s = log tau`` (``a - b e^s``), which the SG samplers' force adds at
        every iteration."""
        grad = super().grad_log_prior(theta)
        if self.noise_precision is None:
            grad[..., -1] = self.noise_prior_shape - self.noise_prior_rate * np.exp(theta[..., -1])
        return grad

    def _terms(self, theta, X, y):
        tau = self.tau(theta)
        r = y - self._linear_predictor(theta, X)[:, 0]
        return r, tau

    def _gradient_terms(self, theta, X, y):
        r, tau = self._terms(theta, X, y)
        return self._residual_terms(r, tau)

    def _residual_terms(self, r, tau):
        """``(R, extra)`` of the per-example gradients from the residuals ``r = y - z`` (..., n)
        and the noise precision ``tau`` (a float, or (M, 1) for a stack of paths)."""
        extra = None
        if self.noise_precision is None:
            # d/ds [s/2 - e^s r^2 / 2]
            extra = (0.5 - 0.5 * tau * r * r)[..., None]
        return (tau * r)[..., None], extra

    def _path_gradient_terms(self, thetas, Z, y):
        tau = np.reshape(self.tau(thetas), (-1, 1))
        return self._residual_terms(y - Z[..., 0], tau)

    def _loglik_and_grad_rows(self, theta, X, y, w=None):
        r, tau = self._terms(theta, X, y)
        if w is None:
            n = X.shape[0]
            rr = float(r @ r)
        else:
            # Weights multiply each row's precision: n becomes sum(w), r' r becomes r' W r.
            n = float(w.sum())
            wr = w * r
            rr = float(wr @ r)
            r = wr
        # exp(s) underflows to 0 below s = -745 (a Metropolis proposal far out under a flat
        # noise prior): the log likelihood is then -inf and the proposal rejected, quietly.
        with np.errstate(divide="ignore"):
            ll = 0.5 * n * np.log(tau) - 0.5 * n * np.log(2 * np.pi) - 0.5 * tau * rr
        parts = [np.asarray(_transpose(X) @ (tau * r)).ravel()]
        if self.fit_intercept:
            parts.append(np.array([tau * r.sum()]))
        if self.noise_precision is None:
            parts.append(np.array([0.5 * n - 0.5 * tau * rr]))
        return float(ll), np.concatenate(parts)

    def _curvature_state(self, Z, y):
        return (y - Z[..., 0])[..., None]

    def _apply_curvature(self, theta, r, U, e_v):
        # tau (..., 1, 1) of theta (P,) or of each path of a stack (M, P).
        tau = np.reshape(self.tau(theta), np.shape(theta)[:-1] + (1, 1))
        if self.noise_precision is not None:
            return -tau * U, None
        # loglik_i = s/2 - e^s r^2 / 2 with r = y - z, s = log tau.
        vs = e_v[..., None, :1]
        return -tau * U + tau * r * vs, tau * r * U - 0.5 * tau * r * r * vs

    def _extra_prior_hvp(self, theta, v):
        # d^2/ds^2 of a s - b e^s is -b e^s.
        return np.array([-self.noise_prior_rate * np.exp(theta[-1]) * v[-1]])

    def predict_draws(self, thetas, X):
        """Predictive means per draw, shape (S, n)."""
        W, b, _ = self.unpack(thetas)
        return (X @ W[..., 0].T).T + b[:, :1]

    def log_likelihood_draws(self, thetas, X, y):
        """``log N(y_i | x_i . w_s + b_s, 1 / tau_s)``, shape (S, n)."""
        tau = np.asarray(self.tau(thetas), dtype=float).reshape(-1, 1)
        R = np.asarray(y, dtype=float) - self.predict_draws(thetas, X)
        R *= R
        R *= -0.5 * tau
        R += 0.5 * (np.log(tau) - np.log(2 * np.pi))
        return R
