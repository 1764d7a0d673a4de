"""The fit loop: run chains of a sampler on a posterior and keep their draws.

One shared loop serves every estimator. Chains run under ``joblib.Parallel``; each chain
draws all its randomness from its own ``numpy.random.Generator`` seeded by a child of
one ``SeedSequence``, so the draws are bit-identical whatever ``n_jobs`` is.
"""

import pickle
import time
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs

try:
    import cloudpickle  # a dependency of joblib since 1.5
except ImportError:  # older joblib vendors it
    from joblib.externals import cloudpickle

from ._blas import one_blas_thread
from ._pools import LOKY_START_SECONDS, PARALLEL_EFFICIENCY, ForkedWorkers, WorkerPool, resolve
from ._progress import progress_bar
from .exceptions import DivergenceError
from .minibatch import ChainsGradient, GradientSpec
from .rows import DaskRows
from .samplers._step_size import FitContext

# How often (in iterations) a chain is checked for non-finite values between stored
# draws: NaN and inf persist once they appear, so a sparse check finds them at a small
# fraction of the per-iteration cost, and the state at the end of every advance is checked,
# so a stored draw can never be non-finite without the fit raising (checking each stored
# draw as well cost ~5% of an unthinned gadMALA fit).
_CHECK_EVERY = 16

#: Wall time a round of :func:`advance_chains` aims at, at least. The chains advance in rounds
#: so that an interrupt (Ctrl-C) finds, in the calling process, every chain as it was at the
#: end of the last round even when the chains run in joblib worker processes; an interrupt
#: loses at most one round of work.
ROUND_SECONDS = 1.0
#: A round costs one dispatch and the runners' round trip to the workers (tens of ms on
#: a9a, ``benchmarks/chunked_rounds.py``): rounds are lengthened until that measured cost is
#: at most this fraction of a round.
ROUND_OVERHEAD = 0.02
#: Iterations of the first round, before the chains' speed is known, and the fewest of any
#: round; a round is at most ``_MAX_ROUND_GROWTH`` times the one before it.
_FIRST_ROUND = 64
_MAX_ROUND_GROWTH = 4
#: What starting a pool of loky worker processes costs, in seconds (1.1-1.2 s for two on a quiet
#: 2-core machine, 1-3 s on a busy one; forked workers cost less, :mod:`._pools`). Chains whose
#: remaining work in this process is short run here (see :func:`advance_chains`); a loky pool
#: once started is reused by joblib, so its later runs count little for it (``_POOLS_STARTED``).
PROCESS_START_SECONDS = LOKY_START_SECONDS
_POOLS_STARTED = set()
#: Iterations whose normals a batched group draws at once (full data; see ChainsState.predraw).
_PREDRAW = 256
#: What running on a pool already started costs (shipping the chains each round, idle workers
#: that joblib has stopped meanwhile), in seconds.
_POOL_REUSE_SECONDS = 0.25


