"""Hamiltonian Monte Carlo with a Metropolis test, for full-data fits (Neal 2011; Chen et al. 2014, Section 2).

Two integrators: the leapfrog (Neal 2011, eqs. 5.18-5.20) and, in coordinates whitened at the
MAP, the split integrator of Neal 2011, Section 5.5.1 (Shahbaba et al. 2014, Section 2), which
integrates the Laplace approximation's part of the dynamics exactly.
"""

import math
from dataclasses import dataclass
from numbers import Real
from typing import NamedTuple

import numpy as np
from sklearn.utils._param_validation import StrOptions

from ..models._fused import fused_force
from ..preconditioning import PRECONDITIONERS
from ._base import AUTO, OPEN_UNIT_INTERVAL, POSITIVE, BaseSampler, _Number
from ._batched import ChainsState, row_dots
from ._state import SamplerState

#: Energy error beyond which a trajectory counts as divergent (Stan's threshold): the
#: leapfrog integrator has left the region where it tracks the dynamics, and the proposal is
#: rejected (its acceptance probability is ``exp(-1000)`` at most anyway).
DIVERGENCE_ENERGY = 1000.0
#: Most leapfrog steps of one trajectory (NUTS's default tree depth of 10 allows 1,023): a
#: step adapted far below the posterior's scale (a posterior whose curvature is far from the
#: whitened 1) then costs a bounded number of gradients per iteration, not an unbounded one.
MAX_LEAPFROG = 1024
#: Dual averaging's constants (Hoffman & Gelman 2014, Section 3.2.1): ``gamma``, ``t0``, ``kappa``.
DA_GAMMA, DA_T0, DA_KAPPA = 0.05, 10.0, 0.75
#: The split integrator's ``"auto"`` start: this fraction of the trajectory's length, two steps
#: per trajectory (the adaptation moves it from there).
SPLIT_START = 0.5
#: The split integrator's ``"auto"`` trajectory length, ``0.55 pi`` in whitened units (the
#: leapfrog's is ``pi / 2``). In the Laplace approximation's ``N(0, I)`` a trajectory of length
#: ``tau`` rotates ``(z, r)`` by ``tau``: a coordinate's draws then correlate by ``cos tau`` and
#: its square's (the folded draws that tail ESS and folded R-hat see) by ``cos^2 tau``. Past
#: ``pi / 2`` the draws are antithetic (bulk ESS above the draws' number), and directions wider
#: than the Laplace approximation, which turn slower, still get a near-quarter turn; at
#: ``0.55 pi`` jittered by 25% ``cos^2`` stays below 0.31. Default fits over 16 seeds
#: (``benchmarks/hmc_split_length.py``; lengths 0.5, 0.55, 0.6 pi): mean wall time on breast
#: cancer 0.147, 0.121, 0.121 s (13 of 16 fits stop at the first block at 0.55 pi, 4 at
#: 0.5 pi), on wine (softmax) 1.08, 1.11, 1.33 s, on diabetes (linear regression) 0.105, 0.114,
#: 0.106 s.
SPLIT_LENGTH = 0.55 * math.pi
#: Iterations whose trajectories' schedule is laid out at once after the steps are frozen.
SCHEDULE_BLOCK = 64
#: The golden ratio's fractional part: the trajectories' jitter is the Weyl sequence
#: ``frac(t phi)``, evenly spread over [0, 1) and never periodic.
_PHI = 0.6180339887498949


