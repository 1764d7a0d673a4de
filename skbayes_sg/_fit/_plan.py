"""The fit plan of the Markov-chain strategy: where the chains start and in which coordinates.

A fresh fit decides the :class:`~skbayes_sg._geometry.Geometry` (MAP, preconditioner, gradient
estimator), the chains' starts and the :class:`~skbayes_sg.samplers.FitContext` the sampler
resolves its step size from; a continued fit (``warm_start``, ``partial_fit``) takes the
chains' stored states and progress instead.
"""

import copy
from dataclasses import dataclass, replace

import numpy as np

from .. import _run_length
from .._chains import draw_schedule
from .._geometry import Geometry, build_geometry, noise_probe
from ..samplers import FitContext
from ..samplers._step_size import largest_curvature


@dataclass
class ChainPlan:
    """What the chains of one fit run with.

    ``geometry`` and ``chain_model`` the coordinates (the model whitened or not), ``starts``
    one point or stored state per chain, ``context`` what the sampler resolves its step from
    (None: a continued chain keeps its step), ``fit_round`` the seeds' round, ``progress`` the
    chains' :meth:`~skbayes_sg._chains.ChainRunner.progress` to continue exactly (or None),
    ``batch_size`` the minibatch size (``batch_size="auto"`` may have grown it).
    """

    geometry: Geometry
    chain_model: object
    starts: object
    context: object
    fit_round: int
    progress: object
    batch_size: object


def first_schedule(est, sampler, n_params, resume):
    """``(burn_in, max_draws, schedule)``: the resolved policy and the first block's
    :class:`~skbayes_sg._run_length.Schedule` (no burn-in for a continued chain).

    Raises ``ValueError`` when the schedule would keep no draw, before any work is done.
    """
    burn_in, min_adaptation, max_draws = est._run_policy(sampler, n_params)
    burn_in = None if resume else burn_in
    n_iter = _run_length.first_n_iter(est.n_iter, burn_in, min_adaptation)
    first_block = getattr(sampler, "_first_block", None)
    if (
        first_block is None
        and isinstance(est.burn_in, str)
        and isinstance(getattr(sampler, "step_size", None), str)
        and est._dense_map_start(sampler, n_params)
    ):
        # Chains near stationarity from the start, at the automatic step: the sampler knows
        # about how long its chains take to reach the ESS target there.
        first_block = getattr(sampler, "_dense_map_first_block", None)
    if est.n_iter == "auto" and first_block is not None and not _run_length._is_count(burn_in):
        # A sampler whose draws are nearly independent (HMC) starts with a shorter block: the
        # default one would overshoot the ESS target several times on a near-Gaussian posterior.
        n_iter = max(first_block, int(np.ceil(min_adaptation / float(burn_in)))) if burn_in else first_block
    n_burn = 0 if burn_in is None else _run_length.n_burn_of(burn_in, n_iter)
    if n_burn >= n_iter:
        raise ValueError(
            f"burn_in={est.burn_in!r} discards {n_burn} of n_iter={est.n_iter} iterations, leaving no "
            "draws; burn_in must be below n_iter (or a fraction in [0, 1))."
        )
    eff_thin, n_draws = draw_schedule(n_iter, n_burn, est.thin, max_draws)
    if n_draws == 0:
        raise ValueError(
            f"n_iter={n_iter} with {n_burn} burn-in iterations leaves {n_iter - n_burn}, fewer than "
            f"thin={est.thin}: no draw would be kept. Increase n_iter (or use n_iter='auto') or lower thin."
        )
    return burn_in, max_draws, _run_length.Schedule(n_iter, n_burn, eff_thin)


def can_resume(est, sampler, model):
    """Whether ``est`` holds chains that ``sampler`` can continue on ``model``."""
    if getattr(est, "_chain_states", None) is None:
        return False
    prev = getattr(est, "_sampler", None)
    return (
        prev is not None
        and type(prev) is type(sampler)
        and est.samples_.shape[2] == model.n_params
        and len(est._chain_states) == est.n_chains
    )


