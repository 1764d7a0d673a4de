"""Where a parallel round of chains runs (forked workers, or a joblib backend), and what
starting its workers costs.

joblib's default backend, loky, starts fresh interpreters that import numpy, scipy,
scikit-learn and this package before their first task: 1.1-1.2 s for two workers on a
quiet 2-core machine of the CI kind (``benchmarks/pool_start.py``), more than sharing the
chains saves on a data set the size of a9a (whose default chains take about 2 s in one
process). Where processes fork, :class:`ForkedWorkers` starts the same workers as copies
of this process, imports done: 0.02 s for two. The chains' arithmetic is the same in either
(each task runs on one BLAS thread), and so are the draws.

The forked workers are a standard-library ``multiprocessing`` pool, not joblib's
``"multiprocessing"`` backend: that backend spawns joblib's resource tracker (a fresh
interpreter importing joblib, whose start competes with the workers' first rounds for a
2-core machine's cores) for memory-mapped arrays, which tasks naming what the workers
inherited (the model, the chains' per-row arrays) never need, and it polls for each result
every 10 ms.

Forking is chosen only when nothing else was asked for or would break: the default start
method is ``fork`` (Linux before Python 3.14; ``JOBLIB_START_METHOD`` is honoured), no
``joblib.parallel_config`` backend is in force (``parallel_config(backend="loky")`` keeps
loky, and dask's backend stays dask's), and this is the main thread of a top-level process
(a fork from another thread copies the process while its other threads may hold locks, and
a worker's chains are not split further), and joblib's pool is still the standard library's
(Ray's joblib backend, once used, rebases it on Ray's actors: such a process keeps joblib's
choice).
A process whose libraries cannot be forked safely (a GNU OpenMP runtime that another library
has already used, say) keeps fresh interpreters with ``joblib.parallel_config(backend="loky")``
around the fit.
"""

import gc
import multiprocessing
import multiprocessing.pool
import os
import signal
import threading

import joblib.parallel

#: What starting a pool of loky worker processes costs, in seconds (1.1-1.2 s for two on a
#: quiet 2-core machine, 1-3 s on a busy one).
LOKY_START_SECONDS = 1.5
#: What a pool of forked workers costs, in seconds: starting two, their first round and
#: stopping them take 0.02 s on a quiet 2-core machine (``benchmarks/pool_start.py``); the
#: rest is a margin for a busier machine. At this cost the synthetic fits of N = 2e4 to 1e6
#: and all of a9a's chains fork and are 0.1-0.2 s faster; at 0.25 they kept one process.
FORK_START_SECONDS = 0.1
#: The share of the ideal speed-up that chains shared among workers get: two workers ran a9a's
#: default chains 1.45 times as fast as one process (they contend for memory bandwidth), HMC's
#: full-data chains at N = 2e4 1.5 times.
PARALLEL_EFFICIENCY = 0.75
#: Seconds per data row that a pool's first round spends shipping the chains' per-row arrays
#: (their row distributions) to workers that did not inherit them: 0.4 s at N = 4e6.
ROW_SHIP_SECONDS = 1e-7