@dataclass
class HMCState(SamplerState):
    """State of one HMC chain.

    Attributes
    ----------
    log_p, grad : float, ndarray of shape (P,)
        ``-U(theta)`` (the log posterior up to a constant) and its gradient ``-grad U``, reused by
        the next trajectory's first half kick.
    eps : float
        The chain's step (a rotation angle under the split integrator): adapted during
        burn-in, then frozen. (``step_size`` stays the
        step the fit resolved for every chain, the adaptation's starting point.)
    log_eps_bar, h_bar, mu, n_adapt : float
        Dual averaging's iterate average, running acceptance deficit, shrinkage target and count.
    adapting, freeze_pending : bool
        True until :meth:`HMC.end_adaptation`; then ``freeze_pending`` until ``eps`` is set to the
        average (by the next stacking or batched step, which hold the live values).
    n_steps, n_accepted, n_divergent, n_leapfrog : int
        Iterations, accepted proposals and divergent trajectories after adaptation, and
        integrator steps (gradient evaluations) in all.
    """

    log_p: float = None
    grad: np.ndarray = None
    eps: float = None
    log_eps_bar: float = 0.0
    h_bar: float = 0.0
    mu: float = 0.0
    n_adapt: float = 0.0
    adapting: bool = False
    freeze_pending: bool = False
    n_steps: float = 0.0
    n_accepted: int = 0
    n_divergent: int = 0
    n_leapfrog: int = 0

    def summary(self):
        """``acceptance_rate`` after adaptation (NaN if none ran), ``step_size``: the adapted
        leapfrog step, ``n_divergent`` after adaptation, ``leapfrog_per_iter``."""
        n = int(self.n_steps) - int(self.n_adapt)
        eps = math.exp(self.log_eps_bar) if self.freeze_pending and self.n_adapt > 0 else self.eps
        return {
            "acceptance_rate": self.n_accepted / n if n > 0 else float("nan"),
            "step_size": float(eps),
            "n_divergent": int(self.n_divergent),
            "leapfrog_per_iter": self.n_leapfrog / max(int(self.n_steps), 1),
        }


class HMCInfo(NamedTuple):
    """``accept_prob`` (``min(1, exp(-Delta H))``), ``accepted`` (1.0 or 0.0), ``n_leapfrog``
    and ``diverging`` (1.0 for a divergent trajectory) of the iteration's proposal."""

    accept_prob: float
    accepted: float
    n_leapfrog: float
    diverging: float


