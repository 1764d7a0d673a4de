"""Linear regression: the Gaussian family with the identity link and a noise precision."""

import copy

import numpy as np

from ._family import Family
from ._model import GLM


class GaussianFamily(Family):
    """``log N(y | z, 1 / tau)``; with ``noise_precision=None`` the extra parameter
    ``s = log tau`` is sampled under ``tau ~ Gamma(shape, rate)`` (its prior on ``s``,
    with the Jacobian of the change of variables, is ``a s - b e^s``)."""

    def __init__(self, noise_precision=None, noise_prior_shape=1e-6, noise_prior_rate=1e-6):
        self.noise_precision = None if noise_precision is None else float(noise_precision)
        self.noise_prior_shape = float(noise_prior_shape)
        self.noise_prior_rate = float(noise_prior_rate)
        self.n_extra = 0 if noise_precision is not None else 1

    def extra_names(self):
        return ["log_noise_precision"] if self.noise_precision is None else []

    def tau(self, extra):
        """Noise precision of the extra parameters (k,) or of each row of a stack (M, k)."""
        if self.noise_precision is not None:
            return np.full(extra.shape[:-1], self.noise_precision) if extra.ndim > 1 else self.noise_precision
        return np.exp(extra[..., -1])

    def log_likelihood(self, Z, y, extra):
        tau = self.tau(extra)
        r = y - Z[..., 0]
        return 0.5 * (np.log(tau) - np.log(2 * np.pi)) - 0.5 * tau * r * r

    def gradient_terms(self, Z, y, extra):
        tau = self.tau(extra)
        if np.ndim(tau):  # one per path: (M, 1) against the residuals (M, n)
            tau = np.reshape(tau, (-1, 1))
        r = y - Z[..., 0]
        E = None
        if self.noise_precision is None:
            E = (0.5 - 0.5 * tau * r * r)[..., None]  # d/ds [s/2 - e^s r^2 / 2]
        return (tau * r)[..., None], E

    def loglik_and_gradient_sums(self, Z, y, w, extra):
        tau = self.tau(extra)
        r = y - Z[:, 0]
        if w is None:
            n = Z.shape[0]
            rr = float(r @ r)
        else:
            # Weights multiply each row's precision: n becomes sum(w), r' r becomes r' W r.
            n = float(w.sum())
            wr = w * r
            rr = float(wr @ r)
            r = wr
        # exp(s) underflows to 0 below s = -745 (a Metropolis proposal far out under a flat
        # noise prior): the log likelihood is then -inf and the proposal rejected, quietly.
        with np.errstate(divide="ignore"):
            ll = 0.5 * n * np.log(tau) - 0.5 * n * np.log(2 * np.pi) - 0.5 * tau * rr
        E = None if self.noise_precision is not None else np.array([0.5 * n - 0.5 * tau * rr])
        return float(ll), tau * r, np.array([tau * r.sum()]), E

    def curvature_state(self, Z, y):
        return (y - Z[..., 0])[..., None]

    def apply_curvature(self, extra, r, U, e_v):
        # tau (..., 1, 1) of theta (P,) or of each path of a stack (M, P).
        tau = np.reshape(self.tau(extra), np.shape(extra)[:-1] + (1, 1))
        if self.noise_precision is not None:
            return -tau * U, None
        # loglik_i = s/2 - e^s r^2 / 2 with r = y - z, s = log tau.
        vs = e_v[..., None, :1]
        return -tau * U + tau * r * vs, tau * r * U - 0.5 * tau * r * r * vs

    def extra_log_prior(self, extra):
        s = extra[-1]
        return self.noise_prior_shape * s - self.noise_prior_rate * np.exp(s)

    def extra_prior_grad(self, extra):
        return self.noise_prior_shape - self.noise_prior_rate * np.exp(extra)

    def extra_prior_hvp(self, extra, v):
        # d^2/ds^2 of a s - b e^s is -b e^s.
        return np.array([-self.noise_prior_rate * np.exp(extra[-1]) * v[-1]])

    def predict_draws(self, W, b, extra, X, offset=None):
        """Predictive means per draw, shape (S, n)."""
        mean = (X @ W[..., 0].T).T + b[:, :1]
        if offset is not None:
            mean += np.asarray(offset, dtype=float)
        return mean

    def log_likelihood_draws(self, W, b, extra, X, y, offset=None):
        tau = np.asarray(self.tau(extra), dtype=float).reshape(-1, 1)
        R = np.asarray(y, dtype=float) - self.predict_draws(W, b, extra, X, offset)
        R *= R
        R *= -0.5 * tau
        R += 0.5 * (np.log(tau) - np.log(2 * np.pi))
        return R


class LinearRegressionModel(GLM):
    """Bayesian linear regression with Gaussian noise.

    ``y_i ~ N(x_i . w + b, 1 / tau)``, priors ``N(0, 1 / alpha_j)`` on the weights and
    ``N(0, 1 / alpha_intercept)`` on ``b``. With ``noise_precision`` a float, ``tau`` is held fixed. With
    ``noise_precision=None`` the last coordinate of ``theta`` is ``s = log tau``, with
    ``tau ~ Gamma(noise_prior_shape, noise_prior_rate)``; the change of variables adds the
    Jacobian ``log |d tau / d s| = s``, so the prior on ``s`` is
    ``a s - b e^s`` (up to a constant).

    Parameters
    ----------
    X : array of shape (N, D)
    y : array of shape (N,)
    alpha : float or array of shape (D,), default=1.0
        Prior precision of the weights: one for all, or one per feature.
    alpha_intercept : float or None, default=None
        Prior precision of the intercept; None gives it ``alpha`` (a float), the papers' prior.
    fit_intercept : bool, default=True
    noise_precision : float or None, default=None
    noise_prior_shape, noise_prior_rate : float, default=1e-6
        Gamma prior on ``tau`` (shape, rate), as ``BayesianRidge``'s ``alpha_1, alpha_2``.
    """

    def __init__(
        self,
        X,
        y,
        *,
        alpha=1.0,
        fit_intercept=True,
        noise_precision=None,
        noise_prior_shape=1e-6,
        noise_prior_rate=1e-6,
        alpha_intercept=None,
    ):
        family = GaussianFamily(noise_precision, noise_prior_shape, noise_prior_rate)
        y = None if y is None else np.asarray(y, dtype=float)
        super().__init__(X, y, family, alpha=alpha, fit_intercept=fit_intercept, alpha_intercept=alpha_intercept)

    @property
    def noise_precision(self):
        """The fixed noise precision, or None when ``log tau`` is sampled."""
        return self.family.noise_precision

    @noise_precision.setter
    def noise_precision(self, value):
        # A copy of the family: a prediction copy of the model (which shares the fitted
        # model's family) takes the user's units without changing the fitted model's.
        family = copy.copy(self.family)
        family.noise_precision = None if value is None else float(value)
        self.family = family

    @property
    def noise_prior_shape(self):
        """Shape ``a`` of the Gamma prior on ``tau``."""
        return self.family.noise_prior_shape

    @property
    def noise_prior_rate(self):
        """Rate ``b`` of the Gamma prior on ``tau``."""
        return self.family.noise_prior_rate

    def tau(self, theta):
        """Noise precision of ``theta`` (P,) or of each draw in a stack (S, P)."""
        theta = np.asarray(theta)
        return self.family.tau(theta[..., self.n_params - self.family.n_extra :])
