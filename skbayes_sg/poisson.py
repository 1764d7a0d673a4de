"""Bayesian Poisson regression sampled by stochastic-gradient MCMC."""

import numpy as np
from sklearn.base import RegressorMixin, _fit_context
from sklearn.metrics import d2_tweedie_score
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from . import _dask
from ._docstrings import fill_docstring
from ._estimator import BaseSGBayes, _check_target_length, epoch_permutation
from ._validation import validate_data
from .linear_model import _GLM_PRIOR_CONSTRAINTS, _SparseInput
from .models import PoissonModel


def check_counts(y, name="y"):
    """``y`` as float64 after checking that it is finite and non-negative, as a Poisson likelihood needs.

    Raises a ValueError that names the first bad values and their rows.
    """
    y = np.asarray(y, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name} contains NaN or infinity; give finite, non-negative counts.")
    bad = np.flatnonzero(y < 0)
    if bad.size:
        raise ValueError(
            f"SGBayesPoissonRegressor needs non-negative targets (counts), but {name} has {bad.size} negative "
            f"value(s): {y[bad[:5]].tolist()} at row(s) {bad[:5].tolist()}{' ...' if bad.size > 5 else ''}. "
            "A Poisson regression models counts or rates; drop or correct these rows, or use "
            "SGBayesLinearRegression for a target that can be negative."
        )
    return y


def row_offset(n_rows, exposure=None, offset=None):
    """The per-row offset of the linear predictor, ``offset + log(exposure)``, shape (n_rows,),
    or None when neither is given; as statsmodels' ``GLM(..., exposure=, offset=)``."""
    if exposure is None and offset is None:
        return None
    total = np.zeros(n_rows)
    if offset is not None:
        offset = _check_target_length(offset, n_rows).astype(np.float64)
        if not np.all(np.isfinite(offset)):
            raise ValueError("offset contains NaN or infinity; give a finite offset (log exposure) for every row.")
        total += offset
    if exposure is not None:
        exposure = _check_target_length(exposure, n_rows).astype(np.float64)
        bad = np.flatnonzero(~(np.isfinite(exposure) & (exposure > 0)))
        if bad.size:
            raise ValueError(
                f"exposure must be positive and finite (it enters as log(exposure)), but has {bad.size} bad "
                f"value(s): {exposure[bad[:5]].tolist()} at row(s) {bad[:5].tolist()}. Give each row's time "
                "at risk (or size) as a positive number, or drop the rows with none."
            )
        total += np.log(exposure)
    return total


