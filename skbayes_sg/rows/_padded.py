"""Sparse rows in padded form (ELLPACK): a minibatch of one-hot features as its nonzeros."""

import numpy as np

from ._narrow import ByteRows
from ._source import Block, _nbytes

try:  # scipy's compiled CSR/CSC kernels, called without the sparse classes' validation
    from scipy.sparse._sparsetools import csc_matvec as _csc_matvec
    from scipy.sparse._sparsetools import csr_matvec as _csr_matvec
except ImportError:  # pragma: no cover - a scipy without them: dense minibatches only
    _csr_matvec = _csc_matvec = None

_INDPTR = {}


def padded_pointers(n, k, dtype):
    """``(indptr, ones)`` of ``n`` padded rows of ``k`` entries as CSR: the row pointers (of the
    column indices' ``dtype``) and the data of all-ones rows. Kept per shape, read-only: every
    minibatch of that shape shares them."""
    key = (n, k, np.dtype(dtype))
    ptr = _INDPTR.get(key)
    if ptr is None:
        if len(_INDPTR) > 64:  # a few batch sizes per fit; never unbounded
            _INDPTR.clear()
        ptr = (np.arange(0, n * k + 1, k, dtype=dtype), np.ones(n * k))
        for a in ptr:
            a.flags.writeable = False
        _INDPTR[key] = ptr
    return ptr


class EllRows:
    """A minibatch of a sparse, integer-valued ``X`` (one-hot features, say) in padded form.

    Row ``i`` holds its nonzeros at columns ``cols[i]`` with values ``vals[i]`` (None: all
    ones); rows with fewer nonzeros than ``k = cols.shape[1]`` are padded with the phantom
    column ``D``, whose coefficient is zero in every product. ``X @ v`` and ``X.T @ u`` are
    scipy's compiled CSR kernels on these arrays as they are gathered (O(n k), no copy), in
    place of a dense minibatch that costs a cast of ``n D`` floats and two O(n D) products.
    On a9a (k = 14 of D = 123) a minibatch's gather and two products take 15 us instead of
    32 us. Each product sums a row's nonzero terms in column order, where BLAS sums all
    ``D`` terms in its own blocked order: the results agree to the last bits (summation
    order), not bit for bit.

    Enough of the dense interface (``shape``, ``@``, ``.T @``, ``toarray``,
    ``multiply(self)``, ``sum(axis=1)``) for :class:`~skbayes_sg.models.LinearPerExampleGradients`.
    """

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(self, cols, vals, n_features):
        self.cols, self.vals, self.n_features = cols, vals, n_features
        self.shape = (cols.shape[0], n_features)

    _csr = _T = None  # _arrays() and T, built on first use (a C step multiplies several times)

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_csr", None)
        state.pop("_T", None)
        return state

    def _arrays(self):
        """``(indptr, indices, data)`` of the ``n x (D + 1)`` CSR matrix (the phantom column last)."""
        if self._csr is not None:
            return self._csr
        indptr, ones = padded_pointers(*self.cols.shape, self.cols.dtype)
        data = ones if self.vals is None else self.vals.reshape(-1)
        self._csr = (indptr, self.cols.reshape(-1), data)
        return self._csr

    def __matmul__(self, v):
        if v.ndim == 2:
            return np.stack([self @ v[:, j] for j in range(v.shape[1])], axis=1)
        n, D = self.shape
        x = np.empty(D + 1)
        x[:D] = v
        x[D] = 0.0
        out = np.zeros(n)
        _csr_matvec(n, D + 1, *self._arrays(), x, out)
        return out

    def rmatvec_into(self, u, out):
        """``out[:D] += X.T @ u`` by the compiled CSC kernel, and ``out``.

        ``out`` has ``D + 1`` entries: the last, the phantom column's, collects the padding's
        terms, which mean nothing (a caller may reuse the slot, as the mean gradient does for
        its intercept).
        """
        if not (u.flags.c_contiguous and u.dtype == np.float64):
            u = np.ascontiguousarray(u, dtype=np.float64)
        _csc_matvec(self.shape[1] + 1, self.shape[0], *self._arrays(), u, out)
        return out

    @property
    def T(self):
        if self._T is None:
            self._T = _EllRowsT(self)
        return self._T

    def toarray(self):
        n, D = self.shape
        out = np.zeros((n, D + 1))
        out[np.arange(n)[:, None], self.cols] = 1.0 if self.vals is None else self.vals
        return out[:, :D].copy()

    def multiply(self, other):
        """The elementwise product with itself (``row_sq_norms``, ``sum_of_squares``)."""
        if other is not self:
            raise NotImplementedError("EllRows.multiply: only X.multiply(X)")
        return EllRows(self.cols, None if self.vals is None else self.vals * self.vals, self.n_features)

    def sum(self, axis=None):
        if axis != 1:
            raise NotImplementedError("EllRows.sum: only axis=1")
        real = self.cols != self.n_features
        return np.where(real, 1.0 if self.vals is None else self.vals, 0.0).sum(axis=1)


