"""The scikit-learn face shared by every skbayes_sg estimator.

Validates input and parameters, builds the model, resolves the run policy and hands the fit to
the fit layer (:mod:`skbayes_sg._fit`), which plans and runs the chains (or multilevel paths)
and sets the fitted attributes; predictions and summaries read them. Subclasses say which
model to build and how to turn draws into fitted attributes and predictions.
"""

import contextlib
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, column_or_1d

from . import _dask, _run_length, diagnostics
from ._blas import one_blas_thread, with_one_blas_thread
from ._fit import fit_model
from ._fit._messages import caller_stacklevel, convergence_messages
from ._geometry import resolved_preconditioner
from ._inference_data import inference_data
from .minibatch import BATCH_SCHEMES, GRADIENTS
from .models._map import _map_estimate
from .models.glm import resolve_alpha
from .rows import block_threads, pass_threads
from .samplers import MCCAdL, get_sampler

#: Rows per minibatch with ``batch_size="auto"`` (as MLPClassifier's ``min(200, N)``).
AUTO_BATCH_SIZE = 200
#: ...unless a full-data gradient is this cheap (rows x parameters): then ``"auto"`` uses all
#: the data. Below it a full gradient costs about as much as the iteration's fixed Python
#: overhead (tens of microseconds), so exact gradients are free, and a minibatch would add
#: noise that, at small N, is largest relative to the posterior (the control variate's
#: expansion is least accurate where the posterior is least Gaussian).
FULL_DATA_WORK = 200_000
#: ``sampler="auto"`` runs exact HMC on the full data while ``N (P + EXACT_ROW_TERMS)`` is at
#: most ``EXACT_WORK``, mCCAdL on minibatches above. HMC's cost is its ~2,000 full-data
#: forces of all chains, each two products over the rows (``N P``) and the residuals' elementwise
#: work (``N``, about 30 parameters' worth of products); mCCAdL's is its ~5,000 iterations,
#: independent of ``N``. Measured (``benchmarks/auto_sampler_crossover.py``, default fits,
#: HMC's time over mCCAdL's): 28 features, N = 10,000 / 20,000 / 35,000 / 50,000: 0.20 / 0.38 /
#: 0.66 / 1.27; 100 features at N = 10,000: 0.58; 10 features at N = 100,000: 1.58; 300 features
#: at N = 3,000: 0.12 (mCCAdL's iterations grow with P); a9a (123 features, 32,561 rows, far
#: above the bound) HMC 4x slower.
EXACT_WORK, EXACT_ROW_TERMS = 2_000_000, 30
#: Past that bound, in coordinates whitened at the MAP by a dense factor, mCCAdL's
#: ``step_size="auto"`` takes this many times its curvature constant (``h = 0.4`` instead of
#: 0.2; the noise cap and the minibatch size stay as they are). There the posterior is close to
#: its Laplace approximation ``N(0, I)`` (Bernstein-von Mises), on which the symmetric splitting's
#: error is small: on synthetic logistic data (28 features, N = 1e5 / 1e6 / 4e6) the draws stay
#: exact against the Laplace approximation (rms mean error 0.037 / 0.030 / 0.028 sd, sd ratios
#: 0.964-1.063, R-hat <= 1.008, against 0.038 / 0.025 / 0.026 sd and 0.951-1.061 at h = 0.2) with
#: 2,330 iterations instead of 5,000 (``benchmarks/synthetic_scaling.py``). The centred whitening
#: (``models._centred.centred_factor``) takes it too: its step is set by its measured largest
#: curvature, so its stiffest direction sees the dense one's ``h sqrt(lambda) = 0.4`` and the
#: others less. On the wide sparse benchmark (P = 2,001) against full-data HMC the draws stay
#: exact (rms mean error 0.030 sd, mean sd ratio 1.0005, 0.029 and 1.0011 at the unscaled step)
#: with 3,272 iterations on the full data instead of 8,000 on minibatches of 15,045 rows
#: (``benchmarks/wide_sparse_diag.py``).
LARGE_DATA_STEP_SCALE = 2.0


