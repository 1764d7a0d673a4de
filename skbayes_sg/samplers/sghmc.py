"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin 2014)."""

import numpy as np
from sklearn.utils._param_validation import StrOptions

from ..preconditioning import PRECONDITIONERS
from ._base import AUTO, POSITIVE, MomentumSampler
from ._batched import ou_euler_rows, row_dots
from ._state import MomentumInfo, SGHMCState
from ._substeps import drift, kick, ou_euler


class SGHMC(MomentumSampler):
    """Stochastic gradient Hamiltonian Monte Carlo with friction.

    The SGHMC paper's Algorithm 2 in the form of the CCAdL paper (Shang et al. 2015,
    eq. 14), discretised by Euler's method with ``M = I``:

    ``theta <- theta + h p``
    ``p <- p - h grad U~(theta) - h A p + N(0, 2 (A T - B^) h)``

    The friction ``A`` dissipates the energy that the gradient noise pumps in;
    ``B^`` estimates that noise so that the injected noise can be reduced by it.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        ``h``. ``"auto"`` sets ``h = c / sqrt(lambda_max)`` with ``c = 0.2``, from the
        largest curvature ``lambda_max`` of the negative log posterior at the initial
        point. The scheme is stable up to about ``2 / sqrt(lambda_max)``; the first-order
        (Euler) scheme shrinks the marginal variances as ``c`` grows, and ``c = 0.2``
        keeps them within a few percent while mixing twice as fast as ``c = 0.1``
        (``benchmarks/auto_step_size.py``). For an accurate posterior with minibatches,
        also keep ``h Sigma_max / (2 A T)`` small (about 0.1; ``Sigma_max`` the largest
        gradient-noise variance), since the stationary variance is inflated by roughly
        that factor: lower ``h`` or raise ``A``, or use the noise-controlling
        :class:`~skbayes_sg.samplers.CCAdL` / :class:`~skbayes_sg.samplers.MCCAdL`.
    friction : float, default=1.0
        ``A`` (SGHMC's ``C``). Larger values damp the gradient noise better but make the
        dynamics diffusive, closer to SGLD (CCAdL paper section 3).
    noise_estimate : {None, "empirical"}, default=None
        ``None``: ``B^ = 0``, the SGHMC paper's simplest choice. ``"empirical"``:
        ``B^ = (h / 2) diag(Sigma^)`` with ``Sigma^ = N^2 / n * Var_i[g_i]`` from the
        per-example gradients of the minibatch (CCAdL paper eq. 17). Where ``A T - B^``
        would fall below ``1e-3 A T`` it is clipped there; the number of clipped
        coordinate-iterations is reported as ``diagnostics_["noise_clipped"]`` and the
        estimator warns, since clipping means the friction is too small for the noise.
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

    """

    _euler_friction = True
    _auto_step_constant = 0.2
    state_type = SGHMCState
    info_type = MomentumInfo

    _parameter_constraints: dict = {
        "step_size": [POSITIVE, AUTO],
        "friction": [POSITIVE],
        "noise_estimate": [StrOptions({"empirical"}), None],
        "temperature": [POSITIVE],
        "preconditioner": [StrOptions(set(PRECONDITIONERS))],
    }

    def __init__(self, step_size="auto", friction=1.0, noise_estimate=None, temperature=1.0, preconditioner="auto"):
        self.preconditioner = preconditioner
        self.step_size = step_size
        self.friction = friction
        self.noise_estimate = noise_estimate
        self.temperature = temperature

    _normals_per_step = 1
    _batch_fields = ("theta", "p")

    def batched(self, grads):
        # The empirical noise estimate needs each chain's per-example gradients.
        return self.noise_estimate is None

    def step_batch(self, chains, grads, rngs):
        h, A, T = chains.step_size, self.friction, self.temperature
        theta, p = chains.theta, chains.p
        theta += h * p
        force = np.empty_like(theta)
        grads.forces(theta, rngs, force)
        ou_euler_rows(p, A, A * T, h, chains, rngs)
        p += h * force
        return (row_dots(p) / p.shape[1])[:, None]

    def step(self, state, grad_estimator, rng):
        h, A, T = state.step_size, self.friction, self.temperature
        drift(state.theta, state.p, h)
        force, grads = grad_estimator.gradient(state.theta, rng)
        diffusion = A * T
        if self.noise_estimate == "empirical":
            B_hat = 0.5 * h * grad_estimator.noise_scale * grads.covariance_diag()
            diffusion = A * T - B_hat
            floor = 1e-3 * A * T
            low = diffusion < floor
            if low.any():
                state.noise_clipped += int(low.sum())
                diffusion[low] = floor
        ou_euler(state.p, A, diffusion, h, rng)
        kick(state.p, force, h)
        return state, MomentumInfo(float(state.p @ state.p) / state.p.size)

    def expected_kinetic_temperature(self, h):
        """``T / (1 - h A / 2)``: the Euler friction step ``p <- (1 - h A) p + sqrt(2 A T h) R``
        has stationary variance ``2 A T h / (1 - (1 - h A)^2)``, above ``T`` by that factor
        (the configuration is not: its variance is right to first order)."""
        return float(self.temperature / (1.0 - 0.5 * h * self.friction))