class HMC(BaseSampler):
    """Hamiltonian Monte Carlo: leapfrog trajectories and a Metropolis test on the full data.

    The exact sampler of full-data fits. Each iteration draws a momentum ``r ~ N(0, I)``
    (mass ``M = I``), integrates Hamilton's equations for ``U = -log p(theta | D)``
    (Chen, Fox & Guestrin 2014, eqs. 1-4, their Section 2 review) with ``m`` leapfrog steps
    of size ``epsilon`` (their Algorithm 1; Neal 2011, eqs. 5.18-5.20), and accepts the end
    point with probability ``min(1, exp(H(theta, r) - H(theta*, r*)))`` (Neal 2011, eq. 5.23;
    Algorithm 1 prints the exponent with the opposite sign). The proposal's momentum is
    negated (Neal 2011, Section 5.3.2.1) to make it an involution; the momentum is then
    discarded, so the negation changes nothing that is kept. Every trajectory's end point
    comes with its log posterior from the call that computes its force. For a logistic
    regression held in memory the force is computed in single precision and the log
    posterior in double: the integrator is volume-preserving and reversible for any force
    that is a fixed function of the point, and the Metropolis test, on the double-precision
    ``H``, keeps the chains exact (``models/_fused.py``).

    Run in the coordinates whitened at the MAP (``preconditioner="auto"``), where a
    near-Gaussian posterior is near ``N(0, I)`` and Hamilton's flow is near a rotation of
    period ``2 pi``: a trajectory of length ``pi / 2`` then maps ``(z, r)`` to about
    ``(r, -z)``, a nearly independent draw, and the split integrator's default ``0.55 pi``
    (:data:`SPLIT_LENGTH`) to an antithetic one. The length of each iteration's trajectory is
    jittered over ``[1 - jitter, 1 + jitter]`` times ``trajectory_length`` (Neal 2011,
    Section 5.4.2.2), so that no direction whose curvature is off 1 resonates, by a Weyl
    sequence of the iteration number shared by the chains (every chain of a fit takes the
    same number of leapfrog steps, so batched chains waste no gradient); the kernel changes
    with the iteration but each one leaves the posterior invariant.

    In those coordinates the default integrator is **split** (Neal 2011, Section 5.5.1,
    "Splitting the Hamiltonian"; Shahbaba, Lan, Johnson & Neal 2014, Section 2): write
    ``U(z) = U_0(z) + U_1(z)`` with ``U_0 = |z|^2 / 2``, the Laplace approximation's
    potential, and ``U_1 = U - U_0``, whose force is ``F_1(z) = F(z) + z``
    (``F = -grad U``). A step of size ``epsilon`` is a half kick
    ``p <- p + (epsilon / 2) F_1(z)``, the exact flow of ``H_0 = U_0 + |p|^2 / 2`` for a
    time ``epsilon`` (the rotation ``z' = z cos(epsilon) + p sin(epsilon)``,
    ``p' = -z sin(epsilon) + p cos(epsilon)``), and another half kick: the Strang splitting
    ``U_1 / 2, H_0, U_1 / 2`` of ``H = U + |p|^2 / 2``, symplectic and reversible, so the
    Metropolis test on the full ``H`` keeps the posterior exact. Its error grows with ``F_1``
    alone, which is small where the posterior is near its Laplace approximation: a
    trajectory of ``pi / 2`` takes one or two steps where the leapfrog takes about five (for
    a Gaussian posterior with the exact whitening one step is exact). A trajectory of
    length ``tau`` takes ``m = ceil(tau / epsilon)`` steps of ``tau / m`` each, so that its
    length stays ``tau`` however large the adapted ``epsilon`` (the rotation is periodic:
    a step of ``2 pi`` would not move). Casas, Sanz-Serna & Shaw (2022) show that the split
    needs the preconditioning: unwhitened it is stable for no larger a step than the
    leapfrog, which is therefore kept in ``theta`` coordinates and under a diagonal
    whitening.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        ``epsilon``. ``"auto"``: starts at ``1.2 P^(-1/4) / sqrt(lambda_max)`` (about the step
        that a standard Gaussian in ``P`` dimensions accepts at ``target_accept``) and is
        adapted during burn-in by dual averaging (Hoffman & Gelman 2014, Section 3.2.1), each
        chain from its own acceptance, then frozen, so the kept draws come from a fixed kernel.
        A float is used as is, never adapted.
    target_accept : float, default=0.8
        The acceptance probability the adaptation aims at.
    trajectory_length : float or "auto", default="auto"
        ``m epsilon``, the integration time; ``"auto"``: ``0.55 pi`` under the split integrator
        (:data:`SPLIT_LENGTH`: antithetic draws of the Laplace approximation's part), ``pi / 2``
        under the leapfrog (in whitened units).
    jitter : float, default=0.25
        Relative spread of the trajectory length, in [0, 1).
    preconditioner : {"auto", "dense", "centred", "diag", "none"}, default="auto"
        As for :class:`MCCAdL`: ``"auto"`` whitens at the MAP (dense up to 1,000 parameters)
        with ``step_size="auto"`` and runs in ``theta`` with an explicit step.
    integrator : {"auto", "split", "leapfrog"}, default="auto"
        How a trajectory is integrated: ``"split"`` (above: kicks by ``F_1 = F + z`` around
        the exact rotation of ``U_0 = |z|^2 / 2``), ``"leapfrog"`` (kicks by ``F`` around a
        drift), or ``"auto"``: split in coordinates whitened by a dense factor at the MAP,
        where ``N(0, I)`` is the Laplace approximation, and leapfrog elsewhere. A step size
        is in the units of the integrator: ``step_size`` and ``diagnostics_["step_size"]``
        are the angle of one rotation under the split.

    Notes
    -----
    Needs the full-data log posterior (``requires_full_data``): the estimators then use
    ``batch_size=None``. A trajectory whose energy error is non-finite or above 1,000 is
    divergent: rejected, and counted in ``diagnostics_["n_divergent"]``.

    References
    ----------
    Neal, R. M. (2011). MCMC using Hamiltonian dynamics. Handbook of Markov Chain Monte Carlo.
    Chen, T., Fox, E. B. & Guestrin, C. (2014). Stochastic gradient Hamiltonian Monte Carlo. ICML.
    Hoffman, M. D. & Gelman, A. (2014). The No-U-Turn sampler. JMLR 15.
    Shahbaba, B., Lan, S., Johnson, W. O. & Neal, R. M. (2014). Split Hamiltonian Monte Carlo.
    Statistics and Computing 24.
    Casas, F., Sanz-Serna, J. M. & Shaw, L. (2022). Split Hamiltonian Monte Carlo revisited.
    Statistics and Computing 32.
    """

    requires_full_data = True
    info_type = HMCInfo
    state_type = HMCState
    _batch_fields = (
        "theta",
        "log_p",
        "grad",
        "eps",
        "log_eps_bar",
        "h_bar",
        "mu",
        "n_adapt",
        "n_steps",
        "n_accepted",
        "n_divergent",
        "n_leapfrog",
    )
    #: The first block of ``n_iter="auto"``: HMC's draws are nearly independent, so the
    #: estimators' default of 1,000 iterations would overshoot the ESS target several times.
    #: ``burn_in="auto"`` under ``init="map"`` is ``_map_burn_in``: the chains start at draws
    #: of the Laplace approximation (``N(0, I)`` in the whitened coordinates) or at the MAP,
    #: already near stationarity, so the burn-in only adapts the step: 50 adapting and 450
    #: kept iterations. With the split's antithetic trajectories (:data:`SPLIT_LENGTH`) the
    #: lowest bulk ESS is past its target there; what a shorter block misses is R-hat < 1.01
    #: on the folded draws (on breast cancer, 24 seeds, lengths 0.6-0.64 pi: 500 iterations met
    #: every target at the first block in 24 fits, 450 in 20-22, 400 in 18-20, each miss
    #: doubling the run).
    _first_block = 500
    _min_adaptation = 50
    _map_burn_in = 0.1

    _parameter_constraints: dict = {
        "step_size": [POSITIVE, AUTO],
        "target_accept": [OPEN_UNIT_INTERVAL],
        "trajectory_length": [POSITIVE, AUTO],
        "jitter": [_Number(Real, 0, 1, closed="left")],
        "preconditioner": [StrOptions(set(PRECONDITIONERS))],
        "integrator": [StrOptions({"auto", "split", "leapfrog"})],
    }

    def __init__(
        self,
        step_size="auto",
        target_accept=0.8,
        trajectory_length="auto",
        jitter=0.25,
        preconditioner="auto",
        integrator="auto",
    ):
        self.step_size = step_size
        self.target_accept = target_accept
        self.trajectory_length = trajectory_length
        self.jitter = jitter
        self.preconditioner = preconditioner
        self.integrator = integrator

    # -- step size ------------------------------------------------------------------------
    def curvature_step(self, lambda_max, scale=1.0):
        if getattr(self, "_split_start", False):
            # The split's error is F_1's, unknown before a trajectory runs: start at two steps
            # per trajectory and let the adaptation find the rest.
            return float(scale * SPLIT_START * self._length(split=True))
        # Leapfrog on N(0, I) in P dimensions has a mean energy error of about P eps^4 / 32;
        # an acceptance of 0.8 needs about 0.13 of it, so eps ~ 1.4 P^(-1/4): start a little below.
        P = getattr(self, "_n_params", 1)
        return float(scale * 1.2 * P**-0.25 / math.sqrt(lambda_max))

    def resolve_step_size(self, model, theta0, sigma_max=None, lambda_max=None, scale=1.0):
        self._n_params = int(np.size(theta0))
        self._split_start = self.uses_split(model)
        return super().resolve_step_size(model, theta0, None, lambda_max, scale)

    def _length(self, split=False):
        if isinstance(self.trajectory_length, str):
            return SPLIT_LENGTH if split else math.pi / 2
        return float(self.trajectory_length)

    def uses_split(self, model):
        """Whether trajectories on ``model`` (the chains' coordinates) use the split integrator:
        ``"auto"`` means a model whitened by a dense factor (``theta = m + L z``, ``L`` a
        matrix), which the fits build at the MAP."""
        if self.integrator != "auto":
            return self.integrator == "split"
        return hasattr(model, "to_theta") and np.ndim(getattr(model, "L", None)) == 2

    # -- chains ---------------------------------------------------------------------------
    def init_state(self, theta0, grad_estimator, rng, context=None):
        theta = np.array(theta0, dtype=float)
        h = self.step_size_for(context, theta)
        # As the trajectories compute it (the fused log posterior drops a constant of the
        # model's): the first accept test compares two values of one function.
        grad = np.empty((1, theta.size))
        log_p = _evaluate(_OneChain(grad_estimator), theta[None], grad, True)[0]
        grad = grad[0]
        adapting = isinstance(self.step_size, str)
        return HMCState(
            theta=theta,
            step_size=h,
            log_p=float(log_p),
            grad=np.array(grad, dtype=float),
            eps=h,
            mu=math.log(10.0 * h),
            adapting=adapting,
        )

    def retune(self, state, context):
        # partial_fit: a continued chain takes the step resolved for the grown data, unadapted.
        state.step_size = state.eps = self.step_size_for(context, state.theta)
        state.adapting = False
        return state

    def end_adaptation(self, state):
        """Freeze the chain's step at its dual-averaging average ``exp(log_eps_bar)`` (before its
        next iteration: in a batched group the live values are in the stack, not the state)."""
        if state.adapting:
            state.adapting = False
            # In a batched group the state's counters are stale until the round ends: whether
            # any adaptation ran is read where the step is frozen.
            state.freeze_pending = True

    def batched(self, grads):
        return True

    def stack_states(self, states):
        for s in states:
            if s.freeze_pending:
                s.eps = _frozen_step(s.n_adapt, s.log_eps_bar, s.eps)
                s.freeze_pending = False
        chains = ChainsState(states, self._batch_fields)
        chains.adapting = any(s.adapting for s in states)
        return chains

    def step(self, state, grad_estimator, rng):
        chains = self.stack_states([state])
        info = self.step_batch(chains, _OneChain(grad_estimator), [rng])
        chains.write_back([state])
        return state, HMCInfo(*info[0])

    def step_batch(self, chains, grads, rngs):
        if chains.adapting and not chains.states[0].adapting:
            # end_adaptation ran on the chains' own states: freeze the stacked steps.
            chains.adapting = False
            for c, s in enumerate(chains.states):
                if s.freeze_pending:
                    chains.eps[c] = _frozen_step(chains.n_adapt[c], chains.log_eps_bar[c], chains.eps[c])
                    s.freeze_pending = False
        theta, log_p, grad = chains.theta, chains.log_p, chains.grad
        # The integrator and the fused force are the group's for the round (one model).
        kit = getattr(chains, "_hmc_kit", None)
        if kit is None:
            split = self.uses_split(grads.model)
            fused = fused_force(grads.model) if grads.full else None
            kit = chains._hmc_kit = (split, fused, _split_trajectory if split else _leapfrog_trajectory)
        split, fused, integrate = kit
        # The momenta are the noise buffer itself: the trajectory moves them in place and the
        # next iteration draws afresh.
        p = chains.normals(rngs, chains.noise)
        log_u = [math.log1p(-rng.random()) for rng in rngs]
        n_leap, e_all, half_all, rotations = self._schedule(chains, int(chains.n_steps[0]), split)
        H0 = 0.5 * row_dots(p) - log_p
        q, g = theta.copy(), grad.copy()
        lp = integrate(grads, fused, q, p, g, e_all, half_all, chains.work, rotations)
        # The proposal (q, -p): the negation leaves the kinetic energy as it is.
        H1 = 0.5 * row_dots(p) - lp
        return self._accept(chains, q, g, lp, H0, H1, log_u, n_leap, split)

    def _schedule(self, chains, t, split):
        """Iteration ``t``'s trajectories: each chain's number of steps (a list), each step's
        ``epsilon`` per chain ``e_all`` (m, C, 1), 0 once a chain's trajectory has ended (so
        that it stays put while the longest one finishes), its halves, and for the split
        integrator its rotations and kicks (:func:`_split_trajectory`; None: computed there).

        Once the chains' steps are frozen the schedule depends on ``t`` alone (the jitter's
        Weyl sequence), and :data:`SCHEDULE_BLOCK` iterations' are laid out at once, the same
        numbers elementwise as one iteration's (a dozen array operations an iteration saved).
        """
        block = getattr(chains, "_hmc_schedule", None)
        if chains.adapting:  # the steps move every iteration: this one's alone, not kept
            block = self._schedule_block(chains.eps, t, split, 1)
        elif block is None or not 0 <= t - block[0] < SCHEDULE_BLOCK:
            block = chains._hmc_schedule = self._schedule_block(chains.eps, t, split)
        t0, n, n_max, e_all, half_all, turn, kick = block
        i, m = t - t0, n_max[t - t0]
        return n[i], e_all[i, :m], half_all[i, :m], None if turn is None else (turn[i, :m], kick[i, :m])

    def _schedule_block(self, eps, t0, split, size=SCHEDULE_BLOCK):
        """:meth:`_schedule` of iterations ``t0 .. t0 + size - 1`` at the steps ``eps`` (C,), as
        arrays over the iterations: iteration ``t``'s trajectory length is jittered by the Weyl
        sequence ``frac((t + 1) phi)``, each chain takes ``ceil(length / eps)`` steps (at least 1,
        at most :data:`MAX_LEAPFROG`) of ``eps`` (leapfrog) or of the length over their number
        (split: the rotation's total angle is the jittered length, however large ``eps``)."""
        t = np.arange(t0, t0 + size)
        u = np.fmod((t + 1) * _PHI, 1.0)
        length = self._length(split) * (1.0 + self.jitter * (2.0 * u - 1.0))
        n = np.ceil(length[:, None] / eps)
        np.maximum(n, 1.0, out=n)
        np.minimum(n, MAX_LEAPFROG, out=n)
        step = length[:, None] / n if split else np.broadcast_to(eps, n.shape)
        n = n.astype(np.intp)
        n_max = n.max(axis=1)
        e_all = np.where(np.arange(n_max.max())[None, :, None] < n[:, None, :], step[:, None, :], 0.0)[..., None]
        half_all = 0.5 * e_all
        turn = kick = None
        if split:
            turn, kick = _rotations(e_all, half_all)
        return t0, n.tolist(), n_max.tolist(), e_all, half_all, turn, kick

    def _accept(self, chains, q, g, lp, H0, H1, log_u, n_leap, split=False):
        # Chain by chain in plain floats: the scalar formulas a chain alone uses (numpy's exp
        # may round otherwise), and for a few chains cheaper than a dozen array operations.
        rows, taken = [], []
        adapting = chains.adapting
        for c, dH in enumerate((H1 - H0).tolist()):
            # Not finite (NaN fails both comparisons) or above the threshold.
            diverging = not (dH > -math.inf and dH <= DIVERGENCE_ENERGY)
            log_ratio = -math.inf if diverging else -dH
            accept_prob = math.exp(min(0.0, log_ratio))
            accepted = log_u[c] < log_ratio
            if accepted:
                taken.append(c)
            if adapting:
                self._dual_average(chains, c, accept_prob, split)
            rows.append((accept_prob, float(accepted), n_leap[c], float(diverging)))
        # The accepted rows at once (all of them, most iterations, in one copy per field).
        if len(taken) == len(rows):
            chains.theta[...], chains.grad[...], chains.log_p[...] = q, g, lp
        elif taken:
            chains.theta[taken], chains.grad[taken], chains.log_p[taken] = q[taken], g[taken], lp[taken]
        info = np.array(rows)
        if not adapting:
            chains.n_accepted += info[:, 1]
            chains.n_divergent += info[:, 3]
        chains.n_leapfrog += n_leap
        chains.n_steps += 1.0
        return info

    def _dual_average(self, chains, c, accept_prob, split=False):
        """One step of dual averaging on chain ``c``'s log step (Hoffman & Gelman 2014, eqs. 5-6)."""
        m = chains.n_adapt[c] = chains.n_adapt[c] + 1.0
        w = 1.0 / (m + DA_T0)
        h_bar = chains.h_bar[c] = (1.0 - w) * chains.h_bar[c] + w * (self.target_accept - accept_prob)
        log_eps = chains.mu[c] - math.sqrt(m) / DA_GAMMA * h_bar
        if split:
            # A split step beyond the longest trajectory takes that trajectory in one step
            # anyway: a target the acceptance always beats (a Gaussian posterior's 1) must not
            # drive the average step to overflow.
            log_eps = min(log_eps, math.log(self._length(split=True) * (1.0 + self.jitter)))
        eta = m**-DA_KAPPA
        chains.log_eps_bar[c] = eta * log_eps + (1.0 - eta) * chains.log_eps_bar[c]
        chains.eps[c] = math.exp(log_eps)


