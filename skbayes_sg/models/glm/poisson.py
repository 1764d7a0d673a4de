"""Poisson regression: counts with the log link.

``log p(y | z) = y z - e^z - log y!`` for a count ``y`` and predictor ``z = x w + b + offset``
(``offset = log exposure`` makes ``e^z`` a rate times the exposure). ``e^z`` overflows beyond
``z = 709``: the exponential is taken of ``min(z, 700)`` (:data:`EXP_CLIP`), which is exact
wherever the mean count is below ``e^700 = 1e304`` (every data set: the gradient and Hessian
are then exact), and keeps the log likelihood, gradient and curvature finite (very negative)
for a proposal that wanders out, so a Metropolis step rejects it quietly instead of
producing NaN.
"""

import numpy as np
from scipy.special import gammaln

from ._family import Family, draw_predictors
from ._model import GLM

#: The largest predictor the exponential is taken of (see the module's docstring).
EXP_CLIP = 700.0


def _mean(Z):
    """``e^z`` of ``min(z, EXP_CLIP)``."""
    return np.exp(np.minimum(Z, EXP_CLIP))


class PoissonFamily(Family):
    """``y ~ Poisson(e^z)``: residual ``y - e^z``, curvature ``-e^z``, predictive mean ``e^z``."""

    def log_likelihood(self, Z, y, extra):
        z = Z[..., 0]
        return y * z - _mean(z) - gammaln(y + 1.0)

    def gradient_terms(self, Z, y, extra):
        return (y - _mean(Z[..., 0]))[..., None], None

    def curvature_state(self, Z, y):
        return _mean(Z)

    def apply_curvature(self, extra, mu, U, e_v):
        return -mu * U, None

    def loglik_and_gradient_sums(self, Z, y, w, extra):
        # One exponential serves both terms; 1-D residuals make X' r a matrix-vector product.
        z = Z[:, 0]
        mu = _mean(z)
        terms = y * z - mu - gammaln(y + 1.0)
        r = y - mu
        if w is not None:
            terms *= w
            r *= w
        return float(terms.sum()), r, r.sum(), None

    def predict_draws(self, W, b, extra, X, offset=None):
        """Mean counts ``e^z`` per draw, shape (S, n); ``offset`` (n,) is the rows' log exposure."""
        return _mean(draw_predictors(W, b, X, offset)[:, :, 0].T)

    def log_likelihood_draws(self, W, b, extra, X, y, offset=None):
        Z = draw_predictors(W, b, X, offset)[:, :, 0]
        y = np.asarray(y, dtype=float)[:, None]
        return (y * Z - _mean(Z) - gammaln(y + 1.0)).T


class PoissonModel(GLM):
    """Bayesian Poisson regression with the log link.

    ``y_i ~ Poisson(exp(x_i . w + b + offset_i))``, priors ``N(0, 1 / alpha_j)`` on the
    weights and ``N(0, 1 / alpha_intercept)`` on ``b``.

    Parameters
    ----------
    X : array of shape (N, D)
    y : array of shape (N,) of non-negative counts
    alpha : float or array of shape (D,), default=1.0
        Prior precision of the weights: one for all, or one per feature.
    fit_intercept : bool, default=True
    alpha_intercept : float or None, default=None
        Prior precision of the intercept; None gives it ``alpha`` (a float).
    offset : array of shape (N,) or None, default=None
        Added to each row's linear predictor: ``log(exposure)`` models counts over an
        exposure (time at risk, population) with rates ``exp(x w + b)``, as statsmodels'
        ``GLM(..., offset=np.log(exposure))``. Predictions take the new rows' offset
        (``predict_draws(thetas, X, offset)``).

    Raises
    ------
    ValueError
        If ``y`` has negative or non-finite values.
    """

    def __init__(self, X, y, *, alpha=1.0, fit_intercept=True, alpha_intercept=None, offset=None):
        if y is not None:
            y = np.asarray(y, dtype=np.float64)
            bad = ~np.isfinite(y) | (y < 0)
            if bad.any():
                raise ValueError(
                    f"PoissonModel needs non-negative counts y; {int(bad.sum())} values are negative or not "
                    f"finite (first at row {int(np.flatnonzero(bad)[0])}: {y[bad][0]!r})."
                )
        super().__init__(
            X,
            y,
            PoissonFamily(),
            alpha=alpha,
            fit_intercept=fit_intercept,
            alpha_intercept=alpha_intercept,
            offset=offset,
        )
