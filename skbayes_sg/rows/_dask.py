"""Rows that live in the partitions of dask arrays on a ``dask.distributed`` cluster.

:class:`DaskRows` keeps the data where it is: a full-data pass sends the model's function to
every partition (one task each, run on the worker that holds it) and the driver receives
one sum per partition (P-vectors, P x P matrices), never rows; a gather asks each partition
that holds some of the requested rows once (one task per partition, the rows put back in
the order asked). Minibatch rows are drawn before they are used (a gradient estimator's
queue of minibatches, see :meth:`RowSource.prefetch`), so the rows of a whole queue arrive
in one bulk gather and the chains then read them on the driver.

dask and distributed are imported here only: the layer's other sources do not need them,
and the package does not depend on them.
"""

import weakref

import numpy as np

from ._source import Block, RowSource, _add

#: Prefetched row sets kept per source for prefetches without an owner (a queue of
#: minibatches keeps its own, see :meth:`DaskRows.prefetch`); a gather of rows no set holds
#: asks the partitions directly (the same rows, one more request).
PREFETCH_SLOTS = 4
#: Rows a prefetch fetches at most (a queue of 256 minibatches of 200 rows is 51,200).
PREFETCH_MAX_ROWS = 2**16
#: Results of full-data passes remembered (see :meth:`DaskRows.together`).
MEMO_SLOTS = 8


def _partition_sum(f, rows_per_block, X, y, w, off, y_dtype):
    """``sum_b f(block_b)`` over the blocks of one partition, on the worker that holds it.

    Blocks of ``rows_per_block`` rows, their features in float64 (the in-memory sources'
    dtype), so a worker's temporaries stay bounded by a block whatever the partition's
    size; one BLAS thread, so the sums do not depend on the worker's thread count.
    """
    from threadpoolctl import threadpool_limits

    total = None
    with threadpool_limits(limits=1, user_api="blas"):
        for start in range(0, max(X.shape[0], 1), rows_per_block):
            rows = slice(start, start + rows_per_block)
            part = f(_block(X, y, w, off, y_dtype, rows))
            total = part if total is None else _add(total, part)
    return total


def _partition_sums(fs, rows_per_block, X, y, w, off, y_dtype):
    """:func:`_partition_sum` of several functions in one read of the partition (a tuple of sums)."""
    from threadpoolctl import threadpool_limits

    totals = [None] * len(fs)
    with threadpool_limits(limits=1, user_api="blas"):
        for start in range(0, max(X.shape[0], 1), rows_per_block):
            block = _block(X, y, w, off, y_dtype, slice(start, start + rows_per_block))
            for i, f in enumerate(fs):
                part = f(block)
                totals[i] = part if totals[i] is None else _add(totals[i], part)
    return tuple(totals)


def _partition_map(f, rows_per_block, X, y, w, off, y_dtype):
    """``f(block)`` of the blocks of one partition, concatenated (a tuple of outputs stays one)."""
    from threadpoolctl import threadpool_limits

    parts = []
    with threadpool_limits(limits=1, user_api="blas"):
        for start in range(0, max(X.shape[0], 1), rows_per_block):
            parts.append(f(_block(X, y, w, off, y_dtype, slice(start, start + rows_per_block))))
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p) for p in zip(*parts))
    return np.concatenate(parts)


def _partition_take(local, X, y, w, off):
    """Rows ``local`` (indices within the partition) of one partition's arrays."""
    return (
        np.take(X, local, axis=0),
        np.take(y, local),
        None if w is None else np.take(w, local),
        None if off is None else np.take(off, local),
    )


def _block(X, y, w, off, y_dtype, rows):
    y = y[rows]
    return Block(
        np.asarray(X[rows], dtype=np.float64),
        y if y_dtype is None else y.astype(y_dtype, copy=False),
        None if w is None else np.asarray(w[rows], dtype=np.float64),
        None if off is None else np.asarray(off[rows], dtype=np.float64),
    )