def _frozen_step(n_adapt, log_eps_bar, eps):
    """The step a chain keeps after burn-in: dual averaging's average ``exp(log_eps_bar)``, or
    ``eps`` as it is when no adaptation ran."""
    return math.exp(log_eps_bar) if n_adapt > 0 else eps


def _rotations(e_all, half_all):
    """The split integrator's rotations ``e^(-i epsilon)`` and kicks (a step's closing half kick
    and the next one's opening one, at the same point, are one: ``half[j] + half[j - 1]``)
    along the steps' axis, the second to last of ``e_all`` and ``half_all``."""
    kick = half_all.copy()
    kick[..., 1:, :, :] += half_all[..., :-1, :, :]
    return np.exp(-1j * e_all), kick


def _leapfrog_trajectory(grads, fused, q, p, g, e_all, half_all, work=None, rotations=None):
    """Integrate the chains' trajectories with the leapfrog (Neal 2011, eqs. 5.18-5.20), in
    place of ``q``, ``p`` and ``g`` (the force at ``q``), and return the end points' log
    posteriors. ``e_all`` (m, C, 1): each step's ``epsilon`` per chain, 0 once a chain's
    trajectory has ended (it stays put); ``half_all`` its halves. ``rotations`` is the split
    integrator's, unused here."""
    n_max = e_all.shape[0]
    lp = None
    for j in range(n_max):
        e, half = e_all[j], half_all[j]
        p += half * g
        q += e * p
        # The last step's end point is every chain's (an ended chain stayed put there):
        # its log posterior comes from the pass that computes its force.
        lp = _evaluate(grads, q, g, j + 1 == n_max, fused, count=False)
        p += half * g
    if fused is not None:
        _count_fused(grads, n_max)
    return lp


