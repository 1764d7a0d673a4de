"""Bayesian linear models sampled by stochastic-gradient MCMC."""

import tempfile
from numbers import Real

import numpy as np
from sklearn.base import RegressorMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from . import _dask
from ._classifier import BaseSGBayesClassifier
from ._docstrings import fill_docstring
from ._estimator import BaseSGBayes, epoch_permutation
from ._validation import validate_data
from .exceptions import DivergenceError
from .models import LinearRegressionModel, LogisticModel, SoftmaxModel
from .models.glm import _memory_mapped
from .samplers import get_sampler

#: Constraints of the GLMs' prior parameters; shapes and values of an array ``alpha`` are
#: checked by the model, which knows the number of features and classes.
_GLM_PRIOR_CONSTRAINTS = {
    "alpha": [Interval(Real, 0, None, closed="neither"), "array-like", StrOptions({"auto"})],
    "alpha_intercept": [Interval(Real, 0, None, closed="neither")],
}


def _standardised(y, m, s):
    """``(y - m) / s``; for a memory-mapped ``y`` in a temporary file, block by block, so
    that a fit on memory-mapped data keeps no per-row array in memory."""
    if not _memory_mapped(y):
        return (y - m) / s
    out = np.memmap(tempfile.TemporaryFile(), dtype=np.float64, mode="w+", shape=np.shape(y))
    for start in range(0, out.shape[0], 65536):
        out[start : start + 65536] = (y[start : start + 65536] - m) / s
    return out