def _past_exact_bound(model):
    """Whether ``model``'s data are past the exact sampler's bound, ``N (P + EXACT_ROW_TERMS) > EXACT_WORK``."""
    return model.n_samples * (model.n_params + EXACT_ROW_TERMS) > EXACT_WORK


#: ``burn_in="auto"``: the fraction of each chain discarded, as in the papers, unless the
#: sampler sets its own for chains started at draws of the Laplace approximation
#: (``_laplace_burn_in``, the adaptive samplers'; ``_map_burn_in``, HMC's; see
#: :meth:`BaseSGBayes._run_policy`).
AUTO_BURN_IN = 0.2

#: ``max_draws="auto"``: draws stored per chain. Every sampler stores every kept draw as long
#: as all chains' draws together stay within ``AUTO_DRAW_FLOATS`` floats, at least
#: ``AUTO_MAX_DRAWS`` per chain (the estimator's ``_auto_max_draws`` for the stochastic-
#: gradient samplers: 250 for the DRBM): thinning discards effective samples (x4 loses 20%
#: of the ESS at an autocorrelation time of 5), and the ArviZ export, whose PSIS-LOO needs
#: many draws, holds what is stored (issue 30: a default fit of standardised breast cancer
#: stored 512 of its 4,102 kept draws a chain). 2^19 floats (4 MiB) is what the samplers
#: store on a9a (4 chains of 1,000 draws of 124 parameters); prediction averages over
#: ``n_predict_draws`` of the stored draws, so its cost does not grow with them.
AUTO_MAX_DRAWS = 1000
AUTO_DRAW_FLOATS = 2**19

#: Upper bound on the floats one predictive chunk allocates (draws x rows x outputs): 2 MiB,
#: so that the (rows, draws) block of linear predictors stays in cache through the in-place
#: passes of the link (exp, add, reciprocal) and the product with the weights. At 32 MiB
#: each pass went to memory: predict_proba on 200,000 rows x 608 draws took 20-30% longer.
_PREDICT_CHUNK = 2**18
#: A row block of the predictive takes all draws in one product when it can keep at least
#: this many rows within ``_PREDICT_CHUNK``; X is then read once, where blocks of a few
#: draws over all rows re-read it per block (40 s for 4,000 draws on 200k rows).
_PREDICT_MIN_ROWS = 64
#: From this many blocks on, the predictive's products run on one BLAS thread: a threaded
#: call on blocks this small costs more in synchronisation than it gains (on a busy 2-core
#: machine 200,000 rows x 608 draws took 5-14 s in 930 threaded calls, 0.6-0.9 s in
#: single-threaded ones, 2.3 s in 32 MiB threaded blocks).
_PREDICT_SERIAL_BLOCKS = 8


def predict_threads(n_blocks):
    """The BLAS threads of a predictive of ``n_blocks`` blocks: a context manager limiting them
    to one from ``_PREDICT_SERIAL_BLOCKS`` blocks on (else unchanged)."""
    if n_blocks < _PREDICT_SERIAL_BLOCKS:
        return contextlib.nullcontext()
    return one_blas_thread()


#: ``n_predict_draws="auto"``: the predictive's total Monte Carlo standard error, in
#: posterior standard deviations, that the draws kept for prediction may reach.
PREDICT_MCSE = 0.05