def _split_trajectory(grads, fused, q, p, g, e_all, half_all, work=None, rotations=None):
    """Integrate the chains' trajectories with the split integrator, in place of ``q``, ``p``
    and ``g`` (the force ``F`` at ``q``), and return the end points' log posteriors.

    Each step (Neal 2011, Section 5.5.1; Shahbaba et al. 2014, Section 2): a half kick by
    ``F_1 = F + z``, the rotation by the angle ``epsilon`` that solves ``H_0 = |z|^2 / 2 +
    |p|^2 / 2`` exactly, a half kick by ``F_1`` at the new point. The rotation is that of the
    complex number ``w = z + i p``, ``w <- w e^(-i epsilon)``, one product; a step's closing
    half kick and the next step's opening one, at the same point, are one kick. A chain whose
    ``epsilon`` is 0 (its trajectory ended) stays put: ``e^0 = 1``, and its closing half kick
    is the first of its zero steps'. ``rotations``: the steps' ``(turn, kick)`` from
    :func:`_rotations`, when the caller laid them out ahead (None: computed here).
    """
    n_max = e_all.shape[0]
    f1 = np.empty_like(q) if work is None else work
    w = np.empty(q.shape, dtype=complex)
    w.real, w.imag = q, p
    turn, kick = _rotations(e_all, half_all) if rotations is None else rotations
    lp = None
    for j in range(n_max):
        np.add(g, q, out=f1)
        f1 *= kick[j]
        w.imag += f1
        w *= turn[j]
        q[...] = w.real
        lp = _evaluate(grads, q, g, j + 1 == n_max, fused, count=False)
    np.add(g, q, out=f1)
    f1 *= half_all[-1]
    w.imag += f1
    p[...] = w.imag
    if fused is not None:
        _count_fused(grads, n_max)
    return lp


