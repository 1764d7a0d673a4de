"""Multinomial logistic regression: the categorical family with the softmax link."""

import numpy as np
from scipy.special import logsumexp, softmax

from ._family import Family, draw_predictors
from ._model import GLM, class_codes


class SoftmaxFamily(Family):
    """``log p(y = k | z) = z_k - logsumexp(z)`` over ``K`` classes (stable log-sum-exp)."""

    y_dtype = np.intp

    def __init__(self, n_classes):
        self.n_outputs = int(n_classes)

    def log_likelihood(self, Z, y, extra):
        return Z[np.arange(Z.shape[0]), y] - logsumexp(Z, axis=1)

    def gradient_terms(self, Z, y, extra):
        if Z.ndim > 2:  # a stack of paths: the rows of all paths at once
            R, _ = self.gradient_terms(Z.reshape(-1, Z.shape[-1]), y.reshape(-1), extra)
            return R.reshape(Z.shape), None
        R = -softmax(Z, axis=1)
        R[np.arange(Z.shape[0]), y] += 1.0
        return R, None

    def curvature_state(self, Z, y):
        return softmax(Z, axis=-1)

    def apply_curvature(self, extra, p, U, e_v):
        # Hessian of the log-softmax likelihood in z is -(diag(p) - p p').
        pU = p * U
        return -(pU - p * pU.sum(axis=-1, keepdims=True)), None

    def predict_draws(self, W, b, extra, X, offset=None):
        """Class probabilities per draw, shape (S, n, K)."""
        S, D, K = W.shape
        # One (n, D) @ (D, S K) product, which a sparse X supports too.
        Z = np.asarray(X @ W.transpose(1, 0, 2).reshape(D, S * K)).reshape(-1, S, K).transpose(1, 0, 2)
        Z = Z + b[:, None, :]
        if offset is not None:
            Z += np.asarray(offset, dtype=float)[:, None]
        return softmax(Z, axis=-1)

    def predict_mean(self, W, b, extra, weights, X, offset=None):
        """Weighted average over draws of the class probabilities, shape (n, K)."""
        return np.einsum("nsk,s->nk", softmax(draw_predictors(W, b, X, offset), axis=-1), weights)

    def log_likelihood_draws(self, W, b, extra, X, y, offset=None):
        Z = draw_predictors(W, b, X, offset)
        y = np.asarray(y, dtype=np.intp)
        return (Z[np.arange(Z.shape[0]), :, y] - logsumexp(Z, axis=-1)).T


class SoftmaxModel(GLM):
    """Bayesian multinomial (softmax) logistic regression over ``K`` classes.

    ``p(y_i = k | x_i) = softmax(x_i W + b)_k``, with the over-complete parametrisation of
    one weight vector per class (identified by the prior, as in scikit-learn's
    multinomial ``LogisticRegression``) and independent Gaussian priors of precision
    ``alpha`` (per class and feature, or one for all) on the weights and ``alpha_intercept``
    on the intercepts. Stable log-sum-exp.

    Parameters
    ----------
    X : array of shape (N, D)
    y : array of shape (N,) of integer class codes 0..K-1
        Kept in its integer dtype (the classifiers' codes are one byte a row).
    n_classes : int
    alpha : float or array of shape (D,) or (K, D), default=1.0
        Prior precision of the weights: one for all, or one per feature (and class: the shape of ``coef_``).
    alpha_intercept : float or None, default=None
        Prior precision of the intercepts; None gives it ``alpha`` (a float), the papers' prior.
    fit_intercept : bool, default=True
    """

    def __init__(self, X, y, *, n_classes, alpha=1.0, fit_intercept=True, alpha_intercept=None):
        super().__init__(
            X,
            class_codes(y),
            SoftmaxFamily(n_classes),
            alpha=alpha,
            fit_intercept=fit_intercept,
            alpha_intercept=alpha_intercept,
        )
