"""The GLMs' Gaussian prior on the weights and intercepts (``alpha="auto"``, which scales it
to the features, is in :mod:`._autoscale`)."""

import numpy as np


def prior_precisions(alpha, alpha_intercept, n_features, n_outputs, fit_intercept):
    """Validate a GLM's prior precisions and lay them out like ``theta``'s weights.

    Returns ``(alpha, alpha_intercept, prior_precision)``: ``alpha`` a float or an array of
    shape (D,) or (K, D) (the shape of ``coef_``), ``alpha_intercept`` a float (``alpha`` when None),
    and ``prior_precision`` the precision of each of the first ``D K (+ K)`` coordinates of
    ``theta``: a float when they all share one (the papers' isotropic prior, whose
    arithmetic then stays that of a scalar, draw for draw) and an array of that length
    otherwise.

    Raises
    ------
    ValueError
        If ``alpha`` has another shape, or a precision is not positive and finite.
    """
    D, K = n_features, n_outputs
    a = np.array(alpha, dtype=float)  # a copy: the model's prior must not follow later edits of the caller's
    if a.ndim == 0:
        a = float(a)
    elif a.shape not in ((D,), (K, D)):
        shapes = f"(n_features,) = ({D},)" + (f" or (n_classes, n_features) = ({K}, {D})" if K > 1 else "")
        raise ValueError(
            f"alpha has shape {a.shape}; expected a float (one prior precision for every weight) or an array "
            f"of shape {shapes}: one precision per feature{' (and class)' if K > 1 else ''}, 1 / s_j^2 for a "
            "prior sd s_j."
        )
    if not (np.all(np.isfinite(a)) and np.all(a > 0)):
        raise ValueError(f"alpha must hold positive, finite prior precisions; got {alpha!r}.")
    b = a if alpha_intercept is None else alpha_intercept
    if np.ndim(b) != 0:
        raise ValueError(f"alpha_intercept must be a float when alpha is an array; got {alpha_intercept!r}.")
    b = float(b)
    if not (np.isfinite(b) and b > 0):
        raise ValueError(f"alpha_intercept must be a positive, finite precision; got {alpha_intercept!r}.")
    if np.ndim(a) == 0 and (b == a or not fit_intercept):
        return a, b, a
    # theta's weights are W (D, K) row-major: coordinate j K + k is feature j of output k.
    weights = np.broadcast_to(a.T if np.ndim(a) == 2 else np.reshape(a, (-1, 1)), (D, K)).ravel()
    if fit_intercept:
        weights = np.concatenate([weights, np.full(K, b)])
    weights.flags.writeable = False
    return a, b, weights


class GaussianPrior:
    """``N(0, 1 / prior_precision)`` on the weights and intercepts of a GLM, the family's
    prior on its extra parameters (mixed into :class:`~skbayes_sg.models.glm.GLM`)."""

    #: ``-prior_precision`` padded with zeros to P, for a per-coefficient prior's gradient.
    _negative_precision = None

    def log_prior_and_grad(self, theta):
        n_w = self.n_params - self._n_extra
        w = theta[:n_w]
        prec = self.prior_precision
        lp = -0.5 * prec * float(w @ w) if np.ndim(prec) == 0 else -0.5 * float(w @ (prec * w))
        if self._n_extra:
            lp += self.family.extra_log_prior(theta[n_w:])
        return lp, self.grad_log_prior(theta)

    def grad_log_prior(self, theta):
        """Gradient of the log prior: ``-prior_precision * w`` on the weights and intercepts
        (of ``theta`` (P,) or of each row of a stack (M, P)), the family's on the extra
        parameters (the SG samplers' force adds it at every iteration)."""
        prec = self.prior_precision
        # The float test first: np.ndim costs half a microsecond, and this runs every step.
        if isinstance(prec, float) or np.ndim(prec) == 0:
            grad = theta * -prec
        else:
            # One multiply, as the scalar's: the force of every iteration includes it.
            neg = self._negative_precision
            if neg is None or neg.size != theta.shape[-1]:
                neg = self._negative_precision = np.concatenate([-prec, np.zeros(self._n_extra)])
            grad = theta * neg
        if self._n_extra:
            n_w = self.n_params - self._n_extra
            grad[..., n_w:] = self.family.extra_prior_grad(theta[..., n_w:])
        return grad

    def log_prior_hessian(self, theta):
        """Exact Hessian of the log prior: ``-prior_precision`` on the diagonal of the weights
        (and the extra coordinates' own prior curvature)."""
        P = self.n_params
        n_w = P - self._n_extra
        H = np.zeros((P, P))
        H[np.arange(n_w), np.arange(n_w)] = -self.prior_precision
        for j in range(n_w, P):
            e = np.zeros(P)
            e[j] = 1.0
            H[n_w:, j] = self._extra_prior_hvp(theta, e)
        return H

    def _extra_prior_hvp(self, theta, v):
        n_w = self.n_params - self._n_extra
        return self.family.extra_prior_hvp(theta[n_w:], v[n_w:])