def forks_workers():
    """Whether a parallel round here runs on forked workers (:class:`ForkedWorkers`): see the
    module's docstring for when."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if multiprocessing.parent_process() is not None:
        return False
    context = joblib.parallel.DEFAULT_MP_CONTEXT or multiprocessing.get_context()
    if context.get_start_method() != "fork":
        return False
    return not _backend_configured() and _pool_is_multiprocessing()


def _pool_is_multiprocessing():
    """Whether joblib's ``"multiprocessing"`` backend still runs on ``multiprocessing.Pool``.

    Ray's joblib backend, once used, rebases joblib's pool on Ray's actor pool for the rest of
    the process (and may patch more of it): a process where it did keeps joblib's own choice.
    """
    try:
        import joblib.pool

        return joblib.pool.PicklingPool.__bases__ == (multiprocessing.pool.Pool,)
    except (ImportError, AttributeError):
        return False


def _backend_configured():
    """Whether a ``joblib.parallel_config`` (or ``parallel_backend``) context sets a backend.

    joblib keeps that configuration in a thread-local without a public accessor; if its
    layout ever changes, this answers True, and the rounds keep joblib's own choice.
    """
    try:
        config = getattr(joblib.parallel._backend, "config", None)
        if config is None:
            return False
        return config["backend"] is not joblib.parallel.default_parallel_config["backend"]
    except (AttributeError, KeyError, TypeError):
        return True


#: True while a :class:`WorkerPool` forks its workers (see :func:`_after_fork_in_child`).
_FORKING = False


def _after_fork_in_child():
    """A worker forked by a :class:`WorkerPool` ignores SIGINT.

    A terminal's Ctrl-C reaches the whole process group: the workers of a ``multiprocessing``
    pool would die in the middle of a task, and the pool could wait for them for ever (a fit
    interrupted so hung in about one run in four). Left to the fit's own process, the
    interrupt stops the rounds there, which keeps the chains as the last round
    left them and stops the workers (``KeyboardInterrupt`` handling in ``_chains``).
    """
    if _FORKING:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


#: What forked workers find in their copy of this module, by key (the chains' model and their
#: per-row arrays): a task names them instead of carrying them, so X and the O(N) arrays are
#: not pickled per round.
_INHERITED = {}


class _Inherited:
    """The name of an object in :data:`_INHERITED`, what a task to forked workers carries."""

    def __init__(self, key):
        self.key = key


def resolve(obj):
    """What a task was given: ``obj`` itself, or what its :class:`_Inherited` name stands for."""
    return _INHERITED[obj.key] if isinstance(obj, _Inherited) else obj


class ForkedWorkers:
    """Forked worker processes, called as an entered ``joblib.Parallel`` is: an iterable of
    ``joblib.delayed`` calls in, their results out in order (a task's exception raised here).

    A worker that dies in a task (killed for lack of memory, say) raises joblib's
    ``TerminatedWorkerError``, as loky's workers do, where a ``multiprocessing`` pool would wait
    for the lost result for ever.

    Parameters
    ----------
    n_jobs : int or None
        As joblib reads it (``-1``: all cores).
    """

    #: Seconds between checks that every worker is alive while a result is awaited (a result
    #: that arrives is returned at once).
    CHECK_SECONDS = 0.5

    def __init__(self, n_jobs):
        self.n_jobs, self._pool, self._pids = n_jobs, None, None

    def __enter__(self):
        self._pool = multiprocessing.get_context("fork").Pool(joblib.effective_n_jobs(self.n_jobs))
        self._pids = self._worker_pids()
        return self

    def _worker_pids(self):
        # The pool replaces a worker that exits; its list of processes is private but has been
        # the same since Python 3.2.
        return {w.pid for w in getattr(self._pool, "_pool", ())}

    def __call__(self, calls):
        # All submitted before any is awaited, so that the workers run them together. A result
        # is returned as soon as it is ready; the timeout only paces the check for dead workers.
        pending = [self._pool.apply_async(f, args, kwargs) for f, args, kwargs in calls]
        results = []
        for p in pending:
            while True:
                try:
                    results.append(p.get(self.CHECK_SECONDS))
                    break
                except multiprocessing.TimeoutError:
                    if self._worker_pids() != self._pids:
                        raise _worker_died() from None
        return results

    #: Seconds :meth:`__exit__` waits for the pool to stop before it kills the workers and goes on.
    STOP_SECONDS = 10.0

    def __exit__(self, *exc_info):
        pool, self._pool = self._pool, None
        if pool is not None:
            _stop(pool, self.STOP_SECONDS)


def _stop(pool, seconds):
    """``pool.terminate(); pool.join()``, waited for at most ``seconds``, then the workers killed.

    ``Pool.terminate`` can block for ever when a worker stops while it holds the task queue's
    lock (once in this suite, under load, after a task had raised): a fit must raise its
    error, not hang. The stop runs in a daemon thread; if it has not finished in time, the
    workers get SIGKILL and the fit goes on (the thread, still blocked, ends with the process).
    """
    workers = list(getattr(pool, "_pool", ()))

    def stop():
        pool.terminate()
        pool.join()

    thread = threading.Thread(target=stop, name="skbayes_sg-pool-stop", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        # Killing the workers frees no lock they held, so the thread is not waited for again.
        for worker in workers:
            if worker.is_alive():
                worker.kill()


def _worker_died():
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    return TerminatedWorkerError(
        "A worker process running the chains stopped in the middle of a task (killed, often by "
        "the system for lack of memory). Fit with a smaller n_jobs, or n_jobs=1 to run the "
        "chains in this process."
    )


class WorkerPool:
    """The worker processes of a fit's parallel rounds: started on first use, kept until
    :meth:`close`, so that the blocks of ``n_iter="auto"`` share them.

    Forked workers (:func:`forks_workers`) inherit ``model`` (and the objects given to
    :meth:`start`), and tasks name it (:meth:`ship`); loky's receive it with each task, as
    joblib memory-maps large arrays.

    Parameters
    ----------
    n_jobs : int or None
    model : object
        What every task of the pool's rounds needs (the chains' model and its data).
    factory : callable
        ``factory(n_jobs, forked)``: what to enter, :class:`ForkedWorkers` when ``forked``
        (the pool forks), else a ``joblib.Parallel``.
    forkable : bool, default=True
        Whether the tasks may run in forked workers at all (False: joblib's own backend).
    """

    def __init__(self, n_jobs, model, factory, forkable=True):
        self.n_jobs, self.model, self._factory, self.forkable = n_jobs, model, factory, forkable
        self.parallel, self._names = None, {}

    @property
    def forks(self):
        """Whether this pool's workers are forked (:func:`forks_workers`, for a forkable pool)."""
        return self.forkable and forks_workers()

    @property
    def started(self):
        """Whether the workers are running."""
        return self.parallel is not None

    def start(self, inherit=()):
        """The entered workers (:class:`ForkedWorkers` or ``joblib.Parallel``), started now if
        they were not.

        ``inherit``: objects besides the model that tasks will carry (the chains' per-row
        arrays, O(N) each) and that forked workers should find in their copy of this process
        instead (:meth:`ship`).
        """
        if self.parallel is None:
            forked = self.forks
            if forked:
                # Registered before the workers fork, so that each inherits them.
                for obj in (self.model, *inherit):
                    if obj is not None and id(obj) not in self._names:
                        self._names[id(obj)] = key = (id(self), id(obj))
                        _INHERITED[key] = obj
            parallel = self._factory(self.n_jobs, forked)
            global _FORKING
            _FORKING = forked
            # Frozen, the parent's objects are not touched by the workers' collections, which
            # leaves their pages shared (the gc module's advice for forking servers; joblib's
            # multiprocessing backend, used before, also collected all of them first, 70 ms with
            # scipy and scikit-learn loaded). A process that froze its own objects keeps them
            # frozen: unfreezing would thaw them too.
            freeze = forked and gc.get_freeze_count() == 0
            if freeze:
                gc.freeze()
            try:
                self.parallel = parallel.__enter__()
            finally:
                _FORKING = False
                if freeze:
                    gc.unfreeze()
        return self.parallel

    def start_seconds(self, loky_seconds=LOKY_START_SECONDS):
        """What starting this pool's workers costs, in seconds: at most
        :data:`FORK_START_SECONDS` forked (the workers inherit the chains' per-row arrays), else
        ``loky_seconds`` and the first round's shipping of those arrays."""
        if self.forks:
            return min(loky_seconds, FORK_START_SECONDS)
        if loky_seconds <= 0:
            return loky_seconds
        return loky_seconds + ROW_SHIP_SECONDS * float(getattr(self.model, "n_samples", 0) or 0)

    def ship(self, obj):
        """What a task carries for ``obj`` (the model, or an object given to :meth:`start`): its
        name if the workers inherited it, else itself."""
        key = self._names.get(id(obj))
        # The identity check: an object collected since may have left its id to another.
        return _Inherited(key) if key is not None and _INHERITED.get(key) is obj else obj

    def close(self, *exc_info):
        """Stop the workers (if started) and forget the model."""
        parallel, self.parallel = self.parallel, None
        for key in self._names.values():
            _INHERITED.pop(key, None)
        self._names = {}
        if parallel is not None:
            parallel.__exit__(*(exc_info or (None, None, None)))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close(*exc_info)
