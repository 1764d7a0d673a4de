"""Minibatch gradients and Hessian-vector products of the log likelihood, for many paths at once.

The multilevel SGLD estimator (Nagapetyan et al. 2017) simulates thousands of short,
independent SGLD paths per level. Stepping them one at a time would spend its time in
Python overhead, so they are stepped together: ``thetas`` is a stack (M, P) of parameter
vectors and ``idx`` an (M, n) array holding each path's minibatch rows. This module gives,
for such stacks,

- :func:`loglik_grad_paths`: ``sum_{i in idx_m} grad log p(x_i | theta_m)``, (M, P);
- :func:`loglik_hvp_paths`: ``sum_{i in idx_m} Hess log p(x_i | theta_m) v_m``, (M, P): the
  per-example Hessian-vector products that the Taylor-based stochastic gradient of the
  paper's section 3.4 subsamples;
- :func:`taylor_remainder_paths`: the subsampled remainder of that section's eq. 11,
  ``sum_i [g_i(theta) - g_i(theta_0) - H_i(theta_0) (theta - theta_0)]``, in one pass;
- :func:`log_prior_grad_paths`: the prior's gradient for each path;

with single-vector forms :func:`loglik_hvp` (the proposed ``Model`` method) and the full
matrices :func:`loglik_hessian` / :func:`posterior_hessian` (formed once, at the MAP).

The GLMs of :mod:`skbayes_sg.models.glm` get exact vectorised forms built from their public
attributes (``X``, ``y``, ``unpack``, ``prior_precision``, ``fit_intercept``, ``noise_precision``...).
For a GLM example ``i`` the log likelihood depends on ``theta`` only through the linear
predictor ``z_i = x_i W + b`` (K,) and extra coordinates ``e`` (linear regression's
``s = log tau``), so with ``x~_i = (x_i, 1)``

``g_i = x~_i (x) r_i,    H_i v = x~_i (x) (d r_i / dz_i [u_i] + d r_i / de [v_e]),``

``u_i = x_i V_W + v_b``, where ``r_i = d log p / dz_i``: every product is two minibatch
matrix products, O(n P), and no n x P or P x P matrix is formed. Any other model falls
back to a loop over paths with a central finite difference of its gradients.
"""

import numpy as np
from scipy.special import expit, softmax

from .glm import LinearRegressionModel, LogisticModel, SoftmaxModel

__all__ = [
    "loglik_grad_paths",
    "loglik_hvp_paths",
    "taylor_remainder_paths",
    "taylor_cache",
    "log_prior_grad_paths",
    "loglik_hvp",
    "loglik_hessian",
    "posterior_hessian",
]


# -- GLM kernels: residuals r = d ll / dz and their derivatives, per example -----------------
class _GLMKernel:
    """Vectorised per-example terms of a GLM over a stack of paths (internal)."""

    def __init__(self, model):
        self.model = model
        self.D = model.n_features
        self.K = model.n_outputs
        self.n_w = self.D * self.K + (self.K if model.fit_intercept else 0)

    def gather(self, idx):
        """Minibatch features (M, n, D) and targets (M, n) for row indices (M, n)."""
        X = self.model.X
        if hasattr(X, "toarray"):
            Xb = X[idx.ravel()].toarray().reshape(*idx.shape, self.D)
        else:
            Xb = X[idx]
        return Xb, self.model.y[idx]

    def weigh(self, idx, R, E=None):
        """``R`` (M, n, K) and ``E`` with each row's terms scaled by its likelihood weight, in
        place (the model's ``sample_weight``; unchanged when it has none)."""
        w = self.model.sample_weight
        if w is not None:
            wb = w[idx][..., None]
            R *= wb
            if E is not None:
                E *= wb
        return R, E

    def split(self, thetas):
        W, b, e = self.model.unpack(thetas)
        return W, b, e

    def predictor(self, thetas, Xb):
        """Linear predictor Z (M, n, K)."""
        W, b, _ = self.split(thetas)
        return np.matmul(Xb, W) + b[:, None, :]

    def project(self, Xb, R, E=None):
        """``sum_i x~_i (x) R_i`` (and ``sum_i E_i`` for extra coordinates), shape (M, P)."""
        M = Xb.shape[0]
        parts = [np.matmul(Xb.transpose(0, 2, 1), R).reshape(M, -1)]
        if self.model.fit_intercept:
            parts.append(R.sum(axis=1))
        if E is not None:
            parts.append(E.sum(axis=1))
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]

    # Subclasses give residuals(Z, e, yb) -> (R, E), the per-row curvature state at Z,
    # curv_state(Z, e, yb), and apply_curv(state, e, U, ve) -> (S, Se): the second derivative
    # of each row's log likelihood applied to the direction (U, ve). Splitting the state out
    # lets the Taylor gradient cache it per row at theta_0.
    def residuals(self, Z, e, yb):
        raise NotImplementedError

    def curv_state(self, Z, e, yb):
        raise NotImplementedError

    def apply_curv(self, state, e, U, ve):
        raise NotImplementedError

    def curvature(self, Z, e, yb, U, ve):
        return self.apply_curv(self.curv_state(Z, e, yb), e, U, ve)


