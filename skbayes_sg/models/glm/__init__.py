"""Generalised linear models: a :class:`Family` (the likelihood in the linear predictor)
over a row source, with a Gaussian prior on the weights and intercepts.

Families: binary logistic, multinomial softmax, Gaussian linear regression, Poisson.
"""

from ...rows import memory_mapped as _memory_mapped  # noqa: F401  (the estimators' import)
from ._autoscale import AUTO_PRIOR_SCALE, FeatureExtremes, auto_alpha, feature_extremes, feature_scales, resolve_alpha
from ._family import Family, draw_predictors
from ._model import GLM, class_codes, weigh
from ._prior import prior_precisions
from .gaussian import GaussianFamily, LinearRegressionModel
from .logistic import LogisticFamily, LogisticModel
from .poisson import PoissonFamily, PoissonModel
from .softmax import SoftmaxFamily, SoftmaxModel

__all__ = [
    "AUTO_PRIOR_SCALE",
    "FeatureExtremes",
    "auto_alpha",
    "feature_extremes",
    "feature_scales",
    "resolve_alpha",
    "GLM",
    "Family",
    "GaussianFamily",
    "LinearRegressionModel",
    "LogisticFamily",
    "LogisticModel",
    "PoissonFamily",
    "PoissonModel",
    "SoftmaxFamily",
    "SoftmaxModel",
    "class_codes",
    "draw_predictors",
    "prior_precisions",
    "weigh",
]