def _gather(client, futures, verbose, desc):
    """``client.gather(futures)``; with ``verbose``, a progress bar of partitions done."""
    if not verbose:
        return client.gather(futures)
    from distributed import as_completed

    from .._progress import progress_bar

    with progress_bar(len(futures), desc, unit="partitions") as bar:
        for _ in as_completed(futures):
            bar.update(1)
    return client.gather(futures)


class DaskRows(RowSource):
    """Rows of dask arrays chunked by rows, on the workers of a ``dask.distributed`` client.

    Parameters
    ----------
    X : dask.array.Array of shape (N, D)
        Features, chunked by rows only (one chunk across the columns), known chunk sizes.
    y : dask.array.Array of shape (N,)
        Targets, chunked as X's rows.
    sample_weight, offset : dask.array.Array of shape (N,) or None
        Chunked as X's rows.
    y_dtype : numpy dtype or None
    client : distributed.Client or None
        The client whose workers hold the partitions (None: the current one).
    persist : bool, default=True
        Keep the partitions in the workers' memory for the fit (``client.persist``): every
        pass and every gather then reads them, where a lazily defined array would be
        recomputed by each. False for arrays already persisted.

    Notes
    -----
    Models keep no per-row state beside these rows (``keeps_row_state`` False): the driver
    holds the prefetched rows of the chains' queues and nothing that grows with N.
    ``n_passes`` counts the full-data passes (a pass repeated with the same function and
    arguments, such as the Hessian at the MAP asked again by the preconditioner, is served
    from the last results and not counted); ``n_gathers`` the bulk gathers;
    ``n_ahead_used`` and ``n_ahead_missed`` the queues whose rows had been gathered ahead and
    were, or were not, the rows the queue drew.
    """

    keeps_row_state = False
    remote = True
    #: With ``verbose > 0`` each full-data pass shows a progress bar of its partitions (the
    #: chains' rounds show theirs).
    verbose = 0
    #: Whether a minibatch queue's refill also starts the gather of the next queue's rows
    #: (see :meth:`prefetch`); False: each queue's rows are gathered when it is refilled.
    #: The draws are the same either way.
    overlap = True

    def __init__(self, X, y, *, sample_weight=None, offset=None, y_dtype=None, client=None, persist=True):
        from distributed import futures_of, get_client

        self.client = get_client() if client is None else client
        arrays = [a for a in (X, y, sample_weight, offset)]
        present = [a for a in arrays if a is not None]
        if persist:
            # One persist per array (see skbayes_sg._dask._persist).
            present = [self.client.persist(a) for a in present]
        it = iter(present)
        arrays = [None if a is None else next(it) for a in arrays]
        self._arrays = arrays
        self._parts = [None if a is None else _partition_futures(a, futures_of) for a in arrays]
        chunks = X.chunks[0]
        self.starts = np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)
        self._n_rows, self._n_features = int(X.shape[0]), int(X.shape[1])
        self.y_dtype = y_dtype
        self.y = self.sample_weight = self.offset = None
        self._has_weight, self._has_offset = sample_weight is not None, offset is not None
        self._cache = []
        self._owned = weakref.WeakKeyDictionary()  # minibatch queue -> its prefetched rows
        self._ahead = weakref.WeakKeyDictionary()  # minibatch queue -> its Lookahead
        self._memo = []
        self._recording = self._first_row = None
        self.n_passes = self.n_gathers = 0
        self.n_ahead_used = self.n_ahead_missed = 0

    # The source is the data: a copy is the same source (no copy of the partitions), and
    # one pickled into a task travels without them (the task reads its own partition).
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(
            client=None, _arrays=None, _parts=None, _cache=[], _owned=None, _ahead=None, _memo=[], _first_row=None
        )
        return state

    @property
    def n_rows(self):
        return self._n_rows

    @property
    def n_features(self):
        return self._n_features

    @property
    def n_partitions(self):
        return self.starts.size - 1

    @property
    def nbytes(self):
        """Bytes held on the driver: the prefetched rows (the partitions are the workers')."""
        entries = [*self._cache, *self._owned.values()]
        return sum(sum(getattr(a, "nbytes", 0) for a in entry) for entry in entries)

    def _partition_args(self, p):
        return [None if parts is None else parts[p] for parts in self._parts]

    def _check_attached(self):
        if self._parts is None:
            raise RuntimeError(
                "These DaskRows travelled to another process without their partitions: fit on dask input "
                "runs its chains in the client's process (n_jobs=None)."
            )

    # -- full-data passes -----------------------------------------------------------------
    def _memo_key(self, f, rows_per_block):
        """What identifies a pass: ``f``'s code and the values it closes over (arrays by their
        bytes, other objects by identity), or None when ``f`` is not a closure of that kind."""
        code = getattr(f, "__code__", None)
        if code is None:
            return None
        cells = []
        for cell in f.__closure__ or ():
            v = cell.cell_contents
            cells.append((v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else id(v))
        return (code, rows_per_block, tuple(cells))

    def together(self, *calls):
        """``[call() for call in calls]``, their full-data passes made as one pass.

        Each call (a model method bound to its arguments, such as the log posterior and the
        Hessian at one point) is first run against a one-row stand-in to learn which block
        functions it reduces; one task per partition then computes all of them from a
        single read of the partition, and the calls run again, served from those sums.
        """
        recorded = []
        self._recording = recorded
        try:
            for call in calls:
                call()
        finally:
            self._recording = None
        fs = [f for f, _ in recorded]
        if fs:
            rows_per_block = recorded[0][1]
            self._check_attached()
            self.n_passes += 1
            futures = [
                self.client.submit(
                    _partition_sums, fs, rows_per_block, *self._partition_args(p), self.y_dtype, pure=False
                )
                for p in range(self.n_partitions)
            ]
            results = _gather(self.client, futures, self.verbose, f"pass {self.n_passes} over the data")
            for i, (f, rpb) in enumerate(recorded):
                self._remember(self._memo_key(f, rpb), [r[i] for r in results], f)
        return [call() for call in calls]

    def _remember(self, key, results, f):
        if key is not None:
            # Each entry keeps ``f`` (and so the objects it closes over) alive, so that the ids
            # in the keys cannot be reused by other objects.
            self._memo = [(key, results, f)] + self._memo[: MEMO_SLOTS - 1]

    def _stand_in(self, f, rows_per_block):
        """What :meth:`together` returns while recording: ``f`` of one row, the sum's shape."""
        self._recording.append((f, rows_per_block))
        if self._first_row is None:
            self._first_row = self.gather(np.zeros(1, dtype=np.intp))
        return [f(self._first_row)]

    def _run(self, func, f, rows_per_block):
        if self._recording is not None and func is _partition_sum:
            return self._stand_in(f, rows_per_block)
        self._check_attached()
        key = self._memo_key(f, rows_per_block)
        for k, value, _ in self._memo:
            if key is not None and k == key:
                return value
        self.n_passes += 1
        futures = [
            self.client.submit(func, f, rows_per_block, *self._partition_args(p), self.y_dtype, pure=False)
            for p in range(self.n_partitions)
        ]
        results = _gather(self.client, futures, self.verbose, f"pass {self.n_passes} over the data")
        self._remember(key, results, f)
        return results

    def reduce_blocks(self, f, rows_per_block):
        """``sum_p f(partition p)``: each partition's sum on its worker, summed here in partition order."""
        total = None
        for part in self._run(_partition_sum, f, rows_per_block):
            total = part if total is None else _add(total, part)
        return total

    def map_rows(self, f, rows_per_block, width=None):
        """``f`` of every row, computed on the workers and concatenated here: N numbers per output.

        The one operation whose result grows with N; the models call it only for per-row
        state, which they keep for in-memory sources alone.
        """
        parts = self._run(_partition_map, f, rows_per_block)
        if isinstance(width, tuple):
            return tuple(np.concatenate(p) for p in zip(*parts))
        return np.concatenate(parts)

    def block_slices(self, rows_per_block):
        return [slice(int(a), int(b)) for a, b in zip(self.starts[:-1], self.starts[1:])]

    def block(self, rows):
        return self.gather(np.arange(rows.start, rows.stop) if rows is not None else None)

    # -- gathers ------------------------------------------------------------------------------
    def prefetch(self, idx, owner=None):
        """Gather the rows ``idx`` now, in one bulk request, for the gathers that will ask for them.

        The rows are kept (deduplicated) while their ``owner`` lives and until it prefetches
        again: each minibatch queue holds the rows of its current queue, whatever the other
        queues do. Rows prefetched without an owner stay until :data:`PREFETCH_SLOTS` later
        such prefetches.

        An owner that can draw its next queue ahead (see :class:`Lookahead`) also starts the
        gather of the next queue's rows on the workers, which then runs while the chains
        compute this queue; the next prefetch uses those rows only if its rows are exactly
        the ones drawn ahead, and gathers them itself otherwise.
        """
        uniq = _unique_rows(idx)
        ahead = None if owner is None or not self.overlap else self._lookahead(owner)
        rows = None if ahead is None else ahead.take(uniq, self)
        entry = (uniq, *(self._fetch(uniq) if rows is None else rows))
        if owner is None:
            self._cache = [entry] + self._cache[: PREFETCH_SLOTS - 1]
        else:
            self._owned[owner] = entry
        if ahead is not None:
            ahead.start_next(owner, self)

    def _lookahead(self, owner):
        if getattr(owner, "refill_states", None) is None or not hasattr(owner, "draw_queue"):
            return None
        ahead = self._ahead.get(owner)
        if ahead is None:
            ahead = self._ahead[owner] = Lookahead()
        return ahead

    def _fetch(self, flat):
        """Rows ``flat`` (1-D) as ``(X, y, w, off)`` in the partitions' dtypes: one task per partition holding some."""
        return self._collect(self._submit(flat))

    def _submit(self, flat):
        """Start the gather of rows ``flat`` on the workers; :meth:`_collect` waits for it."""
        self._check_attached()
        self.n_gathers += 1
        part = np.searchsorted(self.starts, flat, side="right") - 1
        order = np.argsort(part, kind="stable")
        sorted_part = part[order]
        bounds = np.flatnonzero(np.diff(sorted_part)) + 1
        groups = np.split(order, bounds)
        futures = []
        for g in groups:
            p = int(part[g[0]])
            local = flat[g] - self.starts[p]
            futures.append(self.client.submit(_partition_take, local, *self._partition_args(p), pure=False))
        return futures, order

    def _collect(self, pending):
        futures, order = pending
        pieces = self.client.gather(futures)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        out = []
        for j in range(4):
            if pieces[0][j] is None:
                out.append(None)
                continue
            out.append(np.concatenate([piece[j] for piece in pieces])[inverse])
        return tuple(out)

    def _lookup(self, flat):
        """The rows ``flat`` from a prefetched set that holds them all, or None."""
        for entry in [*self._owned.values(), *self._cache]:
            uniq = entry[0]
            pos = np.minimum(np.searchsorted(uniq, flat), uniq.size - 1)
            if np.array_equal(uniq[pos], flat):
                return tuple(None if a is None else np.take(a, pos, axis=0) for a in entry[1:])
        return None

    def gather(self, idx, *, products_only=False):
        if idx is None:
            idx = np.arange(self.n_rows)
        elif isinstance(idx, slice):
            idx = np.arange(self.n_rows)[idx]
        idx = np.asarray(idx)
        flat = idx.ravel()
        rows = self._lookup(flat) if flat.size else None
        if rows is None:
            rows = self._fetch(flat)
        X, y, w, off = rows
        # The rows are kept in the partitions' dtypes (float32 features stay half the size);
        # the models compute in float64.
        X = np.asarray(X, dtype=np.float64)
        w = None if w is None else np.asarray(w, dtype=np.float64)
        off = None if off is None else np.asarray(off, dtype=np.float64)
        y = y if self.y_dtype is None else y.astype(self.y_dtype, copy=False)
        shape = idx.shape
        return Block(
            X.reshape(*shape, self.n_features),
            y.reshape(shape),
            None if w is None else w.reshape(shape),
            None if off is None else off.reshape(shape),
        )

    def take_rows(self, a, idx):
        if a is None or idx is None:
            return a
        return super().take_rows(a, idx)


def _unique_rows(idx):
    """The distinct rows of a prefetch of ``idx``, sorted (large queues cut to their first
    :data:`PREFETCH_MAX_ROWS` rows' worth of minibatches)."""
    idx = np.asarray(idx)
    if idx.ndim == 2 and idx.size > PREFETCH_MAX_ROWS:
        # Large minibatches (the step size's noise probe draws a queue of 4096-row ones and
        # uses one): the first that fit; the others are asked for when they come.
        idx = idx[: max(1, PREFETCH_MAX_ROWS // idx.shape[1])]
    return np.unique(idx.ravel())


class Lookahead:
    """The next queue of one minibatch queue, drawn ahead and its rows' gather started.

    A queue's rows do not depend on the chain's position, only on its generator, which
    between two refills draws the chain's noise: a fixed number of standard normals per
    queue for the kernels that draw nothing else. That number is learned from the first
    two refills (the normals that take the generator from the state after one refill to
    the state before the next); from then on each refill draws the next queue on a copy
    of the generator advanced by that many normals and starts its gather. Whatever the
    kernel draws, the chain's own generator is never touched and the rows a queue uses
    are the rows it drew: drawn-ahead rows serve a refill only when they are its rows
    exactly (a kernel that draws otherwise just gets no overlap).
    """

    #: Normals tried, one at a time, when learning the draws between refills.
    MAX_NORMALS = 2**15

    def __init__(self):
        self.normals = None  # per queue; -1 when not found
        self.after = None  # the generator's state after the last refill
        self.pending = None  # (rows drawn ahead, their gather)

    def take(self, uniq, rows):
        """The gathered rows ``uniq`` if they are the ones drawn ahead, else None (its gather dropped)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return None
        ahead, gather = pending
        if np.array_equal(ahead, uniq):
            rows.n_ahead_used += 1
            return rows._collect(gather)
        # The kernel drew something else between the refills: learn the count again.
        rows.n_ahead_missed += 1
        self.normals = None
        rows.client.cancel(gather[0])
        return None

    def start_next(self, owner, rows):
        """Draw the queue after ``owner``'s current one (on a copy of its generator) and start its gather."""
        before, after = owner.refill_states
        if self.normals is None and self.after is not None:
            self.normals = _normals_between(self.after, before, self.MAX_NORMALS)
        self.after = after
        if self.normals is None or self.normals < 0:
            return
        rng = _generator(after)
        rng.standard_normal(self.normals)
        ahead = _unique_rows(owner.draw_queue(rng))
        self.pending = (ahead, rows._submit(ahead))


def _generator(state):
    rng = np.random.Generator(getattr(np.random, state["bit_generator"])())
    rng.bit_generator.state = state
    return rng


def _normals_between(start, stop, limit):
    """How many standard normals drawn one by one take a generator from state ``start`` to
    ``stop`` (-1: none up to ``limit``)."""
    rng = _generator(start)
    bitgen = rng.bit_generator
    for k in range(limit + 1):
        if bitgen.state == stop:
            return k
        rng.standard_normal()
    return -1


def _partition_futures(a, futures_of):
    """One future per row partition of the persisted dask array ``a``, in row order."""
    by_key = {f.key: f for f in futures_of(a)}
    keys = a.__dask_keys__()
    while isinstance(keys, list) and keys and isinstance(keys[0], list):
        keys = [k[0] for k in keys]  # (row, column) keys of a 2-D array: one column chunk
    return [by_key[k] for k in keys]