class _LogisticKernel(_GLMKernel):
    def residuals(self, Z, e, yb):
        return yb[..., None] - expit(Z), None

    def curv_state(self, Z, e, yb):
        s = expit(Z)
        return s * (1.0 - s)

    def apply_curv(self, state, e, U, ve):
        return -state * U, None


class _SoftmaxKernel(_GLMKernel):
    def residuals(self, Z, e, yb):
        R = -softmax(Z, axis=-1)
        np.put_along_axis(R, yb[..., None], np.take_along_axis(R, yb[..., None], axis=-1) + 1.0, axis=-1)
        return R, None

    def curv_state(self, Z, e, yb):
        return softmax(Z, axis=-1)

    def apply_curv(self, p, e, U, ve):
        # d(onehot - p)/dZ [U] = -(diag(p) - p p') U
        pU = p * U
        return -(pU - p * pU.sum(axis=-1, keepdims=True)), None


class _LinearKernel(_GLMKernel):
    """Gaussian linear regression; with ``noise_precision=None`` the extra ``s = log tau``.

    ``ll_i = s/2 - e^s r_i^2 / 2 + const`` with ``r_i = y_i - z_i``: ``d ll/dz = tau r``,
    ``d ll/ds = 1/2 - tau r^2/2``, ``d2/dz2 = -tau``, ``d2/dz ds = tau r``,
    ``d2/ds2 = -tau r^2 / 2``.
    """

    def _tau(self, e):
        m = self.model
        if m.noise_precision is not None:
            return np.full((e.shape[0], 1), m.noise_precision)
        return np.exp(e[:, :1])

    def residuals(self, Z, e, yb):
        tau = self._tau(e)[:, :, None]  # (M, 1, 1)
        r = yb[..., None] - Z
        R = tau * r
        E = None if self.model.noise_precision is not None else 0.5 - 0.5 * R * r
        return R, E

    def curv_state(self, Z, e, yb):
        return yb[..., None] - Z

    def apply_curv(self, r, e, U, ve):
        tau = self._tau(e)[:, :, None]
        if self.model.noise_precision is not None:
            return -tau * U, None
        vs = ve[:, None, :1]  # (M, 1, 1)
        S = -tau * U + tau * r * vs
        Se = tau * r * U - 0.5 * tau * r * r * vs
        return S, Se


def _kernel(model):
    if isinstance(model, LogisticModel):
        return _LogisticKernel(model)
    if isinstance(model, SoftmaxModel):
        return _SoftmaxKernel(model)
    if isinstance(model, LinearRegressionModel):
        return _LinearKernel(model)
    return None


def _direction(kernel, Xb, V):
    """``u_i = x_i V_W + v_b`` (M, n, K) and the extra part ``v_e`` of direction stack V."""
    Wv, bv, ev = kernel.split(V)
    return np.matmul(Xb, Wv) + bv[:, None, :], ev


# -- public functions --------------------------------------------------------------------
def _as_paths(thetas, idx):
    thetas = np.atleast_2d(np.asarray(thetas, dtype=float))
    idx = np.atleast_2d(np.asarray(idx, dtype=np.intp))
    if idx.shape[0] != thetas.shape[0]:
        raise ValueError(f"thetas has {thetas.shape[0]} paths but idx has {idx.shape[0]} rows.")
    return thetas, idx


def loglik_grad_paths(model, thetas, idx):
    """Minibatch sums of per-example log-likelihood gradients, one minibatch per path.

    Parameters
    ----------
    model : Model
    thetas : ndarray of shape (M, P)
    idx : ndarray of int of shape (M, n)
        Rows of path ``m``'s minibatch.

    Returns
    -------
    ndarray of shape (M, P)
        ``sum_{i in idx[m]} grad log p(x_i | thetas[m])``.
    """
    thetas, idx = _as_paths(thetas, idx)
    k = _kernel(model)
    if k is None:
        return np.stack([model.per_example_gradients(t, i).mean() * i.size for t, i in zip(thetas, idx)])
    Xb, yb = k.gather(idx)
    W, b, e = k.split(thetas)
    R, E = k.weigh(idx, *k.residuals(k.predictor(thetas, Xb), e, yb))
    return k.project(Xb, R, E)


