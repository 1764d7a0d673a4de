"""Rows held in memory as a dense array or a sparse matrix, and rows of a memory map."""

import numpy as np
import scipy.sparse as sp

from ._source import Block, RowSource, _nbytes, row_block


class ArrayRows(RowSource):
    """Rows of an in-memory dense array or scipy.sparse matrix.

    A minibatch's rows are gathered with ``np.take`` (dense; markedly faster than fancy
    indexing) or a sparse row gather; a full-data pass reads blocks of rows as views of X
    (:func:`~skbayes_sg.rows.row_block`). Sparse formats other than CSR are read whole (a
    row block of them would be a conversion).

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (N, D)
    y : ndarray of shape (N,) or None
    sample_weight, offset : ndarray of shape (N,) or None
    y_dtype : numpy dtype or None
        Every block's targets are converted to it (the compact class codes of the
        classifiers stay one byte a row in storage).
    """

    def __init__(self, X, y, *, sample_weight=None, offset=None, y_dtype=None):
        self.X, self.y, self.sample_weight, self.offset, self.y_dtype = X, y, sample_weight, offset, y_dtype

    @property
    def n_rows(self):
        return self.X.shape[0]

    @property
    def n_features(self):
        return self.X.shape[1]

    #: Sparse X in padded form (:func:`ell_from_sparse`): False where that does not pay, None
    #: before it is first asked for.
    _padded_sparse = None

    @property
    def nbytes(self):
        return _nbytes(self.X) + _nbytes(self._padded_sparse) + super().nbytes

    def padded(self):
        """``(cols, vals or None)``: the rows in padded form for products with stacked minibatches
        (the chains' stacked forces, :mod:`skbayes_sg.models._fused_minibatch`), or None.
        Sparse CSR X is padded on first request, when that pays (:func:`ell_from_sparse`); dense
        X here has no padded form (a one-byte copy's is :class:`~._padded.PaddedRows`')."""
        if not sp.issparse(self.X):
            return None
        if self._padded_sparse is None:
            self._padded_sparse = ell_from_sparse(self.X)
        return self._padded_sparse or None

    def _targets(self, y):
        return y if self.y_dtype is None else y.astype(self.y_dtype, copy=False)

    def _gather_features(self, idx):
        """Features of the rows ``idx`` (a 1-D index array) from the storage gathers read."""
        return np.take(self.X, idx, axis=0)

    def gather(self, idx, *, products_only=False):
        X = self.X
        if idx is None or (isinstance(idx, slice) and idx == slice(None)):
            # All rows (a full-data gradient's slice(None)): X itself, as a dense X's slice is
            # a view. Sparse X[:] copies every entry, three times the products' own memory
            # traffic: 43% of a full-data mCCAdL fit on 50,000 x 2,000 sparse rows.
            return Block(X, self._targets(self.y), self.sample_weight, self.offset)
        if isinstance(idx, np.ndarray) and idx.ndim > 1:
            return self._gather_paths(idx)
        if isinstance(idx, np.ndarray) and isinstance(X, np.ndarray):
            Xb, y = self._gather_features(idx), np.take(self.y, idx, axis=0)
        else:
            Xb, y = X[idx], self.y[idx]
        return Block(Xb, self._targets(y), self.take_rows(self.sample_weight, idx), self.take_rows(self.offset, idx))

    def _gather_paths(self, idx):
        """Dense features (M, n, D) and targets, weights, offsets (M, n) of index rows (M, n)."""
        X = self.X
        if sp.issparse(X):
            Xb = X[idx.ravel()].toarray().reshape(*idx.shape, X.shape[1])
        else:
            Xb = X[idx]
        w, off = self.sample_weight, self.offset
        return Block(
            Xb, self._targets(self.y[idx]), None if w is None else np.take(w, idx), None if off is None else off[idx]
        )

    def block_slices(self, rows_per_block):
        N, m = self.n_rows, rows_per_block
        if N <= m or (sp.issparse(self.X) and self.X.format != "csr"):
            return [None]
        return [slice(start, start + m) for start in range(0, N, m)]

    def block(self, rows):
        if rows is None:
            return self.gather(None)
        return Block(
            row_block(self.X, rows),
            self._targets(self.y[rows]),
            None if self.sample_weight is None else self.sample_weight[rows],
            None if self.offset is None else self.offset[rows],
        )


class MemmapRows(ArrayRows):
    """Rows of a memory-mapped dense array (``numpy.memmap`` or a view of one).

    Gathers and blocks read the map directly; the source keeps no copy and tells models to
    keep no per-row state (``keeps_row_state`` False), so a fit's memory stays bounded by a
    block whatever N. The decision is made where the model is built: in joblib's process
    workers every large array arrives memory-mapped, and a model built in the caller on
    in-memory data keeps its in-memory source there.
    """

    keeps_row_state = False

    @property
    def nbytes(self):
        # The pages of X belong to the file, not to this object.
        return RowSource.nbytes.fget(self)


def ell_from_sparse(X):
    """``(cols (N, k), vals (N, k) or None)`` of sparse ``X`` in padded form (its rows' entries in
    their stored order, the phantom column ``D`` for padding), or False where padding would not
    pay: a row with more than a quarter of its columns stored, or rows so uneven that the
    padded arrays would hold more than twice the stored entries."""
    if not sp.issparse(X) or X.format != "csr":
        return False
    N, D = X.shape
    counts = np.diff(X.indptr)
    k = int(counts.max()) if N else 0
    if k == 0 or 4 * k > D or N * k > 2 * max(X.nnz, 1):
        return False
    rows = np.repeat(np.arange(N), counts)
    slot = np.arange(X.nnz) - np.repeat(X.indptr[:-1], counts)
    cols = np.full((N, k), D, dtype=np.int32 if N * k < 2**31 - 1 else np.int64)
    cols[rows, slot] = X.indices
    data = np.asarray(X.data, dtype=np.float64)
    vals = None
    if (data != 1.0).any():
        vals = np.zeros((N, k))
        vals[rows, slot] = data
    return cols, vals