class ChainsInterrupted(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` that arrived while chains advanced, carrying the runners.

    ``runners`` are the chains as the calling process last had them: those returned by the
    last completed round when they ran in worker processes, or the chains themselves,
    one possibly stopped part-way through an iteration (``ChainRunner.busy``), when they
    ran in this process.
    """

    def __init__(self, runners):
        super().__init__()
        self.runners = runners


@dataclass
class ChainResult:
    """What one chain returns to the estimator."""

    draws: np.ndarray
    stats: dict
    state: object
    n_grad_evals: int
    summary: dict = field(default_factory=dict)


def draw_schedule(n_iter, n_burn, thin, max_draws):
    """Effective thinning and number of stored draws for one chain.

    Thinning is raised above ``thin`` when needed so that at most ``max_draws`` draws are
    stored, which bounds memory at ``max_draws x n_params`` floats per chain however long
    the run.
    """
    n_kept = n_iter - n_burn
    eff_thin = max(int(thin), -(-n_kept // int(max_draws)) if max_draws else 1)
    return eff_thin, n_kept // eff_thin


def coarsened_thin(prev, need, span):
    """The thinning of a continued record: the smallest multiple of ``prev`` that is at
    least ``need``, unless that would leave no grid point in the ``span`` iterations after
    the burn-in; then the largest multiple of ``prev`` within ``span`` (one draw, so at most
    ``max_draws`` for any ``max_draws >= 1``).
    """
    k = max(1, -(-need // prev))
    if prev * k > span >= prev:
        k = span // prev
    return prev * k


@dataclass
class ChainSpec:
    """What every chain of a run shares: the sampler, the model and the schedule.

    Parameters
    ----------
    sampler : BaseSampler
    model : Model
        The chains run in the model's coordinates; a model with a ``to_theta`` map (a
        :class:`~.models.WhitenedModel`) has its draws stored in ``theta``.
    n_iter, n_burn, thin, max_draws : int
        Iterations, of which ``n_burn`` are discarded; keep every ``thin``-th (raised to
        respect ``max_draws``; None: no bound).
    gradient : GradientSpec, optional
        The gradient estimator each chain builds for itself
        (:class:`~.minibatch.GradientSpec`: plain minibatches, with importance-sampled rows
        or not, or a control variate); None: full-data gradients.
    context : FitContext, optional
        What the fit measured for every chain (:class:`~.samplers.FitContext`), from which
        the sampler's ``init_state`` resolves the step size of a fresh chain. None:
        ``FitContext(model)``, nothing measured (an ``"auto"`` step from the curvature at the
        chain's start; :func:`start_chains` shares one among its chains, at the first start).
    """

    sampler: object
    model: object
    n_iter: int
    n_burn: int = 0
    thin: int = 1
    max_draws: object = None
    gradient: GradientSpec = None
    context: FitContext = None


class ChainRunner:
    """One chain that can be advanced in chunks and resumed.

    Holds everything the chain's future depends on (sampler state, its own random
    generator, the minibatch queue, the draws so far), so that running it in one call or
    in several chunks, in this process or a joblib worker, gives bit-identical draws:
    progress reporting (which needs chunks) never changes the result.

    Parameters
    ----------
    spec : ChainSpec
        The sampler, model, schedule, gradient estimator and step-size context.
    start : ndarray of shape (P,) or SamplerState
        Initial point, or the state of a chain to continue (``warm_start``).
    seed : numpy.random.SeedSequence
    progress : dict, optional
        :meth:`progress` of an earlier run of this chain, with ``start`` its final state:
        the chain continues exactly where that run stopped (its generator, minibatch
        queue, iteration count, burn-in, adaptation and thinning grid), so that running in
        parts gives the draws of one run. ``spec.n_iter`` then counts from that run's start,
        ``spec.n_burn`` and ``seed`` are ignored, and the draws stored are those from the
        continuation's start on the thinning grid, coarsened (by a whole factor) if
        ``max_draws`` draws since the burn-in would be exceeded.

    The runner keeps the sampler and its own gradient estimator, never ``spec`` (whose model
    travels beside the runner, see :func:`call_with_model`).
    """

    def __init__(self, spec, start, seed=None, progress=None):
        sampler, model = spec.sampler, spec.model
        n_iter, n_burn, thin, max_draws = spec.n_iter, spec.n_burn, spec.thin, spec.max_draws
        self.sampler = sampler
        self.rng = np.random.default_rng(seed) if progress is None else _generator(progress["rng"])
        self.grad_estimator = (GradientSpec() if spec.gradient is None else spec.gradient).build(model)
        if progress is not None:
            self.grad_estimator.restore_queue(progress["queue"])
        if hasattr(start, "theta"):
            self.state = start
        else:
            context = FitContext(model) if spec.context is None else spec.context
            self.state = sampler.init_state(start, self.grad_estimator, self.rng, context)
        if progress is None:
            self.t = 0  # iterations done
            self.n_burn = n_burn
            # Adaptation ends where the first schedule's burn-in ends; an extended run may
            # discard more (``extend``) but never adapts again.
            self.n_adapt = n_burn
            self.eff_thin = draw_schedule(n_iter, n_burn, thin, max_draws)[0]
        else:
            self.t, self.n_burn, self.n_adapt = progress["t"], progress["n_burn"], progress["n_adapt"]
            # The grid continues; coarsened by a whole factor when the record since burn-in
            # would exceed max_draws, which keeps the draws stored before on the new grid.
            prev = progress["eff_thin"]
            need = draw_schedule(n_iter, self.n_burn, thin, max_draws)[0]
            self.eff_thin = coarsened_thin(prev, need, n_iter - self.n_burn)
        self.n_iter = n_iter
        self.t0 = self.t  # iteration this run started at: draws before it are not stored here
        self.n_draws = self._n_grid(n_iter)
        self.draws = np.empty((self.n_draws, model.n_params))
        # The sampler's per-iteration statistics, one column per field of its info.
        self.stat_names = tuple(sampler.info_type._fields)
        self.stats = np.empty((self.n_draws, len(self.stat_names)))
        self.k0 = 0  # draw held in the buffer's first row (see detach_draws)
        self.k = 0  # draws stored
        self.busy = False  # inside advance (left True if an interrupt stopped it mid-iteration)
        if n_burn == 0 and progress is None:
            sampler.end_adaptation(self.state)

    def __reduce__(self):
        # Pickled into one bytes object, so that its arrays are rebuilt as writable copies
        # wherever it is unpickled: joblib's loky backend memory-maps array arguments over
        # 1 MB (a long chain's draw buffer) and Ray maps every array from its object store,
        # both read-only, and a chain updates its state and draws in place. cloudpickle, as
        # loky uses, so that a sampler class defined in a script still travels.
        state = self.__dict__
        if self.k == self.k0:
            # A draw buffer that holds no draw yet (a round's, on its way to a worker) travels
            # as its shape: its bytes are garbage, up to a megabyte a chain a round on a9a.
            state = dict(state, draws=None, stats=None, _empty_buffers=(self.draws.shape, self.stats.shape))
        return _unpickle_runner, (cloudpickle.dumps(state),)

    @property
    def done(self):
        return self.t >= self.n_iter

    def _first_kept(self, n_burn=None, eff_thin=None):
        """The first iteration on the grid (``n_burn``, ``eff_thin``) at or after ``t0``."""
        n_burn = self.n_burn if n_burn is None else n_burn
        eff_thin = self.eff_thin if eff_thin is None else eff_thin
        first = n_burn + eff_thin - 1
        if self.t0 > first:
            first += -(-(self.t0 - first) // eff_thin) * eff_thin
        return first

    def _n_grid(self, n_iter, n_burn=None, eff_thin=None):
        """Grid iterations in ``[t0, n_iter)``: the draws this run stores."""
        eff_thin = self.eff_thin if eff_thin is None else eff_thin
        return len(range(self._first_kept(n_burn, eff_thin), n_iter, eff_thin))

    def progress(self):
        """What the chain's future depends on besides its sampler state, as plain values.

        A dict of the generator's state (``numpy`` ``bit_generator.state``), the minibatch
        queue (:meth:`~.minibatch.MinibatchGradient.queue_state`), the iterations done
        ``t``, the burn-in ``n_burn`` and adaptation length ``n_adapt``, and the thinning
        ``eff_thin``: with the state, a :class:`ChainRunner` built with ``progress=``
        continues the chain bit-identically, in this process or after a pickle or skops
        round trip. The stored draws are not in it (the estimator keeps them).
        """
        return {
            "rng": self.rng.bit_generator.state,
            "queue": self.grad_estimator.queue_state(),
            "t": int(self.t),
            "n_burn": int(self.n_burn),
            "n_adapt": int(self.n_adapt),
            "eff_thin": int(self.eff_thin),
        }

    def extend(self, n_iter, n_burn, eff_thin):
        """Lengthen the run to ``n_iter`` iterations, discarding the first ``n_burn``.

        The draws kept so far that lie on the new grid (iterations ``t`` with
        ``(t + 1 - n_burn) % eff_thin == 0`` past ``n_burn``) are kept, so the stored
        record stays evenly spaced, exactly what one run with the new schedule would have
        stored. That needs ``eff_thin`` to be a multiple of the current thinning and
        ``n_burn`` to lie on the current grid modulo ``eff_thin``
        (:func:`skbayes_sg._run_length.next_schedule` chooses them so).
        """
        if n_iter < self.t or n_burn < self.n_burn or eff_thin % self.eff_thin or (n_burn - self.n_burn) % eff_thin:
            raise ValueError(
                f"cannot extend a chain at iteration {self.t} (burn-in {self.n_burn}, thinning {self.eff_thin}) to "
                f"n_iter={n_iter}, n_burn={n_burn}, thinning {eff_thin}."
            )
        iteration = self._first_kept() + np.arange(self.k) * self.eff_thin
        on_grid = (iteration >= n_burn) & ((iteration + 1 - n_burn) % eff_thin == 0)
        n_draws = self._n_grid(n_iter, n_burn, eff_thin)
        draws = np.empty((n_draws, self.draws.shape[1]))
        stats = np.empty((n_draws, self.stats.shape[1]))
        k = int(on_grid.sum())
        draws[:k], stats[:k] = self.draws[: self.k][on_grid], self.stats[: self.k][on_grid]
        self.draws, self.stats, self.k, self.n_draws = draws, stats, k, n_draws
        self.n_iter, self.n_burn, self.eff_thin = n_iter, n_burn, eff_thin
        return self

    def kept_draws(self):
        """The draws stored so far, shape (k, P) (a view)."""
        return self.draws[: self.k]

    def advance(self, n_steps=None):
        """Run up to ``n_steps`` more iterations (all remaining if None); return self."""
        sampler, state, grad_estimator, rng = self.sampler, self.state, self.grad_estimator, self.rng
        stop = self.n_iter if n_steps is None else min(self.n_iter, self.t + n_steps)
        first_kept = self._first_kept()
        n_draws, k0 = self.n_draws, self.k0
        self.busy = True
        to_theta = getattr(grad_estimator.model, "to_theta", None)
        # A diverging chain overflows before it is caught; the DivergenceError says so, so
        # numpy's overflow warnings would only be noise.
        with np.errstate(over="ignore", invalid="ignore"):
            for t in range(self.t, stop):
                state, info = sampler.step(state, grad_estimator, rng)
                self.t = t + 1  # for an interrupt's report; the state is saved at the end
                if t + 1 == self.n_adapt:
                    sampler.end_adaptation(state)
                keep = t >= first_kept and (t - first_kept) % self.eff_thin == 0 and self.k < n_draws
                if t % _CHECK_EVERY == 0:
                    _check_finite(state, sampler, t)
                if keep:
                    self.draws[self.k - k0] = state.theta if to_theta is None else to_theta(state.theta)
                    self.stats[self.k - k0] = info
                    self.k += 1
        _check_finite(state, sampler, stop - 1)
        self.state, self.t = state, stop
        self.busy = False
        return self

    def detach_draws(self, n_steps):
        """Swap the draw buffer for one that holds only the next ``n_steps`` iterations' draws.

        Returns the full buffer, for :meth:`attach_draws`. A round of
        :func:`advance_chains` then ships only its own draws to and from a worker
        process, not every draw so far (which made a long run with ``max_draws=None``
        quadratic in its length).
        """
        held = (self.draws, self.stats, self.k0)
        n = min(self.n_draws - self.k, -(-n_steps // self.eff_thin) + 1)
        self.draws = np.empty((n, held[0].shape[1]))
        self.stats = np.empty((n, held[1].shape[1]))
        self.k0 = self.k
        return held

    def attach_draws(self, held):
        """Copy the draws of the round buffer into the full buffer ``held``; return self."""
        draws, stats, k0 = held
        if self.draws is draws:  # already attached
            return self
        n = self.k - self.k0
        draws[self.k0 - k0 : self.k - k0] = self.draws[:n]
        stats[self.k0 - k0 : self.k - k0] = self.stats[:n]
        self.draws, self.stats, self.k0 = draws, stats, k0
        return self

    def result(self, n_draws=None):
        """The chain's :class:`ChainResult`, with its first ``n_draws`` stored draws (default:
        all; fewer for a run cut short)."""
        n_draws = self.draws.shape[0] if n_draws is None else n_draws
        return ChainResult(
            draws=self.draws[:n_draws],
            stats={name: self.stats[:n_draws, j] for j, name in enumerate(self.stat_names)},
            state=self.state,
            n_grad_evals=self.grad_estimator.n_grad_evals,
            summary=self.state.summary(),
        )


def _aligned(runners):
    """Whether the runners share their schedule and position in it (a fit's chains do)."""
    keys = {(r.t, r.n_iter, r.n_burn, r.n_adapt, r.eff_thin, r.k, r.k0, r.n_draws, r.t0) for r in runners}
    return len(keys) == 1 and len({r.state.step_size for r in runners}) == 1


def advance_group(runners, n_steps=None):
    """Advance a group of chains by up to ``n_steps`` iterations; return them.

    Chains whose sampler has a batched kernel for their gradients
    (:meth:`~.samplers.BaseSampler.batched`) advance together, their states stacked as (C, P)
    arrays (:mod:`skbayes_sg.samplers._batched`); the others one after the other
    (:meth:`ChainRunner.advance`). Either way each chain's draws are the same whatever
    chains share its group.
    """
    sampler = runners[0].sampler
    fields = sampler._batch_fields
    if (
        fields is not None
        and _aligned(runners)
        and all(getattr(r.state, name, None) is not None for r in runners for name in fields)
    ):
        grads = ChainsGradient([r.grad_estimator for r in runners])
        if sampler.batched(grads):
            return _advance_batched(runners, sampler, grads, n_steps)
    for r in runners:
        r.advance(n_steps)
    return runners


def _advance_batched(runners, sampler, grads, n_steps):
    """:func:`advance_group` of chains with a batched kernel (:meth:`ChainRunner.advance`, for
    every chain at once)."""
    r0 = runners[0]
    stop = r0.n_iter if n_steps is None else min(r0.n_iter, r0.t + n_steps)
    first_kept, eff_thin, n_draws, k0, n_adapt = r0._first_kept(), r0.eff_thin, r0.n_draws, r0.k0, r0.n_adapt
    states, rngs = [r.state for r in runners], [r.rng for r in runners]
    to_theta = getattr(grads.model, "to_theta", None)
    chains = sampler.stack_states(states)
    t_done, k = r0.t, r0.k
    for r in runners:
        r.busy = True
    per_step = 0 if grads.uses_generators else sampler._normals_per_step
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            for t in range(r0.t, stop):
                if per_step and (t - r0.t) % _PREDRAW == 0:
                    # The noise of the next iterations in one draw per chain: the same numbers,
                    # and never more than the round uses, so the generators end where they would.
                    chains.predraw(rngs, per_step * min(_PREDRAW, stop - t))
                info = sampler.step_batch(chains, grads, rngs)
                t_done = t + 1
                if t + 1 == n_adapt:
                    for s in states:
                        sampler.end_adaptation(s)
                if t % _CHECK_EVERY == 0:
                    _check_chains(chains, sampler, t)
                if t >= first_kept and (t - first_kept) % eff_thin == 0 and k < n_draws:
                    # Every chain's draw in one stacked product, row by row as one chain's alone.
                    thetas = chains.theta if to_theta is None else to_theta(chains.theta[:, None, :])[:, 0]
                    for c, r in enumerate(runners):
                        r.draws[k - k0] = thetas[c]
                        r.stats[k - k0] = info[c]
                    k += 1
        _check_chains(chains, sampler, stop - 1)
    finally:
        # Also after an interrupt (the chains then stay busy: stopped part-way through an
        # iteration) or a divergence: every chain as far as it got.
        chains.write_back(states)
        for r in runners:
            r.t, r.k = t_done, k
    for r in runners:
        r.busy = False
    return runners


def _check_chains(chains, sampler, t):
    finite = chains.is_finite()
    if not finite.all():
        chain = int(np.flatnonzero(~finite)[0])
        raise divergence_error(
            type(sampler).__name__,
            chains.step_size,
            f"chain {chain}'s state became non-finite by iteration {t + 1}",
            _divergence_fixes(sampler),
            iteration=t + 1,
        )


def _divergence_fixes(sampler):
    """What else helps a diverging chain: only the momentum samplers have a friction to increase
    (SGLD and gadMALA have none)."""
    if hasattr(sampler, "friction"):
        return "standardise the features, or increase the friction"
    return "or standardise the features"


def _generator(state):
    """A ``numpy.random.Generator`` in the given ``bit_generator.state``."""
    rng = np.random.Generator(getattr(np.random, state["bit_generator"])())
    rng.bit_generator.state = state
    return rng


def _unpickle_runner(state):
    runner = ChainRunner.__new__(ChainRunner)
    state = pickle.loads(state)
    shapes = state.pop("_empty_buffers", None)
    if shapes is not None:
        state["draws"], state["stats"] = np.empty(shapes[0]), np.empty(shapes[1])
    runner.__dict__.update(state)
    return runner


def run_chain(spec, start, seed=None):
    """Run one chain of ``spec`` (a :class:`ChainSpec`) from ``start`` to the end and return its
    draws after burn-in (:class:`ChainResult`)."""
    return ChainRunner(spec, start, seed).advance().result()


def divergence_error(
    sampler, step_size, where, fixes="standardise the features, or increase the friction", iteration=None
):
    """The :class:`DivergenceError` of every simulation (the chains' states, multilevel SGLD's
    path stacks): it names the sampler, ``where`` it happened, the step size and the fixes
    (a quarter of the step, then ``fixes``)."""
    return DivergenceError(
        f"{sampler} diverged: {where} with step_size={step_size:.4g}. Use a smaller step_size (for example "
        f"{step_size / 4:.3g}), {fixes}.",
        sampler=sampler,
        step_size=step_size,
        iteration=iteration,
    )


def check_finite(
    arrays, sampler, step_size, where, fixes="standardise the features, or increase the friction", iteration=None
):
    """Raise :func:`divergence_error` if any of ``arrays`` (None skipped) is non-finite."""
    if not all(a is None or np.isfinite(a).all() for a in arrays):
        raise divergence_error(sampler, step_size, where, fixes, iteration)


def _check_finite(state, sampler, t):
    if not state.is_finite():
        raise divergence_error(
            type(sampler).__name__,
            state.step_size,
            f"the chain's state became non-finite by iteration {t + 1}",
            _divergence_fixes(sampler),
            iteration=t + 1,
        )


def call_with_model(worker, model, method, *args):
    """``getattr(worker, method)(*args)`` with ``worker.grad_estimator.model = model``, on one BLAS thread.

    How every parallel task runs (chains here, multilevel SGLD's chunks of paths): the
    model (and so X) travels as its own argument, shared by every task, and not inside
    the worker: joblib's dask backend scatters it once per worker and loky memmaps it
    once, where a worker carrying it would ship X once per task and pickle it back with
    every result. One BLAS thread, wherever the task runs: a multithreaded product sums in
    another order than a single-threaded one, so results would depend on the process
    (loky and dask workers run single-threaded BLAS, the caller's process does not) and
    the same random_state would not give the same draws for every n_jobs. Tasks are the
    unit of parallelism; their per-step products are too small to gain from threads.
    """
    worker.grad_estimator.model = model
    try:
        with one_blas_thread():
            return getattr(worker, method)(*args)
    finally:
        worker.grad_estimator.model = None


def _advance(runners, model, n_steps, rows=None):
    """One task: a group of chains advanced by ``n_steps`` (:func:`advance_group`) with the model
    attached, and with ``rows`` (one :meth:`~.minibatch.MinibatchGradient.detach_rows` per
    runner, its arrays or their inherited names; None: they kept theirs), detached again before
    the runners travel back."""
    tic = time.perf_counter()
    model = resolve(model)
    for i, r in enumerate(runners):
        r.grad_estimator.model = model
        if rows is not None:
            _attach_rows(r, None if rows[i] is None else tuple(resolve(a) for a in rows[i]))
    try:
        with one_blas_thread():
            advance_group(runners, n_steps)
    finally:
        for r in runners:
            r.grad_estimator.model = None
            if rows is not None:
                _detach_rows(r)
    seconds = (time.perf_counter() - tic) / len(runners)
    for r in runners:
        r.compute_seconds = seconds
    return runners


def _detach_rows(runner):
    """The runner's per-row arrays, removed from its gradient estimator (None if it has none)."""
    detach = getattr(runner.grad_estimator, "detach_rows", None)
    return None if detach is None else detach()


def _row_arrays(runners):
    """The runners' per-row arrays (:func:`_detach_rows`'s, left in place), for forked workers to
    inherit (:meth:`._pools.WorkerPool.start`)."""
    arrays = []
    for r in runners:
        held = _detach_rows(r)
        _attach_rows(r, held)
        arrays.extend(() if held is None else held)
    return arrays


def _attach_rows(runner, held):
    if held is not None:
        runner.grad_estimator.attach_rows(held)


def start_chains(spec, starts, seeds, progress=None):
    """One :class:`ChainRunner` of ``spec`` per start, not yet advanced (the model is detached
    from them: :func:`advance_chains` passes it to each task). ``progress``: one
    :meth:`ChainRunner.progress` per start, to continue those chains exactly."""
    progress = [None] * len(starts) if progress is None else progress
    if spec.context is None:
        # One context for all the chains, so that they resolve one step size.
        spec = replace(spec, context=FitContext(spec.model))
    runners = [ChainRunner(spec, start, seed, prog) for start, seed, prog in zip(starts, seeds, progress)]
    for r in runners:
        r.grad_estimator.model = None
    return runners


@contextmanager
def parallel_rounds(n_jobs=None, verbose=0, total=0, desc="", unit="iterations"):
    """What every parallel run shares across its rounds of tasks, yielded as ``(parallel, bar)``.

    One managed ``joblib.Parallel`` (joblib keeps its workers between rounds and, when an
    exception or a ``KeyboardInterrupt`` leaves it, stops them) and, with ``verbose > 0``, one
    progress bar of ``total`` ``unit`` across the rounds (``bar`` is None otherwise). The chains'
    rounds (:func:`advance_chains`) and multilevel SGLD's rounds of path chunks
    (:func:`~skbayes_sg.multilevel.mlmc`, through :func:`run_tasks`) run in it.
    """
    with Parallel(n_jobs=n_jobs) as parallel, progress_bar(total, desc, unit) if verbose else nullcontext() as bar:
        yield parallel, bar


def run_tasks(parallel, worker, model, method, arglists):
    """One round of tasks on ``parallel``: ``call_with_model(worker, model, method, *args)`` for
    each ``args`` of ``arglists``, results in that order."""
    return parallel(delayed(call_with_model)(worker, model, method, *args) for args in arglists)


def _groups(n_chains, n_groups):
    """Contiguous groups of chain indices, as even as can be."""
    bounds = np.linspace(0, n_chains, n_groups + 1).round().astype(int)
    return [range(bounds[i], bounds[i + 1]) for i in range(n_groups)]


def _go_parallel(n_jobs, workers, seconds_left, pool):
    """Whether the chains' remaining ``seconds_left`` of work (in this process) is worth sharing
    among ``workers`` processes of ``pool``: what they save, at
    :data:`._pools.PARALLEL_EFFICIENCY`, must exceed the cost of starting them."""
    start = pool.start_seconds(PROCESS_START_SECONDS)
    if n_jobs in _POOLS_STARTED and not pool.forks:
        # joblib keeps loky's workers between pools; forked ones are new for every pool.
        start = min(_POOL_REUSE_SECONDS, start)
    return workers > 1 and seconds_left * (1.0 - 1.0 / (workers * PARALLEL_EFFICIENCY)) > start


def advance_chains(runners, model, n_jobs=None, verbose=0, round_seconds=None, pool=None):
    """Advance every runner to its ``n_iter``; runners in chain order.

    The chains advance in groups (:func:`advance_group`: stacked, one batched step for the
    group, when the sampler has a batched kernel), one group per joblib task. The first round
    runs in this process as one group; from its speed, the rest too unless sharing it among
    ``n_jobs`` processes saves more than starting them costs (:data:`PROCESS_START_SECONDS`):
    a short fit on small data never pays for a process pool. The draws are the same either
    way (each chain's randomness is its own, and a group's arithmetic is row by row).

    The chains advance in rounds of about ``round_seconds`` (default
    :data:`ROUND_SECONDS`; ``inf``: one round, 0: rounds of 64 iterations) of wall time,
    sized from the speed of the round before and lengthened while the rounds' own cost
    exceeds :data:`ROUND_OVERHEAD` of a round. Between rounds the calling process holds
    every chain as it stands, so a ``KeyboardInterrupt`` (Ctrl-C) raises
    :class:`ChainsInterrupted` carrying them, whatever the backend. With
    ``verbose > 0`` rounds are also at most a twentieth of the remaining iterations and a
    progress bar across all chains is updated between them. The chains' own randomness
    travels with them, so the draws are the same however the run is cut in rounds.

    ``pool``: a :class:`~._pools.WorkerPool` of ``model`` shared with other calls (the blocks
    of ``n_iter="auto"``); its workers, once started, take every round. None: a pool of this
    call's own, stopped when it returns.
    """
    round_seconds = ROUND_SECONDS if round_seconds is None else round_seconds
    overheads = list(getattr(runners[0], "round_overheads", ()))
    workers = min(len(runners), max(1, effective_n_jobs(n_jobs)))
    remaining = max(r.n_iter - r.t for r in runners)
    if remaining <= 0:
        return runners
    # round_seconds=inf: one round; 0: rounds of _FIRST_ROUND iterations (for tests and
    # benchmarks of the rounds themselves).
    adaptive = 0 < round_seconds < np.inf
    chunk = remaining if round_seconds == np.inf else _FIRST_ROUND
    if adaptive:
        chunk = min(remaining, getattr(runners[0], "round_hint", _FIRST_ROUND))
    cap = max(1, -(-remaining // 20)) if verbose else remaining
    desc = f"{type(runners[0].sampler).__name__}, {len(runners)} chains"
    parallel, first_round = None, True
    # Seconds per iteration of all the chains in one process, as measured by an earlier call
    # (n_iter="auto" advances the same runners block after block).
    speed = getattr(runners[0], "serial_speed", None)
    try:
        with ExitStack() as stack:
            if pool is None:
                pool = stack.enter_context(worker_pool(model, n_jobs, len(runners)))
            if workers > 1 and (
                pool.started
                or pool.start_seconds(PROCESS_START_SECONDS) <= 0
                or (speed is not None and _go_parallel(n_jobs, workers, remaining * speed, pool))
            ):
                # Workers running, or costing nothing to start, or chains known to be slow
                # enough: no first round here to decide.
                parallel = pool.start(_row_arrays(runners))
            bar = stack.enter_context(progress_bar(sum(r.n_iter - r.t for r in runners), desc)) if verbose else None
            while not all(r.done for r in runners):
                step = max(1, min(chunk, cap))
                before = sum(r.t for r in runners)
                tic = time.perf_counter()
                shipped = model if parallel is None else pool.ship(model)
                ship_rows = None if parallel is None else pool.ship
                runners = _round(parallel, runners, shipped, step, workers if parallel else 1, ship_rows)
                elapsed = time.perf_counter() - tic
                if verbose:
                    bar.update(sum(r.t for r in runners) - before)
                speed = sum(r.compute_seconds for r in runners) / step
                if parallel is None and not all(r.done for r in runners):
                    left = max(r.n_iter - r.t for r in runners) * elapsed / step
                    if _go_parallel(n_jobs, workers, left, pool):
                        parallel = pool.start(_row_arrays(runners))
                        first_round = True  # the next round's time includes starting the workers
                        if adaptive:
                            # Sized from this round, all the chains in one process, whatever
                            # its length (the workers, each with a share of them, are faster:
                            # the round lasts less than round_seconds), not from the first
                            # round's 64 again: every round trip to the workers costs tens of ms.
                            chunk = _next_chunk(step, elapsed, overheads, round_seconds, growth=np.inf)
                        continue
                if first_round:
                    first_round = False
                else:
                    # The round's cost beyond the chains' own work, spread over the workers.
                    n = workers if parallel else 1
                    overheads.append(max(0.0, elapsed - sum(r.compute_seconds for r in runners) / n))
                if adaptive:
                    chunk = _next_chunk(step, elapsed, overheads, round_seconds)
    except ChainsInterrupted:
        raise
    except KeyboardInterrupt:
        raise ChainsInterrupted(runners) from None
    for r in runners:
        r.round_hint, r.round_overheads, r.serial_speed = chunk, overheads[-8:], speed
    return runners


def _next_chunk(step, elapsed, overheads, round_seconds, growth=_MAX_ROUND_GROWTH):
    """Iterations of the next round after one of ``step`` iterations in ``elapsed`` seconds: about
    ``round_seconds`` at that speed, or longer if the rounds' typical cost (``overheads``) would
    exceed :data:`ROUND_OVERHEAD` of it; at most ``growth`` times ``step``, never below the first
    round."""
    seconds = max(round_seconds, float(np.median(overheads)) / ROUND_OVERHEAD if overheads else 0.0)
    wanted = step * seconds / elapsed if elapsed > 0 else np.inf
    return int(max(_FIRST_ROUND, min(growth * step, wanted)))


def worker_pool(model, n_jobs=None, n_chains=None):
    """A :class:`~._pools.WorkerPool` for :func:`advance_chains` calls on ``model`` that should
    share their workers (the blocks of one fit); use it as a context manager. Its workers may
    be forked only when the model's rows are in this process (not a dask cluster's, whose
    client a forked copy could not use). A round has at most one task per chain, so the pool
    starts no more than ``n_chains`` workers (``n_jobs=-1`` on a 64-core machine and four
    chains: four processes, not 64)."""
    factory = _parallel if n_chains is None else partial(_parallel, max_workers=n_chains)
    return WorkerPool(n_jobs, model, factory, forkable=_rows_held_here(model))


def _rows_held_here(model):
    """Whether ``model`` (or the model it wraps, as a whitened one does) reads rows held by this
    process: arrays, memory maps, or a model's own arrays; not :class:`~.rows.DaskRows`."""
    while True:
        if isinstance(getattr(model, "rows", None), DaskRows):
            return False
        inner = getattr(model, "model", None)
        if inner is None or inner is model:
            return True
        model = inner


def _parallel(n_jobs, forked=False, max_workers=None):
    """The workers of the chains' parallel rounds (:meth:`._pools.WorkerPool.start`): forked
    ones, or joblib's backend (loky unless configured otherwise), at most ``max_workers`` of
    them, their start recorded for :func:`_go_parallel`."""
    _POOLS_STARTED.add(n_jobs)
    n = n_jobs if max_workers is None else min(effective_n_jobs(n_jobs), max_workers)
    return ForkedWorkers(n) if forked else Parallel(n_jobs=n)


def _round(parallel, runners, model, n_steps, n_groups, ship=None):
    """One round: every runner advanced by ``n_steps`` in ``n_groups`` groups (tasks of
    ``parallel``, or in this process if it is None), shipping only the round's draws, and the
    per-row arrays as ``ship`` gives them (a forked pool's names of the arrays its workers
    inherited; None: the arrays).

    On an interrupt, wherever it lands, every runner is given back whole: advanced in
    place (this process), as returned (a worker's round that completed) or as it was.
    """
    out, held, rows = list(runners), {}, []
    try:
        for i, r in enumerate(runners):
            held[i] = r.detach_draws(n_steps)
        groups = _groups(len(runners), n_groups)
        if parallel is None:
            advanced = [_advance(runners, model, n_steps)]
        else:
            # The per-row arrays stay here: each task's pickle holds one copy of those its chains
            # share (a runner pickles itself apart, so it would carry its own), none come back.
            for r in runners:
                rows.append(_detach_rows(r))
            carried = rows if ship is None else [None if h is None else tuple(ship(a) for a in h) for h in rows]
            advanced = parallel(
                delayed(_advance)([runners[i] for i in g], model, n_steps, [carried[i] for i in g]) for g in groups
            )
        for i, r in enumerate(r for group in advanced for r in group):
            if rows:
                _attach_rows(r, rows[i])
            out[i] = r.attach_draws(held[i])
            del held[i]
    except KeyboardInterrupt:
        for i in list(held):
            if i < len(rows):
                _attach_rows(out[i], rows[i])
            out[i] = out[i].attach_draws(held.pop(i))
        raise ChainsInterrupted(out) from None
    return out


def run_chains(spec, starts, seeds, n_jobs=None, verbose=0):
    """Run one chain of ``spec`` (a :class:`ChainSpec`) per start in parallel with joblib;
    results in chain order. See :func:`advance_chains` for ``n_jobs`` and ``verbose``."""
    runners = start_chains(spec, starts, seeds)
    return [r.result() for r in advance_chains(runners, spec.model, n_jobs, verbose)]
