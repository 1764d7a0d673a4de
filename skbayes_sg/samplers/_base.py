"""Base class of the samplers: hyperparameters only, one transition of one chain."""

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, StrOptions, validate_parameter_constraints

from ..preconditioning import PRECONDITIONERS
from ._batched import ChainsState
from ._state import MomentumState, NoInfo, SamplerState, ThermostatInfo, ThermostatState
from ._step_size import largest_curvature

#: Largest ``h A`` the auto step gives the schemes with an Euler friction step, which
#: multiplies p by 1 - h A (h xi for a thermostat, which fluctuates above A): it must stay
#: well inside (0, 1), which a curvature-only rule no longer guarantees once whitening makes
#: h of order 1.
EULER_FRICTION_LIMIT = 0.25


class _Number(Interval):
    """An :class:`~sklearn.utils._param_validation.Interval` that also rejects booleans.

    Python counts ``True`` as the integer 1, so a plain ``Interval`` accepts
    ``step_size=True``; a hyperparameter given as a boolean is a mistake.
    """

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


#: The constraints the samplers' ``_parameter_constraints`` are built from.
POSITIVE = _Number(Real, 0, None, closed="neither")
POSITIVE_INT = _Number(Integral, 1, None, closed="left")
AUTO = StrOptions({"auto"})
OPEN_UNIT_INTERVAL = _Number(Real, 0, 1, closed="neither")


