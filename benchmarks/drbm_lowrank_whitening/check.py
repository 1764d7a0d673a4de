"""Checks: dense per-example gradients against the operator, and the prototype's C step (k=0 and
whitened) against the library's row_space_c_step / an explicit matrix exponential."""

import numpy as np
from common import BATCH, H_LIB, Chain, Whitening, dense_grads, fisher_topk, library_starts, setup

from skbayes_sg.samplers._expmv import NoiseCovariance, c_step

model, *_ = setup()
th = library_starts(model)[0]
rng = np.random.default_rng(1)
idx = rng.integers(0, model.n_samples, BATCH)
op = model.per_example_gradients(th, idx)
G = dense_grads(model, th, idx)
v = rng.standard_normal(th.size)
u = rng.standard_normal(BATCH)
print("matvec err", np.abs(G @ v - op.matvec(v)).max(), "rmatvec err", np.abs(G.T @ u - op.rmatvec(u)).max())
print("gram err", np.abs(G @ G.T - op.gram()).max() / np.abs(G @ G.T).max())
# C step against the library (k = 0): same minibatch
N = model.n_samples
ns = N * N / BATCH
h = H_LIB
p = rng.standard_normal(th.size)
ref, _ = c_step(p, NoiseCovariance(op, ns, -0.5 * h), ns, h, 0.5 * h, tol=2.0**-24)
ch = Chain(model, th, np.random.default_rng(5), h)
ch.rng = np.random.default_rng(9)


# make the chain draw the same rows
class R:
    def integers(self, *a, **k):
        return idx

    def standard_normal(self, *a):
        return np.random.default_rng(0).standard_normal(*a)


ch.rng = R()
mine = ch._c_step(p)
print("C step k=0 rel err vs library (tol 2^-24)", np.linalg.norm(mine - ref) / np.linalg.norm(ref - p))
# whitened C step against the explicit matrix exponential of L V L
s, V, _ = fisher_topk(model, th, 9)
wh = Whitening(V, s[:9])
L = np.eye(th.size) + V @ np.diag(wh.dm1) @ V.T
ch.wh = wh
mine = ch._c_step(p)
Bc = G - G.mean(0)
Vz = L @ (Bc.T @ Bc) @ L / (BATCH - 1)
# exp(-(h^2/2) ns Vz) p via eigh of the n-dim problem is what we test; explicit here in P dims:
lam, Q = np.linalg.eigh(Vz)
ex = Q @ (np.exp(-(h * h / 2) * ns * lam) * (Q.T @ p))
print("C step k=9 rel err vs explicit", np.linalg.norm(mine - ex) / np.linalg.norm(ex - p))
print("top Fisher eigs at start", np.round(s[:12], 1))