class _EllRowsT:
    """``X.T`` of an :class:`EllRows` ``X``, for products ``X.T @ u``."""

    def __init__(self, rows):
        self.rows = rows
        self.shape = rows.shape[::-1]

    def __matmul__(self, u):
        if u.ndim == 2:
            return np.stack([self @ u[:, j] for j in range(u.shape[1])], axis=1)
        return self.rows.rmatvec_into(u, np.zeros(self.rows.shape[1] + 1))[: self.rows.shape[1]]


def ell_copy(narrow):
    """``(cols (N, k) int32, vals (N, k) or None)`` of a one-byte ``narrow`` X, or False when
    some row has more than a quarter of its columns nonzero (padded rows would not pay)."""
    if narrow is None or _csr_matvec is None:
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


class PaddedRows(ByteRows):
    """Rows of a sparse, integer-valued dense ``X`` gathered as :class:`EllRows` for products.

    When X is integer-valued in a byte and sparse (at most a quarter of its columns nonzero
    in any row, as one-hot features are), a products-only gather returns the rows'
    nonzeros: it reads ``n k`` indices instead of ``n D`` bytes and needs no cast to
    ``n D`` floats, and each product with the minibatch costs ``O(n k)``. On a9a at batch
    500 that takes 17 us off a gradient of 48. Other gathers, and X that does not suit,
    read the one-byte copy (:class:`ByteRows`). Built on the first products-only gather.
    """

    #: ``(cols, vals or None)``, False once X is known not to suit, None before.
    ell = None

    @property
    def nbytes(self):
        return super().nbytes + _nbytes(self.ell)

    def padded(self):
        """The padded arrays ``(cols, vals or None)``, or None."""
        ell = self.ell
        if ell is None:
            ell = self.ell = ell_copy(self.gather_source())
        return None if ell is False else ell

    def gather(self, idx, *, products_only=False):
        if products_only and (isinstance(idx, np.ndarray) or (isinstance(idx, slice) and idx.step is None)):
            ell = self.padded()
            if ell is not None:
                cols, vals = ell
                if isinstance(idx, slice):  # an epochs block: views, no copy
                    X, y = EllRows(cols[idx], None if vals is None else vals[idx], self.n_features), self.y[idx]
                else:
                    # The ndarray.take methods, not np.take: the same gather without
                    # fromnumeric's wrapper (half a microsecond a call, two calls every step).
                    X = EllRows(
                        cols.take(idx, axis=0), None if vals is None else vals.take(idx, axis=0), self.n_features
                    )
                    y = self.y.take(idx, axis=0)
                w, off = self.sample_weight, self.offset
                return Block(
                    X,
                    self._targets(y),
                    None if w is None else self.take_rows(w, idx),
                    None if off is None else self.take_rows(off, idx),
                )
        return super().gather(idx, products_only=products_only)
