"""Models: priors and likelihoods over a flat parameter vector.

A model gives the samplers minibatch per-example gradients as an operator
(:class:`PerExampleGradients`), the full-data log posterior and gradient, and the
predictive for a stack of draws. Models are public so that a user can sample a
posterior directly, without an estimator.
"""

from ._base import Model
from ._drbm_sheared import DRBMShear, ShearedDRBM
from ._gradients import (
    DensePerExampleGradients,
    DifferencePerExampleGradients,
    LinearPerExampleGradients,
    PerExampleGradients,
    TransformedPerExampleGradients,
)
from ._map import find_map
from ._whitened import WhitenedModel
from .drbm import DRBMModel, DRBMPerExampleGradients
from .glm import GLM, Family, LinearRegressionModel, LogisticModel, PoissonModel, SoftmaxModel
from .normal_gamma import NormalGammaModel

__all__ = [
    "DRBMModel",
    "DRBMShear",
    "Family",
    "GLM",
    "DRBMPerExampleGradients",
    "DensePerExampleGradients",
    "DifferencePerExampleGradients",
    "LinearPerExampleGradients",
    "LinearRegressionModel",
    "LogisticModel",
    "Model",
    "NormalGammaModel",
    "PerExampleGradients",
    "PoissonModel",
    "ShearedDRBM",
    "SoftmaxModel",
    "TransformedPerExampleGradients",
    "WhitenedModel",
    "find_map",
]