def noise_eigenvalue(est, chain_model, geometry, batch_size):
    """``sigma_max`` of the chains' gradient noise (None for full data)."""
    if batch_size is None or batch_size >= chain_model.n_samples:
        return None
    return noise_probe(chain_model, geometry, batch_size, est.batch_scheme)


def plan_resume(est, sampler, model, batch_size, streaming):
    """The :class:`ChainPlan` that continues ``est``'s stored chains."""
    # The chains continue in the coordinates they ran in (any fixed preconditioner and
    # control-variate centre stay valid as the data grow; g_hat is recomputed).
    geometry = est._geometry
    if streaming or model.sample_weight is not None or geometry.row_probabilities is not None:
        # The rows' probabilities belong to the data and weights of this call (a warm start
        # may bring other weights, whose positive rows must all be drawable); recomputed from
        # the same data and weights they are the same, bit for bit.
        geometry = geometry.for_data(model)
    chain_model = geometry.chain_model(model)
    # Copies: a continuation cut short (an interrupt, a divergence) must not leave the stored
    # chains half-advanced.
    starts, context = copy.deepcopy(est._chain_states), None
    # A fit continues its chains exactly (generators, minibatch queues, thinning grid), so that
    # fitting in parts gives the draws of one fit. partial_fit, whose data change, starts fresh
    # streams and queues each call, and so does the continuation of an estimator saved before
    # chains kept their progress.
    progress = None if streaming else getattr(est, "_chain_progress", None)
    if streaming and isinstance(getattr(sampler, "step_size", None), str):
        # The posterior sharpens as N grows: the step that was stable on the first chunks can
        # diverge now, so the auto rule runs again at the chains' states.
        sigma_max = noise_eigenvalue(est, chain_model, geometry, batch_size)
        context = FitContext(chain_model, starts[0].theta, sigma_max=sigma_max, scale=est._auto_step_scale(sampler))
        starts = [sampler.retune(state, context) for state in starts]
    return ChainPlan(geometry, chain_model, starts, context, est._fit_round + 1, progress, batch_size)


def plan_fresh(est, sampler, model, batch_size):
    """The :class:`ChainPlan` of new chains: geometry, starts and the step size's context."""
    geometry = build_geometry(
        model,
        sampler,
        batch_size,
        est.gradient,
        est._map,
        est._auto_preconditioner,
        est._auto_control_variate,
        est.batch_scheme,
        start_at_map=isinstance(est.init, str) and est.init == "map",
        coordinates=est._chain_coordinates,
    )
    chain_model = geometry.chain_model(model)
    starts, initial_factor = _fresh_starts(est, sampler, model, geometry, chain_model)
    sigma_max = noise_eigenvalue(est, chain_model, geometry, batch_size)
    # Whitened at the MAP with the exact Hessian, the curvature there is 1.
    lam = 1.0 if geometry.preconditioner == "dense" else None
    curvature_at = (
        np.zeros(model.n_params)
        if geometry.L is not None
        else geometry.theta_map
        if geometry.theta_map is not None
        else est._curvature_point(chain_model, starts[0])
    )
    step_scale = est._fresh_step_scale(sampler, model, geometry.preconditioner)
    if est.batch_size == "auto" and sigma_max and isinstance(sampler.step_size, str):
        if lam is None:
            lam = largest_curvature(chain_model, curvature_at)
        # Sized for the curvature step the chains will take (mCCAdL's larger constant on large
        # whitened data included): a batch sized for a smaller step leaves the noise capping h,
        # and the chains then need proportionally more iterations for the same ESS.
        batch_size, sigma_max = noise_aware_batch(
            sampler, batch_size, sigma_max, lam, chain_model.n_samples, step_scale
        )
        if batch_size is None:
            geometry = replace(geometry, gradient="full", row_probabilities=None)
    # The sampler resolves its step size from these measurements in its init_state, once for
    # all the chains (FitContext.step).
    context = FitContext(
        chain_model,
        curvature_at,
        lambda_max=lam,
        sigma_max=sigma_max,
        scale=step_scale,
        initial_factor=initial_factor,
    )
    return ChainPlan(geometry, chain_model, starts, context, 0, None, batch_size)


