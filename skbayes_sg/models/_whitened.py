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
from ._gradients import TransformedPerExampleGradients, row_cache_closure


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
        # The last two points mapped to theta, keyed by their bytes (see _theta): a
        # control-variate step maps the fixed centre z_hat and then the position z twice
        # (for the likelihood and for the prior), each an O(P^2) product.
        self._theta_memo = {}

    # -- coordinates ------------------------------------------------------------------
    def to_theta(self, z):
        """``m + L z`` for ``z`` of shape (P,) or a stack (S, P)."""
        z = np.asarray(z, dtype=float)
        return self.m + (self.L * z if self.L.ndim == 1 else z @ self.L.T)

    def _theta(self, z, slot):
        """``to_theta(z)`` for one point ``z`` (P,), remembered per ``slot`` while ``z`` keeps its value.

        The key is the bytes of ``z``, not its identity: the samplers move their position in
        place, so the same array holds a new point after every drift. The result is read-only,
        since the next caller with the same ``z`` receives the same array.
        """
        z = np.asarray(z, dtype=float)
        key = z.tobytes()
        hit = self._theta_memo.get(slot)
        if hit is not None and hit[0] == key:
            return hit[1]
        theta = self.to_theta(z)
        theta.flags.writeable = False
        self._theta_memo[slot] = (key, theta)
        return theta

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_theta_memo"] = {}  # rebuilt on first use; not worth shipping to a worker
        return state

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
    #: The per-example gradients in these coordinates (``L'`` applied to each row's).
    _per_example_type = TransformedPerExampleGradients

    def _weights(self, idx):
        """Row weights of the per-example gradients for a non-diagonal ``L``, or None."""
        if np.ndim(self.L) == 1:
            return None
        fn = getattr(self.model, "whitened_row_weights", None)
        if fn is None:
            return None
        return row_cache_closure(lambda: fn(self.L, idx), getattr(self.model, "_cache_row_norms", False))

    def per_example_gradients(self, z, idx):
        inner = self.model.per_example_gradients(self._theta(z, "z"), idx)
        return self._per_example_type(inner, self.L, self._weights(idx))

    def per_example_gradient_differences(self, z, z_hat, idx):
        # The centre gets its own slot: it never moves, so it is mapped once per chain.
        inner = self.model.per_example_gradient_differences(self._theta(z, "z"), self._theta(z_hat, "centre"), idx)
        return self._per_example_type(inner, self.L, self._weights(idx))

    def log_likelihood_and_grad(self, z, idx=None):
        ll, g = self.model.log_likelihood_and_grad(self.to_theta(z), idx)
        return ll, self._right(g)

    def log_prior_and_grad(self, z):
        lp, g = self.model.log_prior_and_grad(self.to_theta(z))
        return lp, self._right(g)

    def grad_log_prior(self, z):
        # Called right after the likelihood terms at the same z (MinibatchGradient.gradient).
        return self._right(self.model.grad_log_prior(self._theta(z, "z")))

    def log_posterior_and_grad(self, z):
        lp, g = self.model.log_posterior_and_grad(self.to_theta(z))
        return lp, self._right(g)

    def grad_log_posterior_draws(self, z):
        return self._right(self.model.grad_log_posterior_draws(self.to_theta(np.atleast_2d(z))))

    def loglik_hvp(self, z, v, idx=None):
        return self._right(self.model.loglik_hvp(self.to_theta(z), self._left(v), idx))

    def hessian_vector_product(self, z, v, eps=None):
        return self._right(self.model.hessian_vector_product(self.to_theta(z), self._left(v)))

    # -- many paths and dense curvature: the model's (vectorised for a GLM), in z -----------
    # theta = m + L z maps directions by L and gradients by L' (so Hessians by L' . L); the
    # Taylor remainder is a gradient, and theta - theta0 = L (z - z0).
    def _left_rows(self, V):
        """``L v`` for each row ``v`` of ``V`` (M, P)."""
        return self.L * V if self.L.ndim == 1 else V @ self.L.T

    def _congruent(self, H):
        """``L' H L`` for a (P, P) matrix ``H``."""
        return self.L[:, None] * H * self.L if self.L.ndim == 1 else self.L.T @ H @ self.L

    def grad_log_prior_paths(self, zs):
        return self._right(self.model.grad_log_prior_paths(self.to_theta(np.atleast_2d(zs))))

    def loglik_grad_paths(self, zs, idx):
        return self._right(self.model.loglik_grad_paths(self.to_theta(np.atleast_2d(zs)), idx))

    def loglik_hvp_paths(self, zs, V, idx):
        V = np.atleast_2d(np.asarray(V, dtype=float))
        return self._right(self.model.loglik_hvp_paths(self.to_theta(zs), self._left_rows(V), idx))

    def taylor_cache(self, z0):
        return self.model.taylor_cache(self.to_theta(z0))

    def taylor_remainder_paths(self, zs, z0, idx, cache=None):
        return self._right(
            self.model.taylor_remainder_paths(self.to_theta(np.atleast_2d(zs)), self.to_theta(z0), idx, cache)
        )

    def loglik_hessian(self, z, chunk=None):
        return self._congruent(self.model.loglik_hessian(self.to_theta(z), chunk))

    def log_prior_hessian(self, z):
        return self._congruent(self.model.log_prior_hessian(self.to_theta(z)))

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

    def prefetch_rows(self, idx, owner=None):
        self.model.prefetch_rows(idx, owner)
