"""Poisson regression with a log link: ``y_i ~ Poisson(exp(x_i . w + b + o_i))``.

A temporary family over today's :class:`~skbayes_sg.models.glm._GLM`, kept to the constructor
and the :class:`~skbayes_sg.models.Model` interface that the estimator uses, so that the GLM
family of the data-access layer can replace it without touching the estimator.

The per-row offset ``o_i`` (``log`` exposure) travels with the rows as a second column of the
stored targets: every path that gathers a row's target (minibatches, blocks of a full-data
pass, multilevel paths, the control variate's cache) then gathers its offset too, and the
likelihood kernels below split the two.
"""

import numpy as np
from scipy.special import gammaln

from .glm import _GLM


def _mean(Z, y):
    """``exp(z + o)`` (..., n, 1) of the predictor ``Z`` (..., n, 1) and stacked targets (..., n, 2).

    A predictor beyond ``log(max float)`` (a diverging chain, a line search's trial point)
    gives an infinite mean and so an infinite force, which the drivers report as divergence.
    """
    with np.errstate(over="ignore"):
        return np.exp(Z + y[..., 1:2])


class PoissonModel(_GLM):
    """Bayesian Poisson regression with a log link and a per-row offset.

    ``y_i ~ Poisson(mu_i)``, ``log mu_i = x_i . w + b + offset_i``, with Gaussian priors
    ``N(0, 1 / alpha_j)`` on the weights and ``N(0, 1 / alpha_intercept)`` on ``b``. The log
    likelihood of a row is ``y_i log mu_i - mu_i - log(y_i!)`` (``log Gamma(y_i + 1)`` for a
    non-integer ``y_i``, the quasi-likelihood of scikit-learn's ``PoissonRegressor``).

    Parameters
    ----------
    X : array of shape (N, D)
    y : array of shape (N,)
        Non-negative counts (or rates).
    alpha : float or array of shape (D,), default=1.0
        Prior precision of the weights: one for all, or one per feature.
    fit_intercept : bool, default=True
    alpha_intercept : float or None, default=None
        Prior precision of the intercept; None gives it ``alpha`` (a float).
    offset : array of shape (N,) or None, default=None
        Added to each row's linear predictor (``log`` of an exposure); None means zeros.
    """

    def __init__(self, X, y, *, alpha=1.0, fit_intercept=True, alpha_intercept=None, offset=None):
        if y is not None:
            y = np.asarray(y, dtype=np.float64)
            o = np.zeros_like(y) if offset is None else np.asarray(offset, dtype=np.float64).reshape(y.shape)
            y = np.column_stack([y, o])
        super().__init__(X, y, alpha=alpha, fit_intercept=fit_intercept, n_outputs=1, alpha_intercept=alpha_intercept)

    def _residuals(self, Z, y):
        return y[:, :1] - _mean(Z, y)

    def _path_gradient_terms(self, thetas, Z, y):
        return y[..., :1] - _mean(Z, y), None

    def _log_likelihood_terms(self, Z, y):
        counts = y[:, 0]
        with np.errstate(over="ignore"):
            return counts * (Z[:, 0] + y[:, 1]) - _mean(Z, y)[:, 0] - gammaln(counts + 1.0)

    def _curvature_state(self, Z, y):
        return _mean(Z, y)

    def _apply_curvature(self, theta, state, U, e_v):
        return -state * U, None

    def predict_draws(self, thetas, X):
        """Mean counts ``exp(x . w_s + b_s)`` per draw at a zero offset, shape (S, n)."""
        with np.errstate(over="ignore"):
            return np.exp(self._draw_predictors(thetas, X)[:, :, 0].T)

    def log_likelihood_draws(self, thetas, X, y):
        """``log Poisson(y_i | exp(x_i . w_s + b_s))`` at a zero offset, shape (S, n)."""
        y = np.asarray(y, dtype=float)
        Z = self._draw_predictors(thetas, X)[:, :, 0].T
        with np.errstate(over="ignore"):
            return y * Z - np.exp(Z) - gammaln(y + 1.0)
