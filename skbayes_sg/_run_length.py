"""How long the chains run: a fixed ``n_iter``, or ``n_iter="auto"``.

With ``"auto"`` the chains run in blocks: a first block of :data:`FIRST_BLOCK`
iterations (or a sampler's own, where it knows about how long its chains need: HMC's
``_first_block``, mCCAdL's ``_dense_map_first_block``), then, after each block, the
convergence diagnostics of the draws kept so far
decide whether to stop or how far to extend. The run stops as soon as

* every parameter's bulk ESS is at least :data:`ESS_TARGET` (1,000: the Monte Carlo
  error of every posterior mean is then at most ``1/sqrt(1000) = 0.032`` posterior sd, and
  that of every sd at most 2.2%),
* every tail ESS is at least 100 per chain and every rank-normalised split R-hat is
  below 1.01 (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021, Sections 4.3 and 5,
  the thresholds the estimators warn at),

or when it reaches :data:`MAX_ITER` iterations per chain. Bulk ESS grows about linearly
with the number of kept draws, so the next length is the one at which the lowest ESS is
predicted to reach its target (with a 10% margin), at least 1.25 and at most 4 times the
current one. A failing R-hat alone extends the run so far as to bring the worst below 1.01
if R-hat - 1 falls as ``1 / n``, as it does for chains that mix (it is about half the excess
of the chain means' variance over that of independent draws), with the same margin and bounds
but at most a doubling (chains stuck apart are not helped by a prediction).

Burn-in stays the fraction ``burn_in`` of the whole run as it grows (a count stays a
count), so a chain that needed longer to forget its start is not averaged with its
transient. Thinning stays at ``thin`` until ``max_draws`` would be exceeded, then doubles.
Both are chosen so that the draws already stored that remain are exactly those one run
of the final length would have stored (:meth:`skbayes_sg._chains.ChainRunner.extend`).

Stopping on a diagnostic is an optional-stopping rule; its bias is of the order of the
Monte Carlo error it targets (Jones, Haran, Caffo & Neath 2006 study fixed-width rules of
this kind), far below the error of stopping short.
"""

from dataclasses import dataclass
from numbers import Integral

import numpy as np

#: Iterations of the first block of ``n_iter="auto"``, burn-in included.
FIRST_BLOCK = 1000
#: Ceiling of ``n_iter="auto"``, iterations per chain.
MAX_ITER = 100_000
#: Bulk ESS (all chains together) at which ``n_iter="auto"`` stops.
ESS_TARGET = 1000
#: Rank-normalised split R-hat below which chains count as mixed (Vehtari et al. 2021
#: recommend 1.01): ``n_iter="auto"`` runs until every parameter's is below it, and ``fit``
#: warns (``ConvergenceWarning``) above it.
RHAT_MAX = 1.01
#: Bulk and tail ESS per chain below which ``fit`` warns (Vehtari et al. 2021: 100 per
#: chain, so 400 for four chains, for reliable R-hat and quantiles); ``n_iter="auto"``
#: runs until every tail ESS reaches it.
ESS_MIN_PER_CHAIN = 100
#: Growth of a block: at least this factor, at most ``MAX_GROWTH``, with ``MARGIN`` over the
#: predicted length.
MIN_GROWTH, MAX_GROWTH, MARGIN = 1.25, 4.0, 1.1


@dataclass(frozen=True)
class Schedule:
    """Iterations per chain, how many are discarded, and the stored draws' spacing."""

    n_iter: int
    n_burn: int
    eff_thin: int

    @property
    def n_draws(self):
        """Draws stored per chain."""
        return (self.n_iter - self.n_burn) // self.eff_thin


def _is_count(burn_in):
    """Whether ``burn_in`` is a number of iterations (an int >= 1) rather than a fraction."""
    return isinstance(burn_in, Integral) and not isinstance(burn_in, bool) and burn_in >= 1


def n_burn_of(burn_in, n_iter):
    """Burn-in iterations of a run of ``n_iter``: a count, or a fraction of ``n_iter``."""
    if _is_count(burn_in):
        return int(burn_in)
    return int(round(float(burn_in) * n_iter))


def first_n_iter(n_iter, burn_in, min_adaptation=0):
    """Length of the first block: ``n_iter``, or for ``"auto"`` :data:`FIRST_BLOCK`.

    With ``"auto"``, a burn-in given as a count gets :data:`FIRST_BLOCK` minus 20% after
    it, and a fraction is applied to a first block long enough that the burn-in covers a
    sampler's ``min_adaptation`` iterations (the adaptive samplers': 1,000, so 5,000 at the
    default ``burn_in=0.2``).
    """
    if n_iter != "auto":
        return int(n_iter)
    if _is_count(burn_in):
        return int(burn_in) + int(FIRST_BLOCK * 0.8)
    if burn_in and min_adaptation:
        return max(FIRST_BLOCK, int(np.ceil(min_adaptation / float(burn_in))))
    return FIRST_BLOCK


