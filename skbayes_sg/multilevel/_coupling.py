"""Coupled fine and coarse SGLD paths (paper section 3): stacks of paths stepped by the shared SGLD
transition with the shared gradient layer's forces; only the rows and Brownian increments that
fine and coarse paths share are the coupling's own."""

import math
from dataclasses import dataclass

import numpy as np

from .._chains import check_finite
from ..minibatch import MinibatchGradient, TaylorControlVariateGradient
from ..samplers._substeps import langevin_step

# Floats one vectorised chunk of paths may gather per step (paths x rows x features): bounds
# memory, and being independent of n_jobs keeps the random streams (one per chunk) fixed.
_CHUNK_FLOATS = 2**20


def _coarse_rows(rng, rows1, rows2):
    """The plain coupling's coarse minibatch: ``n`` of the ``2n`` fine rows without replacement,
    again ``n`` independent draws of the fine rows' law (paper eq. 8)."""
    if rows1 is None:
        return None
    n = rows1.shape[1]
    both = np.concatenate([rows1, rows2], axis=1)
    pick = np.argpartition(rng.random(both.shape), n - 1, axis=1)[:, :n]
    return np.take_along_axis(both, pick, axis=1)


@dataclass
class LevelSample:
    """Samples of one level's correction ``Delta_l`` (paper eq. 4): ``delta`` (M, q) per path;
    ``points`` (M, k, P), when kept, the states ``g`` was evaluated at (fine first), with
    ``Delta_l = sum_j coefs[j] g(points[:, j])``."""

    delta: np.ndarray
    points: object
    coefs: np.ndarray


