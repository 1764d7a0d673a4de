"""Stochastic gradient Nose-Hoover thermostat (Ding et al. 2014)."""

import numpy as np
from sklearn.utils._param_validation import StrOptions

from ..preconditioning import PRECONDITIONERS
from ._base import AUTO, POSITIVE, ThermostatSampler
from ._batched import ou_euler_rows, row_dots
from ._state import ThermostatInfo
from ._substeps import drift, kick, ou_euler, thermostat


class SGNHT(ThermostatSampler):
    """Stochastic gradient Nose-Hoover thermostat (adaptive Langevin).

    The Ding et al. dynamics in the form of the CCAdL paper (Shang et al. 2015, eq. 8),
    discretised as its Algorithm 1 without the covariance term (``M = I``):

    ``theta <- theta + h p``
    ``p <- p - h grad U~(theta) - h xi p + sqrt(2 A T h) N(0, I)``
    ``xi <- xi + (h / mu) (p'p - N_d T)``

    The thermostat ``xi`` rises when the kinetic temperature ``p'p / N_d`` exceeds ``T``
    and falls below it, absorbing gradient noise of *constant* covariance
    ``Sigma = sigma^2 I``: by Proposition 1 of the CCAdL paper, ``xi`` settles at
    ``A + beta h sigma^2 / 2``. With parameter-dependent noise this no longer holds
    exactly; CCAdL and mCCAdL correct it.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        ``h``; ``"auto"`` sets ``h = 0.05 / sqrt(lambda_max)``, a quarter of SGHMC's
        constant: the thermostat holds the end-of-step momentum, which the Euler friction
        step leaves a fraction ``h A / 2`` hot, at ``T``, and so cools the configuration by
        as much (at ``c = 0.1``, sds 2.5% low in every whitened direction and a sampled
        noise precision 0.13 sd off at N = 1,000, D = 100; 1.6% and 0.06 sd at 0.05; see
        :class:`SGHMC` for the accuracy condition under minibatch noise; the thermostat
        absorbs the isotropic part of that noise, not its anisotropy).
    friction : float, default=1.0
        ``A``, the effective friction: strength of the injected noise, and the value at
        which ``xi`` starts.
    thermal_mass : float or None, default=None
        ``mu``, the thermostat's inertia; ``None`` uses ``N_d``, the number of parameters,
        as the CCAdL paper does (then the update reads ``xi += h (p'p / N_d - T)``).
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
    # A quarter of SGHMC's: the Euler friction step leaves the end-of-step momentum a
    # fraction h A / 2 hotter than the configuration, and the thermostat, which holds
    # p'p / N_d at T, cools the configuration by as much (sds 3-9% low at h = 0.2 in
    # whitened coordinates, where every direction is as stiff as the stiffest; 2.5% on
    # average at h = 0.1, 1.6% at 0.05: benchmarks/posterior_accuracy.py).
    _auto_step_constant = 0.05

    _parameter_constraints: dict = {
        "step_size": [POSITIVE, AUTO],
        "friction": [POSITIVE],
        "thermal_mass": [POSITIVE, None],
        "temperature": [POSITIVE],
        "preconditioner": [StrOptions(set(PRECONDITIONERS))],
    }

    def __init__(self, step_size="auto", friction=1.0, thermal_mass=None, temperature=1.0, preconditioner="auto"):
        self.preconditioner = preconditioner
        self.step_size = step_size
        self.friction = friction
        self.thermal_mass = thermal_mass
        self.temperature = temperature

    _normals_per_step = 1
    _batch_fields = ("theta", "p", "xi")

    def step_batch(self, chains, grads, rngs):
        h, A, T = chains.step_size, self.friction, self.temperature
        theta, p = chains.theta, chains.p
        theta += h * p
        force = np.empty_like(theta)
        grads.forces(theta, rngs, force)
        ou_euler_rows(p, chains.xi, A * T, h, chains, rngs)
        p += h * force
        pp = row_dots(p)
        chains.xi = chains.xi + h * (pp - p.shape[1] * T) / self._mu(p.shape[1])
        return np.stack([chains.xi, pp / p.shape[1]], axis=1)

    def step(self, state, grad_estimator, rng):
        h, A, T = state.step_size, self.friction, self.temperature
        p = state.p
        drift(state.theta, p, h)
        force, _ = grad_estimator.gradient(state.theta, rng)
        ou_euler(p, state.xi, A * T, h, rng)
        kick(p, force, h)
        pp = float(p @ p)
        state.xi = thermostat(state.xi, p, h, self._mu(p.size), T, pp)
        return state, ThermostatInfo(state.xi, pp / p.size)
