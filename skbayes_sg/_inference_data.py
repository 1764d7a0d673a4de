"""The ArviZ export: a fitted estimator's draws as an ``arviz.InferenceData``
(:func:`inference_data`, the body of the estimators' ``to_inference_data``), and
:func:`to_inference_data` for an estimator or a Pipeline ending in one."""

import numpy as np
from sklearn.pipeline import Pipeline
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._validation import validate_data


def to_inference_data(estimator, X=None, y=None, *, feature_names=None, random_state=0):
    """Export a fitted skbayes_sg estimator, or a ``Pipeline`` ending in one, to ArviZ.

    For a ``Pipeline`` the raw ``X`` goes through the preceding steps (their ``transform``)
    before it reaches the estimator, and the ``feature`` coordinates are the names those
    steps give their outputs (``pipeline[:-1].get_feature_names_out()``): the column names
    of a DataFrame, as a ``ColumnTransformer`` or ``OneHotEncoder`` renames them, where the
    estimator itself only saw an array and would say ``x13``.

    Parameters
    ----------
    estimator : skbayes_sg estimator or sklearn.pipeline.Pipeline
        Fitted; a Pipeline's last step must be a skbayes_sg estimator.
    X : array-like of shape (n_samples, n_features), default=None
        Rows for ``log_likelihood`` and ``posterior_predictive``, as the Pipeline (or
        the estimator) takes them.
    y : array-like of shape (n_samples,), default=None
        Targets of ``X``; with them the ``log_likelihood`` group needed by ``az.loo``.
    feature_names : array-like of str, default=None
        Names of the estimator's input features, overriding the Pipeline's. When the
        preceding steps cannot name their outputs (a step without
        ``get_feature_names_out``), the estimator's own names are used.
    random_state : int, RandomState instance or None, default=0
        Seeds the posterior predictive draws.

    Returns
    -------
    arviz.InferenceData
        See :meth:`SGBayesLogisticRegression.to_inference_data
        <skbayes_sg.SGBayesLogisticRegression.to_inference_data>` for the groups.

    Examples
    --------
    >>> import arviz as az  # doctest: +SKIP
    >>> from skbayes_sg import to_inference_data  # doctest: +SKIP
    >>> idata = to_inference_data(pipeline, X_train, y_train)  # doctest: +SKIP
    >>> az.loo(idata)  # doctest: +SKIP
    """
    if isinstance(estimator, Pipeline):
        final = estimator[-1]
        if not _exports(final):
            raise TypeError(
                f"to_inference_data() needs a Pipeline whose last step is a skbayes_sg estimator; its "
                f"last step is {type(final).__name__}."
            )
        check_is_fitted(final, "samples_")
        head = estimator[:-1]
        if X is not None:
            X = head.transform(X)
        if feature_names is None:
            try:
                feature_names = head.get_feature_names_out()
            except (AttributeError, TypeError, ValueError):
                feature_names = None  # a step that cannot name its outputs: the estimator's names
        estimator = final
    elif not _exports(estimator):
        raise TypeError(
            f"to_inference_data() needs a fitted skbayes_sg estimator or a Pipeline ending in one; "
            f"got {type(estimator).__name__}."
        )
    return estimator.to_inference_data(X, y, feature_names=feature_names, random_state=random_state)


def _exports(estimator):
    """Whether ``estimator`` is a skbayes_sg estimator: one with the posterior variables this
    export reads (every ``BaseSGBayes``)."""
    return callable(getattr(estimator, "to_inference_data", None)) and callable(
        getattr(estimator, "_posterior_variables", None)
    )


def inference_data(estimator, X=None, y=None, *, feature_names=None, random_state=0):
    """The draws of a fitted skbayes_sg ``estimator`` as an ``arviz.InferenceData``.

    The body of the estimators' ``to_inference_data`` (see
    :meth:`SGBayesLogisticRegression.to_inference_data
    <skbayes_sg.SGBayesLogisticRegression.to_inference_data>` for the parameters and groups):
    it reads the estimator's ``_posterior_variables``, ``sample_stats_``, and for given data its
    ``_sample_targets``, ``_check_targets`` and ``_log_likelihood``.
    """
    check_is_fitted(estimator, "samples_")
    try:
        import arviz as az
    except ImportError:
        raise ImportError(
            "to_inference_data() needs arviz, an optional dependency: pip install arviz "
            "(or pip install 'skbayes_sg[arviz]')."
        ) from None
    if estimator.sample_weight_ is not None:
        raise ValueError(
            "to_inference_data() needs equally weighted draws; a multilevel fit has signed "
            "weights (see sample_weight_)."
        )
    if y is not None and X is None:
        raise ValueError(
            "to_inference_data() got y without X: the log likelihood needs the rows X of the "
            "targets y; pass both (for LOO, the training data)."
        )
    variables, coords = estimator._posterior_variables(feature_names)
    posterior = {name: array for name, (array, _) in variables.items()}
    dims = {name: d for name, (_, d) in variables.items()}
    stats = {name: values for name, values in estimator.sample_stats_.items()}
    stats["step_size"] = np.full(estimator.samples_.shape[:2], estimator.diagnostics_.get("step_size", np.nan))
    groups = {}
    if X is None:
        groups["observed_data"] = None if estimator._observed_y is None else {"y": estimator._observed_targets()}
    else:
        X = validate_data(estimator, X, dtype=np.float64, accept_sparse="csr", reset=False)
        shape = estimator.samples_.shape[:2] + (X.shape[0],)
        groups["posterior_predictive"] = {
            "y": estimator._sample_targets(X, check_random_state(random_state)).reshape(shape)
        }
        if y is not None:
            codes, observed = estimator._check_targets(y, X.shape[0])
            groups["log_likelihood"] = {"y": estimator._log_likelihood(X, codes).reshape(shape)}
            groups["observed_data"] = {"y": observed}
    dims["y"] = ["obs"]
    return az.from_dict(posterior=posterior, sample_stats=stats, coords=coords, dims=dims, **groups)
