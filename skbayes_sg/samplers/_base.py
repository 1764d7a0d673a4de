"""Base class of the samplers: hyperparameters only, one transition of one chain."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator

from ..preconditioning import PRECONDITIONERS
from ._state import SamplerState
from ._step_size import largest_curvature


#: Largest ``h A`` the auto step gives the schemes with an Euler friction step, which
#: multiplies p by 1 - h A (h xi for a thermostat, which fluctuates above A): it must stay
#: well inside (0, 1), which a curvature-only rule no longer guarantees once whitening makes
#: h of order 1.
EULER_FRICTION_LIMIT = 0.25


class BaseSampler(BaseEstimator):
    """A Markov transition for one chain; holds hyperparameters and nothing else.

    Being a scikit-learn ``BaseEstimator`` gives ``get_params`` / ``set_params`` and
    ``clone``, so ``GridSearchCV`` can tune ``sampler__step_size``. A sampler never
    touches the data: it sees a *target* (:class:`skbayes_sg.minibatch.MinibatchGradient`)
    that returns noisy forces, per-example gradients and, for the exact samplers, the
    full-data log posterior.

    Subclasses implement :meth:`init_state` and :meth:`step` and may set

    - ``_step_size_order``: 1 if the stable ``h`` scales as ``1 / lambda_max`` (SGLD),
      2 if as ``1 / sqrt(lambda_max)`` (momentum methods);
    - ``_auto_step_constant``: the ``c`` of ``step_size="auto"``;
    - ``_noise_tolerance``: the gradient-noise error the auto step allows;
    - ``_stat_names``: per-draw statistics recorded by :meth:`sample_stats`;
    - ``requires_full_data``: True for Metropolis-adjusted samplers.
    """

    _step_size_order = 2
    _auto_step_constant = 0.1
    #: Largest :meth:`predicted_noise_error` the auto step allows (see :mod:`._step_size`).
    _noise_tolerance = 0.05
    #: True for the schemes whose friction is an Euler step (SGHMC, SGNHT, CCAdL).
    _euler_friction = False
    _stat_names = ()
    requires_full_data = False

    # -- hyperparameters ------------------------------------------------------------
    def _check_positive(self, name, allow_auto=False, allow_none=False):
        value = getattr(self, name)
        if allow_auto and isinstance(value, str) and value == "auto":
            return
        if allow_none and value is None:
            return
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) or value <= 0:
            extra = ' or "auto"' if allow_auto else ""
            raise ValueError(
                f"{type(self).__name__}: {name} must be a positive finite number{extra}; got {value!r}."
            )

    def validate(self):
        """Check the hyperparameters; raise ``ValueError`` naming the bad one."""
        if hasattr(self, "step_size"):
            self._check_positive("step_size", allow_auto=True)
        if hasattr(self, "temperature"):
            self._check_positive("temperature")
        if hasattr(self, "friction"):
            self._check_positive("friction")
        if hasattr(self, "thermal_mass"):
            self._check_positive("thermal_mass", allow_none=True)
        if hasattr(self, "preconditioner") and self.preconditioner not in PRECONDITIONERS:
            raise ValueError(f"{type(self).__name__}: preconditioner must be one of {PRECONDITIONERS}; "
                             f"got {self.preconditioner!r}.")

    # -- step size --------------------------------------------------------------------
    def predicted_noise_error(self, h, sigma_max):
        """Predicted relative excess of the stationary variance from gradient noise.

        ``delta = h sigma_max / (2 A T)`` for the momentum samplers, ``h sigma_max / (2 T)``
        for SGLD (see :mod:`._step_size`), before any noise control: CCAdL and mCCAdL
        remove most of it.
        """
        A = getattr(self, "friction", 1.0)
        T = getattr(self, "temperature", 1.0)
        return float(h * sigma_max / (2.0 * A * T))

    def expected_kinetic_temperature(self, h):
        """The mean kinetic temperature ``p'p / P`` a correct chain records at step ``h``.

        ``T`` for the schemes whose recorded momentum is at equilibrium; samplers whose
        discretisation leaves it off ``T`` by a known factor override this, so that the
        estimator's noise check compares against what the scheme itself predicts.
        """
        return float(getattr(self, "temperature", 1.0))

    def curvature_step(self, lambda_max, scale=1.0):
        """The curvature part of the auto rule: ``c / lambda_max`` (first order) or
        ``c / sqrt(lambda_max)`` (momentum samplers), capped for an Euler friction step.
        ``scale`` multiplies ``c`` (an estimator's own ``_auto_step_scale``, 1 but for the
        DRBM)."""
        c = self._auto_step_constant * scale if scale != 1.0 else self._auto_step_constant
        h = c / lambda_max if self._step_size_order == 1 else c / np.sqrt(lambda_max)
        if self._euler_friction and hasattr(self, "friction"):
            h = min(h, EULER_FRICTION_LIMIT / self.friction)
        return float(h)

    def noise_step(self, sigma_max):
        """The largest ``h`` whose :meth:`predicted_noise_error` is the sampler's tolerance."""
        return float(self._noise_tolerance / self.predicted_noise_error(1.0, sigma_max))

    def resolve_step_size(self, model, theta0, sigma_max=None, lambda_max=None, scale=1.0):
        """The step size ``h`` to use from ``theta0``: the explicit float, or the auto rule.

        The auto rule takes the smaller of the curvature step (``c / lambda_max`` or
        ``c / sqrt(lambda_max)``) and the noise step at which
        :meth:`predicted_noise_error` equals ``_noise_tolerance``.

        Parameters
        ----------
        model : Model
        theta0 : ndarray of shape (P,)
        sigma_max : float, optional
            Largest eigenvalue of the force's noise covariance (None: full data, no noise).
        lambda_max : float, optional
            The curvature when already known (1 in coordinates whitened at the MAP);
            measured by Lanczos otherwise.
        scale : float, default=1.0
            Multiplies the curvature step's constant ``c`` (not the noise cap).

        Returns
        -------
        step_size : float
        info : dict
            ``lambda_max``, ``noise_eigenvalue`` and ``predicted_noise_error`` (of the
            chosen ``h``) where they were computed.
        """
        info = {}
        if sigma_max is not None:
            info["noise_eigenvalue"] = float(sigma_max)
        if not (isinstance(self.step_size, str) and self.step_size == "auto"):
            h = float(self.step_size)
        else:
            lam = lambda_max if lambda_max is not None else largest_curvature(model, np.asarray(theta0, dtype=float))
            h = self.curvature_step(lam, scale)
            info["lambda_max"] = float(lam)
            if sigma_max:
                h = min(h, self.noise_step(sigma_max))
            h = float(h)
        if sigma_max is not None:
            info["predicted_noise_error"] = self.predicted_noise_error(h, sigma_max)
        return h, info

    # -- estimation strategy ------------------------------------------------------------
    def fit_estimator(self, estimator, X, y, model, batch_size, streaming=False):
        """Fit ``estimator`` on ``model`` (built from validated ``X`` and encoded ``y``): how
        draws are made with this sampler.

        The estimators call this and nothing else. The default runs Markov chains of
        :meth:`step` through the shared chain driver (:mod:`skbayes_sg._chains`);
        a sampler that is an estimation strategy of its own (:class:`~.MLSGLD`) overrides it.
        ``batch_size`` is the estimator's resolved minibatch size, ``streaming`` True for
        ``partial_fit``.
        """
        return estimator._fit_chains(self, X, y, model, batch_size, streaming)

    # -- transition ---------------------------------------------------------------------
    def init_state(self, theta0, target, rng, step_size):
        """Initial state of a chain started at ``theta0`` with step size ``step_size``."""
        return SamplerState(theta=np.array(theta0, dtype=float), step_size=float(step_size))

    def step(self, state, target, rng):
        """Advance ``state`` by one iteration (may update its arrays in place)."""
        raise NotImplementedError

    #: Burn-in iterations the sampler needs to adapt; the first block of the estimators'
    #: ``n_iter="auto"`` is made long enough for its burn-in to cover them.
    _min_adaptation = 0

    def end_adaptation(self, state):
        """Called once when burn-in ends: freeze anything adapted during burn-in.

        The kept draws then come from a fixed Markov kernel. The default does nothing;
        adaptive samplers (gadMALA, gadRWM) override it.
        """

    def sample_stats(self, state):
        """Per-draw statistics, a tuple aligned with ``_stat_names``."""
        return ()

    def chain_summary(self, state):
        """Chain-level diagnostics after the run (counters kept in ``state.extra``)."""
        return {}


class MomentumSampler(BaseSampler):
    """Base of the second-order samplers: a momentum ``p`` with mass ``M = I``.

    Chains start with ``p ~ N(0, T I)``, the momentum's stationary law, so no burn-in is
    spent heating or cooling it.
    """

    def init_state(self, theta0, target, rng, step_size):
        state = super().init_state(theta0, target, rng, step_size)
        state.p = np.sqrt(self.temperature) * rng.standard_normal(state.theta.shape)
        return state


class ThermostatSampler(MomentumSampler):
    """Base of the Nose-Hoover thermostat samplers (SGNHT, CCAdL, mCCAdL).

    The thermostat starts at ``xi_0 = A`` (CCAdL paper Algorithm 1, mCCAdL paper
    Algorithm 1) and has thermal mass ``mu``, by default ``N_d``, the number of
    parameters, as both papers use.
    """

    _stat_names = ("xi", "kinetic_temperature")

    def _mu(self, n_params):
        return float(n_params) if self.thermal_mass is None else float(self.thermal_mass)

    def init_state(self, theta0, target, rng, step_size):
        state = super().init_state(theta0, target, rng, step_size)
        state.xi = float(self.friction)
        return state