class CoupledSGLD:
    """The levels of multilevel SGLD: coupled fine and coarse SGLD paths (paper section 3).

    Level ``l`` runs ``s_l = m (l + 1) 2^l`` SGLD steps (eq. 2) at ``h_l = h_0 2^-l`` from
    ``theta_0``; above level 0 each coarse step at ``2 h_l`` takes the increment ``(dW_1 +
    dW_2) / sqrt 2`` of the two fine steps it spans (eq. 9) and ``n`` of their ``2n`` rows
    (plain coupling, section 3.1, eq. 8) or, antithetic (3.2, eq. 10), two coarse paths one
    fine step's rows each. Averaging (3.3) averages ``g`` over the last ``p_0 2^l`` states,
    ``p_0 = ceil(m / 2)``. :doc:`/maths/mlsgld` derives the levels and their variances.

    ``theta0`` (P,) is the start of every path and Taylor expansion point (the MAP in the
    paper); ``step_size``, ``horizon``, ``batch_size``: ``h_0``, ``m``, ``n`` (None: full data);
    ``antithetic``, ``taylor``, ``averaging``: the variants of sections 3.2, 3.4 (eq. 11), 3.3.
    ``grad_estimator``, every path's force, is the estimators'
    :class:`~skbayes_sg.minibatch.TaylorControlVariateGradient` at ``theta0`` with ``taylor``
    and a minibatch, their :class:`~skbayes_sg.minibatch.MinibatchGradient` otherwise.
    """

    def __init__(self, model, theta0, step_size, horizon, batch_size, *, antithetic=True, taylor=True, averaging=False):
        self.theta0 = np.asarray(theta0, dtype=float).copy()
        self.h0, self.m = float(step_size), int(horizon)
        self.antithetic, self.averaging = bool(antithetic), bool(averaging)
        grad_estimator = MinibatchGradient(model, batch_size)
        if taylor and not grad_estimator.full:
            grad_estimator = TaylorControlVariateGradient(model, batch_size, theta_hat=self.theta0)
        self.grad_estimator = grad_estimator
        self.taylor = isinstance(grad_estimator, TaylorControlVariateGradient)
        self.p0 = (self.m + 1) // 2
        self._width = self.batch_size * max(1, getattr(model, "n_features", self.theta0.size))

    @property
    def batch_size(self):
        """``n``: rows per minibatch (``N`` for the full data)."""
        return self.grad_estimator.batch_size

    def step_size(self, level):
        """``h_l = h_0 2^-l``."""
        return self.h0 * 2.0**-level

    def n_steps(self, level):
        """``s_l = T_l / h_l = m (l + 1) 2^l``."""
        return self.m * (level + 1) * 2**level

    def window(self, level):
        """States averaged per path at ``level`` (1 without averaging)."""
        return self.p0 * 2**level if self.averaging else 1

    def cost(self, level):
        """``C_l``: data items touched per sample of ``Delta_level`` (fine and coarse steps)."""
        coarse = self.n_steps(level - 1) * (2 if self.antithetic else 1) if level else 0
        return (self.n_steps(level) + coarse) * self.batch_size

    def chunk_size(self):
        """Paths stepped together: bounded so a gathered minibatch stack stays small."""
        return int(max(16, min(4096, _CHUNK_FLOATS // self._width)))

    def sample(self, level, n_paths, rng, g=None, keep_points=False):
        """``n_paths`` independent samples of ``Delta_level`` (:class:`LevelSample`), ``g`` mapping
        states (M, P) to (M,) or (M, q) (None: identity), keeping its points with ``keep_points``."""
        M, P, grad_estimator = int(n_paths), self.theta0.size, self.grad_estimator
        h, s, pf = self.step_size(level), self.n_steps(level), self.window(level)
        s_c = self.n_steps(level - 1) if level else 0
        pc = self.window(level - 1) if level else 1
        n_c = (2 if self.antithetic else 1) if level else 0
        delta, points, coefs = None, [], []

        def record(states, coef):  # adds coef g(states) to Delta_l
            nonlocal delta
            term = coef * np.asarray(states if g is None else g(states), dtype=float).reshape(M, -1)
            delta = term if delta is None else np.add(delta, term, out=delta)
            coefs.append(coef)
            if keep_points:
                points.append(states.copy())

        fine, coarse = np.tile(self.theta0, (M, 1)), np.tile(self.theta0, (n_c * M, 1))
        work, dW_c = np.empty((M, P)), np.empty((n_c * M, P))

        def fine_step(j):
            rows, dW = grad_estimator.draw_rows(rng, M), rng.standard_normal((M, P))
            langevin_step(fine, grad_estimator.gradient_paths(fine, rows), h, dW, out=work)
            if j > s - pf:
                record(fine, 1.0 / pf)
            return rows, dW

        # A diverging path overflows before the check below names the step and the fix; numpy's
        # overflow warnings would only be noise, as in the chains.
        with np.errstate(over="ignore", invalid="ignore"):
            n_alone = s - 2 * s_c
            for j in range(1, n_alone + 1):
                fine_step(j)
            for k in range(1, s_c + 1):
                rows1, dW1 = fine_step(n_alone + 2 * k - 1)
                rows2, dW2 = fine_step(n_alone + 2 * k)
                # The coarse increment is the fine ones' sum over the coarse step (eq. 9).
                np.add(dW1, dW2, out=dW_c[:M])
                dW_c[:M] *= 1.0 / math.sqrt(2.0)
                if self.antithetic:  # c+ takes tau_1, c- tau_2 (eq. 10)
                    dW_c[M:] = dW_c[:M]
                    rows = None if rows1 is None else np.concatenate([rows1, rows2])
                else:
                    rows = _coarse_rows(rng, rows1, rows2)
                langevin_step(coarse, grad_estimator.gradient_paths(coarse, rows), 2.0 * h, dW_c, out=dW_c)
                if k > s_c - pc:
                    for c in range(n_c):
                        record(coarse[c * M : (c + 1) * M], -1.0 / (pc * n_c))
        where = f"the paths of level {level} (h_l = {h:.4g}) became non-finite"
        check_finite((fine, coarse), "MLSGLD", self.h0, where, fixes="or standardise the features")
        return LevelSample(delta, np.stack(points, axis=1) if keep_points else None, np.asarray(coefs))
