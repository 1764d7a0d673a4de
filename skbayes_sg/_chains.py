"""The fit loop: run chains of a sampler on a target and keep their draws.

One shared loop serves every estimator. Chains run under ``joblib.Parallel``; each chain
draws all its randomness from its own ``numpy.random.Generator`` seeded by a child of
one ``SeedSequence``, so the draws are bit-identical whatever ``n_jobs`` is.
"""

from dataclasses import dataclass, field

import numpy as np
from joblib import Parallel, delayed

from .exceptions import DivergenceError
from .minibatch import MinibatchGradient

# How often (in iterations) a chain is checked for non-finite values between stored
# draws: NaN and inf persist once they appear, so a sparse check finds them at a small
# fraction of the per-iteration cost; every stored draw is checked too.
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


def run_chain(sampler, model, start, n_iter, n_burn, thin, max_draws, batch_size, batch_scheme,
              seed, step_size=None):
    """Run one chain and return its draws after burn-in.

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

    Returns
    -------
    ChainResult
    """
    rng = np.random.default_rng(seed)
    target = MinibatchGradient(model, batch_size, batch_scheme)
    if hasattr(start, "theta"):
        state = start
    else:
        state = sampler.init_state(start, target, rng, step_size)
    eff_thin, n_draws = draw_schedule(n_iter, n_burn, thin, max_draws)
    draws = np.empty((n_draws, model.n_params))
    stat_names = sampler._stat_names
    stats = np.empty((n_draws, len(stat_names)))
    k = 0
    first_kept = n_burn + eff_thin - 1
    # A diverging chain overflows before it is caught; the DivergenceError says so, so
    # numpy's overflow warnings would only be noise.
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(n_iter):
            state = sampler.step(state, target, rng)
            keep = t >= first_kept and (t - first_kept) % eff_thin == 0 and k < n_draws
            if keep or t % _CHECK_EVERY == 0:
                _check_finite(state, sampler, t)
            if keep:
                draws[k] = state.theta
                stats[k] = sampler.sample_stats(state)
                k += 1
    _check_finite(state, sampler, n_iter - 1)
    return ChainResult(
        draws=draws,
        stats={name: stats[:, j] for j, name in enumerate(stat_names)},
        state=state,
        n_grad_evals=target.n_grad_evals,
        summary=sampler.chain_summary(state),
    )


def _check_finite(state, sampler, t):
    if not np.isfinite(state.theta).all() or (state.p is not None and not np.isfinite(state.p).all()):
        raise DivergenceError(
            f"{type(sampler).__name__} diverged: the chain's state became non-finite by iteration "
            f"{t + 1} with step_size={state.step_size:.4g}. Use a smaller step_size (for example "
            f"{state.step_size / 4:.3g}), standardise the features, or increase the friction.",
            sampler=type(sampler).__name__, step_size=state.step_size, iteration=t + 1,
        )


def run_chains(sampler, model, starts, n_iter, n_burn, thin, max_draws, batch_size, batch_scheme,
               seeds, step_size=None, n_jobs=None, verbose=0):
    """Run one chain per start in parallel; results in chain order."""
    return Parallel(n_jobs=n_jobs, verbose=verbose)(
        delayed(run_chain)(sampler, model, start, n_iter, n_burn, thin, max_draws, batch_size,
                           batch_scheme, seed, step_size)
        for start, seed in zip(starts, seeds)
    )
