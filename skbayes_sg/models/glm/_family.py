"""The family of a generalised linear model: a likelihood in the linear predictor.

A family says how one row's log likelihood depends on its linear predictor
``z_i = x_i W + b + offset_i`` (K outputs) and on ``k`` extra parameters (the noise
precision of a Gaussian): the log likelihood, its first and second derivatives in ``z_i``
(and the extra parameters), and the predictive. Everything else, the products with the
rows, Hessians, leverages, per-example operators, multilevel paths and Taylor terms, the
:class:`~skbayes_sg.models.glm.GLM` derives from these, for every family alike.

Shapes: ``Z`` is (..., n, K), a stack of paths' predictors (M, n, K) included; ``y`` (..., n);
``extra`` the extra parameters of ``theta`` (P,) or of each path, (..., k).
"""

import numpy as np


def draw_predictors(W, b, X, offset=None):
    """Linear predictors of a stack of draws ``W`` (S, D, K), ``b`` (S, K) at rows ``X``, shape
    (n, S, K): one (n, D) @ (D, S K) product (sparse X too), intercepts added in place."""
    S, D, K = W.shape
    Z = np.asarray(X @ W.transpose(1, 0, 2).reshape(D, S * K)).reshape(-1, S, K)
    Z += b
    if offset is not None:
        Z += np.asarray(offset, dtype=float)[:, None, None]
    return Z


class Family:
    """The likelihood of one row in its linear predictor; subclass to add a GLM.

    Subclasses implement :meth:`log_likelihood`, :meth:`gradient_terms`,
    :meth:`curvature_state`, :meth:`apply_curvature` and the predictive
    (:meth:`predict_draws`, :meth:`log_likelihood_draws`).

    Attributes
    ----------
    n_outputs : int
        ``K``, the number of linear predictors of a row.
    n_extra : int
        ``k``, extra parameters after the weights and intercepts (their prior is the family's).
    y_dtype : numpy dtype
        The dtype the kernels compute with; each block's targets are converted to it.
    """

    n_outputs = 1
    n_extra = 0
    y_dtype = np.float64

    def extra_names(self):
        """Names of the extra parameters."""
        return []

    def log_likelihood(self, Z, y, extra):
        """``log p(y_i | z_i)``, shape (..., n)."""
        raise NotImplementedError

    def gradient_terms(self, Z, y, extra):
        """``(R, E)``: ``R = d loglik_i / dz_i`` (..., n, K) and the extra parameters' per-row
        gradients (..., n, k), or None without extra parameters."""
        raise NotImplementedError

    def draw_residuals(self, Z, y):
        """``R`` of :meth:`gradient_terms` for a family without extra parameters, with the rows
        first: ``Z`` (n, M, K) the predictors of M points at n rows (may be overwritten),
        ``y`` (n,). The full-data scores of many draws (the KSD's) compute this on every row
        for every draw, the elementwise work their pass is made of."""
        # No extra parameters: one empty vector (as for a single point) serves every draw.
        return self.gradient_terms(Z, np.broadcast_to(y[:, None], Z.shape[:2]), np.empty(0))[0]

    def curvature_state(self, Z, y):
        """What :meth:`apply_curvature` needs of each row at the predictor ``Z`` (kept per
        row at a Taylor expansion point)."""
        raise NotImplementedError

    def apply_curvature(self, extra, state, U, e_v):
        """``(S, Se)``: the derivatives of :meth:`gradient_terms` along a direction that moves
        the predictors by ``U`` (..., n, K) and the extra parameters by ``e_v`` (..., k)."""
        raise NotImplementedError

    def loglik_and_gradient_sums(self, Z, y, w, extra):
        """The summed log likelihood of the rows (weighted by ``w`` when given) and the pieces
        of its gradient: ``(ll, R, R_sum, E_sum)``, where the weights' gradient is ``X' R``,
        the intercepts' ``R_sum`` and the extra parameters' ``E_sum`` (None without).

        Families override it to fuse the work (one transcendental pass for both terms).
        """
        ll, (R, E) = self.log_likelihood(Z, y, extra), self.gradient_terms(Z, y, extra)
        if w is not None:
            ll = ll * w
            R *= w[:, None]
            if E is not None:
                E *= w[:, None]
        return float(ll.sum()), R, R.sum(axis=0), None if E is None else E.sum(axis=0)

    # -- the prior of the extra parameters (none by default) ------------------------------
    def extra_log_prior(self, extra):
        """Log prior density of the extra parameters (up to a constant)."""
        return 0.0

    def extra_prior_grad(self, extra):
        """Gradient of :meth:`extra_log_prior`, shape (..., k)."""
        return np.zeros_like(extra)

    def extra_prior_hvp(self, extra, v):
        """Hessian of :meth:`extra_log_prior` times the extra parameters' direction ``v`` (k,)."""
        return np.zeros(self.n_extra)

    # -- predictive -----------------------------------------------------------------------
    def predict_draws(self, W, b, extra, X, offset=None):
        """The predictive of each draw (``W`` (S, D, K), ``b`` (S, K), ``extra`` (S, k)) at rows ``X``."""
        raise NotImplementedError

    def predict_mean(self, W, b, extra, weights, X, offset=None):
        """Weighted average of :meth:`predict_draws` over the draws, or None for the model's
        generic average (families override it to avoid the stack of all draws)."""
        return None

    def log_likelihood_draws(self, W, b, extra, X, y, offset=None):
        """``log p(y_i | x_i, theta_s)`` of each draw, shape (S, n)."""
        raise NotImplementedError