@fill_docstring
class SGBayesPoissonRegressor(_SparseInput, RegressorMixin, BaseSGBayes):
    """Bayesian Poisson regression with a log link, sampled by stochastic-gradient MCMC.

    ``y_i ~ Poisson(mu_i)``, ``log mu_i = x_i . w + b + offset_i``, with Gaussian priors on
    ``w`` (precision ``alpha``, one for all or per feature) and a weak one on ``b``
    (precision ``alpha_intercept``): the Bayesian counterpart of scikit-learn's
    ``PoissonRegressor`` and of statsmodels' ``GLM(family=Poisson())``. ``exp(coef_[j])`` is
    the rate ratio of a unit increase of feature ``j``. ``fit`` and ``predict`` take an
    ``exposure`` (time at risk, population size...) or an ``offset`` as statsmodels does:
    ``log(exposure)`` is added to the offset, and the offset to the linear predictor.

    ``predict`` is the posterior predictive mean count, ``score`` the fraction of Poisson
    deviance explained (D^2, as ``PoissonRegressor.score``) and ``sample_y`` draws counts
    from the posterior predictive. ``y`` must be non-negative; non-integer values are
    accepted as in ``PoissonRegressor`` (the quasi-likelihood ``y log mu - mu``).

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
        Prior precision of the weights: ``coef_[j] ~ N(0, 1 / alpha_j)``, in units of the
        log rate per unit of ``x_j``: ``alpha_j = 1`` puts 95% of the prior on rate ratios
        between 1/7 and 7 per unit of ``x_j``. ``"auto"`` scales it to the features
        (rstanarm's autoscale rule): rate ratios between 1/7 and 7 per standard deviation
        of ``x_j``, per unit of its range ``max - min`` for a binary feature, whatever its
        units (resolved in ``alpha_``; see :ref:`priors`). A float is the isotropic prior
        per unit of ``x_j``; an array gives each feature its own prior scale ``s_j`` as
        ``alpha_j = 1 / s_j^2`` (see :ref:`priors`).
    alpha_intercept : float, default=0.01
        Prior precision of the intercept (the log rate at ``x = 0``), ``N(0, 1 /
        alpha_intercept)``: weak by default (sd 10), so that the intercept is not shrunk,
        as in ``PoissonRegressor``, yet proper (an all-zero ``y`` would otherwise send it to
        minus infinity). Ignored without ``fit_intercept``.
    fit_intercept : bool, default=True
        Whether to fit the intercept.
    {warm_start}
    {max_draws}
    {n_predict_draws}
    {verbose}

    Attributes
    ----------
    {alpha_}
    coef_ : ndarray of shape (n_features,)
        Posterior mean of the weights (log rate ratios).
    intercept_ : float
        Posterior mean of the intercept (0.0 without ``fit_intercept``).
    coef_samples_ : ndarray of shape (n_draws_total, n_features)
    intercept_samples_ : ndarray of shape (n_draws_total,)
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
    sklearn.linear_model.PoissonRegressor : the maximum a posteriori (L2) point estimate.
    SGBayesLinearRegression : Gaussian targets.

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg import SGBayesPoissonRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2))
    >>> y = rng.poisson(np.exp(0.5 + 0.3 * X[:, 0]))
    >>> reg = SGBayesPoissonRegressor(n_iter=500, random_state=0).fit(X, y)
    >>> reg.predict(X[:3]).shape
    (3,)
    """

    _parameter_constraints = {**BaseSGBayes._parameter_constraints, **_GLM_PRIOR_CONSTRAINTS}
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
        self.n_predict_draws = n_predict_draws

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags

    # -- fitting -------------------------------------------------------------------------
    def _validate_fit_data(self, X, y, sample_weight, exposure, offset, reset, allow_all_zero_weights=False):
        X, y = validate_data(self, X, y, dtype=np.float64, accept_sparse="csr", reset=reset, y_numeric=True)
        y = check_counts(y)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight,
                X,
                dtype=np.float64,
                ensure_non_negative=True,
                allow_all_zero_weights=allow_all_zero_weights,
            )
        return X, y, sample_weight, row_offset(X.shape[0], exposure, offset)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None, *, exposure=None, offset=None):
        """Sample the posterior of the weights given training counts.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Non-negative counts.
        sample_weight : array-like of shape (n_samples,), default=None
            Likelihood weights: the posterior is ``p(theta) prod_i p(y_i | x_i, theta)^{w_i}``,
            so an integer weight counts a row that many times and a weight of 0 drops it.
            None means all ones. Must be non-negative, and not all zero. See
            :ref:`sample-weights`.
        exposure : array-like of shape (n_samples,), default=None
            Positive exposure of each row (time at risk, population...): the row's mean count
            is its rate times its exposure, ``log(exposure)`` entering the linear predictor
            with coefficient 1, as in statsmodels' ``GLM``.
        offset : array-like of shape (n_samples,), default=None
            Added to each row's linear predictor (with ``exposure``, on top of its log).

        Returns
        -------
        self : object
        """
        if _dask.is_dask_collection(X):
            return _dask.fit_poisson(self, X, y, sample_weight, exposure, offset)
        first = not (self.warm_start and hasattr(self, "samples_"))
        X, y, sample_weight, off = self._validate_fit_data(X, y, sample_weight, exposure, offset, reset=first)
        self._seen_X = self._seen_y = self._seen_offset = None
        if self.batch_scheme == "epochs":
            perm = epoch_permutation(self.random_state, X.shape[0])
            X, y = X[perm], y[perm]
            sample_weight = None if sample_weight is None else sample_weight[perm]
            off = None if off is None else off[perm]
        return self._fit_with_offset(X, y, sample_weight, off)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, sample_weight=None, *, exposure=None, offset=None):
        """Continue the chains on a new chunk of counts (online Bayesian learning).

        Each call targets the posterior given *all the data seen so far*, as
        :meth:`SGBayesLinearRegression.partial_fit <skbayes_sg.SGBayesLinearRegression.partial_fit>`
        does: the chains continue for ``n_iter`` more iterations (with ``"auto"``, until this
        call's draws meet their targets) on minibatches of all the data seen, whose rows,
        weights and offsets the estimator keeps.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Non-negative counts.
        sample_weight : array-like of shape (n_samples,), default=None
            Likelihood weights of this chunk's rows, as in :meth:`fit`.
        exposure : array-like of shape (n_samples,), default=None
            Positive exposure of this chunk's rows, as in :meth:`fit`.
        offset : array-like of shape (n_samples,), default=None
            Offset of this chunk's rows, as in :meth:`fit`.

        Returns
        -------
        self : object
        """
        first = not hasattr(self, "samples_")
        X, y, sample_weight, off = self._validate_fit_data(
            X, y, sample_weight, exposure, offset, reset=first, allow_all_zero_weights=True
        )
        fresh = getattr(self, "_seen_X", None) is None
        n_seen = 0 if fresh else self._seen_X.shape[0]
        X_all, y_all, w_all = self._accumulate(X, y, sample_weight)
        seen = None if fresh else getattr(self, "_seen_offset", None)
        if off is not None or seen is not None:
            # Chunks given without an offset have a zero one.
            seen = np.zeros(n_seen) if seen is None else seen
            off = np.concatenate([seen, np.zeros(X.shape[0]) if off is None else off])
        self._seen_offset = off
        return self._fit_with_offset(X_all, y_all, w_all, off, streaming=True)

    def _fit_with_offset(self, X, y, sample_weight, offset, streaming=False):
        # _build_model takes (X, y) only: the offset reaches it through this attribute,
        # which holds rows of training data and so lives only for the fit.
        self._train_offset = offset
        try:
            return self._fit(X, y, streaming=streaming, sample_weight=sample_weight)
        finally:
            del self._train_offset

    def _build_model(self, X, y):
        return PoissonModel(
            X,
            y,
            alpha=self.alpha_,
            fit_intercept=self.fit_intercept,
            alpha_intercept=self.alpha_intercept,
            offset=getattr(self, "_train_offset", None),
        )

    def _set_posterior_attributes(self, model):
        self.coef_ = self._posterior_mean(self.coef_samples_)
        self.intercept_ = float(self._posterior_mean(self.intercept_samples_)) if self.fit_intercept else 0.0

    # -- draws ---------------------------------------------------------------------------
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

    def _posterior_variables(self, feature_names=None):
        C, D = self.samples_.shape[:2]
        variables = {
            "coef": (self.coef_samples_.reshape(C, D, -1), ["feature"]),
            "intercept": (self.intercept_samples_.reshape(C, D), []),
        }
        return variables, {"feature": self._feature_names(feature_names)}

    # -- prediction ----------------------------------------------------------------------
    def _validate_predict_data(self, X, exposure, offset):
        check_is_fitted(self, "samples_")
        X = validate_data(self, X, dtype=np.float64, accept_sparse="csr", reset=False)
        return X, row_offset(X.shape[0], exposure, offset)

    def _rate_moments(self, X, offset):
        """Posterior mean and variance of the mean count ``exp(x . w + b + offset)`` over the
        prediction draws, in blocks of rows and draws (see ``n_predict_draws``)."""
        thetas, weights = self._predict_draws()
        mean = np.zeros(X.shape[0])
        second = np.zeros(X.shape[0])
        for rows, draws in self._predict_blocks(X.shape[0], thetas.shape[0], 1):
            mu = self._model.predict_draws(thetas[draws], X[rows], None if offset is None else offset[rows])
            mean[rows] += weights[draws] @ mu
            second[rows] += weights[draws] @ (mu * mu)
        # Signed multilevel weights can make the variance estimate slightly negative.
        return mean, np.maximum(second - mean * mean, 0.0)

    def predict(self, X, exposure=None, offset=None, return_std=False):
        """Posterior predictive mean count, and optionally its standard deviation.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
        exposure : array-like of shape (n_samples,), default=None
            Positive exposure of each row, as in :meth:`fit` (None: 1).
        offset : array-like of shape (n_samples,), default=None
            Offset of each row's linear predictor, as in :meth:`fit` (None: 0).
        return_std : bool, default=False
            Also return the predictive standard deviation of the count,
            ``sqrt(E_s[mu_s] + Var_s[mu_s])``: Poisson noise plus the posterior's spread.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,)
            ``E_s[mu_s(x)]``, the mean count over the ``n_predict_draws_`` draws.
        y_std : ndarray of shape (n_samples,)
            Only when ``return_std`` is True.
        """
        if _dask.is_dask_collection(X):
            return _dask.predict_blocks(self, "predict", X, return_std=return_std, exposure=exposure, offset=offset)
        X, offset = self._validate_predict_data(X, exposure, offset)
        mean, var = self._rate_moments(X, offset)
        if not return_std:
            return mean
        return mean, np.sqrt(mean + var)

    def score(self, X, y, sample_weight=None, *, exposure=None, offset=None):
        """D^2, the fraction of Poisson deviance explained, as ``PoissonRegressor.score``.

        ``1 - D(y, predict(X)) / D(y, y_bar)`` with ``D`` the (weighted) Poisson deviance and
        ``y_bar`` the (weighted) mean count: 1 for a perfect fit, 0 for the constant mean, and
        negative for worse (:func:`sklearn.metrics.d2_tweedie_score` with ``power=1``).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Non-negative counts.
        sample_weight : array-like of shape (n_samples,), default=None
        exposure : array-like of shape (n_samples,), default=None
            Positive exposure of each row, as in :meth:`fit`.
        offset : array-like of shape (n_samples,), default=None
            Offset of each row, as in :meth:`fit`.

        Returns
        -------
        score : float
        """
        y = check_counts(y)
        pred = self.predict(X, exposure=exposure, offset=offset)
        # d2_tweedie_score needs strictly positive predictions; an underflowed rate is 0.
        pred = np.maximum(pred, np.finfo(float).tiny)
        return float(d2_tweedie_score(y, pred, sample_weight=sample_weight, power=1))

    def sample_y(self, X, n_samples=1, random_state=None, *, exposure=None, offset=None):
        """Draw counts from the posterior predictive.

        Each column takes a posterior draw at random and draws a Poisson count at its mean.
        After a multilevel fit (signed ``sample_weight_``) there are no posterior samples to
        draw from: each count is then drawn from the negative binomial with the posterior
        predictive mean and variance of :meth:`predict` (Poisson when the posterior's
        spread is 0), an approximation that matches the first two moments.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None
        exposure : array-like of shape (n_samples_X,), default=None
            Positive exposure of each row, as in :meth:`fit`.
        offset : array-like of shape (n_samples_X,), default=None
            Offset of each row, as in :meth:`fit`.

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples)
        """
        X, offset = self._validate_predict_data(X, exposure, offset)
        rng = check_random_state(random_state)
        if self.sample_weight_ is not None:
            mean, var = self._rate_moments(X, offset)
            # NB(r, p): mean r (1 - p) / p, variance mean / p, so p = mean / (mean + var).
            spread = var > 1e-12 * np.maximum(mean, 1e-300)
            p = np.where(spread, mean / (mean + np.where(spread, var, 1.0)), 1.0)
            r = np.where(spread, mean * p / np.where(spread, 1.0 - p, 1.0), 1.0)
            out = np.empty((X.shape[0], n_samples))
            out[spread] = rng.negative_binomial(r[spread, None], p[spread, None], (spread.sum(), n_samples))
            out[~spread] = rng.poisson(mean[~spread, None], ((~spread).sum(), n_samples))
            return out
        thetas = self._flat_samples()
        pick = rng.randint(0, thetas.shape[0], size=n_samples)
        mu = self._model.predict_draws(thetas[pick], X, offset)
        return rng.poisson(mu).T.astype(float)

    # -- ArviZ export --------------------------------------------------------------------
    def to_inference_data(self, X=None, y=None, *, feature_names=None, random_state=0, exposure=None, offset=None):
        """The draws as an ``arviz.InferenceData``, as
        :meth:`SGBayesLinearRegression.to_inference_data <skbayes_sg.SGBayesLinearRegression.to_inference_data>`.

        ``log_likelihood`` holds each draw's Poisson ``log p(y_i | x_i, theta)`` (``log y_i!``
        included, so that ``az.loo`` compares with other count models) and
        ``posterior_predictive`` one count per draw and row.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), default=None
            Rows at which to evaluate the likelihood and draw the posterior predictive.
        y : array-like of shape (n_samples,), default=None
            Counts of ``X``, for the ``log_likelihood`` group.
        feature_names : array-like of str of shape (n_features,), default=None
            Coordinates of the ``feature`` dimension.
        random_state : int, RandomState instance or None, default=0
            Seeds the posterior predictive draws.
        exposure : array-like of shape (n_samples,), default=None
            Positive exposure of the rows of ``X``, as in :meth:`fit`.
        offset : array-like of shape (n_samples,), default=None
            Offset of the rows of ``X``, as in :meth:`fit`.

        Returns
        -------
        arviz.InferenceData
        """
        n_rows = None if X is None else getattr(X, "shape", (len(X),))[0]
        self._export_offset = None if X is None else row_offset(n_rows, exposure, offset)
        try:
            return super().to_inference_data(X, y, feature_names=feature_names, random_state=random_state)
        finally:
            del self._export_offset

    def _check_targets(self, y, n_samples):
        y = check_counts(_check_target_length(y, n_samples))
        return y, y

    def _export_rows_offset(self, rows):
        off = getattr(self, "_export_offset", None)
        return None if off is None else off[rows]

    def _log_likelihood(self, X, codes):
        """Per draw and row ``log Poisson(y_i | exp(x_i . w + b + offset_i))``."""
        thetas = self._flat_samples()
        out = np.empty((thetas.shape[0], X.shape[0]))
        for rows, draws in self._predict_blocks(X.shape[0], thetas.shape[0], 1):
            off = self._export_rows_offset(rows)
            out[draws, rows] = self._model.log_likelihood_draws(thetas[draws], X[rows], codes[rows], off)
        return out

    def _sample_targets(self, X, rng):
        """One count per stored draw and row, shape (n_draws_total, n)."""
        thetas = self._flat_samples()
        off = self._export_rows_offset(slice(None))
        out = np.empty((thetas.shape[0], X.shape[0]))
        for draws in self._draw_blocks(X.shape[0]):
            out[draws] = rng.poisson(self._model.predict_draws(thetas[draws], X, off))
        return out