def _fresh_starts(est, sampler, model, geometry, chain_model):
    """``(starts, initial_factor)``: the chains' starts in the chain's coordinates, and the
    adaptive samplers' initial proposal factor when they start from the Laplace approximation."""
    starts = Geometry.to_chain(chain_model, est._initial_points(model))
    initial_factor = None
    if geometry.L is not None and isinstance(est.init, str) and est.init == "map":
        # Chains start at draws of the Laplace approximation, N(0, I) in whitened coordinates:
        # already near stationarity, and dispersed so that R-hat can tell chains that do not
        # mix from chains that agree by construction.
        starts = starts + est._start_rng().standard_normal(starts.shape)
    elif est._laplace_start(sampler):
        # The adaptive samplers' proposal starts from L0 L0' = H^-1 at the MAP, computed once
        # for all chains; the chains start at draws of N(theta_map, L0 L0'), for the same
        # reasons (their burn-in is then only their adaptation).
        initial_factor = sampler.fix_initial_factor(chain_model, starts[0])
        L0 = initial_factor[0]
        if L0 is not None:
            z = est._start_rng().standard_normal(starts.shape)
            starts = starts + (z @ L0.T if L0.ndim == 2 else z * L0)
    elif _curvature_proposal_away_from_map(est, sampler):
        # Chains started elsewhere (init="zeros" or given points) take the proposal of the
        # MAP's curvature too, not of their own start's: at zeros a logistic regression's
        # curvature (every p = 1/2) is far above the posterior's, the proposal started far too
        # small, and its adaptation had not recovered after 20,000 iterations on australian
        # (min ESS 234 against 3,885 from the MAP). The proposal then no longer depends on
        # where a chain starts.
        theta_map = Geometry.to_chain(chain_model, est._map(model))
        initial_factor = sampler.fix_initial_factor(chain_model, theta_map)
    return starts, initial_factor


def _curvature_proposal_away_from_map(est, sampler):
    """Whether an adaptive sampler whose proposal starts from the curvature
    (``init_scale="map"``) runs chains that start away from the MAP: ``init="zeros"`` or
    given points (not the DRBM's ``"random"``, whose modes the MAP would not represent)."""
    if not hasattr(sampler, "fix_initial_factor") or getattr(sampler, "init_scale", None) != "map":
        return False
    return not isinstance(est.init, str) or est.init == "zeros"


def noise_aware_batch(sampler, batch_size, sigma_max, lambda_max, n_samples, scale=1.0):
    """``batch_size="auto"``: grow the minibatch until the gradient noise no longer caps ``h``.

    With rows drawn with replacement ``sigma_max`` falls as ``1 / n``, so the batch at which
    the noise step reaches the curvature step is ``n0 h_curvature / h_noise``. The cost of
    an iteration grows with ``n`` but so, until that point, does the step and with it the
    mixing per iteration, and the default ``n_iter`` is an iteration budget. Many
    parameters for the rows (digits' softmax: 650 for 1,797 rows) need this: the control
    variate's noise grows like ``P / n``. Past half the rows the full data are used.

    Returns
    -------
    batch_size : int or None
    sigma_max : float or None
        The noise eigenvalue at the new batch size (None for full data).
    """
    h_curvature = sampler.curvature_step(lambda_max, scale)
    h_noise = sampler.noise_step(sigma_max)
    if h_noise >= h_curvature:
        return batch_size, sigma_max
    n = int(np.ceil(batch_size * h_curvature / h_noise))
    if n >= n_samples / 2:
        return None, None
    return n, sigma_max * batch_size / n
