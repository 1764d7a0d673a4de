"""The estimator layer shared by every skbayes_sg estimator.

Validates input, builds the model, starts and runs the chains (``_chains``), keeps the
draws and computes diagnostics. Subclasses say which model to build and how to turn
draws into fitted attributes and predictions.
"""

import copy
import warnings
from dataclasses import dataclass, replace
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, column_or_1d
from sklearn.utils.validation import validate_data as _sklearn_validate_data
from threadpoolctl import threadpool_limits

from . import _run_length, _stein, diagnostics
from ._chains import advance_chains, coarsened_thin, draw_schedule, start_chains
from ._geometry import Geometry, build_geometry, noise_probe
from ._run_length import ESS_MIN_PER_CHAIN, RHAT_MAX
from .exceptions import DivergenceError, FitInterruptedWarning, GradientNoiseWarning
from .minibatch import BATCH_SCHEMES
from .models._map import _map_estimate
from .samplers import get_sampler
from .samplers._step_size import FitContext, largest_curvature


def validate_data(*args, **kwargs):
    """scikit-learn's ``validate_data``, without numpy's RuntimeWarning on X holding both
    ``inf`` and ``-inf``: sklearn's finiteness check first sums X (``inf - inf`` is NaN,
    "invalid value encountered in reduce"), then raises its own ValueError naming the
    infinity, which says all there is to say. A DataFrame without columns gets sklearn's
    error for an array without columns."""
    X = args[1] if len(args) > 1 else kwargs.get("X")
    if hasattr(X, "columns") and len(X.columns) == 0:
        # sklearn fails on a DataFrame without columns with numpy's "at least one array or
        # dtype is required"; this is sklearn's message for the same array.
        raise ValueError(
            f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is required by "
            f"{type(args[0]).__name__}."
        )
    with np.errstate(invalid="ignore", over="ignore"):
        return _sklearn_validate_data(*args, **kwargs)


#: Rows per minibatch with ``batch_size="auto"`` (as MLPClassifier's ``min(200, N)``).
AUTO_BATCH_SIZE = 200
#: ...unless a full-data gradient is this cheap (rows x parameters): then ``"auto"`` uses all
#: the data. Below it a full gradient costs about as much as the iteration's fixed Python
#: overhead (tens of microseconds), so exact gradients are free, and a minibatch would add
#: noise that, at small N, is largest relative to the posterior (the control variate's
#: expansion is least accurate where the posterior is least Gaussian).
FULL_DATA_WORK = 200_000

#: ``fit`` warns (``GradientNoiseWarning``) when the mean kinetic temperature is off its
#: target by more than this fraction plus four Monte Carlo standard errors.
KINETIC_TOLERANCE = 0.1


#: ``burn_in="auto"``: the fraction of each chain discarded, as in the papers, unless the
#: sampler sets its own for chains started at draws of the Laplace approximation
#: (``_laplace_burn_in``, the adaptive samplers', see :meth:`BaseSGBayes._run_policy`).
AUTO_BURN_IN = 0.2

#: ``max_draws="auto"``: draws stored per chain. Samplers whose draws are nearly independent
#: (``_store_every_draw``: the Metropolis-adjusted gadMALA and gadRWM, autocorrelation times
#: of a few iterations) store every kept draw as long as all chains' draws together stay
#: within ``AUTO_DRAW_FLOATS`` floats, at least ``AUTO_MAX_DRAWS`` per chain: thinning them
#: discards effective samples (x4 loses 20% of the ESS at an autocorrelation time of 5).
#: 2^19 floats (4 MiB) is what the stochastic-gradient samplers store on a9a (4 chains of
#: 1,000 draws of 124 parameters), so that prediction, whose cost is linear in the stored
#: floats, never costs more per test row than theirs there. The stochastic-gradient
#: samplers keep ``AUTO_MAX_DRAWS``, as before: their draws are more autocorrelated (14
#: iterations per effective draw on a9a, which its thinning x4 hardly touches).
AUTO_MAX_DRAWS = 1000
AUTO_DRAW_FLOATS = 2**19

#: What a continued fit (``warm_start``) carries over from the first fit's diagnostics.
_FIT_INFO = ("lambda_max", "noise_eigenvalue", "predicted_noise_error", "gradient", "preconditioner")

#: Estimator values of ``gradient``.
GRADIENTS = ("auto", "minibatch", "control_variate")

#: A failed convergence check advises standardising when the ratio of the largest to the
#: smallest (non-zero) feature standard deviation exceeds this, and the chains did not run
#: in coordinates whitened by the MAP Hessian (which makes them scale-free).
FEATURE_SCALE_SPREAD = 100.0

# Upper bound on the floats one predictive chunk allocates (draws x rows x outputs).
_PREDICT_CHUNK = 2**22
#: A row block of the predictive takes all draws in one product when it can keep at least
#: this many rows within ``_PREDICT_CHUNK``; X is then read once, where blocks of a few
#: draws over all rows re-read it per block (40 s for 4,000 draws on 200k rows).
_PREDICT_MIN_ROWS = 256

#: ``n_predict_draws="auto"``: the predictive's total Monte Carlo standard error, in
#: posterior standard deviations, that the draws kept for prediction may reach.
PREDICT_MCSE = 0.05


