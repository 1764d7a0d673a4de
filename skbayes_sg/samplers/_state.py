"""Typed chain states and per-iteration statistics of the samplers.

Each algorithm keeps what its next iteration depends on in a small dataclass of its own
(as blackjax's ``SGNHTState``), and :meth:`~._base.BaseSampler.step` returns, with the new
state, a small ``NamedTuple`` of that iteration's statistics (as blackjax's ``MALAInfo``):

    state = sampler.init_state(theta0, grad_estimator, rng, context)
    state, info = sampler.step(state, grad_estimator, rng)

The chain driver stores ``info`` at the kept draws under its field names (the sampler's
``info_type._fields``; they become the estimators' ``sample_stats_`` keys) and, after the
run, the state's :meth:`SamplerState.summary` (the chain-level counters) in
``diagnostics_``. States are pickled with the estimators for ``warm_start`` and are plain
dataclasses of numbers, arrays and strings, so skops can load them too.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


def compose(L0, M):
    """``L0 M``: lower-triangular (P, P) if either factor is, else diagonal (P,)."""
    if L0 is None:
        return M
    if L0.ndim == 2:
        return L0 @ (M if M.ndim == 2 else np.diag(M))
    return L0[:, None] * M if M.ndim == 2 else L0 * M


# -- states ---------------------------------------------------------------------------------
@dataclass
class SamplerState:
    """State of one chain between iterations: the base of every sampler's state.

    Attributes
    ----------
    theta : ndarray of shape (P,)
        Position (the parameters).
    step_size : float
        The step size ``h`` in use (NaN for the samplers without one).
    """

    theta: np.ndarray
    step_size: float = math.nan

    def is_finite(self):
        """Whether the chain's variables are all finite (the driver's divergence check)."""
        return bool(np.isfinite(self.theta).all())

    def summary(self):
        """Chain-level diagnostics after the run (the state's counters), a dict."""
        return {}


@dataclass
class MomentumState(SamplerState):
    """State of a second-order (Langevin-family) chain: position and momentum ``p`` (``M = I``)."""

    p: np.ndarray = None

    def is_finite(self):
        return bool(np.isfinite(self.theta).all()) and bool(np.isfinite(self.p).all())


@dataclass
class SGHMCState(MomentumState):
    """SGHMC's state; ``noise_clipped`` counts the coordinate-iterations whose empirical
    noise estimate exceeded the friction and was clipped (``noise_estimate="empirical"``)."""

    noise_clipped: int = 0

    def summary(self):
        return {"noise_clipped": self.noise_clipped}


@dataclass
class ThermostatState(MomentumState):
    """State of a Nose-Hoover thermostat chain (SGNHT): momentum and thermostat ``xi``."""

    xi: float = None


@dataclass
class CCAdLState(ThermostatState):
    """CCAdL's state: the thermostat's, plus the moving average ``I_hat`` of the per-example
    gradient covariance (``(P, P)`` for ``covariance="full"``, its diagonal (P,) for
    ``"diag"``) over the ``t`` minibatches seen."""

    covariance: str = "diag"
    I_hat: np.ndarray = None
    t: int = 0


@dataclass
class MCCAdLState(ThermostatState):
    """mCCAdL's state.

    Attributes
    ----------
    force : ndarray of shape (P,)
        The noisy force at ``theta``, reused by the next iteration's first kick.
    grads : PerExampleGradients
        Per-example gradients of that force's minibatch.
    grads_prev : PerExampleGradients or None
        Those of the force before it (``sigma_estimate="lagged"``).
    sigma_eigvec : ndarray of shape (P,)
        Warm start of the power iteration on ``Sigma`` (zeros: not started).
    sigma_norm_cache : dict
        The C step's cached norm estimates (see :func:`._expmv.c_step`).
    sigma_cov, sigma_age, sigma_period, sigma_batches : NoiseCovariance, int, int, int
        The independent ``Sigma`` minibatch in reuse, its age in iterations, how many
        iterations it serves, and how many minibatches its running average holds.
    c_products, n_steps, sigma_minibatches : int
        Counters: operator products of the C steps, iterations, ``Sigma`` minibatches drawn.
    """

    force: np.ndarray = None
    grads: object = None
    grads_prev: object = None
    sigma_eigvec: np.ndarray = None
    sigma_norm_cache: dict = None
    sigma_cov: object = None
    sigma_age: int = 0
    sigma_period: int = None
    sigma_batches: int = 1
    c_products: int = 0
    n_steps: int = 0
    sigma_minibatches: int = 0

    def summary(self):
        n = max(self.n_steps, 1)
        lanczos = (self.sigma_norm_cache or {}).get("n_lanczos", 0)
        # Which of the C step's two methods the chain used: Taylor below LANCZOS_FROM products.
        return {
            "c_step_products_per_iter": self.c_products / n,
            "c_step_lanczos_fraction": lanczos / n,
            # How many iterations each independent Sigma minibatch served (sigma_refresh).
            "sigma_minibatches_per_iter": self.sigma_minibatches / n,
        }


@dataclass
class GadState(SamplerState):
    """State of a gadMALA / gadRWM chain (Titsias & Dellaportas 2019).

    Attributes
    ----------
    L : ndarray of shape (P, P) or (P,)
        The adapted factor: ``M`` of ``L = L0 M`` while adapting with a base factor, the
        whole proposal factor once frozen (lower triangular, or its diagonal).
    L0 : ndarray or None
        The fixed base factor while adapting (None without one, and once frozen).
    beta : float
        The entropy weight.
    G : ndarray or None
        RMSprop's running mean of squared gradients (dropped once frozen); ``n_rms`` its
        step count.
    diag_floor : float
        Lower bound of the adapted factor's diagonal.
    log_p, grad, w : float, ndarray, ndarray
        ``log pi(theta)``, its gradient, and that gradient in ``M``'s coordinates ``L0' grad``.
    half_Lt, half_Lt_grad : ndarray
        Cached ``(1/2) L'`` (frozen) and ``(1/2) L' grad log pi(theta)`` (gadMALA).
    adapting : bool
        True until :meth:`~._gad_common.GadSampler.end_adaptation`.
    noise, noise_sq, noise_log_u, noise_i : ndarray, ndarray, ndarray, int
        A block of the next iterations' randomness and the index of the next row.
    n_adapt_steps, n_adapt_accepted, n_steps, n_accepted : int
        Proposals and acceptances during and after adaptation.
    buf, tmp, tril : ndarray
        Work arrays of the adaptation (dropped once frozen).
    """

    L: np.ndarray = None
    L0: np.ndarray = None
    beta: float = 1.0
    G: np.ndarray = None
    n_rms: int = 0
    diag_floor: float = 0.0
    log_p: float = None
    grad: np.ndarray = None
    w: np.ndarray = None
    half_Lt: np.ndarray = None
    half_Lt_grad: np.ndarray = None
    adapting: bool = True
    noise: np.ndarray = None
    noise_sq: np.ndarray = None
    noise_log_u: np.ndarray = None
    noise_i: int = 0
    n_adapt_steps: int = 0
    n_adapt_accepted: int = 0
    n_steps: int = 0
    n_accepted: int = 0
    buf: np.ndarray = None
    tmp: np.ndarray = None
    tril: np.ndarray = None

    def proposal_factor(self):
        """The proposal's Cholesky factor ``L = L0 M`` (or its diagonal), formed."""
        return compose(self.L0, self.L)

    def summary(self):
        """Acceptance rates, the final ``beta`` and the learned ``L`` of one chain.

        Returns
        -------
        dict
            ``acceptance_rate``: fraction of accepted proposals after adaptation (NaN if
            none ran); ``adapt_acceptance_rate``: the same during adaptation; ``n_accepted``
            and ``n_adapt_steps`` (ints, iterations that adapted); ``entropy_weight``: the
            final ``beta``; ``proposal_cholesky`` (P, P), the learned lower-triangular ``L``
            with ``cholesky="full"``, or ``proposal_scale`` (P,), the learned diagonal, with
            ``cholesky="diag"``.
        """
        n, na = self.n_steps, self.n_adapt_steps
        L = self.proposal_factor()
        out = {
            "acceptance_rate": self.n_accepted / n if n else float("nan"),
            "adapt_acceptance_rate": self.n_adapt_accepted / na if na else float("nan"),
            "n_accepted": int(self.n_accepted),
            "n_adapt_steps": int(na),
            "entropy_weight": float(self.beta),
        }
        out["proposal_cholesky" if L.ndim == 2 else "proposal_scale"] = np.array(L)
        return out


# -- per-iteration statistics -------------------------------------------------------------------
class NoInfo(NamedTuple):
    """No per-draw statistics (SGLD)."""


class MomentumInfo(NamedTuple):
    """``kinetic_temperature``: ``p'p / P`` of the iteration's final momentum (SGHMC)."""

    kinetic_temperature: float


class ThermostatInfo(NamedTuple):
    """The thermostat ``xi`` and the kinetic temperature ``p'p / P`` the thermostat
    controls (SGNHT, CCAdL, mCCAdL)."""

    xi: float
    kinetic_temperature: float


class MetropolisInfo(NamedTuple):
    """``accepted`` (1.0 or 0.0) and ``accept_prob`` (``min(1, MH ratio)``) of the
    iteration's proposal (gadMALA, gadRWM)."""

    accepted: float
    accept_prob: float