def _fd_hvp(model, theta, v, idx):
    """Central difference of the minibatch log-likelihood gradient along ``v`` (fallback)."""
    norm = np.linalg.norm(v)
    if norm == 0:
        return np.zeros_like(v)
    eps = 1e-5 * max(1.0, np.linalg.norm(theta)) / norm
    gp = model.per_example_gradients(theta + eps * v, idx)
    gm = model.per_example_gradients(theta - eps * v, idx)
    return (gp.mean() - gm.mean()) * gp.n_batch / (2 * eps)


def loglik_hvp_paths(model, thetas, V, idx):
    """Minibatch sums of per-example log-likelihood Hessian-vector products.

    Parameters
    ----------
    model : Model
    thetas : ndarray of shape (M, P) or (P,)
        Points (one shared point is broadcast over the paths).
    V : ndarray of shape (M, P)
        One direction per path.
    idx : ndarray of int of shape (M, n)

    Returns
    -------
    ndarray of shape (M, P)
        ``sum_{i in idx[m]} Hess log p(x_i | thetas[m]) V[m]`` (the log likelihood's Hessian,
        negative semi-definite for log-concave likelihoods).
    """
    V = np.atleast_2d(np.asarray(V, dtype=float))
    thetas = np.broadcast_to(np.asarray(thetas, dtype=float), V.shape)
    thetas, idx = _as_paths(thetas, idx)
    k = _kernel(model)
    if k is None:
        return np.stack([_fd_hvp(model, t, v, i) for t, v, i in zip(thetas, V, idx)])
    Xb, yb = k.gather(idx)
    _, _, e = k.split(thetas)
    U, ve = _direction(k, Xb, V)
    S, Se = k.weigh(idx, *k.curvature(k.predictor(thetas, Xb), e, yb, U, ve))
    return k.project(Xb, S, Se)


def taylor_remainder_paths(model, thetas, theta0, idx, cache=None):
    """Subsampled Taylor remainder of the paper's eq. 11 (section 3.4), per path.

    ``sum_{i in idx[m]} [g_i(theta_m) - g_i(theta_0) - H_i(theta_0) (theta_m - theta_0)]``
    with ``g_i``, ``H_i`` the gradient and Hessian of ``log p(x_i | .)``. It is small when
    ``theta_m`` is near ``theta_0`` (zero for a Gaussian likelihood with fixed noise), which
    is what makes the Taylor-based stochastic gradient's variance small.

    Parameters
    ----------
    model : Model
    thetas : ndarray of shape (M, P)
    theta0 : ndarray of shape (P,)
        The expansion point (the MAP in the paper).
    idx : ndarray of int of shape (M, n)
    cache : object, optional
        :func:`taylor_cache` of ``(model, theta0)``, to reuse across calls.

    Returns
    -------
    ndarray of shape (M, P)
    """
    thetas, idx = _as_paths(thetas, idx)
    theta0 = np.asarray(theta0, dtype=float)
    k = _kernel(model)
    delta = thetas - theta0
    if k is None:
        t0 = np.broadcast_to(theta0, thetas.shape)
        return (loglik_grad_paths(model, thetas, idx) - loglik_grad_paths(model, t0, idx)
                - loglik_hvp_paths(model, theta0, delta, idx))
    # The linear predictor is linear in theta, so the direction u_i = x~_i (theta - theta_0)
    # is z_i - z0_i; z0 and the residuals at theta_0 are cached per row once per theta_0.
    z0_all, r0_all, e0_all, c0_all = taylor_cache(model, theta0) if cache is None else cache
    Xb, yb = k.gather(idx)
    _, _, e = k.split(thetas)
    e0 = np.broadcast_to(k.split(theta0[None])[2], e.shape)
    Z = k.predictor(thetas, Xb)
    Z0 = z0_all[idx]
    R, E = k.residuals(Z, e, yb)
    S, Se = k.apply_curv(c0_all[idx], e0, Z - Z0, delta[:, k.n_w:])
    R -= r0_all[idx]
    R -= S
    E_rem = None if E is None else E - e0_all[idx] - Se
    # The cache holds the unweighted terms at theta_0: the weights scale the remainder.
    R, E_rem = k.weigh(idx, R, E_rem)
    return k.project(Xb, R, E_rem)