class _SparseInput:
    """Mixin: the GLM operators work on CSR minibatches, so sparse X is accepted."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


@fill_docstring
class SGBayesLogisticRegression(_SparseInput, BaseSGBayesClassifier):
    """Bayesian logistic regression sampled by stochastic-gradient MCMC.

    Binary labels (any two values) use the logistic likelihood; more than two classes the
    multinomial softmax likelihood. Each weight has a Gaussian prior of precision ``alpha``
    (one for all, or per feature and class) and each intercept a weak one of precision
    ``alpha_intercept``. ``predict_proba`` is the posterior predictive: the average over
    draws of each draw's class probabilities. With two classes and
    ``n_predict_draws="auto"`` it is estimated with a control variate: the mean over 64
    evenly spaced draws of ``s(z) - s'(m) (z - m)``, where ``z`` is a draw's linear
    predictor, ``s`` the sigmoid and ``m`` the linear predictor of the mean of all draws
    (the tangent's exact mean over all draws). Its Monte Carlo error, next to the average
    over every draw, is about ``|1 - 2p| sqrt(v / 2) / 8`` posterior sds of the probability
    for a row whose linear predictor spreads by ``v`` (mean square about ``m`` over those
    draws): at most 0.044 sd, as it is used only for ``v <= 0.25``; rows that spread more
    get the plain average over the ``n_predict_draws_`` draws. On large data (a9a's rows:
    0.005 sd, median) it is ten times as accurate as that average and ten times cheaper.

    Parameters
    ----------
    {sampler}
    {n_iter}
    {burn_in}
    {thin}
    {batch_size}
    {batch_scheme}
    {gradient}
    {n_chains}
    {n_jobs}
    {random_state}
    {init}
    alpha : "auto", float or array-like of shape (n_features,) or (n_classes, n_features), \
default="auto"
        Prior precision of the weights: ``coef_[..., j] ~ N(0, 1 / alpha_j)``. ``"auto"``
        scales it to the features (rstanarm's autoscale rule): a prior sd of 1 on the logit
        per standard deviation of ``x_j``, per unit of its range ``max - min`` for a binary
        feature (1 for a 0/1 column), so that predictions do not depend on the features'
        units (the resolved precisions are ``alpha_``; see :ref:`priors`). A float is the
        papers' isotropic prior per unit of ``x_j`` (``1 / C`` of ``LogisticRegression``);
        an array gives each feature its own prior scale ``s_j`` as ``alpha_j = 1 / s_j^2``,
        per class too with a 2-d array of ``coef_``'s shape (see :ref:`priors`). Arrays can
        be searched over in ``GridSearchCV`` like any other value.
    alpha_intercept : float, default=0.01
        Prior precision of the intercepts, ``N(0, 1 / alpha_intercept)``: weak by default
        (sd 10), so that the intercept is not shrunk, as in ``BayesianRidge`` and
        ``LogisticRegression``, yet proper (with separable data a flat intercept gives
        an improper posterior). ``alpha_intercept=alpha`` gives the papers' prior, the same
        on every weight. Ignored without ``fit_intercept``.
    fit_intercept : bool, default=True
        Whether to fit the intercepts.
    {warm_start}
    {max_draws}
    {n_predict_draws}
    {verbose}
    {class_weight}

    Attributes
    ----------
    {alpha_}
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Posterior mean of the weights.
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Posterior mean of the intercepts (zeros without ``fit_intercept``).
    coef_samples_ : ndarray of shape (n_draws_total, n_outputs, n_features)
        Draws of all chains stacked.
    intercept_samples_ : ndarray of shape (n_draws_total, n_outputs)
    {samples_}
    {sample_weight_}
    {sample_stats_}
    {n_iter_}
    {n_predict_draws_}
    {n_features_in_}
    {feature_names_in_}
    {diagnostics_}

    See Also
    --------
    sklearn.linear_model.LogisticRegression : the maximum a posteriori (L2) point estimate.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skbayes_sg import SGBayesLogisticRegression
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = make_pipeline(StandardScaler(), SGBayesLogisticRegression(random_state=0)).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 2)
    """

    _parameter_constraints = {**BaseSGBayesClassifier._parameter_constraints, **_GLM_PRIOR_CONSTRAINTS}
    _auto_alpha = True

    def __init__(
        self,
        *,
        sampler="auto",
        n_iter="auto",
        burn_in="auto",
        thin=1,
        batch_size="auto",
        batch_scheme="replacement",
        gradient="auto",
        n_chains=4,
        n_jobs=None,
        random_state=None,
        init="map",
        alpha="auto",
        alpha_intercept=0.01,
        fit_intercept=True,
        warm_start=False,
        max_draws="auto",
        verbose=0,
        class_weight=None,
        n_predict_draws="auto",
    ):
        self.sampler = sampler
        self.n_iter = n_iter
        self.burn_in = burn_in
        self.thin = thin
        self.batch_size = batch_size
        self.batch_scheme = batch_scheme
        self.gradient = gradient
        self.n_chains = n_chains
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.init = init
        self.alpha = alpha
        self.alpha_intercept = alpha_intercept
        self.fit_intercept = fit_intercept
        self.warm_start = warm_start
        self.max_draws = max_draws
        self.verbose = verbose
        self.class_weight = class_weight
        self.n_predict_draws = n_predict_draws

    def _build_model(self, X, y):
        if self.classes_.size == 2:
            return LogisticModel(
                X, y, alpha=self.alpha_, alpha_intercept=self.alpha_intercept, fit_intercept=self.fit_intercept
            )
        return SoftmaxModel(
            X,
            y,
            n_classes=self.classes_.size,
            alpha=self.alpha_,
            alpha_intercept=self.alpha_intercept,
            fit_intercept=self.fit_intercept,
        )

    def _set_posterior_attributes(self, model):
        self.coef_ = self._posterior_mean(self.coef_samples_)
        self.intercept_ = self._posterior_mean(self.intercept_samples_)

    def _posterior_variables(self, feature_names=None):
        C, D = self.samples_.shape[:2]
        features = self._feature_names(feature_names)
        coef = self.coef_samples_.reshape(C, D, *self.coef_.shape)
        intercept = self.intercept_samples_.reshape(C, D, *self.intercept_.shape)
        if self.coef_.shape[0] == 1:
            return (
                {"coef": (coef[:, :, 0], ["feature"]), "intercept": (intercept[:, :, 0], [])},
                {"feature": features},
            )
        return (
            {"coef": (coef, ["class", "feature"]), "intercept": (intercept, ["class"])},
            {"feature": features, "class": [str(c) for c in self.classes_]},
        )

    # Views of samples_, not copies: memory and pickles stay at one copy of the draws.
    @property
    def coef_samples_(self):
        """Weight draws of all chains stacked, shape (n_draws_total, n_outputs, n_features).

        ``n_outputs`` is 1 for two classes (as in ``coef_``), the number of classes otherwise.
        """
        W, _, _ = self._model.unpack(self._flat_samples())
        return np.swapaxes(W, 1, 2)

    @property
    def intercept_samples_(self):
        """Intercept draws of all chains stacked, shape (n_draws_total, n_outputs)."""
        _, b, _ = self._model.unpack(self._flat_samples())
        return b


@fill_docstring
class SGBayesLinearRegression(_SparseInput, RegressorMixin, BaseSGBayes):
    """Bayesian linear regression sampled by stochastic-gradient MCMC.

    ``y = X w + b + e`` with Gaussian noise ``e ~ N(0, 1 / tau)``, Gaussian priors on ``w``
    (precision ``alpha``, one for all or per feature) and a weak one on ``b`` (precision
    ``alpha_intercept``). The noise precision ``tau`` is sampled too (under a Gamma prior,
    as ``BayesianRidge``) unless held fixed.

    With ``normalize_y`` (the default), ``y`` is standardised to ``(y - y_mean_) /
    y_scale_`` before sampling and the priors are stated in those units, as bambi's and
    rstanarm's default priors are scaled by ``sd(y)``: the posterior is then the same
    whatever the units of ``y``, up to those units, and the step size and the curvature
    the sampler adapts to do not depend on them. Everything fitted (``samples_``,
    ``coef_``, ``intercept_``, ``noise_precision_``, ``predict``, ``sample_y``) is in the
    units of ``y``. See :ref:`priors`.

    Parameters
    ----------
    {sampler}
    {n_iter}
    {burn_in}
    {thin}
    {batch_size}
    {batch_scheme}
    {gradient}
    {n_chains}
    {n_jobs}
    {random_state}
    {init}
    alpha : "auto", float or array-like of shape (n_features,), default="auto"
        Prior precision of the weights: ``coef_[..., j] ~ N(0, y_scale_**2 / alpha_j)``:
        ``alpha`` is in units of ``y``'s standardised scale, so ``alpha_j = 1`` is a prior
        sd of one sd of ``y`` per unit of ``x_j``. ``"auto"`` scales it to the features
        (rstanarm's autoscale rule): a prior sd of one sd of ``y`` per standard deviation
        of ``x_j``, per unit of its range ``max - min`` for a binary feature, so that
        predictions do not depend on the features' units (resolved in ``alpha_``; see
        :ref:`priors`). A float is the papers' isotropic prior; an array gives each feature
        its own prior scale ``s_j`` as ``alpha_j = 1 / s_j^2`` (see :ref:`priors`). Arrays
        can be searched over in ``GridSearchCV`` like any other value.
    alpha_intercept : float, default=0.01
        Prior precision of the intercept, ``N(y_mean_, y_scale_**2 / alpha_intercept)``:
        weak by default (sd 10 sds of ``y``), so that the intercept is not shrunk, as in
        ``BayesianRidge`` and ``LogisticRegression``, yet proper (with separable data a
        flat intercept gives an improper posterior). ``alpha_intercept=alpha`` gives the
        papers' prior, the same on every weight. Ignored without ``fit_intercept``.
    fit_intercept : bool, default=True
        Whether to fit the intercept.
    {warm_start}
    {max_draws}
    {n_predict_draws}
    {verbose}
    normalize_y : bool, default=True
        Standardise ``y`` (centre it by its mean when ``fit_intercept``, scale it by its sd,
        or by its root mean square without intercept) and state ``alpha``,
        ``alpha_intercept`` and the noise prior in those units. ``False`` samples the raw
        ``y`` with the priors in its units; with ``alpha_intercept=alpha`` this is the
        papers' prior. With ``warm_start`` or ``partial_fit`` the first call fixes the
        scaling: later data are expressed in it. A hand-set ``step_size`` (for example
        ``sampler=SGLD(step_size=h)``) is in those standardised units too: the likelihood's
        curvature there is ``y_scale_**2`` times that of the raw ``y``, so a step copied from
        a paper written for raw ``y`` is too large by that factor (``y_scale_`` for the
        momentum samplers, whose stability limit goes as ``1 / sqrt(lambda_max)``) and may
        diverge. To reproduce a paper's setting (raw ``y``, plain minibatch gradients, no
        preconditioning), use ``SGBayesLinearRegression(sampler=SGLD(step_size=h,
        preconditioner="none"), gradient="minibatch", normalize_y=False)``, with
        ``alpha_intercept=alpha`` for its prior and ``noise_precision`` fixed if it was.
    noise_precision : float or None, default=None
        ``None`` samples ``tau`` (as ``log tau``, with the Jacobian of that change of
        variables); a positive float holds it fixed (in the units of ``y``: ``1 / var`` of
        the noise). With ``init="zeros"`` the weights start at zero and ``log tau`` at its
        conditional mode given them, ``log((a + N/2) / (b + ||y||^2 / 2))`` (on the
        standardised targets with ``normalize_y``): ``tau`` has no natural zero, and
        ``log tau = 0`` (unit noise) is orders of magnitude off for unscaled targets.
    noise_prior_shape : float, default=1e-6
        Shape of the Gamma prior on ``tau``.
    noise_prior_rate : float, default=1e-6
        Rate of the Gamma prior on ``tau``; with ``normalize_y`` the prior is on the
        standardised noise precision ``tau * y_scale_**2``, so that the default
        ``Gamma(1e-6, 1e-6)`` is as vague whatever the units of ``y``.

    Attributes
    ----------
    {alpha_}
    coef_ : ndarray of shape (n_features,)
        Posterior mean of the weights.
    intercept_ : float
        Posterior mean of the intercept (0.0 without ``fit_intercept``).
    coef_samples_ : ndarray of shape (n_draws_total, n_features)
    intercept_samples_ : ndarray of shape (n_draws_total,)
    noise_precision_ : float
        Posterior mean of ``tau`` (the fixed value when held fixed).
    noise_precision_samples_ : ndarray of shape (n_draws_total,)
    y_mean_ : float
        The centre subtracted from ``y`` before sampling (0.0 without ``normalize_y`` or
        ``fit_intercept``).
    y_scale_ : float
        The scale ``y`` was divided by before sampling (1.0 without ``normalize_y``, or for a
        constant ``y``).
    {samples_}
    {sample_weight_}
    {sample_stats_}
    {n_iter_}
    {n_predict_draws_}
    {n_features_in_}
    {feature_names_in_}
    {diagnostics_}

    See Also
    --------
    sklearn.linear_model.BayesianRidge : conjugate evidence-maximising counterpart.

    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skbayes_sg import SGBayesLinearRegression
    >>> X, y = load_diabetes(return_X_y=True)
    >>> reg = make_pipeline(StandardScaler(), SGBayesLinearRegression(random_state=0)).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    """

    _auto_alpha = True
    _parameter_constraints = {
        **BaseSGBayes._parameter_constraints,
        **_GLM_PRIOR_CONSTRAINTS,
        "normalize_y": ["boolean"],
        "noise_precision": [Interval(Real, 0, None, closed="neither"), None],
        "noise_prior_shape": [Interval(Real, 0, None, closed="neither")],
        "noise_prior_rate": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        *,
        sampler="auto",
        n_iter="auto",
        burn_in="auto",
        thin=1,
        batch_size="auto",
        batch_scheme="replacement",
        gradient="auto",
        n_chains=4,
        n_jobs=None,
        random_state=None,
        init="map",
        alpha="auto",
        alpha_intercept=0.01,
        fit_intercept=True,
        warm_start=False,
        max_draws="auto",
        verbose=0,
        normalize_y=True,
        noise_precision=None,
        noise_prior_shape=1e-6,
        noise_prior_rate=1e-6,
        n_predict_draws="auto",
    ):
        self.sampler = sampler
        self.n_iter = n_iter
        self.burn_in = burn_in
        self.thin = thin
        self.batch_size = batch_size
        self.batch_scheme = batch_scheme
        self.gradient = gradient
        self.n_chains = n_chains
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.init = init
        self.alpha = alpha
        self.alpha_intercept = alpha_intercept
        self.fit_intercept = fit_intercept
        self.warm_start = warm_start
        self.max_draws = max_draws
        self.verbose = verbose
        self.normalize_y = normalize_y
        self.n_predict_draws = n_predict_draws
        self.noise_precision = noise_precision
        self.noise_prior_shape = noise_prior_shape
        self.noise_prior_rate = noise_prior_rate

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Sample the posterior of the weights (and noise precision) given training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Likelihood weights: row ``i``'s Gaussian log likelihood is multiplied by
            ``w_i``, which is the same as giving it the noise precision ``w_i tau``
            (``y_i ~ N(x_i w + b, 1 / (w_i tau))``), so an integer weight counts a row that
            many times and a weight of 0 drops it. When ``tau`` is sampled its conditional
            posterior is ``Gamma(a + sum(w) / 2, b + sum_i w_i r_i^2 / 2)``: ``sum(w)`` takes
            the place of ``n_samples``. None means all ones. Must be non-negative, and not
            all zero. See :ref:`sample-weights`.

        Returns
        -------
        self : object
        """
        if _dask.is_dask_collection(X):
            return _dask.fit_regressor(self, X, y, sample_weight)
        first = not (self.warm_start and hasattr(self, "samples_"))
        X, y = validate_data(self, X, y, dtype=np.float64, accept_sparse="csr", reset=first, y_numeric=True)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        if first or not hasattr(self, "y_scale_"):
            self._set_target_scaling(y, sample_weight)
        self._seen_X = self._seen_y = None
        if self.batch_scheme == "epochs":
            perm = epoch_permutation(self.random_state, X.shape[0])
            X, y = X[perm], y[perm]
            sample_weight = None if sample_weight is None else sample_weight[perm]
        return self._fit(X, y, sample_weight=sample_weight)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, sample_weight=None):
        """Continue the chains on a new chunk of data (online Bayesian learning).

        Each call targets the posterior given *all the data seen so far*: the chains
        continue from their states for ``n_iter`` more iterations (with ``"auto"``, until this
        call's draws meet its targets; burn-in only on the first call), with minibatches
        drawn from all the data seen, ``N`` growing as chunks arrive, and an ``"auto"`` step
        size re-set for the larger ``N``. ``samples_`` then holds this
        call's draws. The estimator keeps the data seen (the posterior depends on all of
        it), so memory grows with it; a ``fit`` starts over. After a ``fit`` (which keeps no
        data), ``partial_fit`` continues its chains, with the data seen starting at this
        chunk.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Likelihood weights of this chunk's rows, as in :meth:`fit` (kept with the data
            seen; chunks without weights count their rows once). See :ref:`sample-weights`.

        Returns
        -------
        self : object
        """
        first = not hasattr(self, "samples_")
        X, y = validate_data(self, X, y, dtype=np.float64, accept_sparse="csr", reset=first, y_numeric=True)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float64, ensure_non_negative=True, allow_all_zero_weights=True
            )
        if first or not hasattr(self, "y_scale_"):
            self._set_target_scaling(y, sample_weight)
        X_all, y_all, w_all = self._accumulate(X, y, sample_weight)
        return self._fit(X_all, y_all, streaming=True, sample_weight=w_all)

    def _set_target_scaling(self, y, sample_weight=None):
        """Fix ``y_mean_`` and ``y_scale_`` from the targets of a first fit or chunk (their
        weighted mean and sd under ``sample_weight``, the moments of the likelihood's data)."""
        self.y_mean_, self.y_scale_ = 0.0, 1.0
        if not self.normalize_y:
            return
        y = np.asarray(y, dtype=float)  # a non-numeric y fails here with numpy's "could not convert"
        w = None if sample_weight is None or not np.any(sample_weight > 0) else sample_weight
        if self.fit_intercept:
            self.y_mean_ = float(np.average(y, weights=w))
            scale = float(np.sqrt(np.average(np.square(y - self.y_mean_), weights=w)))
        else:
            # Without an intercept the model is centred at 0: its scale is y's distance from 0.
            scale = float(np.sqrt(np.average(np.square(y), weights=w)))
        # A constant y (an sd of 0, or of rounding noise around a large mean) is sampled
        # centred but unscaled, as StandardScaler leaves constant features.
        if np.isfinite(scale) and scale > 10 * np.finfo(float).eps * max(1.0, abs(self.y_mean_)):
            self.y_scale_ = scale

    def _build_model(self, X, y):
        m, s = self.y_mean_, self.y_scale_
        if y is not None and (m != 0.0 or s != 1.0):  # (rows on a cluster arrive standardised)
            y = _standardised(y, m, s)
        tau = self.noise_precision
        return LinearRegressionModel(
            X,
            y,
            alpha=self.alpha_,
            alpha_intercept=self.alpha_intercept,
            fit_intercept=self.fit_intercept,
            noise_precision=None if tau is None else tau * s * s,
            noise_prior_shape=self.noise_prior_shape,
            noise_prior_rate=self.noise_prior_rate,
        )

    def _user_affine(self):
        m, s = self.y_mean_, self.y_scale_
        if m == 0.0 and s == 1.0:
            return None
        # w = s w~, b = m + s b~, log tau = log tau~ - 2 log s: coordinate by coordinate.
        D = self.n_features_in_
        n_w = D + (1 if self.fit_intercept else 0)
        n_params = n_w + (1 if self.noise_precision is None else 0)
        scale, shift = np.ones(n_params), np.zeros(n_params)
        scale[:n_w] = s
        if self.fit_intercept:
            shift[D] = m
        if self.noise_precision is None:
            shift[-1] = -2.0 * np.log(s)
        return scale, shift

    def _prediction_model(self, model):
        model = model.without_data()
        if self.noise_precision is not None:
            model.noise_precision = float(self.noise_precision)  # the user's units, as the draws
        return model

    def _initial_points(self, model):
        starts = super()._initial_points(model)
        if isinstance(self.init, str) and self.init == "zeros" and model.noise_precision is None:
            # From log tau = 0 the force along log tau is ||y||^2 / 2, and a step set by
            # the curvature at the mode threw targets of size 100 to log tau = -870, where
            # tau underflows: start it where the weights' zeros put its mode instead.
            y = np.asarray(model.y, dtype=float)
            w = getattr(model, "sample_weight", None)
            n, yy = (y.size, y @ y) if w is None else (float(w.sum()), float((w * y) @ y))
            starts[:, -1] = np.log((self.noise_prior_shape + 0.5 * n) / (self.noise_prior_rate + 0.5 * yy))
        return starts

    def _set_posterior_attributes(self, model):
        if model.noise_precision is None:
            self._check_noise_precision_draws()
        self.coef_ = self._posterior_mean(self.coef_samples_)
        self.intercept_ = float(self._posterior_mean(self.intercept_samples_)) if self.fit_intercept else 0.0
        if model.noise_precision is not None:
            self.noise_precision_ = model.noise_precision
        else:
            self.noise_precision_ = float(self._posterior_mean(self.noise_precision_samples_))

    def _check_noise_precision_draws(self):
        """Raise DivergenceError if a draw's noise precision ``exp(s)`` is 0 or infinite.

        The chains sample ``s = log tau``, which stays finite (and so passes the chains'
        divergence check) while running away, say to -1e10 under a step size too large
        for its curvature; ``tau`` then underflows to 0 and the predictive std is infinite.
        """
        with np.errstate(over="ignore"):
            tau = self.noise_precision_samples_
        if np.all(np.isfinite(tau) & (tau > 0)):
            return
        s = self._flat_samples()[:, -1]
        step = self.diagnostics_.get("step_size", float("nan"))
        name = type(getattr(self, "_sampler", None) or get_sampler(self.sampler)).__name__
        chain, iteration, where = self._first_bad_noise_draw(tau)
        del self.samples_  # not fitted: predictions from these draws would be infinite
        units = ", in standardised-y units since normalize_y=True" if self.normalize_y else ""
        raise DivergenceError(
            f"{name} diverged in the noise precision {where}: log noise precision draws reach {s.min():.3g} .. "
            f"{s.max():.3g}, where exp underflows to 0 or overflows (step_size={step:.4g}{units}). Use a smaller "
            "step_size or step_size='auto', standardise the targets, or hold noise_precision fixed.",
            sampler=name,
            step_size=step,
            iteration=iteration,
        )

    def _first_bad_noise_draw(self, tau):
        """``(chain, iteration, where)`` of the earliest kept draw whose noise precision is 0 or
        infinite: the iteration (1-based) from the chains' thinning grid, None without chains."""
        tau = np.asarray(tau).reshape(self.samples_.shape[:2])
        bad = ~(np.isfinite(tau) & (tau > 0))
        first = int(np.argmax(bad.any(axis=0)))  # the earliest draw index bad in some chain
        chain = int(np.argmax(bad[:, first]))
        progress = getattr(self, "_chain_progress", None)
        if not progress:
            return chain, None, f"at draw {first + 1} (of {tau.shape[1]})"
        # Draw j of the record is kept at iteration n_burn + (j + 1) * thin (1-based).
        iteration = int(progress[0]["n_burn"] + (first + 1) * self.diagnostics_["thin"])
        return chain, iteration, f"by iteration {iteration} (chain {chain})"

    def _posterior_variables(self, feature_names=None):
        C, D = self.samples_.shape[:2]
        features = self._feature_names(feature_names)
        variables = {
            "coef": (self.coef_samples_.reshape(C, D, -1), ["feature"]),
            "intercept": (self.intercept_samples_.reshape(C, D), []),
        }
        if self.noise_precision is None:
            variables["noise_precision"] = (self.noise_precision_samples_.reshape(C, D), [])
        return variables, {"feature": features}

    def _sample_targets(self, X, rng):
        """One target per stored draw and row: the draw's mean plus Gaussian noise of the
        draw's precision, shape (n_draws_total, n)."""
        thetas = self._flat_samples()
        out = np.empty((thetas.shape[0], X.shape[0]))
        for draws in self._draw_blocks(X.shape[0]):
            mu = self._model.predict_draws(thetas[draws], X)
            mu += rng.standard_normal(mu.shape) / np.sqrt(self._model.tau(thetas[draws]))[:, None]
            out[draws] = mu
        return out

    @property
    def coef_samples_(self):
        """Weight draws of all chains stacked, shape (n_draws_total, n_features)."""
        W, _, _ = self._model.unpack(self._flat_samples())
        return W[..., 0]

    @property
    def intercept_samples_(self):
        """Intercept draws, shape (n_draws_total,); zeros without ``fit_intercept``."""
        _, b, _ = self._model.unpack(self._flat_samples())
        return b[:, 0]

    @property
    def noise_precision_samples_(self):
        """Noise precision draws, shape (n_draws_total,); constant when held fixed."""
        return np.asarray(self._model.tau(self._flat_samples()), dtype=float)

    def predict(self, X, return_std=False):
        """Posterior predictive mean, and optionally its standard deviation.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the predictive standard deviation: the spread of the mean over
            draws plus the noise, ``sqrt(Var_s[mu_s(x)] + E_s[1 / tau_s])``.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,)
        y_std : ndarray of shape (n_samples,)
            Only when ``return_std`` is True.

        Notes
        -----
        The mean is linear in the draws, so it is computed exactly from the posterior mean
        of all of them (one matrix-vector product, as ``BayesianRidge``). The standard
        deviation averages over the ``n_predict_draws_`` draws chosen by
        ``n_predict_draws``, in blocks of rows and draws with one matrix product per block.
        """
        check_is_fitted(self, "samples_")
        if _dask.is_dask_collection(X):
            return _dask.predict_blocks(self, "predict", X, return_std=return_std)
        X = validate_data(self, X, dtype=np.float64, accept_sparse="csr", reset=False)
        W, b, _ = self._model.unpack(self._flat_samples())
        mean = np.asarray(X @ self._posterior_mean(W[..., 0])).ravel() + self._posterior_mean(b[:, 0])
        if not return_std:
            return mean
        return mean, np.sqrt(self._predictive_variance(X))

    def _predictive_variance(self, X):
        """``Var_s[mu_s(x)] + E_s[1 / tau_s]`` over the prediction draws, from the draws' means
        centred at their own (weighted) average, so no precision is lost to a large mean."""
        thetas, weights = self._predict_draws()
        W, b, _ = self._model.unpack(thetas)
        centre = np.asarray(X @ (weights @ W[..., 0])).ravel() + weights @ b[:, 0]
        var = np.full(X.shape[0], weights @ (1.0 / self._model.tau(thetas)))
        for rows, draws in self._predict_blocks(X.shape[0], thetas.shape[0], 1):
            spread = self._model.predict_draws(thetas[draws], X[rows])
            spread -= centre[rows]
            var[rows] += weights[draws] @ (spread * spread)
        # Signed multilevel weights can make the variance estimate slightly negative.
        return np.maximum(var, 0.0)

    def sample_y(self, X, n_samples=1, random_state=None):
        """Draw targets from the posterior predictive.

        Each column takes a posterior draw at random and adds Gaussian noise with that
        draw's noise precision. After a multilevel fit (signed ``sample_weight_``) there are
        no posterior samples to draw from: each column is then drawn from the Gaussian with
        the posterior predictive mean and standard deviation of :meth:`predict`, an
        approximation that matches the first two moments.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples)
        """
        check_is_fitted(self, "samples_")
        X = validate_data(self, X, dtype=np.float64, accept_sparse="csr", reset=False)
        rng = check_random_state(random_state)
        if self.sample_weight_ is not None:
            mean, std = self.predict(X, return_std=True)
            return mean[:, None] + std[:, None] * rng.standard_normal((len(mean), n_samples))
        thetas = self._flat_samples()
        pick = rng.randint(0, thetas.shape[0], size=n_samples)
        mu = self._model.predict_draws(thetas[pick], X)
        noise = rng.standard_normal(mu.shape) / np.sqrt(self.noise_precision_samples_[pick])[:, None]
        return (mu + noise).T
