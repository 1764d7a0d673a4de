"""Data access: how models read rows.

Every model reads its training rows through a :class:`RowSource`: a minibatch's rows by
one gather of an index array, full-data passes by reductions over blocks of rows. The
implementations here hold the rows in memory (:class:`ArrayRows`, dense or sparse), as a
one-byte copy of integer-valued features (:class:`ByteRows`), as padded sparse rows
(:class:`PaddedRows`) or in a memory map (:class:`MemmapRows`); :func:`as_row_source`
chooses among them; :class:`DaskRows` reads the partitions of dask arrays on a cluster. The
layer imports nothing else of the package.
"""

import numpy as np
import scipy.sparse as sp

from ._array import ArrayRows, MemmapRows
from ._dask import DaskRows
from ._narrow import ByteRows, narrow_copy
from ._padded import EllRows, PaddedRows
from ._source import (
    Block,
    RowSource,
    aligned,
    aligned_state,
    block_threads,
    memory_mapped,
    ordered_map,
    pass_threads,
    row_block,
    transpose,
)

#: Elements of the per-row temporaries of one block of a full-data pass: blocks of 2**14
#: rows (one output) take a few MiB whatever N, where a whole memmapped X took tens of bytes
#: a row. The block's features are a view, never a copy. Each block's BLAS calls run on one
#: BLAS thread, and a fit's passes share its ``n_jobs`` cores by blocks
#: (:func:`~skbayes_sg.rows._source.block_threads`): at 2**16 rows a9a (32,561 rows) was one
#: block and its set-up passes used one core; at 2**14 its Hessian takes 16-21 ms instead of
#: 30 on two cores, its whitened row weights 12 instead of 25 (the fit's set-up 0.23 s
#: instead of 0.29-0.35). The partition depends on N alone, never on ``n_jobs``, so the
#: passes' sums, and the draws, are the same whatever the cores.
BLOCK_ELEMENTS = 2**14


def as_row_source(X, y, *, sample_weight=None, offset=None, y_dtype=None, padded=False, compact=True):
    """The row source for ``X``: what a model built on ``X`` reads its rows through.

    Parameters
    ----------
    X : ndarray, numpy.memmap or sparse matrix of shape (N, D), or a RowSource
        A RowSource is returned as it is (it holds its own targets: ``y`` must be None),
        told ``y_dtype`` when it has none.
    y : ndarray of shape (N,) or None
    sample_weight, offset : ndarray of shape (N,) or None
    y_dtype : numpy dtype or None
        The dtype of every block's targets.
    padded : bool, default=False
        Whether products-only gathers may return padded sparse rows (:class:`PaddedRows`):
        worth it for one-output models, whose products are matrix-vector products.
    compact : bool, default=True
        Whether gathers may read a one-byte copy of integer-valued X (:class:`ByteRows`, N D
        bytes more memory for a faster gather); False gives :class:`ArrayRows`.

    Returns
    -------
    RowSource
        :class:`MemmapRows` for a memory map, :class:`ArrayRows` for sparse X (or not
        ``compact``), else :class:`PaddedRows` (``padded``) or :class:`ByteRows`.
    """
    if isinstance(X, RowSource):
        if y is not None:
            raise ValueError("A RowSource holds its own targets: give y to the source and y=None to the model.")
        if X.y_dtype is None:
            X.y_dtype = y_dtype
        return X
    kw = dict(sample_weight=sample_weight, offset=offset, y_dtype=y_dtype)
    if memory_mapped(X):
        return MemmapRows(X, y, **kw)
    if sp.issparse(X) or not isinstance(X, np.ndarray) or not compact:
        return ArrayRows(X, y, **kw)
    return (PaddedRows if padded else ByteRows)(X, y, **kw)


__all__ = [
    "aligned",
    "aligned_state",
    "BLOCK_ELEMENTS",
    "ArrayRows",
    "Block",
    "block_threads",
    "ByteRows",
    "DaskRows",
    "EllRows",
    "MemmapRows",
    "PaddedRows",
    "RowSource",
    "as_row_source",
    "memory_mapped",
    "narrow_copy",
    "ordered_map",
    "pass_threads",
    "row_block",
    "transpose",
]
