"""Covariance-controlled adaptive Langevin thermostat (Shang, Zhu, Leimkuhler & Storkey 2015)."""

import numpy as np
from sklearn.utils._param_validation import StrOptions

from ..preconditioning import PRECONDITIONERS
from ._base import AUTO, POSITIVE, ThermostatSampler
from ._batched import ou_euler_rows, row_dots
from ._state import CCAdLState, ThermostatInfo
from ._substeps import drift, kick, ou_euler, thermostat

#: Largest number of parameters for ``covariance="full"``, which keeps a P x P moving
#: average and costs O(n P^2) per iteration. The CCAdL paper used the full estimate for
#: P = 100 (MNIST, section 4.2) and the diagonal one for the DRBMs (P >= 1,083, section 4.3);
#: ``"auto"`` follows the same split.
MAX_FULL_PARAMS = 500

COVARIANCES = ("auto", "full", "diag")


class CCAdL(ThermostatSampler):
    """CCAdL: adaptive Langevin with covariance control, the Euler-type Algorithm 1.

    The dynamics of the CCAdL paper (Shang et al. 2015, eq. 12, ``M = I``) add to the
    SGNHT thermostat the damping ``-(h/2) beta Sigma(theta) p`` that cancels the
    parameter-dependent gradient noise, so that (Proposition 2) the invariant law is
    ``exp(-beta H) exp(-beta mu (xi - A)^2 / 2)`` whatever ``Sigma(theta)``: ``xi`` settles
    at ``A`` and ``p'p / N_d`` at ``T``. Algorithm 1 discretises it as

    ``theta_t = theta_{t-1} + h p_{t-1}``
    ``p_t = p_{t-1} + h F~(theta_t) - h (h/2) beta Sigma_t p_{t-1} - h xi_{t-1} p_{t-1}
    + sqrt(2 A T h) N(0, I)``
    ``xi_t = xi_{t-1} + (h / mu) (p_t'p_t - N_d T)``

    with ``Sigma_t = noise_scale * I^_t`` (``N^2 / n I^_t`` for minibatches drawn with
    replacement, eq. 17; zero with full data) and the moving average (eqs. 18-19)
    ``I^_t = (1 - kappa_t) I^_{t-1} + kappa_t V(theta_t)``, ``kappa_t = 1 / t``, of the
    empirical covariance ``V`` of the minibatch's per-example gradients.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        ``h``; ``"auto"`` sets ``h = 0.05 / sqrt(lambda_max)``, :class:`SGNHT`'s constant:
        the same Euler friction step cools the configuration by ``h A / 2`` (see
        :class:`SGNHT`), and the Euler-type scheme with a moving-average covariance is the
        least stable of the thermostats (mCCAdL paper, section 3).
    friction : float, default=1.0
        ``A``, the effective friction; ``xi`` starts at ``A``.
    thermal_mass : float or None, default=None
        ``mu``; ``None`` uses ``N_d``, as the paper does.
    covariance : {"auto", "full", "diag"}, default="auto"
        ``"full"``: ``I^`` is the ``P x P`` moving average of ``V`` (allowed for
        ``P <= 500``: memory O(P^2), cost O(n P^2) per iteration). ``"diag"``: only its
        diagonal, from the per-coordinate sums of squares, O(n P) (the paper's choice in
        high dimension, section 3.1). ``"auto"``: ``"full"`` for ``P <= 500``, else
        ``"diag"``, as the paper chose by size (full for P = 100, diagonal for the DRBMs).
    temperature : float, default=1.0
        ``T = 1 / beta``.
    preconditioner : {"auto", "dense", "centred", "diag", "none"}, default="auto"
        Coordinates the scheme runs in. ``"dense"``: ``theta = theta_hat + L z`` with
        ``L L'`` the inverse Hessian of the negative log posterior at the MAP
        ``theta_hat``; ``"diag"``: its diagonal; ``"centred"``: for a GLM with
        intercepts, the diagonal after centring the predictors for the intercepts, with
        a Lanczos correction of the few directions it leaves far from unit curvature, O(P)
        to apply (the diagonal for other models); ``"none"``: ``theta`` itself. The scheme
        above is applied unchanged to ``z`` (equivalently, in ``theta`` with the constant
        mass matrix ``H``), where a near-Gaussian posterior is near ``N(0, I)``, so one
        step size fits every direction however the features are scaled.
        ``"auto"``: dense up to 1,000 parameters, centred beyond (see
        :mod:`skbayes_sg.preconditioning`) with ``step_size="auto"``; ``"none"`` with an
        explicit ``step_size``, which is in the units of ``theta``. Used by the
        estimators, which find the MAP.

    See Also
    --------
    MCCAdL : the symmetric splitting with the exact C step, stable at larger ``h``.
    """

    _euler_friction = True
    _auto_step_constant = 0.05
    state_type = CCAdLState
    # The covariance correction cancels most of the noise (see MCCAdL).
    _noise_tolerance = 0.15
    #: Estimates and cancels the minibatch noise covariance (a warning never advises
    #: switching to a noise-controlling sampler when this one is in use).
    controls_noise = True

    _parameter_constraints: dict = {
        "step_size": [POSITIVE, AUTO],
        "friction": [POSITIVE],
        "thermal_mass": [POSITIVE, None],
        "covariance": [StrOptions(set(COVARIANCES))],
        "temperature": [POSITIVE],
        "preconditioner": [StrOptions(set(PRECONDITIONERS))],
    }

    def __init__(
        self,
        step_size="auto",
        friction=1.0,
        thermal_mass=None,
        covariance="auto",
        temperature=1.0,
        preconditioner="auto",
    ):
        self.preconditioner = preconditioner
        self.step_size = step_size
        self.friction = friction
        self.thermal_mass = thermal_mass
        self.covariance = covariance
        self.temperature = temperature

    def _resolved_covariance(self, n_params):
        if self.covariance == "auto":
            return "full" if n_params <= MAX_FULL_PARAMS else "diag"
        if self.covariance == "full" and n_params > MAX_FULL_PARAMS:
            raise ValueError(
                f"CCAdL: covariance='full' keeps a P x P estimate and is limited to "
                f"P <= {MAX_FULL_PARAMS} parameters; this model has P = {n_params}. Use "
                "covariance='diag', or MCCAdL, whose covariance control needs no P x P matrix."
            )
        return self.covariance

    def init_state(self, theta0, grad_estimator, rng, context=None):
        state = super().init_state(theta0, grad_estimator, rng, context)
        P = state.theta.size
        kind = self._resolved_covariance(P)
        state.covariance = kind
        state.I_hat = np.zeros((P, P)) if kind == "full" else np.zeros(P)
        state.t = 0
        return state

    _normals_per_step = 1
    _batch_fields = ("theta", "p", "xi")

    def step_batch(self, chains, grads, rngs):
        h, A, T = chains.step_size, self.friction, self.temperature
        theta, p = chains.theta, chains.p
        theta += h * p
        force = np.empty_like(theta)
        noisy = grads.noise_scale > 0.0
        per_example = grads.forces(theta, rngs, force, per_example=noisy)
        corrections = []
        if noisy:
            # Each chain's own moving average of its minibatches' covariance.
            for c, (state, g) in enumerate(zip(chains.states, per_example)):
                I_hat = _update_moving_average(state, g)
                correction = I_hat @ p[c] if I_hat.ndim == 2 else I_hat * p[c]
                correction *= h * (0.5 * h / T) * grads.noise_scale
                corrections.append(correction)
        ou_euler_rows(p, chains.xi, A * T, h, chains, rngs)
        p += h * force
        for c, correction in enumerate(corrections):
            p[c] -= correction
        pp = row_dots(p)
        chains.xi = chains.xi + h * (pp - p.shape[1] * T) / self._mu(p.shape[1])
        return np.stack([chains.xi, pp / p.shape[1]], axis=1)

    def step(self, state, grad_estimator, rng):
        h, A, T = state.step_size, self.friction, self.temperature
        theta, p = state.theta, state.p
        drift(theta, p, h)
        force, grads = grad_estimator.gradient(theta, rng)
        correction = None
        if grad_estimator.noise_scale > 0.0:
            I_hat = _update_moving_average(state, grads)
            # -h (h/2) beta Sigma_t p_{t-1}, with p_{t-1} taken before the other updates.
            correction = I_hat @ p if I_hat.ndim == 2 else I_hat * p
            correction *= h * (0.5 * h / T) * grad_estimator.noise_scale
        ou_euler(p, state.xi, A * T, h, rng)
        kick(p, force, h)
        if correction is not None:
            p -= correction
        pp = float(p @ p)
        state.xi = thermostat(state.xi, p, h, self._mu(p.size), T, pp)
        return state, ThermostatInfo(state.xi, pp / p.size)


def _update_moving_average(state, grads):
    """``I^_t = I^_{t-1} + (V(theta_t) - I^_{t-1}) / t`` (eq. 18 with ``kappa_t = 1/t``)."""
    state.t += 1
    kappa = 1.0 / state.t
    I_hat = state.I_hat
    V = _empirical_covariance(grads) if I_hat.ndim == 2 else grads.covariance_diag()
    I_hat *= 1.0 - kappa
    I_hat += kappa * V
    return I_hat


def _empirical_covariance(grads):
    """The ``P x P`` empirical covariance ``V`` of eq. 19 (for ``covariance="full"`` only).

    Built from the centred ``n x P`` gradient matrix by one BLAS product, O(n P^2): the
    full estimate is bounded to ``P <= MAX_FULL_PARAMS``, where this is cheap.
    """
    n = grads.n_batch
    if n < 2:
        return np.zeros((grads.n_params, grads.n_params))
    G = grads.to_dense()
    Gc = G - G.mean(axis=0)
    return Gc.T @ Gc / (n - 1)