def _count_fused(grads, n):
    """Add ``n`` fused full-data evaluations to every chain's ``n_grad_evals`` (each chain's own
    estimator counts its unfused ones itself)."""
    for e in grads.estimators:
        e.n_grad_evals += n * e.n_samples


class _OneChain:
    """One chain's gradient estimator with the interface :meth:`HMC.step_batch` reads."""

    def __init__(self, estimator):
        self.estimators, self.model, self.full = [estimator], estimator.model, estimator.full


def _evaluate(grads, Z, out, log_p, fused=False, count=True):
    """The full-data forces at the rows of ``Z`` into ``out`` and, when ``log_p``, the log
    posteriors (C,) (else None where that costs extra): fused over the chains for a one-output
    GLM in memory (``fused``, :func:`~skbayes_sg.models._fused.fused_force` of the model, looked
    up here if not given), else each chain's own estimator. ``count=False``: the fused
    evaluation is not added to the estimators' ``n_grad_evals`` (a trajectory adds its
    evaluations at its end, :func:`_count_fused`)."""
    if fused is False:
        fused = fused_force(grads.model) if grads.full else None
    if fused is not None:
        if count:
            _count_fused(grads, 1)
        if log_p:
            return fused.log_posterior_and_force(Z, out)
        fused.leapfrog_force(Z, out)
        return None
    values = np.empty(Z.shape[0])
    for c, e in enumerate(grads.estimators):
        values[c], out[c] = e.log_posterior_and_grad(Z[c])
    return values