def taylor_cache(model, theta0):
    """Per-row linear predictor and residuals of a GLM at ``theta0`` (None for other models),
    unweighted (:func:`taylor_remainder_paths` applies the model's row weights).

    One full-data pass, done once per expansion point; :func:`taylor_remainder_paths` then
    needs only the minibatch at the current point.
    """
    k = _kernel(model)
    if k is None:
        return None
    theta0 = np.asarray(theta0, dtype=float)
    rows = np.arange(model.n_samples)[None]
    Xb, yb = k.gather(rows)
    t0 = theta0[None]
    Z0 = k.predictor(t0, Xb)
    e0 = k.split(t0)[2]
    R0, E0 = k.residuals(Z0, e0, yb)
    return Z0[0], R0[0], None if E0 is None else E0[0], k.curv_state(Z0, e0, yb)[0]


def log_prior_grad_paths(model, thetas):
    """Gradient of the log prior for each row of ``thetas`` (M, P)."""
    thetas = np.atleast_2d(np.asarray(thetas, dtype=float))
    k = _kernel(model)
    if k is None:
        return np.stack([model.log_prior_and_grad(t)[1] for t in thetas])
    grad = np.zeros_like(thetas)
    grad[:, : k.n_w] = thetas[:, : k.n_w] * -model.prior_precision
    if isinstance(model, LinearRegressionModel) and model.noise_precision is None:
        grad[:, -1] = model.noise_prior_shape - model.noise_prior_rate * np.exp(thetas[:, -1])
    return grad


def loglik_hvp(model, theta, v, idx=None):
    """``sum_{i in idx} Hess log p(x_i | theta) v``: one minibatch Hessian-vector product.

    The method proposed for the ``Model`` interface (``Model.loglik_hvp``); ``idx=None``
    means all rows.

    Parameters
    ----------
    model : Model
    theta, v : ndarray of shape (P,)
    idx : ndarray of int, optional

    Returns
    -------
    ndarray of shape (P,)
    """
    rows = np.arange(model.n_samples) if idx is None else np.asarray(idx, dtype=np.intp)
    return loglik_hvp_paths(model, theta, np.asarray(v, dtype=float)[None], rows[None])[0]


def _columns_hessian(hvp, P, chunk):
    H = np.empty((P, P))
    eye = np.eye(P)
    for start in range(0, P, chunk):
        stop = min(P, start + chunk)
        H[:, start:stop] = hvp(eye[start:stop]).T
    return 0.5 * (H + H.T)


def loglik_hessian(model, theta, chunk=None):
    """Full-data Hessian of the log likelihood at ``theta``, (P, P), formed once.

    Computed column block by column block from :func:`loglik_hvp_paths` (exact for the
    GLMs), with all rows as each column's minibatch. Memory O(P^2 + chunk N D); meant for
    the once-per-fit expansion point of the Taylor-based gradient, not for a hot path.
    """
    theta = np.asarray(theta, dtype=float)
    P, N = theta.size, model.n_samples
    chunk = chunk or max(1, min(P, 2**22 // max(1, N * max(1, getattr(model, "n_features", P)))))
    rows = np.arange(N)

    def hvp(V):
        return loglik_hvp_paths(model, theta, V, np.broadcast_to(rows, (V.shape[0], N)))

    return _columns_hessian(hvp, P, chunk)


def posterior_hessian(model, theta):
    """Hessian of the full-data log posterior at ``theta``, (P, P) (negative definite at a mode).

    The log-likelihood part from :func:`loglik_hessian`; the prior part exact for the GLMs
    and a central difference of ``log_prior_and_grad`` otherwise.
    """
    theta = np.asarray(theta, dtype=float)
    H = loglik_hessian(model, theta)
    k = _kernel(model)
    P = theta.size
    if k is not None:
        H[np.arange(k.n_w), np.arange(k.n_w)] -= model.prior_precision
        if isinstance(model, LinearRegressionModel) and model.noise_precision is None:
            H[-1, -1] -= model.noise_prior_rate * np.exp(theta[-1])
        return H
    eps = 1e-5 * max(1.0, np.linalg.norm(theta))
    Hp = np.empty((P, P))
    for j in range(P):
        e = np.zeros(P)
        e[j] = eps
        Hp[:, j] = (model.log_prior_and_grad(theta + e)[1] - model.log_prior_and_grad(theta - e)[1]) / (2 * eps)
    return H + 0.5 * (Hp + Hp.T)
