"""Shared pieces of the prototype: data, model, library starts, dense per-example gradients,
the whitening map L and the standalone mCCAdL sampler (BAODCDOAB) in whitened coordinates.

theta = theta0 + L z with L = I + V (D - 1) V', D = diag(lambda^-1/2), V (P, k) orthonormal
eigenvectors of the empirical Fisher F = G'G + alpha I (G: full-data per-example gradients of
log p(y_i | x_i, theta) at the chain's position after warm-up). L is symmetric (L' = L).
The sampler keeps theta itself (the drift adds L (delta p)), the momentum p in z.
Forces in z: L' grad_theta; per-example gradients in z: G L.
"""

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from drbm_digits_defaults import _data  # noqa: E402

from skbayes_sg.drbm import _START_STREAM, MONITOR_ROWS  # noqa: E402
from skbayes_sg.models.drbm import DRBMModel  # noqa: E402

H, ALPHA, BATCH = 50, 1.0, 100
#: Where the runs' arrays go (large: not kept in the repository).
OUT = Path(os.environ.get("DRBM_WHITENING_DIR", "/tmp/drbm_lowrank_whitening"))
A_FRICTION, T = 1.0, 1.0
H_LIB = 0.017630882011992467  # the library's step for random_state=0 (lib_fit.json)


def setup():
    Xtr, Xte, ytr, yte = _data()
    model = DRBMModel(
        Xtr,
        ytr,
        n_classes=10,
        n_hidden=H,
        alpha=ALPHA,
        fit_intercept=True,
        init_scale=0.1,
        operator_dtype="float64",
        dtype="float64",
    )
    n = Xtr.shape[0]
    mon_rows = np.unique(np.linspace(0, n - 1, min(n, MONITOR_ROWS)).round().astype(np.intp))
    return model, Xtr, ytr, Xte, yte, mon_rows


def library_starts(model, n_chains=4, entropy=0):
    rng = np.random.default_rng(np.random.SeedSequence([entropy, _START_STREAM]))
    return np.stack([model.random_point(rng) for _ in range(n_chains)])


def dense_grads(model, theta, idx):
    """Per-example gradients of log p(y_i | x_i) as a dense (n, P) matrix, from the
    operator's factors: g_i = [vec(a_i x_i'), vec(A_i), a_i, r_i]."""
    op = model.per_example_gradients(theta, idx)
    A, a, r, X = op.A, op.a, op.r, np.asarray(op.X)
    n = a.shape[0]
    GW = (a[:, :, None] * X[:, None, :]).reshape(n, -1)
    return np.concatenate([GW, A.reshape(n, -1), a, r], axis=1)


class Whitening:
    """L = I + V (d - 1) V' with d = lambda^-1/2 (k = 0: identity)."""

    def __init__(self, V=None, lam=None):
        self.V = V
        self.k = 0 if V is None else V.shape[1]
        if self.k:
            self.dm1 = lam**-0.5 - 1.0  # D - 1
            self.d2m1 = 1.0 / lam - 1.0  # D^2 - 1

    def apply(self, v):  # L v (= L' v)
        if not self.k:
            return v.copy()
        return v + self.V @ (self.dm1 * (self.V.T @ v))


def fisher_topk(model, theta, k, alpha=ALPHA):
    """Top-k eigenpairs of F = G'G + alpha I at theta (full data), from the N x N Gram."""
    G = dense_grads(model, theta, np.arange(model.n_samples))
    s, U = np.linalg.eigh(G @ G.T)
    order = np.argsort(s)[::-1]
    s, U = s[order], U[:, order]
    V = G.T @ U[:, :k] / np.sqrt(s[:k])
    return s + alpha, V, G


def ou(p, xi, delta, rng):
    noise = rng.standard_normal(p.shape)
    diffusion = A_FRICTION * T
    if xi == 0.0:
        return p + math.sqrt(2 * diffusion * delta) * noise
    decay = math.exp(-xi * delta)
    var = diffusion * -math.expm1(-2.0 * xi * delta) / xi
    return p * decay + math.sqrt(var) * noise