def next_schedule(schedule, summary, burn_in, max_draws, n_chains, max_iter=None, ess_target=ESS_TARGET):
    """The schedule of the next block of ``n_iter="auto"``, or None to stop.

    Parameters
    ----------
    schedule : Schedule
        The run so far.
    summary : dict
        :func:`skbayes_sg.diagnostics.summarize` of the draws stored so far.
    burn_in : float or int
        The estimator's ``burn_in`` (None: no burn-in, a continued chain).
    max_draws : int or None
    n_chains : int
    max_iter : int, optional
        Ceiling on ``n_iter``; default :data:`MAX_ITER`.
    ess_target : float, default=ESS_TARGET
        Bulk ESS at which to stop.

    Returns
    -------
    Schedule or None
    """
    max_iter = MAX_ITER if max_iter is None else max_iter
    needed = required_growth(summary, n_chains, ess_target)
    if needed <= 1.0 or schedule.n_iter >= max_iter:
        return None
    n_kept = schedule.n_iter - schedule.n_burn
    growth = min(MAX_GROWTH, max(MIN_GROWTH, needed))
    target_kept = n_kept * growth
    if burn_in is None:
        n_iter = target_kept
    elif _is_count(burn_in):
        n_iter = target_kept + int(burn_in)
    else:
        n_iter = target_kept / (1.0 - float(burn_in))
    n_iter = int(min(max_iter, np.ceil(n_iter)))
    target_burn = 0 if burn_in is None else n_burn_of(burn_in, n_iter)
    eff_thin = schedule.eff_thin
    while True:
        # The burn-in moves by whole multiples of the new thinning, so that the draws
        # already stored stay on the new grid (ChainRunner.extend), and leaves a draw.
        steps = int(np.ceil(max(0, target_burn - schedule.n_burn) / eff_thin))
        steps = min(steps, max(0, (n_iter - eff_thin - schedule.n_burn) // eff_thin))
        n_burn = schedule.n_burn + eff_thin * steps
        if max_draws is None or (n_iter - n_burn) // eff_thin <= max_draws:
            return Schedule(n_iter, n_burn, eff_thin)
        eff_thin *= 2


def required_growth(summary, n_chains, ess_target=ESS_TARGET):
    """Factor by which the kept draws should grow to meet the targets (<= 1: met).

    The bulk and tail ESS are taken as proportional to the kept draws, and the length at
    which the lowest is predicted to reach its target gets a ``MARGIN``; a parameter with
    no finite ESS asks for a doubling, and an R-hat of at least :data:`RHAT_MAX` for
    :func:`rhat_growth`.
    """
    ess_bulk = np.asarray(summary["ess_bulk"], dtype=float)
    ess_tail = np.asarray(summary["ess_tail"], dtype=float)
    rhat = np.asarray(summary["rhat"], dtype=float)
    if not (np.isfinite(ess_bulk).all() and np.isfinite(ess_tail).all()):
        return 2.0
    ess_ratio = max(ess_target / ess_bulk.min(), ESS_MIN_PER_CHAIN * n_chains / ess_tail.min())
    growth = MARGIN * ess_ratio if ess_ratio > 1.0 else 1.0
    # A single chain has no R-hat (NaN): its ESS alone decides.
    if n_chains > 1:
        worst = float(rhat.max()) if np.isfinite(rhat).all() else np.inf
        if not worst < RHAT_MAX:
            growth = max(growth, rhat_growth(worst))
    return float(growth)


def rhat_growth(rhat):
    """Growth of the kept draws that brings a split R-hat of ``rhat`` (>= :data:`RHAT_MAX`) below it.

    For chains that mix, ``R-hat^2 = var+ / W`` with ``var+ = (n - 1) W / n + B / n``
    (Gelman et al. 2013, section 11.4), so ``R-hat^2 - 1 = (B / W - 1) / n``, ``B / W`` the
    chain means' variance over that of independent draws (about their autocorrelation time), and
    ``R-hat - 1`` falls as ``1 / n``: the prediction ``(R-hat - 1) / (RHAT_MAX - 1)`` with
    ``MARGIN``, at least :data:`MIN_GROWTH` and at most 2. The cap keeps the doubling for
    chains that disagree by far more (stuck apart, or an infinite R-hat), which no prediction
    from their draws so far describes. A just failing R-hat (1.0105 with ESS met) used to
    double the run; it now asks for a quarter more.
    """
    return float(min(2.0, max(MIN_GROWTH, MARGIN * (rhat - 1.0) / (RHAT_MAX - 1.0))))
