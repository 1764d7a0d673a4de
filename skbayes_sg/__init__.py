"""skbayes_sg: scikit-learn estimators with posteriors sampled by stochastic-gradient MCMC.

>>> from skbayes_sg import SGBayesLogisticRegression
>>> from skbayes_sg.samplers import SGHMC
"""

from ._inference_data import to_inference_data
from .drbm import SGBayesDRBMClassifier
from .exceptions import DivergenceError, FitInterruptedWarning, GradientNoiseWarning
from .linear_model import SGBayesLinearRegression, SGBayesLogisticRegression
from .poisson import SGBayesPoissonRegressor

__version__ = "0.1.0"

__all__ = [
    "SGBayesLogisticRegression",
    "SGBayesLinearRegression",
    "SGBayesPoissonRegressor",
    "SGBayesDRBMClassifier",
    "DivergenceError",
    "GradientNoiseWarning",
    "to_inference_data",
    "FitInterruptedWarning",
    "__version__",
]