class Chain:
    """One mCCAdL chain (BAODCDOAB) in the coordinates of ``wh``; momentum p in z."""

    def __init__(self, model, theta, rng, h, wh=None, p=None, xi=A_FRICTION):
        self.model, self.rng, self.h = model, rng, h
        self.wh = wh or Whitening()
        self.theta = theta.copy()
        P = theta.size
        self.P, self.mu = P, float(P)
        self.N = model.n_samples
        self.noise_scale = self.N * self.N / BATCH
        self.p = rng.standard_normal(P) * math.sqrt(T) if p is None else p.copy()
        self.xi = float(xi)
        self.force_z = self._force(self.theta)
        self.kin = []
        self.n_steps_done = 0

    def set_whitening(self, wh, h):
        """Change coordinates at the current point (theta kept). The momentum is kept as it is:
        at stationarity it is N(0, T I) in any coordinates, independent of theta."""
        self.wh, self.h = wh, h
        self.force_z = self._force(self.theta)

    def _rows(self):
        return self.rng.integers(0, self.N, size=BATCH)

    def _force(self, theta):
        idx = self._rows()
        op = self.model.per_example_gradients(theta, idx)
        f = op.mean() * self.N - ALPHA * theta
        return self.wh.apply(f)

    def _c_step(self, p):
        """p <- exp(-(h^2/2) beta noise_scale V_z) p, V_z the unbiased covariance of the rows
        G L of an independent minibatch at theta, through the n x n centred Gram's eigenpairs."""
        h = self.h
        wh = self.wh
        op = self.model.per_example_gradients(self.theta, self._rows())
        n = op.n_batch
        c = -h * (0.5 * h / T) * self.noise_scale / (n - 1)
        K = np.asarray(op.gram(), dtype=float)  # G G', centred below: Bc Bc'
        row = K.mean(axis=1)
        K -= row[:, None]
        K -= row[None, :]
        K += row.mean()
        gbar = op.mean()
        if wh.k:
            # Bc V (n, k): k products with the rows, the extra work of whitening.
            BV = np.stack([op.matvec(wh.V[:, j]) for j in range(wh.k)], axis=1) - gbar @ wh.V
            K += (BV * wh.d2m1) @ BV.T
        lam, Q = np.linalg.eigh(0.5 * (K + K.T))
        lam = np.clip(lam, 0.0, None)
        x = c * lam
        with np.errstate(divide="ignore", invalid="ignore"):
            phi = np.where(np.abs(x) > 1e-12, np.expm1(x) / np.where(lam > 0, lam, 1.0), c)
        Lp = wh.apply(p)
        u = op.matvec(Lp) - gbar @ Lp  # Bz p = Bc L p
        y = Q @ (phi * (Q.T @ u))
        y -= y.mean()  # Bc' y = G' (y - mean y) for sum-zero y
        return p + wh.apply(op.rmatvec(y))  # + Bz' y = L Bc' y

    refresh = 0

    def _refresh(self):
        """Re-estimate V_k at the current theta: 3 subspace iterations on F = G'G + alpha I
        (full data) warm-started at the current V, then Rayleigh-Ritz. Logs lambda_max(L'FL)
        with the old and the new L (power-free: from the Ritz problem of [V_old, V_new])."""
        wh = self.wh
        G = dense_grads(self.model, self.theta, np.arange(self.N))
        Q = wh.V
        for _ in range(3):
            Q, _ = np.linalg.qr(G.T @ (G @ Q) + ALPHA * Q)
        M = G @ Q
        S = M.T @ M + ALPHA * np.eye(Q.shape[1])
        s, U = np.linalg.eigh(S)
        order = np.argsort(s)[::-1]
        V = Q @ U[:, order]
        self.wh = Whitening(V, s[order])
        self.force_z = self.wh.apply(self.wh_inv_old(wh, self.force_z))
        if not hasattr(self, "refresh_log"):
            self.refresh_log = []
        self.refresh_log.append(float(s[order][0]))

    @staticmethod
    def wh_inv_old(wh, v):
        """L_old^-1 v (to re-express the stored force in the new coordinates)."""
        return v + wh.V @ ((1.0 / (wh.dm1 + 1.0) - 1.0) * (wh.V.T @ v))

    def step(self):
        if self.refresh and self.wh.k and self.n_steps_done and self.n_steps_done % self.refresh == 0:
            self._refresh()
        self.n_steps_done += 1
        _h, half, P = self.h, 0.5 * self.h, self.P
        p = self.p + half * self.force_z
        self.theta += self.wh.apply(half * p)
        p = ou(p, self.xi, half, self.rng)
        k1 = float(p @ p)
        xi = self.xi + half * (k1 - P * T) / self.mu
        p = self._c_step(p)
        k2 = float(p @ p)
        xi = xi + half * (k2 - P * T) / self.mu
        p = ou(p, xi, half, self.rng)
        self.theta += self.wh.apply(half * p)
        self.force_z = self._force(self.theta)
        p += half * self.force_z
        self.p, self.xi = p, xi
        return xi, 0.5 * (k1 + k2) / P


def whitened_lambda_max(model, theta, wh, which="fisher", G=None, k=1):
    """Largest eigenvalues of L'FL (F = G'G + alpha I at theta) or of L'HL (H: Hessian of the
    negative log posterior, central finite differences of full-data gradients)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    P = theta.size
    if which == "fisher":
        if G is None:
            G = dense_grads(model, theta, np.arange(model.n_samples))

        def mv(v):
            v = np.ravel(v)
            Lv = wh.apply(v)
            return wh.apply(G.T @ (G @ Lv) + ALPHA * Lv)
    else:

        def mv(v):
            v = np.ravel(v)
            return wh.apply(model.hessian_vector_product(theta, wh.apply(v)))

    op = LinearOperator((P, P), matvec=mv, dtype=float)
    v0 = np.random.default_rng(0).standard_normal(P)
    vals = eigsh(op, k=k, which="LA", tol=1e-4, v0=v0, return_eigenvectors=False)
    return np.sort(vals)[::-1]
