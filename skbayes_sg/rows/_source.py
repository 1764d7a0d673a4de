"""The row-source interface: how a model reads its data.

A model never indexes its training data itself: it asks a :class:`RowSource` for the rows
of a minibatch (:meth:`RowSource.gather`, a whole index array at once, the rows in that
order) and for full-data passes (:meth:`RowSource.reduce_blocks`, which applies a function
to each block of rows and sums the results, or :meth:`RowSource.map_rows`, which
concatenates per-row results). A source whose rows live elsewhere (partitions of an array
on a cluster) implements the same three calls: the gather is one bulk request for every
index it is given, and a full-data pass sends the function to where the blocks are and
returns only the sums.

The targets, the per-row likelihood weights and the per-row offsets of the linear
predictor travel with the rows: every block is a :class:`Block`.
"""

import contextvars
import itertools
import mmap
import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

#: Threads that run a full-data pass's blocks (:func:`block_threads`); 1: the calling thread alone.
_BLOCK_THREADS = contextvars.ContextVar("skbayes_sg_block_threads", default=1)
_POOLS = {}
_POOLS_LOCK = threading.Lock()


def _after_fork_in_child():
    """A forked process (the chains' workers, :mod:`skbayes_sg._pools`) has none of its
    parent's threads: the pools it inherited would take work that no thread runs, and their
    lock may have been held by one of them. It starts without pools, and its passes run in
    its one thread, the worker's share of the cores."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()
    _BLOCK_THREADS.set(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextmanager
def block_threads(n_threads):
    """Within the block, full-data passes (:meth:`RowSource.reduce_blocks`, :meth:`RowSource.map_rows`)
    compute up to ``n_threads`` blocks at once, on threads of this process.

    NumPy and BLAS release the GIL in a block's products and element-wise work, so ``n_threads``
    cores share a pass. The results are bit-identical to one thread's: every block is
    computed alone, as before (on one BLAS thread where the caller limits BLAS so), and the
    blocks' results are summed or placed in row order. Each block runs in a copy of the
    caller's context (NumPy's ``errstate`` holds there).
    """
    token = _BLOCK_THREADS.set(max(1, int(n_threads)))
    try:
        yield
    finally:
        _BLOCK_THREADS.reset(token)


def pass_threads(n_jobs):
    """Threads of a fit's full-data passes for the estimator's ``n_jobs``: None (the default)
    gives 1, otherwise joblib's count of workers, at most the machine's cores."""
    if n_jobs is None:
        return 1
    from joblib import effective_n_jobs

    return max(1, min(effective_n_jobs(n_jobs), os.cpu_count() or 1))


def _pool(n_threads):
    """One pool of ``n_threads`` threads per process and size, made at its first use."""
    with _POOLS_LOCK:
        pool = _POOLS.get(n_threads)
        if pool is None:
            pool = _POOLS[n_threads] = ThreadPoolExecutor(n_threads, thread_name_prefix="skbayes_sg-blocks")
        return pool


def ordered_map(f, items):
    """``f(item)`` for each of ``items``, yielded in their order, computed on :func:`block_threads`
    threads when more than one is allowed (in this thread otherwise).

    At most ``2 n_threads`` items are in flight, so a pass over blocks of rows holds a few
    blocks' temporaries, never N's. Each call runs in a copy of the caller's context (its
    NumPy ``errstate``) in which passes are not threaded again: a pool thread never waits on
    the pool.
    """
    n_threads = _BLOCK_THREADS.get()
    if n_threads <= 1:
        return (f(item) for item in items)
    return _threaded(f, items, n_threads)


_END = object()


def _threaded(f, items, n_threads):
    items = iter(items)
    first = next(items, _END)
    second = next(items, _END) if first is not _END else _END
    if second is _END:
        # One block (small data): nothing to share between threads, and handing it to the pool
        # (in a process's first fit, starting the pool's threads: 3-4 ms of a 0.1 s fit on
        # breast cancer) costs more than the block. Computed as a pool thread would.
        if first is not _END:
            context = contextvars.copy_context()
            context.run(_BLOCK_THREADS.set, 1)
            yield context.run(f, first)
        return
    items = itertools.chain((first, second), items)
    pool, pending = _pool(n_threads), deque()
    try:
        for item in items:
            context = contextvars.copy_context()
            context.run(_BLOCK_THREADS.set, 1)
            pending.append(pool.submit(context.run, f, item))
            if len(pending) >= 2 * n_threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:  # an error or an abandoned pass: drop the calls not started
            future.cancel()


class Block(NamedTuple):
    """Rows of the data as a model consumes them.

    Attributes
    ----------
    X : ndarray, sparse matrix or operator of shape (n, D)
        Features; anything a likelihood can multiply (``X @ v``, ``X.T @ u``). A stack
        (..., n, D) for a stack of index arrays.
    y : ndarray of shape (n,)
        Targets, in the dtype the source was asked for.
    sample_weight : ndarray of shape (n,) or None
        Likelihood weights of the rows; None when all are one.
    offset : ndarray of shape (n,) or None
        Per-row offsets added to the linear predictor (an exposure's log); None when zero.
    """

    X: object
    y: object
    sample_weight: object
    offset: object


def memory_mapped(X):
    """Whether dense ``X`` lives in a memory map (a ``numpy.memmap`` or a view of one, as
    ``validate_data`` returns for a memmap)."""
    while isinstance(X, np.ndarray):
        if isinstance(X, np.memmap):
            return True
        X = X.base
    return isinstance(X, mmap.mmap)


def aligned(value):
    """``value`` with every ndarray in it that is misaligned for its dtype replaced by an
    aligned copy (in tuples, lists and the arrays of a scipy sparse matrix too).

    Unpickling can place an array at any byte: dask's serialisation packs several buffers
    in one frame, and a float64 X after a uint8 y of 569 bytes started at an odd address in
    a worker. NumPy and BLAS take other code paths for misaligned data (numpy copies it
    through buffers, BLAS gets another product), whose sums round differently in the last
    bit from the same product on aligned data in the caller: full-data gradients, and so
    the draws, then depended on where the chains ran. Aligned arrays are kept as they are
    (their offset modulo a cache line does not change a product's rounding), and memory
    maps are never copied.
    """
    if isinstance(value, np.ndarray):
        if value.flags.aligned or memory_mapped(value):
            return value
        return np.array(value, copy=True, order="K")
    if isinstance(value, (tuple, list)):
        return type(value)(aligned(v) for v in value)
    if sp.issparse(value):
        for name in ("data", "indices", "indptr"):
            if hasattr(value, name):
                setattr(value, name, aligned(getattr(value, name)))
    return value


def aligned_state(obj, state):
    """Set ``obj.__dict__`` from a pickled ``state`` with :func:`aligned` arrays (a
    ``__setstate__``)."""
    obj.__dict__.update({key: aligned(value) for key, value in state.items()})


def row_block(X, rows):
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


def transpose(X):
    """``X.T``; for CSR ``X``, a CSC matrix over the same arrays.

    scipy's transpose goes through the constructor, which copies the arrays of a row
    block from :func:`row_block` (views of a small part of X's): every ``X.T @ r`` of a
    full-data pass would copy the block's entries, a quarter of its time.
    """
    if not (sp.issparse(X) and X.format == "csr"):
        return X.T
    csc = sp.csc_matrix if isinstance(X, sp.spmatrix) else sp.csc_array
    T = csc((X.shape[1], X.shape[0]), dtype=X.dtype)
    T.data, T.indices, T.indptr = X.data, X.indices, X.indptr
    return T


def _add(total, part):
    """``total + part`` for numbers, arrays and tuples of them (None stays None)."""
    if isinstance(part, tuple):
        return tuple(_add(t, p) for t, p in zip(total, part))
    if part is None:
        return None
    return total + part


class RowSource:
    """Rows of a data set, their targets, weights and offsets, as a model reads them.

    Subclasses implement :meth:`gather`, :meth:`block_slices` and :meth:`block`; the
    reductions over blocks are derived here. ``n_rows`` and ``n_features`` give the shape,
    ``nbytes`` the memory held (``Model.__sizeof__`` reports it, so that dask's ``sizeof``
    sees the data), and ``keeps_row_state`` whether a model may keep per-row caches beside
    it (False for data on disk: a fit over it allocates nothing that grows with N).

    Attributes
    ----------
    y : ndarray of shape (N,)
    sample_weight : ndarray of shape (N,) or None
    offset : ndarray of shape (N,) or None
    y_dtype : numpy dtype or None
        The dtype the targets of every block are converted to (None: as stored).
    """

    keeps_row_state = True
    #: Whether the rows live in other processes (a cluster's workers): every full-data pass
    #: is then a round trip, and ``batch_size="auto"`` never chooses full-data gradients.
    remote = False
    y = sample_weight = offset = y_dtype = None

    def __setstate__(self, state):
        # Same products, hence same draws, wherever the source is unpickled (see aligned).
        aligned_state(self, state)

    @property
    def n_rows(self):
        """Number of rows ``N``."""
        raise NotImplementedError

    @property
    def n_features(self):
        """Number of features ``D``."""
        raise NotImplementedError

    @property
    def nbytes(self):
        """Bytes held by the source: features, targets, weights, offsets and any copies."""
        return sum(_nbytes(a) for a in (self.y, self.sample_weight, self.offset))

    def gather(self, idx, *, products_only=False):
        """The rows ``idx`` as a :class:`Block`, in the order of ``idx``.

        Parameters
        ----------
        idx : ndarray of int, slice or None
            Row indices (a 2-D array gives a stack of dense (M, n, D) features, one per
            path), a slice (a view where the storage allows) or None (all rows).
        products_only : bool, default=False
            The caller only multiplies the features by vectors (``X @ v``, ``X.T @ u``,
            ``row_sq_norms``): the source may return a lighter operator than a matrix.
        """
        raise NotImplementedError

    def block_slices(self, rows_per_block):
        """Row slices of a full-data pass, ``[None]`` for one block of all rows."""
        raise NotImplementedError

    def block(self, rows):
        """The :class:`Block` of the rows ``rows`` (a slice of :meth:`block_slices`, or None)."""
        raise NotImplementedError

    def blocks(self, rows_per_block):
        """``(rows, Block)`` over all rows in order, at most ``rows_per_block`` rows a block."""
        for rows in self.block_slices(rows_per_block):
            yield rows, self.block(rows)

    def reduce_blocks(self, f, rows_per_block):
        """``sum_b f(block_b)`` over the blocks of all rows, summed in row order.

        ``f`` returns a number, an array or a tuple of them (None entries stay None). What a
        full-data pass allocates is bounded by a block, not N.
        """
        total = None
        for _, part in self._block_results(f, rows_per_block):
            total = part if total is None else _add(total, part)
        return total

    def _block_results(self, f, rows_per_block):
        """``(rows, f(block))`` over the blocks in row order, on :func:`block_threads` threads."""
        return self._slice_results(lambda rows: f(self.block(rows)), rows_per_block)

    def _slice_results(self, g, rows_per_block):
        """``(rows, g(rows))`` over the blocks' row slices in order, on :func:`block_threads` threads."""
        slices = self.block_slices(rows_per_block)
        if len(slices) == 1:  # one block (small data): no thread to hand it to
            return iter([(slices[0], g(slices[0]))])
        return zip(slices, ordered_map(g, slices))

    def map_rows(self, f, rows_per_block, width=None):
        """``f(block)`` of every block, concatenated in row order.

        ``f`` returns one array of a row per row of the block, or a tuple of them; ``width``
        gives each output's shape per row: None for (N,), an int ``w`` for (N, w), a tuple
        of these for a tuple of outputs.
        """
        many = isinstance(width, tuple)
        widths = width if many else (width,)
        outs = tuple(np.empty((self.n_rows,) if w is None else (self.n_rows, w)) for w in widths)

        def place(rows):
            # Written by the thread that computed the block: on large N the first writes to the
            # fresh outputs are much of a pass (page faults), and so they share its threads.
            parts = f(self.block(rows))
            for out, part in zip(outs, parts if many else (parts,)):
                out[slice(None) if rows is None else rows] = part

        for _ in self._slice_results(place, rows_per_block):
            pass
        return outs if many else outs[0]

    def prefetch(self, idx, owner=None):
        """The rows ``idx`` (an index array of any shape) will be gathered soon.

        A source whose rows live elsewhere fetches them now in one bulk request, so that the
        gathers that follow read them locally; in-memory sources have nothing to do.
        ``owner`` (a minibatch queue) replaces its own earlier prefetch, which it no longer
        needs; None: kept among the most recent ones.
        """

    def take_rows(self, a, idx):
        """Rows ``idx`` of a per-row array ``a`` (weights, offsets, a model's per-row cache)."""
        if a is None or idx is None:
            return a
        if isinstance(idx, np.ndarray):
            return np.take(a, idx, axis=0)
        return a[idx]


def _nbytes(a):
    """Bytes of an array, a sparse matrix or a tuple of them."""
    if a is None or a is False:
        return 0
    if sp.issparse(a):
        return a.data.nbytes + a.indices.nbytes + a.indptr.nbytes
    if isinstance(a, tuple):
        return sum(_nbytes(p) for p in a)
    return getattr(a, "nbytes", 0)