class BaseSGBayes(BaseEstimator):
    """Common parameters, fit loop and diagnostics of the skbayes_sg estimators."""

    #: What ``gradient="auto"`` and a sampler's ``preconditioner="auto"`` mean for this
    #: estimator's model: on for the log-concave GLMs, off where the posterior is
    #: multimodal by construction (the DRBM), so that the MAP is not a meaningful centre.
    _auto_control_variate = True
    _auto_preconditioner = True
    #: Whether multilevel samplers (MLSGLD) may fit this estimator's model.
    _supports_multilevel = True
    #: Whether ``fit`` scores the draws for the kernel Stein discrepancy and its bias test
    #: (``diagnostics_["ksd"]``): not where the posterior is multimodal by construction
    #: (the DRBM's hidden-unit permutations), whose chains never visit every mode.
    _ksd_at_fit = True

    _parameter_constraints = {
        "sampler": [str, HasMethods(["init_state", "step"])],
        "n_iter": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "burn_in": [
            Interval(Real, 0, 1, closed="left"),
            Interval(Integral, 0, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "thin": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "batch_scheme": [StrOptions(set(BATCH_SCHEMES))],
        "gradient": [StrOptions(set(GRADIENTS))],
        "n_chains": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [Integral, None],
        "random_state": ["random_state"],
        "init": [StrOptions({"map", "zeros"}), "array-like"],
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "warm_start": ["boolean"],
        "max_draws": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "n_predict_draws": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "verbose": ["verbose"],
    }

    # -- hooks for subclasses ------------------------------------------------------------
    def _build_model(self, X, y):
        raise NotImplementedError

    def _set_posterior_attributes(self, model):
        raise NotImplementedError

    def _user_affine(self):
        """``(scale, shift)`` of shape (P,) mapping the model's ``theta`` to the user's units
        coordinate by coordinate (``theta_user = scale * theta + shift``), or None when the
        model samples in the user's units. A regressor that samples a standardised problem
        reports its draws, ``init`` and MCSEs through it."""
        return None

    def _prediction_model(self, model):
        """The model kept for prediction after fit: ``model`` without its data, in the units
        of :meth:`_user_affine`'s draws."""
        return model.without_data()

    #: Whether :meth:`_run_length_summary` summarises the parameters (then ``fit`` reuses it
    #: for ``diagnostics_``) rather than a quantity of the subclass's choosing.
    _run_length_on_parameters = True
    #: Bulk ESS at which ``n_iter="auto"`` stops, and its ceiling (None: ``MAX_ITER``).
    _run_length_ess_target = _run_length.ESS_TARGET
    _run_length_max_iter = None
    #: What ``batch_size="auto"`` and ``max_draws="auto"`` resolve to (see the constants).
    _auto_batch_size = AUTO_BATCH_SIZE
    _auto_max_draws = AUTO_MAX_DRAWS

    def _auto_step_scale(self, sampler):
        """Multiplier of ``sampler``'s ``_auto_step_constant`` in the curvature part of
        ``step_size="auto"`` (never of the noise cap): 1, but the DRBM's mCCAdL takes more."""
        return 1.0

    def _curvature_point(self, chain_model, start):
        """Where the ``"auto"`` step size measures the curvature when there is no MAP: the
        first chain's start. The DRBM's random starts are far from where its chains
        spend their time and override this."""
        return start

    def _run_length_summary(self, draws):
        """The :func:`~skbayes_sg.diagnostics.summarize` that ``n_iter="auto"`` stops on, of
        the draws ``(n_chains, n_draws, P)`` stored so far: the parameters' by default.
        Subclasses whose parameters are not identified (the DRBM's hidden units can swap)
        summarise a predictive quantity instead and set ``_run_length_on_parameters``
        to False."""
        return diagnostics.summarize(draws)

    # -- the fit loop --------------------------------------------------------------------
    def _laplace_start(self, sampler):
        """Whether the chains start at draws of the Laplace approximation at the MAP, with the
        proposal's initial factor from the curvature there: an adaptive sampler whose
        proposal starts from the curvature (``init_scale="map"``) under ``init="map"``."""
        return (
            isinstance(self.init, str)
            and self.init == "map"
            and hasattr(sampler, "fix_initial_factor")
            and getattr(sampler, "init_scale", None) == "map"
        )

    def _run_policy(self, sampler, n_params):
        """``(burn_in, min_adaptation, max_draws)`` of this fit, the ``"auto"`` values resolved.

        ``burn_in="auto"`` is :data:`AUTO_BURN_IN` but for the adaptive samplers started at
        draws of the Laplace approximation (:meth:`_laplace_start`), whose proposal then
        accepts the target rate on that approximation from the first iteration: their burn-in
        only adapts it, and the chains need none to forget a start already near
        stationarity, so they discard the sampler's ``_laplace_burn_in`` (5%). Their first
        block of ``n_iter="auto"`` then covers ``_laplace_min_adaptation`` adapting
        iterations (250), ``_min_adaptation`` (1,000) otherwise. ``max_draws="auto"``: see
        :data:`AUTO_MAX_DRAWS`.
        """
        laplace = self._laplace_start(sampler)
        min_adaptation = getattr(sampler, "_min_adaptation", 0)
        burn_in = self.burn_in
        if laplace:
            min_adaptation = getattr(sampler, "_laplace_min_adaptation", min_adaptation)
        if isinstance(burn_in, str):
            burn_in = getattr(sampler, "_laplace_burn_in", AUTO_BURN_IN) if laplace else AUTO_BURN_IN
        max_draws = self.max_draws
        if isinstance(max_draws, str):
            max_draws = self._auto_max_draws
            if getattr(sampler, "_store_every_draw", False):
                max_draws = max(AUTO_MAX_DRAWS, AUTO_DRAW_FLOATS // (self.n_chains * max(n_params, 1)))
        return burn_in, min_adaptation, max_draws

    def _first_schedule(self, sampler, n_params, resume):
        """``(burn_in, max_draws, schedule)``: the resolved policy and the first block's
        :class:`~skbayes_sg._run_length.Schedule` (no burn-in for a continued chain).

        Raises ``ValueError`` when the schedule would keep no draw, before any work is done.
        """
        burn_in, min_adaptation, max_draws = self._run_policy(sampler, n_params)
        burn_in = None if resume else burn_in
        n_iter = _run_length.first_n_iter(self.n_iter, burn_in, min_adaptation)
        n_burn = 0 if burn_in is None else _run_length.n_burn_of(burn_in, n_iter)
        if n_burn >= n_iter:
            raise ValueError(
                f"burn_in={self.burn_in!r} discards {n_burn} of n_iter={self.n_iter} iterations, leaving no "
                "draws; burn_in must be below n_iter (or a fraction in [0, 1))."
            )
        eff_thin, n_draws = draw_schedule(n_iter, n_burn, self.thin, max_draws)
        if n_draws == 0:
            raise ValueError(
                f"n_iter={n_iter} with {n_burn} burn-in iterations leaves {n_iter - n_burn}, fewer than "
                f"thin={self.thin}: no draw would be kept. Increase n_iter (or use n_iter='auto') or lower thin."
            )
        return burn_in, max_draws, _run_length.Schedule(n_iter, n_burn, eff_thin)

    def _batch_size(self, sampler, n_samples, n_params=1):
        if sampler.requires_full_data:
            if self.batch_size not in (None, "auto"):
                raise ValueError(
                    f"{type(sampler).__name__} is a Metropolis-adjusted sampler and needs the full-data "
                    f"log posterior; got batch_size={self.batch_size!r}. Use batch_size=None."
                )
            return None
        if self.batch_size is None:
            return None
        if self.batch_size == "auto":
            if n_samples * n_params <= FULL_DATA_WORK:
                return None
            return min(self._auto_batch_size, n_samples)
        if self.batch_size > n_samples:
            warnings.warn(
                f"batch_size={self.batch_size} is larger than the number of samples ({n_samples}); "
                f"it is clipped to {n_samples} (full-data gradients, no minibatch noise).",
                UserWarning,
                stacklevel=_caller_stacklevel(),
            )
            return n_samples
        return int(self.batch_size)

    def _map(self, model):
        """The MAP of ``model``, computed once per fit (the start, the preconditioner and the
        control variate all use it)."""
        cached = getattr(self, "_fit_map", None)
        if cached is None or cached[0] is not model:
            self._fit_map = (model, _map_estimate(model))
        return self._fit_map[1]

    def _initial_points(self, model):
        P = model.n_params
        if isinstance(self.init, str) and self.init == "zeros":
            return np.tile(model.initial_point(), (self.n_chains, 1))
        if isinstance(self.init, str) and self.init == "map":
            return np.tile(self._map(model), (self.n_chains, 1))
        init = np.asarray(self.init, dtype=float)
        if init.shape == (P,):
            init = np.tile(init, (self.n_chains, 1))
        if init.shape != (self.n_chains, P):
            raise ValueError(
                f"init array has shape {init.shape}; expected ({P},) for one start shared by all chains or "
                f"({self.n_chains}, {P}) for one start per chain (P = {P} parameters for this model)."
            )
        if not np.isfinite(init).all():
            raise ValueError("init contains NaN or infinity; give finite starting values.")
        affine = self._user_affine()
        if affine is not None:
            init = (init - affine[1]) / affine[0]  # given in the units of samples_
        return init

    def _seeds(self, fit_round):
        rs = self.random_state
        entropy = rs if isinstance(rs, Integral) else check_random_state(rs).randint(2**31 - 1)
        # A partial_fit call (or the continuation of an estimator saved without its chains'
        # progress) gets fresh streams, not a replay of the first fit's; a warm_start fit
        # carries on the chains' own streams instead (ChainRunner.progress).
        return np.random.SeedSequence([int(entropy), int(fit_round)]).spawn(self.n_chains)

    # One BLAS thread for the whole fit, as the chains already run (_chains._advance): the
    # setup's products (MAP, Hessian, noise probe) are small enough that threads gain
    # little on an idle machine, while on a busy one (GridSearchCV with n_jobs, other
    # processes, CI) oversubscribed threads made the MAP 10x slower (benchmarks/fit_time.py),
    # and one thread makes it bit-identical on any machine.
    @threadpool_limits.wrap(limits=1, user_api="blas")
    def _fit(self, X, y, streaming=False, sample_weight=None):
        """Run the chains on validated ``X``, encoded ``y``; set the fitted attributes.

        ``streaming`` (``partial_fit``): continue the chains, when there are any, on the
        data seen so far, re-resolving an ``"auto"`` step size for the grown N, and keep
        only this call's draws (they alone target the current posterior).
        ``sample_weight``: validated per-row likelihood weights (None: all ones).
        """
        sampler = get_sampler(self.sampler)
        model = self._build_model(X, y)
        if sample_weight is not None:
            model.set_sample_weight(sample_weight)
        batch_size = self._batch_size(sampler, model.n_samples, model.n_params)
        return sampler.fit_estimator(self, X, y, model, batch_size, streaming)

    def _fit_chains(self, sampler, X, y, model, batch_size, streaming):
        """The chain strategy (:meth:`~skbayes_sg.samplers.BaseSampler.fit_estimator`):
        run, or continue, the chains and set the fitted attributes."""
        can_resume = hasattr(self, "_chain_states") and self._can_resume(sampler, model)
        resume = (self.warm_start or streaming) and can_resume
        burn_in, max_draws, first = self._first_schedule(sampler, model.n_params, resume)
        self._fit_map = None
        if resume:
            # The chains continue in the coordinates they ran in (any fixed preconditioner
            # and control-variate centre stay valid as the data grow; g_hat is recomputed).
            geometry = self._geometry
            if streaming or model.sample_weight is not None or geometry.row_probabilities is not None:
                # The rows' probabilities belong to the data and weights of this call (a warm
                # start may bring other weights, whose positive rows must all be drawable);
                # recomputed from the same data and weights they are the same, bit for bit.
                geometry = geometry.for_data(model)
            chain_model = geometry.chain_model(model)
            # Copies: a continuation cut short (an interrupt, a divergence) must not leave
            # the stored chains half-advanced.
            starts, context = copy.deepcopy(self._chain_states), None
            fit_round = self._fit_round + 1
            # A fit continues its chains exactly (generators, minibatch queues, thinning
            # grid), so that fitting in parts gives the draws of one fit. partial_fit, whose
            # data change, starts fresh streams and queues each call, and so does the
            # continuation of an estimator saved before chains kept their progress.
            progress = None if streaming else getattr(self, "_chain_progress", None)
            if streaming and isinstance(getattr(sampler, "step_size", None), str):
                # The posterior sharpens as N grows: the step that was stable on the first
                # chunks can diverge now, so the auto rule runs again at the chains' states.
                sigma_max = self._noise_eigenvalue(chain_model, geometry, batch_size)
                context = FitContext(
                    chain_model, starts[0].theta, sigma_max=sigma_max, scale=self._auto_step_scale(sampler)
                )
                starts = [sampler.retune(state, context) for state in starts]
        else:
            geometry = build_geometry(
                model,
                sampler,
                batch_size,
                self.gradient,
                self._map,
                self._auto_preconditioner,
                self._auto_control_variate,
                self.batch_scheme,
                start_at_map=isinstance(self.init, str) and self.init == "map",
            )
            chain_model = geometry.chain_model(model)
            starts = Geometry.to_chain(chain_model, self._initial_points(model))
            initial_factor = None
            if geometry.L is not None and isinstance(self.init, str) and self.init == "map":
                # Chains start at draws of the Laplace approximation, N(0, I) in whitened
                # coordinates: already near stationarity, and dispersed so that R-hat can
                # tell chains that do not mix from chains that agree by construction.
                starts = starts + self._start_rng().standard_normal(starts.shape)
            elif self._laplace_start(sampler):
                # The adaptive samplers' proposal starts from L0 L0' = H^-1 at the MAP, computed
                # once for all chains; the chains start at draws of N(theta_map, L0 L0'), for
                # the same reasons (their burn-in is then only their adaptation).
                initial_factor = sampler.fix_initial_factor(chain_model, starts[0])
                L0 = initial_factor[0]
                if L0 is not None:
                    z = self._start_rng().standard_normal(starts.shape)
                    starts = starts + (z @ L0.T if L0.ndim == 2 else z * L0)
            sigma_max = self._noise_eigenvalue(chain_model, geometry, batch_size)
            # Whitened at the MAP with the exact Hessian, the curvature there is 1.
            lam = 1.0 if geometry.preconditioner == "dense" else None
            curvature_at = (
                np.zeros(model.n_params)
                if geometry.L is not None
                else geometry.theta_map
                if geometry.theta_map is not None
                else self._curvature_point(chain_model, starts[0])
            )
            if self.batch_size == "auto" and sigma_max and isinstance(sampler.step_size, str):
                if lam is None:
                    lam = largest_curvature(chain_model, curvature_at)
                batch_size, sigma_max = _noise_aware_batch(
                    sampler, batch_size, sigma_max, lam, chain_model.n_samples, self._auto_step_scale(sampler)
                )
                if batch_size is None:
                    geometry = replace(geometry, gradient="full", row_probabilities=None)
            # The sampler resolves its step size from these measurements in its init_state, once
            # for all the chains (FitContext.step).
            context = FitContext(
                chain_model,
                curvature_at,
                lambda_max=lam,
                sigma_max=sigma_max,
                scale=self._auto_step_scale(sampler),
                initial_factor=initial_factor,
            )
            fit_round = 0
            progress = None
        self._fit_map = None
        control_variate = geometry.control_variate(chain_model)

        try:
            runs = self._run(
                sampler,
                chain_model,
                starts,
                first,
                burn_in,
                max_draws,
                batch_size,
                context,
                fit_round,
                control_variate,
                geometry.row_probabilities if control_variate is None else None,
                progress,
            )
        except DivergenceError as exc:
            raise _explain_divergence(exc, self) from None
        # What the step-size rule measured (lambda_max, the noise eigenvalue, the predicted
        # noise error), as the sampler resolved it.
        info = {} if context is None or context.step is None else dict(context.step[1])
        info.update(gradient=geometry.gradient, preconditioner=geometry.preconditioner)
        results, summary, blocks, interrupted = runs.results, runs.summary, runs.blocks, runs.interrupted
        if interrupted is not None and interrupted["n_draws"] == 0 and not (resume and not streaming):
            # Still in burn-in (or before the first kept draw): nothing to be fitted on,
            # so the estimator stays as it was, as after any interrupt.
            raise interrupted["exception"]
        eff_thin, n_run = runs.eff_thin, runs.n_run
        if self.n_iter == "auto":
            info["n_iter_blocks"] = [b.n_iter for b in blocks]
        self._geometry = geometry
        draws = np.stack([r.draws for r in results])
        affine = self._user_affine()
        if affine is not None:
            draws = draws * affine[0] + affine[1]
            if summary is not None:  # ESS and R-hat are affine-invariant, the MCSE scales
                summary = {**summary, "mcse_mean": summary["mcse_mean"] * np.abs(affine[0])}
        stats = {k: np.stack([r.stats[k] for r in results]) for k in results[0].stats}
        if resume and streaming:
            n_grad = self.diagnostics_["n_grad_evals"] + sum(r.n_grad_evals for r in results)
            self.n_iter_ += n_run
        elif resume:
            if progress is not None:
                # One evenly spaced record from the burn-in on: what one fit of the whole
                # length would have stored.
                draws, stats, eff_thin = _join_records(
                    (self.samples_, self.sample_stats_),
                    (draws, stats),
                    progress[0],
                    runs.t0,
                    runs.t,
                    eff_thin,
                    max_draws,
                )
            else:
                draws = np.concatenate([self.samples_, draws], axis=1)
                stats = {k: np.concatenate([self.sample_stats_[k], v], axis=1) for k, v in stats.items()}
                if max_draws is not None and draws.shape[1] > max_draws:
                    # Keep memory bounded on long continued runs: thin the whole record evenly.
                    keep = np.linspace(0, draws.shape[1] - 1, max_draws).round().astype(int)
                    draws = draws[:, keep]
                    stats = {k: v[:, keep] for k, v in stats.items()}
            n_grad = self.diagnostics_["n_grad_evals"] + sum(r.n_grad_evals for r in results)
            info = {**{k: self.diagnostics_[k] for k in _FIT_INFO if k in self.diagnostics_}, **info}
            self.n_iter_ += n_run
            summary = None  # the record now spans both fits
        else:
            n_grad = sum(r.n_grad_evals for r in results)
            self.n_iter_ = n_run

        # What a later fit needs to continue the chains exactly; nothing if an interrupt
        # left them at different iterations or one part-way through an iteration.
        self._chain_states = runs.states
        self._chain_progress = runs.progress
        if runs.progress is not None and resume and not streaming and progress is not None:
            for prog in self._chain_progress:
                prog["eff_thin"] = int(eff_thin)
        self._fit_round = fit_round
        self._sampler = sampler
        self.samples_ = draws
        self.sample_stats_ = stats
        self.sample_weight_ = None
        self._model = self._prediction_model(model)
        self.diagnostics_ = self._diagnostics(results, draws, stats, info, n_grad, batch_size, eff_thin, summary)
        self._observed_y = y
        self._set_posterior_attributes(self._model)
        # The KSD's budget is this call's gradient work, not the running total of a
        # partial_fit stream or a continued fit (each call pays a bounded share).
        this_call = sum(r.n_grad_evals for r in results)
        self._stein_diagnostics(chain_model, geometry, this_call if interrupted is None else None)
        self._warn_fit(sampler, X)
        if interrupted is not None:
            self.diagnostics_["interrupted"] = True
            continued = (
                "; warm_start=True continues the chains from there"
                if self._chain_states is not None
                else "; the chains stopped at different iterations, so warm_start=True starts afresh"
            )
            warnings.warn(
                f"{type(self).__name__}: the fit was interrupted at iteration {interrupted['iteration']} of "
                f"{interrupted['n_iter']} per chain; the estimator is fitted on the {self.samples_.shape[1]} draws "
                f"per chain kept so far and its diagnostics are computed on them{continued}.",
                FitInterruptedWarning,
                stacklevel=_caller_stacklevel(),
            )
            raise interrupted["exception"]
        return self

    def _run(
        self,
        sampler,
        chain_model,
        starts,
        first,
        burn_in,
        max_draws,
        batch_size,
        context,
        fit_round,
        control_variate,
        row_probabilities=None,
        progress=None,
    ):
        """Run the chains for the ``first`` schedule, and with ``n_iter="auto"`` in further
        blocks until they converge (``burn_in`` None: a continued chain, which runs until its
        own draws meet the targets).

        ``progress``: the chains' :meth:`~skbayes_sg._chains.ChainRunner.progress` to
        continue them exactly (``first`` then counts from the continuation's start).

        Returns a :class:`_Runs`: the chains' results, the
        :func:`~skbayes_sg.diagnostics.summarize` of their draws when it was computed
        (``"auto"``) or None, the schedule of every block (:mod:`skbayes_sg._run_length`),
        and after a ``KeyboardInterrupt`` the chains cut to their common draws.
        """
        t0 = 0 if progress is None else progress[0]["t"]
        seeds = self._seeds(fit_round) if progress is None else [None] * len(starts)
        runners = start_chains(
            sampler,
            chain_model,
            list(starts),
            t0 + first.n_iter,
            first.n_burn,
            self.thin,
            max_draws,
            batch_size,
            self.batch_scheme,
            seeds,
            context,
            control_variate,
            row_probabilities,
            progress,
        )
        # A continued chain's grid may be coarser than the first block's (max_draws over the
        # whole record); the blocks count from the continuation's start.
        blocks = [_run_length.Schedule(first.n_iter, first.n_burn, runners[0].eff_thin) if progress else first]
        summary = None
        try:
            runners = advance_chains(runners, chain_model, self.n_jobs, self.verbose)
            while self.n_iter == "auto":
                summary = self._run_length_summary(np.stack([r.kept_draws() for r in runners]))
                nxt = _run_length.next_schedule(
                    blocks[-1],
                    summary,
                    burn_in,
                    max_draws,
                    len(runners),
                    max_iter=self._run_length_max_iter,
                    ess_target=self._run_length_ess_target,
                )
                if nxt is None:
                    break
                blocks.append(nxt)
                n_burn = nxt.n_burn if progress is None else runners[0].n_burn
                runners = advance_chains(
                    [r.extend(t0 + nxt.n_iter, n_burn, nxt.eff_thin) for r in runners],
                    chain_model,
                    self.n_jobs,
                    self.verbose,
                )
        except KeyboardInterrupt as exc:
            # ChainsInterrupted carries the chains as the last round left them; an interrupt
            # between rounds (the diagnostics of n_iter="auto") finds them in `runners`.
            runners = getattr(exc, "runners", runners)
            n_draws = min(r.k for r in runners)
            t = min(r.t for r in runners)
            # Chains that all stopped between iterations at one count and on one grid
            # (rounds run in worker processes) can be continued exactly; otherwise their
            # draws are cut to a common length and they cannot.
            aligned = (
                not any(r.busy for r in runners) and len({(r.t, r.n_iter, r.n_burn, r.eff_thin) for r in runners}) == 1
            )
            interrupted = {"exception": exc, "n_draws": n_draws, "iteration": t, "n_iter": runners[0].n_iter}
            return _Runs(
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
        t = runners[0].t
        summary = summary if self._run_length_on_parameters else None
        return _Runs(
            [r.result() for r in runners],
            summary,
            blocks,
            None,
            t0,
            t,
            runners[0].eff_thin,
            [r.state for r in runners],
            [r.progress() for r in runners],
        )

    def _start_rng(self):
        """Generator of the chains' starting jitter, apart from the chains' own streams."""
        rs = self.random_state
        entropy = rs if isinstance(rs, Integral) else check_random_state(rs).randint(2**31 - 1)
        return np.random.default_rng([int(entropy), 2**31 + 1])

    def _noise_eigenvalue(self, chain_model, geometry, batch_size):
        """``sigma_max`` of the chains' gradient noise (None for full data)."""
        if batch_size is None or batch_size >= chain_model.n_samples:
            return None
        return noise_probe(chain_model, geometry, batch_size, self.batch_scheme)

    def _accumulate(self, X, y, sample_weight=None):
        """Append a chunk (and its sample weights) to the data seen by ``partial_fit``; return
        all of it, ``(X, y, sample_weight)`` with ``sample_weight`` None while every chunk
        came without weights."""
        if getattr(self, "_seen_X", None) is None:
            self._seen_X, self._seen_y, self._seen_w = X, y, sample_weight
        else:
            seen_w = getattr(self, "_seen_w", None)
            if sample_weight is not None or seen_w is not None:
                # Chunks given without weights count each row once.
                seen_w = np.ones(self._seen_X.shape[0]) if seen_w is None else seen_w
                w = np.ones(X.shape[0]) if sample_weight is None else sample_weight
                self._seen_w = np.concatenate([seen_w, w])
            if sp.issparse(X) or sp.issparse(self._seen_X):
                self._seen_X = sp.vstack([self._seen_X, X], format="csr")
            else:
                self._seen_X = np.concatenate([self._seen_X, X])
            self._seen_y = np.concatenate([self._seen_y, y])
        return self._seen_X, self._seen_y, getattr(self, "_seen_w", None)

    def _set_weighted_draws(self, sampler, model, draws, weights, diag):
        """Set the fitted attributes from one set of signed-weight draws (no chains).

        For strategies such as multilevel SGLD: ``sum_s weights[s] f(draws[s])``, with
        ``draws`` (n_draws, P) and ``weights`` (n_draws,), estimates the posterior
        expectation of ``f``; ``diag`` becomes ``diagnostics_``.
        """
        self._chain_states = self._chain_progress = None
        self._fit_round = 0
        self._sampler = sampler
        self.samples_ = np.asarray(draws)[None]
        affine = self._user_affine()
        if affine is not None:
            self.samples_ = self.samples_ * affine[0] + affine[1]
            for key in ("rmse", "target_rmse"):  # per-coordinate errors scale with the draws
                if np.shape(diag.get(key)) == affine[0].shape:
                    diag[key] = diag[key] * np.abs(affine[0])
        self.sample_weight_ = np.asarray(weights, dtype=float)[None]
        self.sample_stats_ = {}
        self.n_iter_ = int(diag.get("n_iter", 0))
        self._model = self._prediction_model(model)
        self.diagnostics_ = dict(diag)
        self._stein = None  # signed weights: no KSD (see _stein_diagnostics)
        self._observed_y = None
        self._set_posterior_attributes(self._model)
        return self

    def _can_resume(self, sampler, model):
        if self._chain_states is None:
            return False
        prev = getattr(self, "_sampler", None)
        return (
            prev is not None
            and type(prev) is type(sampler)
            and self.samples_.shape[2] == model.n_params
            and len(self._chain_states) == self.n_chains
        )

    def _diagnostics(self, results, draws, stats, info, n_grad, batch_size, eff_thin, summary=None):
        if summary is None:
            summary = diagnostics.summarize(draws)
        diag = {
            "step_size": results[0].state.step_size,
            **info,
            "batch_size": batch_size,
            "thin": eff_thin,
            "n_grad_evals": int(n_grad),
            "ess": summary["ess_bulk"],
            "ess_tail": summary["ess_tail"],
            "rhat": summary["rhat"],
            "mcse_mean": summary["mcse_mean"],
        }
        for name, values in stats.items():
            diag[f"mean_{name}"] = float(values.mean()) if values.size else float("nan")
        for key in results[0].summary:
            vals = [r.summary[key] for r in results]
            if isinstance(vals[0], np.ndarray):
                diag[key] = np.stack(vals)  # per chain (e.g. a learned proposal factor)
            else:
                diag[key] = sum(vals) if isinstance(vals[0], Integral) else float(np.mean(vals))
        return diag

    def _warn_fit(self, sampler, X):
        """Issue at most one warning for the fit, naming its likeliest cause and the fix.

        The checks (predicted gradient noise, kinetic temperature, clipped noise estimate,
        R-hat and ESS) often fail together for one cause, a step size too large or too small
        for the posterior; one warning whose first sentence is that cause is more use than
        several, and a ``GridSearchCV`` over step sizes prints one line per poor cell. The
        category is ``GradientNoiseWarning`` when the chains ran at the wrong temperature
        (the cause), else ``ConvergenceWarning``; the first subclasses the second.
        """
        noise = self._predicted_noise_message(sampler) or self._kinetic_temperature_message(sampler)
        clipped = self.diagnostics_.get("noise_clipped", 0)
        if noise is None and clipped > 0:
            noise = (
                f"the noise estimate exceeded the friction on {clipped} coordinate-iterations and was "
                "clipped, so the chains ran hotter than the posterior. Increase friction or decrease step_size."
            )
        convergence = self._convergence_messages()
        if noise is None and not convergence:
            noise = self._ksd_bias_message(sampler)
        if noise is None and not convergence:
            return
        parts = [noise] if noise is not None else []
        if convergence:
            lead = "The chains also failed the convergence checks: " if noise is not None else ""
            advice = self._convergence_advice(sampler, X) if noise is None else []
            text = " Also, ".join(convergence + advice)
            parts.append(lead + text)
        category = GradientNoiseWarning if noise is not None else ConvergenceWarning
        warnings.warn(
            f"{type(self).__name__} with {type(sampler).__name__}: " + " ".join(parts),
            category,
            stacklevel=_caller_stacklevel(),
        )

    def _stein_diagnostics(self, chain_model, geometry, n_grad):
        """Score the draws for the kernel Stein discrepancy while the data are at hand.

        Sets ``_stein`` (the thinned draws and their full-data scores, see
        :func:`._stein.fit_statistics`; the KSD needs the data, which the fitted estimator
        does not keep), ``diagnostics_["ksd"]`` and the bias test's ``diagnostics_["ksd_pvalue"]``.
        None (no KSD) for an interrupted fit (``n_grad`` None) and for models whose
        posterior is multimodal by construction (``_ksd_at_fit`` False).
        """
        self._stein = None
        if n_grad is None or not self._ksd_at_fit:
            return
        thetas = self._flat_samples()
        affine = self._user_affine()
        if affine is not None:
            thetas = (thetas - affine[1]) / affine[0]
        self._stein = _stein.fit_statistics(
            chain_model,
            thetas,
            self.samples_.shape[0],
            n_grad,
            geometry.L is not None,
            lambda t: Geometry.to_chain(chain_model, t),
        )
        K = _stein.imq_stein_kernel(self._stein["x"], self._stein["s"])
        self.diagnostics_["ksd"] = _stein.ksd_from_kernel(K)
        ess = np.asarray(self.diagnostics_.get("ess", np.nan), dtype=float)
        test = _stein.bias_test(K, float(np.min(ess)) if ess.size else np.nan, self.samples_.shape[0])
        if test is not None:
            self.diagnostics_["ksd_pvalue"] = test[1]

    def __getstate__(self):
        # The KSD's draws and scores (_stein) are a cache of fit-time work for kernels other
        # than the default: a pickle (a saved model, a worker's result) keeps the KSD in
        # diagnostics_ only and so no second copy of the draws.
        state = super().__getstate__()
        if state.get("_stein") is not None:
            state = {**state, "_stein": None}
        return state

    def _ksd_bias_message(self, sampler):
        """Why the draws' KSD says they are biased (bootstrap p-value below
        ``_stein.BIAS_LEVEL``), naming the likeliest fix, or None."""
        p = self.diagnostics_.get("ksd_pvalue")
        if p is None or p > _stein.BIAS_LEVEL:
            return None
        h = self.diagnostics_.get("step_size", np.nan)
        if not isinstance(getattr(sampler, "step_size", "auto"), str):
            fix = f"decrease step_size (step_size={h:.3g} was set by hand; step_size='auto' sets it from the noise)"
        elif self.diagnostics_.get("gradient") == "minibatch":
            fix = "use gradient='control_variate' or a larger batch_size"
        else:
            fix = "decrease step_size or increase batch_size"
        return (
            f"the kernel Stein discrepancy of the draws (KSD={self.diagnostics_['ksd']:.3g}) is larger than exact "
            f"draws of the same effective size give (bootstrap p={p:.2g}): the draws are biased, likeliest by a step "
            f"too large for the posterior or its gradient noise. {fix[0].upper() + fix[1:]}."
        )

    def _predicted_noise_message(self, sampler):
        """Why the step's predicted gradient-noise error is over twice the sampler's tolerance,
        or None.

        The one check that covers SGLD, which has no momentum whose temperature could show
        the noise. It fires for explicit step sizes (the auto rule keeps the prediction at
        the tolerance).
        """
        delta = self.diagnostics_.get("predicted_noise_error")
        tolerance = getattr(sampler, "_noise_tolerance", None)
        if delta is None or tolerance is None or delta <= 2 * tolerance:
            return None
        fixes = ["step_size='auto'", "a larger batch_size"]
        if self.diagnostics_.get("gradient") == "minibatch":
            fixes.append("gradient='control_variate'")
        return (
            f"at step_size={self.diagnostics_['step_size']:.3g} the minibatch gradient noise "
            f"(largest eigenvalue {self.diagnostics_['noise_eigenvalue']:.3g}) is predicted to inflate the "
            f"posterior variance along its noisiest direction by about {100 * delta:.0f}% "
            f"(h sigma_max / 2AT = {delta:.3g}). Use {', '.join(fixes[:-1])} or {fixes[-1]}."
        )

    def _kinetic_temperature_message(self, sampler):
        """Why the chains' mean kinetic temperature is off its target, or None."""
        kinetic = self.sample_stats_.get("kinetic_temperature")
        T = getattr(sampler, "temperature", None)
        if kinetic is None or T is None or kinetic.shape[1] < 4:
            return None
        mean = float(kinetic.mean())
        mcse = float(np.nan_to_num(diagnostics.mcse_mean(kinetic), nan=np.inf))
        T_expected = sampler.expected_kinetic_temperature(self.diagnostics_["step_size"])
        if abs(mean - T_expected) <= KINETIC_TOLERANCE * T_expected + 4 * mcse:
            return None
        self.diagnostics_["kinetic_temperature"] = mean
        if mean > T_expected:
            cause = (
                "Minibatch gradient noise is not being dissipated: increase friction, decrease "
                "step_size or increase batch_size"
            )
            # Only the covariance-controlled samplers cancel the noise; never advise them to
            # a user who already runs one.
            cause += (
                "."
                if getattr(sampler, "controls_noise", False)
                else (", or use a sampler that controls the noise (mccadl).")
            )
        else:
            # A chain started at the mode with thermal momentum gives about half its kinetic
            # energy to the potential before it equilibrates.
            cause = (
                "The chains have not reached equilibrium (a burn-in too short for the friction) or the "
                "step size is too large: increase n_iter or burn_in, or decrease step_size."
            )
        if not isinstance(sampler.step_size, str):
            cause += " step_size was set by hand; step_size='auto' sets it from the posterior's curvature and noise."
        return (
            f"the chains ran {'hotter' if mean > T_expected else 'colder'} than the target: "
            f"mean kinetic temperature {mean:.3g} against T = {T:g}"
            f"{'' if T_expected == T else f' ({T_expected:.3g} expected of this scheme at this step)'}, so the "
            f"posterior variances are off by about that factor. {cause}"
        )

    def _convergence_messages(self):
        """What the R-hat and ESS checks found (a list of sentences, empty when they pass)."""
        names = self._param_names()
        rhat, ess = self.diagnostics_["rhat"], self.diagnostics_["ess"]
        messages = []
        with np.errstate(invalid="ignore"):
            high = np.flatnonzero(rhat > RHAT_MAX)
            floor = ESS_MIN_PER_CHAIN * self.samples_.shape[0]
            low = np.flatnonzero(ess < floor)
        if high.size:
            worst = high[np.argsort(-rhat[high])][:3]
            listed = ", ".join(f"{names[j]} {rhat[j]:.3f}" for j in worst)
            messages.append(
                f"split R-hat exceeds {RHAT_MAX} for {high.size} of {rhat.size} parameters (worst: {listed}): the "
                "chains have not mixed. Run longer (n_iter, which lengthens burn-in too) or use a larger "
                "step size."
            )
        if low.size:
            worst = low[np.argsort(ess[low])][:3]
            listed = ", ".join(f"{names[j]} {ess[j]:.0f}" for j in worst)
            messages.append(
                f"bulk ESS is below {floor} ({ESS_MIN_PER_CHAIN} per chain) for {low.size} of {ess.size} "
                f"parameters (lowest: {listed}): increase n_iter, or the step size if the chains move slowly."
            )
        if not np.isfinite(ess).any():
            messages.append(
                f"{self.samples_.shape[1]} draw(s) per chain are too few to assess convergence (R-hat and ESS "
                "need at least 4): increase n_iter or max_draws, or lower thin."
            )
        if messages and self.n_iter == "auto" and "n_iter_blocks" in self.diagnostics_:
            messages.append(
                f"n_iter='auto' stopped at its ceiling of {self.diagnostics_['n_iter_blocks'][-1]} iterations per "
                "chain: the chains move too slowly for it. Use a larger step size, a sampler that mixes faster, "
                "or an explicit, larger n_iter."
            )
        return messages

    def _convergence_advice(self, sampler, X):
        """Fixes of a failed convergence check that fit its likeliest cause."""
        advice = []
        if not isinstance(getattr(sampler, "step_size", "auto"), str):
            advice.append(
                f"step_size={self.diagnostics_['step_size']:.3g} was set by hand: step_size='auto' sets it from the "
                "posterior's curvature and the gradient noise."
            )
        if self.diagnostics_.get("preconditioner") != "dense":
            # Without the MAP-Hessian whitening the chains run in the features' own units, and
            # features on scales orders of magnitude apart make the posterior too elongated
            # for any one step size.
            spread = _feature_scale_spread(X)
            if spread > FEATURE_SCALE_SPREAD:
                advice.append(
                    f"the features' scales differ by a factor of {spread:.3g}: standardise them (for example "
                    "make_pipeline(StandardScaler(), estimator))."
                )
        return advice

    # -- inspection --------------------------------------------------------------------------
    def _param_names(self, feature_names=None):
        check_is_fitted(self, "samples_")
        features = (
            getattr(self, "feature_names_in_", None) if feature_names is None else self._feature_names(feature_names)
        )
        return self._model.param_names(features, getattr(self, "classes_", None))

    def summary(self, ci=0.9, feature_names=None):
        """Posterior summary per named parameter.

        Parameters
        ----------
        ci : float, default=0.9
            Level of the equal-tailed credible intervals.
        feature_names : array-like of str of shape (n_features,), default=None
            Names of the features in the parameter names; defaults to
            ``feature_names_in_`` (or ``x0, x1, ...``). In a ``Pipeline``, pass
            ``pipe[:-1].get_feature_names_out()``.

        Returns
        -------
        summary : skbayes_sg.diagnostics.PosteriorSummary
            A dict of columns (``parameter``, ``mean``, ``sd``, ``ci_lower``, ``ci_upper``,
            ``ess_bulk``, ``ess_tail``, ``r_hat``, ``mcse_mean``) that prints as a table.
        """
        out = diagnostics.posterior_summary(self.samples_, self._param_names(feature_names), ci, self.sample_weight_)
        out.ksd = self.diagnostics_.get("ksd")
        return out

    def _feature_names(self, feature_names=None):
        """Names of the features: ``feature_names`` (validated), else ``feature_names_in_``,
        else ``x0, x1, ...``."""
        if feature_names is None:
            names = getattr(self, "feature_names_in_", None)
            return [f"x{d}" for d in range(self.n_features_in_)] if names is None else [str(f) for f in names]
        names = [str(f) for f in np.asarray(feature_names, dtype=object).ravel()]
        if len(names) != self.n_features_in_:
            raise ValueError(
                f"feature_names has {len(names)} names but the estimator was fit on "
                f"{self.n_features_in_} features; give one name per column of the X it was fit on."
            )
        return names

    def _posterior_variables(self, feature_names=None):
        """ArviZ posterior variables: ``{name: (array (chain, draw, ...), dims)}`` and coords."""
        return {"theta": (self.samples_, ["parameter"])}, {"parameter": self._param_names()}

    def to_inference_data(self, X=None, y=None, *, feature_names=None, random_state=0):
        """The draws as an ``arviz.InferenceData`` (arviz is an optional dependency).

        Groups: ``posterior`` (named variables with ``chain`` and ``draw`` dimensions and
        coordinates from the feature names and ``classes_``), ``sample_stats`` (the
        sampler's per-draw statistics, such as the thermostat ``xi`` or acceptance, and the
        step size) and ``observed_data``. Given data, also ``log_likelihood`` and
        ``posterior_predictive``, so that ``az.loo``, ``az.waic``, ``az.compare`` and
        ``az.plot_ppc`` work on the result.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), default=None
            Rows at which to evaluate the likelihood and draw the posterior predictive:
            usually the training data (for LOO), or held-out data. With ``X`` the
            ``posterior_predictive`` group holds, for every draw, one ``y`` per row drawn
            from the likelihood at that draw.
        y : array-like of shape (n_samples,), default=None
            Targets of ``X`` (class labels as in ``fit``). With ``y`` the
            ``log_likelihood`` group holds ``log p(y_i | x_i, theta)`` per draw and row
            (variable ``y``, dimensions ``chain, draw, obs``, as ``az.loo`` expects) and
            ``observed_data`` holds ``y``. Without ``X`` and ``y``, ``observed_data`` holds
            the training targets.
        feature_names : array-like of str of shape (n_features,), default=None
            Coordinates of the ``feature`` dimension; defaults to ``feature_names_in_``
            (or ``x0, x1, ...``). :func:`skbayes_sg.to_inference_data` takes them from
            the preceding steps of a ``Pipeline``.
        random_state : int, RandomState instance or None, default=0
            Seeds the posterior predictive draws; the default makes them reproducible, as
            ``GaussianProcessRegressor.sample_y``'s.

        Returns
        -------
        arviz.InferenceData

        Raises
        ------
        ImportError
            If arviz is not installed.
        ValueError
            For a multilevel fit (signed weights, which InferenceData cannot represent),
            ``y`` without ``X``, or data that do not match the fit.

        Notes
        -----
        ``log_likelihood`` and ``posterior_predictive`` hold one float per draw and row
        (``8 * n_draws_total * n_samples`` bytes each: 1 GB for 4,000 draws of 32,561
        rows); they are computed in blocks, so nothing else of that size is allocated.
        Pass a subset of rows, or refit with a smaller ``max_draws``, to bound them.
        Classifiers' predictive draws are class labels, as ``y``.
        """
        check_is_fitted(self, "samples_")
        try:
            import arviz as az
        except ImportError:
            raise ImportError(
                "to_inference_data() needs arviz, an optional dependency: pip install arviz "
                "(or pip install 'skbayes_sg[arviz]')."
            ) from None
        if self.sample_weight_ is not None:
            raise ValueError(
                "to_inference_data() needs equally weighted draws; a multilevel fit has signed "
                "weights (see sample_weight_)."
            )
        if y is not None and X is None:
            raise ValueError(
                "to_inference_data() got y without X: the log likelihood needs the rows X of the "
                "targets y; pass both (for LOO, the training data)."
            )
        variables, coords = self._posterior_variables(feature_names)
        posterior = {name: array for name, (array, _) in variables.items()}
        dims = {name: d for name, (_, d) in variables.items()}
        stats = {name: values for name, values in self.sample_stats_.items()}
        stats["step_size"] = np.full(self.samples_.shape[:2], self.diagnostics_.get("step_size", np.nan))
        groups = {}
        if X is None:
            groups["observed_data"] = None if self._observed_y is None else {"y": self._observed_targets()}
        else:
            X = validate_data(self, X, dtype=np.float64, accept_sparse="csr", reset=False)
            shape = self.samples_.shape[:2] + (X.shape[0],)
            groups["posterior_predictive"] = {
                "y": self._sample_targets(X, check_random_state(random_state)).reshape(shape)
            }
            if y is not None:
                codes, observed = self._check_targets(y, X.shape[0])
                groups["log_likelihood"] = {"y": self._log_likelihood(X, codes).reshape(shape)}
                groups["observed_data"] = {"y": observed}
        dims["y"] = ["obs"]
        return az.from_dict(posterior=posterior, sample_stats=stats, coords=coords, dims=dims, **groups)

    def _observed_targets(self):
        return self._observed_y

    def _check_targets(self, y, n_samples):
        """``(codes, observed)`` of targets given to :meth:`to_inference_data`: what the model's
        likelihood takes and what ``observed_data`` shows."""
        y = _check_target_length(y, n_samples).astype(np.float64)
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or infinity; give finite targets.")
        return y, y

    def _log_likelihood(self, X, codes):
        """``log p(y_i | x_i, theta_s)`` of every stored draw, shape (n_draws_total, n), in blocks."""
        thetas = self._flat_samples()
        out = np.empty((thetas.shape[0], X.shape[0]))
        for rows, draws in self._predict_blocks(X.shape[0], thetas.shape[0], self._n_outputs()):
            out[draws, rows] = self._model.log_likelihood_draws(thetas[draws], X[rows], codes[rows])
        return out

    def _draw_blocks(self, n_rows):
        """Slices over the stacked draws, each holding the predictive of all ``n_rows`` rows in
        at most ``_PREDICT_CHUNK`` floats: random draws consumed block by block are then those
        of one (n_draws, n_rows) array, whatever the blocks."""
        S = self._flat_samples().shape[0]
        size = max(1, _PREDICT_CHUNK // max(1, n_rows * self._n_outputs()))
        return [slice(i, min(i + size, S)) for i in range(0, S, size)]

    def _n_outputs(self):
        classes = getattr(self, "classes_", None)
        return 1 if classes is None else classes.size

    # -- draws ---------------------------------------------------------------------------
    def _flat_samples(self):
        check_is_fitted(self, "samples_")
        return self.samples_.reshape(-1, self.samples_.shape[-1])

    def _flat_weights(self):
        """Weights of the stacked draws summing to 1: equal, or the signed multilevel ones."""
        S = self._flat_samples().shape[0]
        if self.sample_weight_ is None:
            return np.full(S, 1.0 / S)
        return self.sample_weight_.reshape(-1)

    def _posterior_mean(self, values):
        """Weighted mean over the first axis (draws) of per-draw ``values``."""
        return np.tensordot(self._flat_weights(), values, axes=1)

    # -- prediction ----------------------------------------------------------------------
    @property
    def n_predict_draws_(self):
        """Number of draws the posterior predictive averages over (see ``n_predict_draws``)."""
        return self._predict_index().size

    def _predict_index(self):
        """Indices into the stacked draws that prediction uses (see ``n_predict_draws``)."""
        check_is_fitted(self, "samples_")
        C, S = self.samples_.shape[:2]
        n = getattr(self, "n_predict_draws", None)
        per_chain = S
        if self.sample_weight_ is None and n is not None:
            if isinstance(n, str):
                ess = np.asarray(self.diagnostics_.get("ess", np.nan), dtype=float)
                ess = float(np.min(ess)) if ess.size and np.all(np.isfinite(ess)) else np.nan
                target = PREDICT_MCSE**-2
                if ess > target:
                    # 1 / ESS_kept ~ 1 / ESS + 1 / M: the error the chains' autocorrelation
                    # leaves plus the error of M draws; an upper bound for evenly thinned
                    # chains, exact in the limits of independent and of dense draws.
                    per_chain = int(np.ceil(1.0 / (1.0 / target - 1.0 / ess) / C))
            else:
                per_chain = max(1, int(n) // C)
        if per_chain >= S:
            return np.arange(C * S)
        keep = np.linspace(0, S - 1, per_chain).round().astype(np.intp)
        return (np.arange(C)[:, None] * S + keep).ravel()

    def _predict_draws(self):
        """``(thetas, weights)``: the draws prediction averages over and their weights."""
        index = self._predict_index()
        thetas, weights = self._flat_samples(), self._flat_weights()
        if index.size == thetas.shape[0]:
            return thetas, weights
        return thetas[index], np.full(index.size, 1.0 / index.size)

    @staticmethod
    def _predict_blocks(n_rows, n_draws, n_outputs):
        """``(rows, draws)`` slice pairs covering the rows x draws of a predictive, each block
        holding at most ``_PREDICT_CHUNK`` floats of ``n_outputs`` per row and draw.

        A row block takes every draw in one matrix product while that leaves it
        ``_PREDICT_MIN_ROWS`` rows, so X is read once; beyond that the draws are split too.
        """
        per = max(1, n_outputs)
        draws = min(n_draws, max(1, _PREDICT_CHUNK // (per * min(max(n_rows, 1), _PREDICT_MIN_ROWS))))
        rows = max(1, _PREDICT_CHUNK // (per * draws))
        return [
            (slice(r, min(r + rows, n_rows)), slice(d, min(d + draws, n_draws)))
            for r in range(0, max(n_rows, 1), rows)
            for d in range(0, n_draws, draws)
        ]


def _check_target_length(y, n_samples):
    """``y`` as a 1-D array of ``n_samples`` targets, else a ValueError saying so."""
    y = column_or_1d(y, warn=True)
    if y.shape[0] != n_samples:
        raise ValueError(f"y has {y.shape[0]} targets but X has {n_samples} rows; give one target per row.")
    return y


@dataclass
class _Runs:
    """What :meth:`BaseSGBayes._run` returns: the chains' results and how far they ran.

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

    @property
    def n_run(self):
        """Iterations per chain run by this call."""
        return self.t - self.t0


def _join_records(old, new, progress, t0, t, eff_thin, max_draws):
    """The record of a chain continued exactly: old and new draws on one grid.

    ``old`` holds the draws of iterations ``n_burn + (j + 1) * eff_old - 1`` (the grid of the
    chains' ``progress`` before the continuation), ``new`` those of the grid ``eff_thin``
    (a multiple of ``eff_old``) in ``[t0, t)``. The old draws off the new grid are dropped,
    and the grid is coarsened by a whole factor while more than ``max_draws`` draws would
    remain, so the result is every draw on one grid from the burn-in to ``t``: what a
    single run of ``t`` iterations would have stored.

    Returns
    -------
    draws : ndarray of shape (n_chains, n_draws, P)
    stats : dict of ndarray of shape (n_chains, n_draws)
    eff_thin : int
    """
    (old_draws, old_stats), (new_draws, new_stats) = old, new
    n_burn, eff_old = progress["n_burn"], progress["eff_thin"]
    it_old = n_burn + (np.arange(old_draws.shape[1]) + 1) * eff_old - 1
    first_new = n_burn + eff_thin - 1
    if t0 > first_new:
        first_new += -(-(t0 - first_new) // eff_thin) * eff_thin
    it_new = first_new + np.arange(new_draws.shape[1]) * eff_thin
    if max_draws is not None and t - n_burn > max_draws * eff_thin:
        need = -(-(t - n_burn) // max_draws)
        eff_thin = coarsened_thin(eff_thin, need, t - n_burn)
    iteration = np.concatenate([it_old, it_new])
    keep = (iteration + 1 - n_burn) % eff_thin == 0
    keep_old, keep_new = keep[: it_old.size], keep[it_old.size :]
    draws = np.concatenate([old_draws[:, keep_old], new_draws[:, keep_new]], axis=1)
    stats = {k: np.concatenate([old_stats[k][:, keep_old], v[:, keep_new]], axis=1) for k, v in new_stats.items()}
    return draws, stats, eff_thin


def _noise_aware_batch(sampler, batch_size, sigma_max, lambda_max, n_samples, scale=1.0):
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


@threadpool_limits.wrap(limits=1, user_api="blas")  # see BaseSGBayes._fit
def epoch_permutation(random_state, n):
    """The once-per-fit row order of ``batch_scheme="epochs"``, reproducible from ``random_state``."""
    if isinstance(random_state, Integral):
        # A stream of its own, apart from the chains' SeedSequence children.
        return np.random.default_rng([int(random_state), 2**31]).permutation(n)
    return check_random_state(random_state).permutation(n)


#: A divergence under a prior precision below this also names the prior (see
#: :func:`_explain_divergence`).
FLAT_PRIOR_ALPHA = 1e-3


def _explain_divergence(exc, estimator):
    """``exc``, with the prior named as a cause when it is nearly flat.

    On data that (nearly) separate the classes a nearly flat prior leaves a posterior whose
    tails are far longer than the curvature at the mode says, so no step size set there is
    stable across it: a smaller step would not help, a proper prior does.
    """
    alpha = getattr(estimator, "alpha", None)
    hints = []
    if alpha is not None and np.min(alpha) < FLAT_PRIOR_ALPHA:
        hints.append(
            f"The prior is nearly flat (smallest alpha = {np.min(alpha):.3g}): where the data (nearly) "
            "separate the classes, the posterior then reaches far beyond its curvature at the mode. Use a "
            "larger alpha (default 1.0)."
        )
    init_scale = getattr(estimator, "init_scale", None)
    if isinstance(estimator.init, str) and estimator.init == "random" and init_scale is not None and init_scale > 1:
        # The automatic step is set where the chains spend their time; chains started at
        # weights of this size meet forces (and, for the Euler thermostats, frictions) far
        # beyond it in their first steps.
        hints.append(
            f"The chains started at random weights of scale init_scale={init_scale:g}, far from the "
            "posterior, where the step is too large for the forces: use a smaller init_scale (default 0.1)."
        )
    if not hints:
        return exc
    return DivergenceError(
        " ".join([exc.args[0], *hints]), sampler=exc.sampler, step_size=exc.step_size, iteration=exc.iteration
    )


def _feature_scale_spread(X):
    """Ratio of the largest to the smallest non-zero column standard deviation of ``X``."""
    if sp.issparse(X):
        from sklearn.utils.sparsefuncs import mean_variance_axis

        sd = np.sqrt(mean_variance_axis(sp.csr_matrix(X), axis=0)[1])
    else:
        # By row blocks, shifted by the first row for accuracy: a memory-mapped or integer X
        # is never copied whole (a fit on a memmap allocates O(D) per pass, not O(N D)).
        # Each column is first divided by its largest |value|, so that features near 1e300
        # cannot overflow the squares.
        blocks = range(0, X.shape[0], 4096)
        size = np.zeros(X.shape[1])
        for start in blocks:
            np.maximum(size, np.abs(np.asarray(X[start : start + 4096], dtype=float)).max(axis=0), out=size)
        size[~(size > 0) | ~np.isfinite(size)] = 1.0
        shift = np.asarray(X[:1], dtype=float) / size
        total, total_sq = np.zeros(X.shape[1]), np.zeros(X.shape[1])
        for start in blocks:
            block = np.asarray(X[start : start + 4096], dtype=float) / size - shift
            total += block.sum(axis=0)
            total_sq += np.einsum("ij,ij->j", block, block)
        mean = total / X.shape[0]
        sd = size * np.sqrt(np.maximum(total_sq / X.shape[0] - mean * mean, 0.0))
    sd = sd[np.isfinite(sd) & (sd > 0)]
    with np.errstate(over="ignore"):  # sds of 1e300 and 1e-300: an infinite spread
        return float(sd.max() / sd.min()) if sd.size else 1.0


def _caller_stacklevel():
    """``stacklevel`` for ``warnings.warn`` that points at the user's call of ``fit``.

    The frames between (this package, scikit-learn's wrappers, threadpoolctl's and
    contextlib's decorators, joblib) vary with the entry point (``fit``, ``partial_fit``,
    a Pipeline, ``GridSearchCV``), so a constant level would attribute the warning to one
    of them.
    """
    import sys

    frame, level = sys._getframe(2), 2  # level 1 is warn's caller
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def _is_internal(filename):
    import contextlib
    import functools
    import os

    import joblib
    import sklearn
    import threadpoolctl

    import skbayes_sg

    packages = tuple(os.path.dirname(m.__file__) + os.sep for m in (skbayes_sg, sklearn, joblib))
    return filename.startswith(packages) or filename in (
        contextlib.__file__,
        functools.__file__,
        threadpoolctl.__file__,
    )
