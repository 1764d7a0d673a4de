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

    @property
    def nbytes(self):
        return _nbytes(self.X) + super().nbytes

    def _targets(self, y):
        return y if self.y_dtype is None else y.astype(self.y_dtype, copy=False)

    def _gather_features(self, idx):
        """Features of the rows ``idx`` (a 1-D index array) from the storage gathers read."""
        return np.take(self.X, idx, axis=0)

    def gather(self, idx, *, products_only=False):
        X = self.X
        if idx is None:
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
