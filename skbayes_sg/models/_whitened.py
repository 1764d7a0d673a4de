"""A model seen in whitened coordinates ``theta = m + L z``: the preconditioned target.

Every sampler of the library is a scheme for ``d theta = ...`` with an identity mass; run
on this model it is the *same* scheme in the coordinates ``z``, which is the paper's scheme
with mass matrix / preconditioner ``(L L')^-1`` in ``theta`` (for Langevin dynamics a
linear change of variables and a constant metric are one thing). With ``L`` the Cholesky
factor of the inverse Hessian at the mode, the posterior in ``z`` is close to ``N(0, I)``
whatever the scaling or correlation of the features, so one step size serves every
direction.
"""

import numpy as np

from ._base import Model
from ._gradients import TransformedPerExampleGradients


class WhitenedModel(Model):
    """``model`` in the coordinates ``z``, ``theta = m + L z``.

    Gradients are ``L'`` times the model's (chain rule); the log density is the model's
    (the Jacobian ``|L|`` is a constant). The predictive is the model's applied to
    ``theta``.

    Parameters
    ----------
    model : Model
    m : ndarray of shape (P,)
        Centre, typically the MAP.
    L : ndarray of shape (P, P) lower triangular, or (P,) for a diagonal
    """

    def __init__(self, model, m, L):
        self.model = model
        self.m = np.asarray(m, dtype=float)
        self.L = np.asarray(L, dtype=float)
        self.n_samples = model.n_samples
        self.n_params = model.n_params
        self._row_weight_cache = None

    # -- coordinates ------------------------------------------------------------------
    def to_theta(self, z):
        """``m + L z`` for ``z`` of shape (P,) or a stack (S, P)."""
        z = np.asarray(z, dtype=float)
        return self.m + (self.L * z if self.L.ndim == 1 else z @ self.L.T)

    def from_theta(self, theta):
        """``L^-1 (theta - m)``."""
        d = np.asarray(theta, dtype=float) - self.m
        if self.L.ndim == 1:
            return d / self.L
        from scipy.linalg import solve_triangular

        return solve_triangular(self.L, d.T, lower=True).T

    def _right(self, g):
        """``L' g``."""
        return self.L * g if self.L.ndim == 1 else g @ self.L

    def _left(self, v):
        return self.L * v if self.L.ndim == 1 else self.L @ v

    # -- gradients ----------------------------------------------------------------------
    def _weights(self, idx):
        """Row weights of :class:`TransformedPerExampleGradients` for dense ``L``, or None."""
        if self.L.ndim == 1:
            return None
        fn = getattr(self.model, "whitened_row_weights", None)
        if fn is None:
            return None
        return lambda: fn(self.L, idx)

    def per_example_gradients(self, z, idx):
        inner = self.model.per_example_gradients(self.to_theta(z), idx)
        return TransformedPerExampleGradients(inner, self.L, self._weights(idx))

    def per_example_gradient_differences(self, z, z_hat, idx):
        inner = self.model.per_example_gradient_differences(self.to_theta(z), self.to_theta(z_hat), idx)
        return TransformedPerExampleGradients(inner, self.L, self._weights(idx))

    def log_likelihood_and_grad(self, z, idx=None):
        ll, g = self.model.log_likelihood_and_grad(self.to_theta(z), idx)
        return ll, self._right(g)

    def log_prior_and_grad(self, z):
        lp, g = self.model.log_prior_and_grad(self.to_theta(z))
        return lp, self._right(g)

    def grad_log_prior(self, z):
        return self._right(self.model.grad_log_prior(self.to_theta(z)))

    def log_posterior_and_grad(self, z):
        lp, g = self.model.log_posterior_and_grad(self.to_theta(z))
        return lp, self._right(g)

    def loglik_hvp(self, z, v, idx=None):
        return self._right(self.model.loglik_hvp(self.to_theta(z), self._left(v), idx))

    def hessian_vector_product(self, z, v, eps=None):
        return self._right(self.model.hessian_vector_product(self.to_theta(z), self._left(v)))

    # -- naming, start and predictive: the model's, in theta ------------------------------
    def param_names(self, feature_names=None, class_names=None):
        return self.model.param_names(feature_names, class_names)

    def initial_point(self):
        return self.from_theta(self.model.initial_point())

    def predict_draws(self, thetas, X):
        return self.model.predict_draws(thetas, X)

    def __sizeof__(self):
        return object.__sizeof__(self) + self.model.__sizeof__() + self.L.nbytes

    def without_data(self):
        return self.model.without_data()
