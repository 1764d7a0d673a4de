"""The Normal-Gamma example of the CCAdL paper (Shang et al. 2015, section 4.1).

Data ``x_i ~ N(mu, 1/gamma)`` with the conjugate prior
``mu | gamma ~ N(0, 1/gamma)``, ``gamma ~ Gamma(1, 1)``. The posterior is Normal-Gamma in
closed form, and the per-example gradient noise depends on ``(mu, gamma)``: the test case
for samplers that must handle parameter-dependent noise (the paper's Table 1).
"""

import numpy as np
from scipy import stats

from ._base import Model
from ._gradients import DensePerExampleGradients


class NormalGammaModel(Model):
    """Mean ``mu`` and precision ``gamma`` of a normal sample, ``theta = (mu, gamma)``.

    ``gamma`` is sampled directly, as in the paper (its stochastic gradients, section 4.1,
    are in ``gamma``, not ``log gamma``); for ``gamma <= 0`` the log posterior is ``-inf``.

    Parameters
    ----------
    x : array of shape (N,)
        The observations.
    """

    _data_attributes = ("x",)
    n_params = 2

    def __init__(self, x):
        self.x = np.asarray(x, dtype=float).ravel()
        self.n_samples = self.x.size

    def _per_example(self, theta, x):
        mu, gamma = theta
        d = x - mu
        # d/dmu and d/dgamma of 0.5 log gamma - 0.5 gamma (x - mu)^2
        return np.column_stack([gamma * d, 0.5 / gamma - 0.5 * d * d])

    def per_example_gradients(self, theta, idx):
        return DensePerExampleGradients(self._per_example(theta, self.x[idx]))

    def log_likelihood_and_grad(self, theta, idx=None):
        x = self.x if idx is None else self.x[idx]
        mu, gamma = theta
        if gamma <= 0:
            return -np.inf, np.zeros(2)
        d = x - mu
        ll = 0.5 * x.size * np.log(gamma / (2 * np.pi)) - 0.5 * gamma * float(d @ d)
        return float(ll), self._per_example(theta, x).sum(axis=0)

    def log_prior_and_grad(self, theta):
        mu, gamma = theta
        if gamma <= 0:
            return -np.inf, np.zeros(2)
        # N(mu | 0, 1/gamma) Gamma(gamma | 1, 1)
        lp = 0.5 * np.log(gamma) - 0.5 * gamma * mu * mu - gamma
        return float(lp), np.array([-gamma * mu, 0.5 / gamma - 0.5 * mu * mu - 1.0])

    def initial_point(self):
        return np.array([0.0, 1.0])

    def posterior(self):
        """Exact posterior marginals ``(mu, gamma)`` as frozen scipy distributions.

        ``gamma | x ~ Gamma(alpha_N, beta_N)`` and, integrating ``gamma`` out,
        ``mu | x ~ t_{2 alpha_N}(mu_N, beta_N / (alpha_N kappa_N))`` with
        ``mu_N = N xbar / (N + 1)``, ``kappa_N = 1 + N``, ``alpha_N = 1 + N / 2``,
        ``beta_N = 1 + sum (x_i - xbar)^2 / 2 + N xbar^2 / (2 (1 + N))`` (section 4.1).
        """
        N, x = self.n_samples, self.x
        xbar = x.mean()
        mu_N = N * xbar / (N + 1)
        kappa_N = 1.0 + N
        alpha_N = 1.0 + N / 2
        beta_N = 1.0 + 0.5 * np.sum((x - xbar) ** 2) + N * xbar**2 / (2 * (1 + N))
        mu = stats.t(df=2 * alpha_N, loc=mu_N, scale=np.sqrt(beta_N / (alpha_N * kappa_N)))
        gamma = stats.gamma(a=alpha_N, scale=1.0 / beta_N)
        return mu, gamma

    def predict_draws(self, thetas, X=None):
        """Per-draw ``(mu, gamma)``: the model predicts nothing beyond its parameters."""
        return np.asarray(thetas)
