"""The fit loop: run chains of a sampler on a target and keep their draws.

One shared loop serves every estimator. Chains run under ``joblib.Parallel``; each chain
draws all its randomness from its own ``numpy.random.Generator`` seeded by a child of
one ``SeedSequence``, so the draws are bit-identical whatever ``n_jobs`` is.
"""

import pickle
from dataclasses import dataclass, field

import numpy as np
from joblib import Parallel, delayed
from threadpoolctl import threadpool_limits

try:
    import cloudpickle  # a dependency of joblib since 1.5
except ImportError:  # older joblib vendors it
    from joblib.externals import cloudpickle

from .exceptions import DivergenceError
from ._progress import progress_bar
from .minibatch import ControlVariateGradient, MinibatchGradient

# How often (in iterations) a chain is checked for non-finite values between stored
# draws: NaN and inf persist once they appear, so a sparse check finds them at a small
# fraction of the per-iteration cost, and the state at the end of every advance is checked,
# so a stored draw can never be non-finite without the fit raising (checking each stored
# draw as well cost ~5% of an unthinned gadMALA fit).
_CHECK_EVERY = 16


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


class ChainRunner:
    """One chain that can be advanced in chunks and resumed.

    Holds everything the chain's future depends on (sampler state, its own random
    generator, the minibatch queue, the draws so far), so that running it in one call or
    in several chunks, in this process or a joblib worker, gives bit-identical draws:
    progress reporting (which needs chunks) never changes the result.

    Parameters
    ----------
    sampler : BaseSampler
    model : Model
    start : ndarray of shape (P,) or SamplerState
        Initial point, or the state of a chain to continue (``warm_start``).
    n_iter, n_burn, thin, max_draws : int
        Iterations, of which ``n_burn`` are discarded; keep every ``thin``-th (raised to
        respect ``max_draws``).
    batch_size : int or None
    batch_scheme : str
    seed : numpy.random.SeedSequence
    step_size : float, optional
        ``h`` for a fresh chain.
    control_variate : tuple (theta_hat, g_hat) or None
        Centre of the control-variate gradient estimator and the full-data log-likelihood
        gradient there (:class:`~.minibatch.ControlVariateGradient`); None for plain
        minibatch gradients.
    row_probabilities : RowDistribution, optional
        Importance-sampling distribution of the plain minibatches' rows (the likelihood
        weights of a weighted fit, see :func:`skbayes_sg._geometry.row_distribution`);
        None draws them uniformly.

    The chain runs in the model's coordinates; a model with a ``to_theta`` map (a
    :class:`~.models.WhitenedModel`) has its draws stored in ``theta``.
    """

    def __init__(self, sampler, model, start, n_iter, n_burn, thin, max_draws, batch_size, batch_scheme,
                 seed, step_size=None, control_variate=None, row_probabilities=None):
        self.sampler = sampler
        self.rng = np.random.default_rng(seed)
        if control_variate is None:
            self.target = MinibatchGradient(model, batch_size, batch_scheme, row_probabilities)
        else:
            self.target = ControlVariateGradient(model, batch_size, batch_scheme, *control_variate)
        if hasattr(start, "theta"):
            self.state = start
        else:
            self.state = sampler.init_state(start, self.target, self.rng, step_size)
        self.n_iter, self.n_burn = n_iter, n_burn
        # Adaptation ends where the first schedule's burn-in ends; an extended run may
        # discard more (``extend``) but never adapts again.
        self.n_adapt = n_burn
        self.eff_thin, n_draws = draw_schedule(n_iter, n_burn, thin, max_draws)
        self.draws = np.empty((n_draws, model.n_params))
        self.stats = np.empty((n_draws, len(sampler._stat_names)))
        self.t = 0  # iterations done
        self.k = 0  # draws stored
        if n_burn == 0:
            sampler.end_adaptation(self.state)

    def __reduce__(self):
        # Pickled into one bytes object, so that its arrays are rebuilt as writable copies
        # wherever it is unpickled: joblib's loky backend memory-maps array arguments over
        # 1 MB (a long chain's draw buffer) and Ray maps every array from its object store,
        # both read-only, and a chain updates its state and draws in place. cloudpickle, as
        # loky uses, so that a sampler class defined in a script still travels.
        return _unpickle_runner, (cloudpickle.dumps(self.__dict__),)

    @property
    def done(self):
        return self.t >= self.n_iter

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
                f"n_iter={n_iter}, n_burn={n_burn}, thinning {eff_thin}.")
        iteration = self.n_burn + (np.arange(self.k) + 1) * self.eff_thin - 1
        on_grid = (iteration >= n_burn) & ((iteration + 1 - n_burn) % eff_thin == 0)
        n_draws = (n_iter - n_burn) // eff_thin
        draws = np.empty((n_draws, self.draws.shape[1]))
        stats = np.empty((n_draws, self.stats.shape[1]))
        k = int(on_grid.sum())
        draws[:k], stats[:k] = self.draws[:self.k][on_grid], self.stats[:self.k][on_grid]
        self.draws, self.stats, self.k = draws, stats, k
        self.n_iter, self.n_burn, self.eff_thin = n_iter, n_burn, eff_thin
        return self

    def kept_draws(self):
        """The draws stored so far, shape (k, P) (a view)."""
        return self.draws[:self.k]

    def advance(self, n_steps=None):
        """Run up to ``n_steps`` more iterations (all remaining if None); return self."""
        sampler, state, target, rng = self.sampler, self.state, self.target, self.rng
        stop = self.n_iter if n_steps is None else min(self.n_iter, self.t + n_steps)
        first_kept = self.n_burn + self.eff_thin - 1
        n_draws = self.draws.shape[0]
        to_theta = getattr(target.model, "to_theta", None)
        # A diverging chain overflows before it is caught; the DivergenceError says so, so
        # numpy's overflow warnings would only be noise.
        with np.errstate(over="ignore", invalid="ignore"):
            for t in range(self.t, stop):
                state = sampler.step(state, target, rng)
                if t + 1 == self.n_adapt:
                    sampler.end_adaptation(state)
                keep = t >= first_kept and (t - first_kept) % self.eff_thin == 0 and self.k < n_draws
                if t % _CHECK_EVERY == 0:
                    _check_finite(state, sampler, t)
                if keep:
                    self.draws[self.k] = state.theta if to_theta is None else to_theta(state.theta)
                    self.stats[self.k] = sampler.sample_stats(state)
                    self.k += 1
        _check_finite(state, sampler, stop - 1)
        self.state, self.t = state, stop
        return self

    def result(self):
        """The finished chain's :class:`ChainResult`."""
        return ChainResult(
            draws=self.draws,
            stats={name: self.stats[:, j] for j, name in enumerate(self.sampler._stat_names)},
            state=self.state,
            n_grad_evals=self.target.n_grad_evals,
            summary=self.sampler.chain_summary(self.state),
        )