class BaseSampler(BaseEstimator):
    """A Markov transition for one chain; holds hyperparameters and nothing else.

    Being a scikit-learn ``BaseEstimator`` gives ``get_params`` / ``set_params`` and
    ``clone``, so ``GridSearchCV`` can tune ``sampler__step_size``. A sampler never
    touches the data: it sees a *gradient estimator*
    (:class:`skbayes_sg.minibatch.MinibatchGradient`) that returns noisy forces,
    per-example gradients and, for the exact samplers, the full-data log posterior.

    Subclasses implement :meth:`init_state`, which returns the algorithm's own typed state
    (a :class:`~._state.SamplerState` subclass), and :meth:`step`, which returns
    ``(state, info)`` with ``info`` an instance of the class attribute ``info_type``, a
    ``NamedTuple`` of the iteration's statistics; they may set

    - ``_step_size_order``: 1 if the stable ``h`` scales as ``1 / lambda_max`` (SGLD),
      2 if as ``1 / sqrt(lambda_max)`` (momentum methods);
    - ``_auto_step_constant``: the ``c`` of ``step_size="auto"``;
    - ``_noise_tolerance``: the gradient-noise error the auto step allows;
    - ``info_type``: the ``NamedTuple`` class of :meth:`step`'s ``info``, whose fields the
      chain driver records at every kept draw (the estimators' ``sample_stats_``);
    - ``requires_full_data``: True for Metropolis-adjusted samplers.
    """

    _step_size_order = 2
    _auto_step_constant = 0.1
    #: Largest :meth:`predicted_noise_error` the auto step allows (see :mod:`._step_size`).
    _noise_tolerance = 0.05
    #: True for the schemes whose friction is an Euler step (SGHMC, SGNHT, CCAdL).
    _euler_friction = False
    info_type = NoInfo
    requires_full_data = False

    # -- hyperparameters ------------------------------------------------------------
    #: scikit-learn parameter constraints, checked by :meth:`validate`. Each sampler
    #: declares its own; these cover the shared names, so that a sampler defined outside
    #: the package that uses them is checked too.
    _parameter_constraints: dict = {
        "step_size": [POSITIVE, AUTO],
        "temperature": [POSITIVE],
        "friction": [POSITIVE],
        "thermal_mass": [POSITIVE, None],
        "preconditioner": [StrOptions(set(PRECONDITIONERS))],
    }

    def validate(self):
        """Check the hyperparameters against ``_parameter_constraints``.

        Raises
        ------
        ValueError
            (scikit-learn's ``InvalidParameterError``) naming the sampler, the bad
            hyperparameter and its allowed values.
        """
        validate_parameter_constraints(
            self._parameter_constraints, self.get_params(deep=False), caller_name=type(self).__name__
        )

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

    # -- step size of a fit ---------------------------------------------------------------
    def step_size_for(self, context, theta0=None):
        """The step size ``h`` of a fit: resolved from ``context`` (a
        :class:`~._step_size.FitContext`) the first time, then the same for every chain.

        ``resolve_step_size(context.model, context.curvature_at or theta0, context.sigma_max,
        context.lambda_max, context.scale)``, kept in ``context.step``. Without a context, the
        explicit ``step_size`` (``"auto"`` then raises: it needs the posterior's curvature).
        """
        if context is None:
            if isinstance(self.step_size, str):
                raise ValueError(
                    f"{type(self).__name__}(step_size={self.step_size!r}) resolves its step size from "
                    "the posterior: pass context=FitContext(model) to init_state, or give an explicit "
                    "step_size."
                )
            return float(self.step_size)
        if context.step is None:
            at = context.curvature_at if context.curvature_at is not None else theta0
            context.step = self.resolve_step_size(
                context.model, at, context.sigma_max, lambda_max=context.lambda_max, scale=context.scale
            )
        return context.step[0]

    # -- transition ---------------------------------------------------------------------
    def init_state(self, theta0, grad_estimator, rng, context=None):
        """Initial state of a chain started at ``theta0``, with the step size the sampler
        resolves from ``context`` (:meth:`step_size_for`)."""
        return SamplerState(theta=np.array(theta0, dtype=float), step_size=self.step_size_for(context, theta0))

    def retune(self, state, context):
        """A continued chain's ``state`` with its step size resolved anew from ``context``.

        For ``partial_fit``, whose data grow between calls: the posterior sharpens, and a
        step that was stable on the first chunks can diverge. The rest of the state is kept.
        """
        state.step_size = self.step_size_for(context, state.theta)
        return state

    def step(self, state, grad_estimator, rng):
        """Advance ``state`` by one iteration (may update its arrays in place).

        Returns
        -------
        state : SamplerState
            The new state (the same object, updated, for the samplers of this package).
        info : info_type
            The iteration's statistics.
        """
        raise NotImplementedError

    #: The state fields :meth:`step_batch` advances, stacked over the chains; None: the sampler
    #: has no batched kernel and its chains advance one at a time.
    _batch_fields = None
    #: Normal vectors :meth:`step_batch` draws per chain and iteration, its only use of the
    #: chains' generators besides the gradients' (0: unknown; no normals are drawn ahead).
    _normals_per_step = 0

    def batched(self, grads):
        """Whether :meth:`step_batch` can advance chains whose gradients are ``grads`` (a
        :class:`~skbayes_sg.minibatch.ChainsGradient`)."""
        return self._batch_fields is not None

    def stack_states(self, states):
        """The chains' ``states`` stacked for :meth:`step_batch` (a :class:`~._batched.ChainsState`)."""
        return ChainsState(states, self._batch_fields)

    def step_batch(self, chains, grads, rngs):
        """Advance the stacked ``chains`` by one iteration, chain ``c`` drawing from ``rngs[c]``.

        The batched form of :meth:`step`, chain by chain the same arithmetic but for the force
        (``grads.forces``, which may sum in another order).

        Returns
        -------
        ndarray of shape (C, len(info_type._fields))
            The iteration's statistics of every chain.
        """
        raise NotImplementedError

    #: Burn-in iterations the sampler needs to adapt; the first block of the estimators'
    #: ``n_iter="auto"`` is made long enough for its burn-in to cover them.
    _min_adaptation = 0

    def end_adaptation(self, state):
        """Called once when burn-in ends: freeze anything adapted during burn-in.

        The kept draws then come from a fixed Markov kernel. The default does nothing;
        adaptive samplers (gadMALA, gadRWM) override it.
        """


class MomentumSampler(BaseSampler):
    """Base of the second-order samplers: a momentum ``p`` with mass ``M = I``.

    Chains start with ``p ~ N(0, T I)``, the momentum's stationary law, so no burn-in is
    spent heating or cooling it.
    """

    #: The state class :meth:`init_state` builds.
    state_type = MomentumState

    def init_state(self, theta0, grad_estimator, rng, context=None):
        theta = np.array(theta0, dtype=float)
        h = self.step_size_for(context, theta)
        return self.state_type(theta=theta, step_size=h, p=np.sqrt(self.temperature) * rng.standard_normal(theta.shape))


class ThermostatSampler(MomentumSampler):
    """Base of the Nose-Hoover thermostat samplers (SGNHT, CCAdL, mCCAdL).

    The thermostat starts at ``xi_0 = A`` (CCAdL paper Algorithm 1, mCCAdL paper
    Algorithm 1) and has thermal mass ``mu``, by default ``N_d``, the number of
    parameters, as both papers use.
    """

    state_type = ThermostatState
    info_type = ThermostatInfo

    def _mu(self, n_params):
        return float(n_params) if self.thermal_mass is None else float(self.thermal_mass)

    def init_state(self, theta0, grad_estimator, rng, context=None):
        state = super().init_state(theta0, grad_estimator, rng, context)
        state.xi = float(self.friction)
        return state
