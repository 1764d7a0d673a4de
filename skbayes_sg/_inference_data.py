"""``to_inference_data`` for an estimator or a Pipeline ending in one."""

from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from ._estimator import BaseSGBayes


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
        if not isinstance(final, BaseSGBayes):
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
    elif not isinstance(estimator, BaseSGBayes):
        raise TypeError(
            f"to_inference_data() needs a fitted skbayes_sg estimator or a Pipeline ending in one; "
            f"got {type(estimator).__name__}."
        )
    return estimator.to_inference_data(X, y, feature_names=feature_names, random_state=random_state)
