"""Run a fit's chains: the first block of iterations and, with ``n_iter="auto"``, further blocks
until the draws meet the convergence targets; an interrupt (Ctrl-C) cuts them to their common
draws."""

from dataclasses import dataclass

import numpy as np

from .. import _run_length
from .._chains import ChainSpec, advance_chains, start_chains, worker_pool
from ._ksd import SpeculativeKSD


@dataclass
class Runs:
    """What :func:`run_blocks` returns: the chains' results and how far they ran.

    ``t0`` and ``t`` are the chains' iteration counts at the start and end of the run
    (``t0 > 0`` for an exact continuation), ``eff_thin`` the final thinning; ``states`` and
    ``progress`` what a later fit needs to continue them (None when an interrupt left them
    misaligned); ``interrupted`` None, or the interrupt and where it stopped the chains.
    """

    results: list
    summary: object
    blocks: list
    interrupted: object
    t0: int
    t: int
    eff_thin: int
    states: object
    progress: object
    ksd: object = None

    @property
    def n_run(self):
        """Iterations per chain run by this call."""
        return self.t - self.t0


def run_blocks(est, sampler, plan, first, burn_in, max_draws):
    """Run the chains of ``plan`` (a :class:`~._plan.ChainPlan`) for the ``first`` schedule, and
    with ``n_iter="auto"`` in further blocks until they converge (``burn_in`` None: a continued
    chain, which runs until its own draws meet the targets).

    ``plan.progress``: the chains' :meth:`~skbayes_sg._chains.ChainRunner.progress` to continue
    them exactly (``first`` then counts from the continuation's start).

    Returns a :class:`Runs`: the chains' results, the :func:`~skbayes_sg.diagnostics.summarize`
    of their draws when it was computed (``"auto"``) or None, the schedule of every block
    (:mod:`skbayes_sg._run_length`), and after a ``KeyboardInterrupt`` the chains cut to their
    common draws.
    """
    progress, chain_model = plan.progress, plan.chain_model
    t0 = 0 if progress is None else progress[0]["t"]
    seeds = est._seeds(plan.fit_round) if progress is None else [None] * len(plan.starts)
    spec = ChainSpec(
        sampler,
        chain_model,
        t0 + first.n_iter,
        first.n_burn,
        est.thin,
        max_draws,
        plan.geometry.gradient_spec(chain_model, plan.batch_size, est.batch_scheme),
        plan.context,
    )
    runners = start_chains(spec, list(plan.starts), seeds, progress)
    # A continued chain's grid may be coarser than the first block's (max_draws over the
    # whole record); the blocks count from the continuation's start.
    blocks = [_run_length.Schedule(first.n_iter, first.n_burn, runners[0].eff_thin) if progress else first]
    summary = speculative = None
    try:
        # One pool of workers for all the blocks, started when a block is long enough.
        with worker_pool(chain_model, est.n_jobs, len(runners)) as pool:
            runners = advance_chains(runners, chain_model, est.n_jobs, est.verbose, pool=pool)
            while est.n_iter == "auto":
                draws = np.stack([r.kept_draws() for r in runners])
                # The KSD of these draws, in a thread while the summary decides (if it stops).
                speculative = SpeculativeKSD.start(est, plan, runners, draws, not sampler.requires_full_data)
                summary = est._run_length_summary(draws)
                nxt = _run_length.next_schedule(
                    blocks[-1],
                    summary,
                    burn_in,
                    max_draws,
                    len(runners),
                    max_iter=est._run_length_max_iter,
                    ess_target=est._run_length_ess_target,
                )
                if nxt is None:
                    break
                if speculative is not None:  # the run goes on: its KSD will score other draws
                    speculative.join()
                    speculative = None
                blocks.append(nxt)
                n_burn = nxt.n_burn if progress is None else runners[0].n_burn
                runners = advance_chains(
                    [r.extend(t0 + nxt.n_iter, n_burn, nxt.eff_thin) for r in runners],
                    chain_model,
                    est.n_jobs,
                    est.verbose,
                    pool=pool,
                )
    except KeyboardInterrupt as exc:
        if speculative is not None:
            speculative.join()
        # ChainsInterrupted carries the chains as the last round left them; an interrupt
        # between rounds (the diagnostics of n_iter="auto") finds them in `runners`.
        return _interrupted(exc, getattr(exc, "runners", runners), blocks, t0)
    summary = summary if est._run_length_on_parameters else None
    states, progress = [r.state for r in runners], [r.progress() for r in runners]
    return Runs(
        [r.result() for r in runners],
        summary,
        blocks,
        None,
        t0,
        runners[0].t,
        runners[0].eff_thin,
        states,
        progress,
        speculative,
    )


def _interrupted(exc, runners, blocks, t0):
    """The :class:`Runs` of chains stopped by ``exc``, a ``KeyboardInterrupt``."""
    n_draws = min(r.k for r in runners)
    t = min(r.t for r in runners)
    # Chains that all stopped between iterations at one count and on one grid (rounds run in
    # worker processes) can be continued exactly; otherwise their draws are cut to a common
    # length and they cannot.
    aligned = not any(r.busy for r in runners) and len({(r.t, r.n_iter, r.n_burn, r.eff_thin) for r in runners}) == 1
    interrupted = {"exception": exc, "n_draws": n_draws, "iteration": t, "n_iter": runners[0].n_iter}
    return Runs(
        [r.result(n_draws) for r in runners],
        None,
        blocks,
        interrupted,
        t0,
        t,
        runners[0].eff_thin,
        [r.state for r in runners] if aligned else None,
        [r.progress() for r in runners] if aligned else None,
    )