def _unpickle_runner(state):
    runner = ChainRunner.__new__(ChainRunner)
    runner.__dict__.update(pickle.loads(state))
    return runner


def run_chain(sampler, model, start, n_iter, n_burn, thin, max_draws, batch_size, batch_scheme,
              seed, step_size=None, control_variate=None):
    """Run one chain to the end and return its draws after burn-in (:class:`ChainResult`).

    See :class:`ChainRunner` for the parameters.
    """
    runner = ChainRunner(sampler, model, start, n_iter, n_burn, thin, max_draws, batch_size,
                         batch_scheme, seed, step_size, control_variate)
    return runner.advance().result()


def _check_finite(state, sampler, t):
    if not np.isfinite(state.theta).all() or (state.p is not None and not np.isfinite(state.p).all()):
        raise DivergenceError(
            f"{type(sampler).__name__} diverged: the chain's state became non-finite by iteration "
            f"{t + 1} with step_size={state.step_size:.4g}. Use a smaller step_size (for example "
            f"{state.step_size / 4:.3g}), standardise the features, or increase the friction.",
            sampler=type(sampler).__name__, step_size=state.step_size, iteration=t + 1,
        )


def _advance(runner, model, n_steps):
    # The model (and so X) travels as its own argument, shared by every task, and not
    # inside the runner: joblib's dask backend scatters it once per worker and loky
    # memmaps it once, where a runner carrying it would ship X once per chain and
    # pickle it back with every result.
    runner.target.model = model
    try:
        # One BLAS thread, wherever the chain runs: a multithreaded product sums in another
        # order than a single-threaded one, so draws would depend on the process (loky and
        # dask workers run single-threaded BLAS, the caller's process does not) and the same
        # random_state would not give the same draws for every n_jobs. Chains are the unit
        # of parallelism; their per-step products are too small to gain from threads.
        with threadpool_limits(limits=1, user_api="blas"):
            runner.advance(n_steps)
    finally:
        runner.target.model = None
    return runner


def start_chains(sampler, model, starts, n_iter, n_burn, thin, max_draws, batch_size, batch_scheme, seeds,
                 step_size=None, control_variate=None, row_probabilities=None):
    """One :class:`ChainRunner` per start, not yet advanced (the model is detached from
    them: :func:`advance_chains` passes it to each task)."""
    runners = [ChainRunner(sampler, model, start, n_iter, n_burn, thin, max_draws, batch_size, batch_scheme,
                           seed, step_size, control_variate, row_probabilities) for start, seed in zip(starts, seeds)]
    for r in runners:
        r.target.model = None
    return runners


def advance_chains(runners, model, n_jobs=None, verbose=0):
    """Advance every runner to its ``n_iter`` in parallel with joblib; runners in chain order.

    With ``verbose > 0`` the chains advance in chunks of about a twentieth of the
    remaining iterations and a progress bar across all chains is updated between chunks
    (the chains' own randomness travels with them, so the draws are the same as in one
    call).
    """
    if not verbose:
        return Parallel(n_jobs=n_jobs)(delayed(_advance)(r, model, None) for r in runners)
    remaining = max(r.n_iter - r.t for r in runners)
    chunk = max(1, -(-remaining // 20))
    sampler = runners[0].sampler
    with Parallel(n_jobs=n_jobs) as parallel, progress_bar(
            sum(r.n_iter - r.t for r in runners), f"{type(sampler).__name__}, {len(runners)} chains") as bar:
        while not all(r.done for r in runners):
            before = sum(r.t for r in runners)
            runners = parallel(delayed(_advance)(r, model, chunk) for r in runners)
            bar.update(sum(r.t for r in runners) - before)
    return runners


def run_chains(sampler, model, starts, n_iter, n_burn, thin, max_draws, batch_size, batch_scheme,
               seeds, step_size=None, n_jobs=None, verbose=0, control_variate=None):
    """Run one chain per start in parallel with joblib; results in chain order.

    See :class:`ChainRunner` for the parameters and :func:`advance_chains` for
    ``n_jobs`` and ``verbose``.
    """
    runners = start_chains(sampler, model, starts, n_iter, n_burn, thin, max_draws, batch_size, batch_scheme,
                           seeds, step_size, control_variate)
    return [r.result() for r in advance_chains(runners, model, n_jobs, verbose)]