class BaseSGBayes(BaseEstimator):
    """Common parameters, validation, fitted attributes and predictions of the skbayes_sg estimators."""

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
    #: ``coordinates(model)``: the model's own coordinates for the chains when no preconditioner
    #: applies (:attr:`~._geometry.Geometry.coordinates`; the DRBM's shear), or None.
    _chain_coordinates = None

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
    #: Whether ``alpha="auto"`` is resolved to ``alpha_`` at fit (the GLMs; see
    #: :func:`~skbayes_sg.models.glm.auto_alpha`), which ``_build_model`` then uses.
    _auto_alpha = False
    #: What ``batch_size="auto"`` and ``max_draws="auto"`` resolve to (see the constants).
    _auto_batch_size = AUTO_BATCH_SIZE
    _auto_max_draws = AUTO_MAX_DRAWS

    def _auto_step_scale(self, sampler):
        """Multiplier of ``sampler``'s ``_auto_step_constant`` in the curvature part of
        ``step_size="auto"`` (never of the noise cap): 1, but the DRBM's mCCAdL takes more."""
        return 1.0

    def _fresh_step_scale(self, sampler, model, preconditioner):
        """:meth:`_auto_step_scale` for new chains on ``model``: times
        :data:`LARGE_DATA_STEP_SCALE` for mCCAdL whitened at the MAP by a dense or a centred
        factor (``preconditioner`` ``"dense"`` or ``"centred"``) on data past the exact
        sampler's bound (``N (P + EXACT_ROW_TERMS) > EXACT_WORK``)."""
        scale = self._auto_step_scale(sampler)
        if isinstance(sampler, MCCAdL) and preconditioner in ("dense", "centred") and _past_exact_bound(model):
            scale *= LARGE_DATA_STEP_SCALE
        return scale

    def _curvature_point(self, chain_model, start):
        """Where the ``"auto"`` step size measures the curvature when there is no MAP: the
        first chain's start. The DRBM's random starts are far from where its chains
        spend their time and override this."""
        return start

    def _convergence_messages(self):
        """What the convergence checks found, a list of sentences (empty when they pass) that the
        fit's one warning gathers: R-hat and ESS of the parameters
        (:func:`skbayes_sg._fit._messages.convergence_messages`). Subclasses whose parameters
        are not identified check a predictive quantity instead."""
        return convergence_messages(self)

    def _run_length_summary(self, draws):
        """The :func:`~skbayes_sg.diagnostics.summarize` that ``n_iter="auto"`` stops on, of
        the draws ``(n_chains, n_draws, P)`` stored so far: the parameters' by default.
        Subclasses whose parameters are not identified (the DRBM's hidden units can swap)
        summarise a predictive quantity instead and set ``_run_length_on_parameters``
        to False. The parameters share the fit's cores (``n_jobs``): the chains' workers wait."""
        return diagnostics.summarize(draws, n_threads=pass_threads(self.n_jobs))

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

    def _dense_map_start(self, sampler, n_params):
        """Whether the chains start at the MAP (``init="map"``) in coordinates whitened there by a
        dense factor: the posterior they see is then near ``N(0, I)``."""
        return (
            isinstance(self.init, str)
            and self.init == "map"
            and not self._laplace_start(sampler)
            and resolved_preconditioner(sampler, n_params, self._auto_preconditioner) == "dense"
        )

    def _run_policy(self, sampler, n_params):
        """``(burn_in, min_adaptation, max_draws)`` of this fit, the ``"auto"`` values resolved.

        ``burn_in="auto"`` is :data:`AUTO_BURN_IN` but for the adaptive samplers started at
        draws of the Laplace approximation (:meth:`_laplace_start`), whose proposal then
        accepts the target rate on that approximation from the first iteration: their burn-in
        only adapts it, and the chains need none to forget a start already near
        stationarity, so they discard the sampler's ``_laplace_burn_in`` (5%). Their first
        block of ``n_iter="auto"`` then covers ``_laplace_min_adaptation`` adapting
        iterations (250), ``_min_adaptation`` (1,000) otherwise. HMC's chains start at such
        draws too under ``init="map"`` and adapt only their step: they discard the sampler's
        ``_map_burn_in`` (10%). mCCAdL's chains whitened densely at the MAP start at such draws
        as well, where the posterior is near ``N(0, I)``, with the thermostat and the momenta
        at their stationary means: they discard the sampler's ``_dense_map_burn_in`` (5%).
        ``max_draws="auto"``: see :data:`AUTO_MAX_DRAWS`.
        """
        laplace = self._laplace_start(sampler)
        min_adaptation = getattr(sampler, "_min_adaptation", 0)
        burn_in = self.burn_in
        if laplace:
            min_adaptation = getattr(sampler, "_laplace_min_adaptation", min_adaptation)
        if isinstance(burn_in, str):
            if laplace:
                burn_in = getattr(sampler, "_laplace_burn_in", AUTO_BURN_IN)
            elif isinstance(self.init, str) and self.init == "map":
                burn_in = getattr(sampler, "_map_burn_in", AUTO_BURN_IN)
                if self._dense_map_start(sampler, n_params):
                    burn_in = getattr(sampler, "_dense_map_burn_in", burn_in)
            else:
                burn_in = AUTO_BURN_IN
        max_draws = self.max_draws
        if isinstance(max_draws, str):
            budget = AUTO_DRAW_FLOATS // (self.n_chains * max(n_params, 1))
            floor = AUTO_MAX_DRAWS if getattr(sampler, "_store_every_draw", False) else self._auto_max_draws
            max_draws = max(floor, budget)
        return burn_in, min_adaptation, max_draws

    def _batch_size(self, sampler, n_samples, n_params=1, remote=False):
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
            # Rows on a cluster (``remote``): a full-data gradient is a pass over the workers,
            # never as cheap as a minibatch's, however small the data.
            if n_samples * n_params <= FULL_DATA_WORK and not remote:
                return None
            return min(self._auto_batch_size, n_samples)
        if self.batch_size > n_samples:
            warnings.warn(
                f"batch_size={self.batch_size} is larger than the number of samples ({n_samples}); "
                f"it is clipped to {n_samples} (full-data gradients, no minibatch noise).",
                UserWarning,
                stacklevel=caller_stacklevel(),
            )
            return n_samples
        return int(self.batch_size)

    def _map(self, model):
        """The MAP of ``model``, computed once per fit (the start, the preconditioner and the
        control variate all use it)."""
        cached = getattr(self, "_fit_map", None)
        if cached is None or cached[0] is not model:
            # Rows on a cluster: Newton's method with one pass a step (see _dask.map_on_workers).
            remote = getattr(getattr(model, "rows", None), "remote", False)
            self._fit_map = (model, (_dask.map_on_workers if remote else _map_estimate)(model))
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
    @with_one_blas_thread
    def _fit(self, X, y, streaming=False, sample_weight=None):
        """Run the chains on validated ``X``, encoded ``y``; set the fitted attributes.

        ``streaming`` (``partial_fit``): continue the chains, when there are any, on the
        data seen so far, re-resolving an ``"auto"`` step size for the grown N, and keep
        only this call's draws (they alone target the current posterior).
        ``sample_weight``: validated per-row likelihood weights (None: all ones).
        """
        # The full-data passes (prior scales, MAP, Hessian, leverages, the KSD's scores) share
        # the cores n_jobs allows by blocks of rows, with the draws bit-identical for any n_jobs.
        with block_threads(pass_threads(self.n_jobs)):
            if self._auto_alpha:
                # alpha="auto" scales the prior to the features; a continued fit keeps its prior.
                continuing = streaming or (self.warm_start and hasattr(self, "samples_"))
                previous = getattr(self, "alpha_", None) if continuing else None
                self.alpha_ = resolve_alpha(self.alpha, previous, X, sample_weight, self.fit_intercept)
            model = self._build_model(X, y)
            if sample_weight is not None:
                model.set_sample_weight(sample_weight)
            remote = getattr(getattr(model, "rows", None), "remote", False)
            sampler = self._resolve_sampler(model, remote, streaming)
            batch_size = self._batch_size(sampler, model.n_samples, model.n_params, remote)
            return fit_model(self, sampler, X, y, model, batch_size, streaming)

    #: What ``sampler="auto"`` takes when the gradients are the full data (None: mCCAdL always).
    _auto_exact_sampler = "hmc"

    def _resolve_sampler(self, model, remote=False, streaming=False):
        """The fit's sampler (:func:`~skbayes_sg.samplers.get_sampler`), ``"auto"`` resolved.

        ``"auto"``: exact HMC (:class:`~skbayes_sg.samplers.HMC`, whitened at the MAP) on the
        full data with ``batch_size=None``, and with ``batch_size="auto"`` while
        ``N (P + EXACT_ROW_TERMS) <= EXACT_WORK`` (about 34,000 rows of 28 features), where
        HMC's nearly independent draws cost fewer full-data gradients than mCCAdL's
        iterations cost minibatch ones (memory-mapped rows and several outputs: while
        ``batch_size="auto"`` resolves to the full data); mCCAdL for larger data, for
        ``partial_fit`` (whose data grow
        past the full-data size between calls, and whose chains would then change sampler) and
        for an estimator without an exact sampler (:attr:`_auto_exact_sampler` None: the DRBM).
        """
        if not (isinstance(self.sampler, str) and self.sampler.lower() == "auto"):
            return get_sampler(self.sampler)
        previous = getattr(self, "_sampler", None)
        if (self.warm_start or streaming) and previous is not None and getattr(self, "_chain_states", None):
            # Chains to continue keep the sampler they ran with (a partial_fit's mCCAdL, say).
            return get_sampler(type(previous).__name__.lower())
        minibatch = get_sampler("mccadl")
        exact = self._auto_exact_sampler
        if exact is None or streaming or self.batch_size not in (None, "auto"):
            return minibatch
        if self.batch_size is None:
            return get_sampler(exact)
        if getattr(model, "_cache_row_norms", True) and getattr(model, "n_outputs", 1) == 1:
            small = not (remote or _past_exact_bound(model))
        else:
            # Rows read from disk (HMC's full-data passes, its fused force's N x P matrix) and
            # several outputs (a softmax's posterior, far from its Laplace approximation, takes
            # HMC 41 steps a trajectory on digits: 4x mCCAdL's time): HMC only where a full
            # gradient is as cheap as an iteration's overhead.
            small = self._batch_size(minibatch, model.n_samples, model.n_params, remote) is None
        return get_sampler(exact) if small else minibatch

    def _start_rng(self):
        """Generator of the chains' starting jitter, apart from the chains' own streams."""
        rs = self.random_state
        entropy = rs if isinstance(rs, Integral) else check_random_state(rs).randint(2**31 - 1)
        return np.random.default_rng([int(entropy), 2**31 + 1])

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
            ``ess_bulk``, ``ess_tail``, ``r_hat``, ``mcse_mean``) that prints as a table; for
            the GLMs also ``prior_sd``, each coefficient's prior sd in the user's units (``alpha``, or
            ``alpha="auto"`` resolved, see :ref:`priors`).
        """
        out = diagnostics.posterior_summary(self.samples_, self._param_names(feature_names), ci, self.sample_weight_)
        prior_sd = self._prior_sd()
        if prior_sd is not None:
            out["prior_sd"] = prior_sd
        out.ksd = self.diagnostics_.get("ksd")
        return out

    def __getstate__(self):
        # The KSD's draws and scores (_stein) are a cache of fit-time work for kernels other
        # than the default: a pickle (a saved model, a worker's result) keeps the KSD in
        # diagnostics_ only and so no second copy of the draws.
        state = super().__getstate__()
        if state.get("_stein") is not None:
            state = {**state, "_stein": None}
        return state

    def _prior_sd(self):
        """Each parameter's Gaussian prior sd in the user's units (NaN where it has none, as a
        regression's noise precision), or None for a model without one (the DRBM)."""
        prec = getattr(self._model, "prior_precision", None)
        if prec is None:
            return None
        P = self.samples_.shape[-1]
        n_w = np.size(prec) if np.ndim(prec) else P - getattr(self._model, "_n_extra", 0)
        sd = np.full(P, np.nan)
        sd[:n_w] = 1.0 / np.sqrt(prec)
        affine = self._user_affine()
        return sd if affine is None else sd * np.abs(affine[0])

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
        return inference_data(self, X, y, feature_names=feature_names, random_state=random_state)

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


@with_one_blas_thread  # see BaseSGBayes._fit
def epoch_permutation(random_state, n):
    """The once-per-fit row order of ``batch_scheme="epochs"``, reproducible from ``random_state``."""
    if isinstance(random_state, Integral):
        # A stream of its own, apart from the chains' SeedSequence children.
        return np.random.default_rng([int(random_state), 2**31]).permutation(n)
    return check_random_state(random_state).permutation(n)
