"""Many paths at once (multilevel SGLD), vectorised, for every GLM family.

A row's log likelihood depends on ``theta`` only through its predictor ``z_i`` (K,) and the
extra parameters, so with ``x~_i = (x_i, 1)`` ``g_i = x~_i (x) r_i`` and
``H_i v = x~_i (x) S_i``: every stack of sums below is two batched minibatch products,
O(M n P), with the family's residuals and curvature.
"""

import numpy as np

from ... import rows as _rows
from ...rows import transpose
from .._base import as_paths


class PathsMixin:
    """Stacks of paths of a :class:`~skbayes_sg.models.glm.GLM` (mixed into it)."""

    def _path_predictor(self, thetas, block):
        """Linear predictors (M, n, K) of a stack ``thetas`` (M, P) at a block of rows (M, n, D)."""
        W, b, _ = self.unpack(thetas)
        Z = np.matmul(block.X, W) + b[:, None, :]
        if block.offset is not None:
            Z += block.offset[..., None]
        return Z

    def _path_sums(self, Xb, R, extra=None):
        """``sum_i x~_i (x) R_i`` (and ``sum_i extra_i``) over each path's rows, shape (M, P)."""
        M = Xb.shape[0]
        parts = [np.matmul(Xb.transpose(0, 2, 1), R).reshape(M, -1)]
        if self.fit_intercept:
            parts.append(R.sum(axis=1))
        if extra is not None:
            parts.append(extra.sum(axis=1))
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]

    def grad_log_posterior_draws(self, thetas):
        """Full-data gradients of the log posterior at a stack ``thetas`` (M, P), shape (M, P).

        One pass over the rows: each block's predictors for all M points are one product
        ``X_b [W_1 ... W_M]``, and their gradient sums one product with ``X_b'``, so scoring a
        fit's draws (the kernel Stein discrepancy) costs about one pass, not M. Without extra
        parameters the block's (n, M K) predictors stay rows first from one product to the
        other (the family's :meth:`~._family.Family.draw_residuals` in place): no transposed
        copy of them, half the pass's time at N = 1e6, M = 100.
        """
        thetas = np.atleast_2d(np.asarray(thetas, dtype=float))
        M, D, K = thetas.shape[0], self.n_features, self.n_outputs
        W, b, _ = self.unpack(thetas)
        W_all = np.ascontiguousarray(W.transpose(1, 0, 2).reshape(D, M * K))
        # A block holds the predictors of every point: at most a usual block's rows, and few
        # enough that the block's M predictors stay within 16 usual blocks' elements.
        rows = max(1, min(self._block_rows(), 16 * _rows.BLOCK_ELEMENTS // (M * K)))
        if self._n_extra == 0:
            part = lambda block: self._draw_sums(block, W_all, b)  # noqa: E731
        else:
            extra = self._extra(thetas)
            part = lambda block: self._draw_sums_extra(block, W_all, b, extra)  # noqa: E731
        return self.rows.reduce_blocks(part, rows) + self.grad_log_prior(thetas)

    def _draw_sums(self, block, W_all, b):
        """One block's gradient sums (M, P) at M points, rows first (no extra parameters)."""
        n, (M, K) = block.X.shape[0], b.shape
        Z = np.asarray(block.X @ W_all).reshape(n, M, K)
        Z += b
        if block.offset is not None:
            Z += block.offset[:, None, None]
        R = self.family.draw_residuals(Z, block.y)
        if block.sample_weight is not None:
            R *= block.sample_weight[:, None, None]
        G = np.asarray(transpose(block.X) @ R.reshape(n, M * K))
        return self._draw_parts(G, R.sum(axis=0))

    def _draw_sums_extra(self, block, W_all, b, extra):
        """:meth:`_draw_sums` for a family with extra parameters, points first."""
        n, (M, K) = block.X.shape[0], b.shape
        Z = np.asarray(block.X @ W_all).reshape(n, M, K).transpose(1, 0, 2) + b[:, None, :]
        if block.offset is not None:
            Z += block.offset[:, None]
        R, E = self._weighed(
            block.sample_weight, *self.family.gradient_terms(Z, np.broadcast_to(block.y, (M, n)), extra)
        )
        G = np.asarray(transpose(block.X) @ R.transpose(1, 0, 2).reshape(n, M * K))
        return self._draw_parts(G, R.sum(axis=1), E.sum(axis=1))

    def _draw_parts(self, G, R_sum, E_sum=None):
        """The (M, P) gradient sums from ``X' R`` (D, M K), the residuals' sums (M, K) and the
        extra parameters' (M, k)."""
        M, K = R_sum.shape
        parts = [G.reshape(-1, M, K).transpose(1, 0, 2).reshape(M, -1)]
        if self.fit_intercept:
            parts.append(R_sum)
        if E_sum is not None:
            parts.append(E_sum)
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]

    def grad_log_prior_paths(self, thetas):
        return self.grad_log_prior(np.atleast_2d(np.asarray(thetas, dtype=float)))

    def loglik_grad_paths(self, thetas, idx):
        thetas, idx = as_paths(thetas, idx)
        block = self.rows.gather(idx)
        R, E = self.family.gradient_terms(self._path_predictor(thetas, block), block.y, self._extra(thetas))
        return self._path_sums(block.X, *self._weighed(block.sample_weight, R, E))

    def loglik_hvp_paths(self, thetas, V, idx):
        V = np.atleast_2d(np.asarray(V, dtype=float))
        thetas = np.broadcast_to(np.asarray(thetas, dtype=float), V.shape)
        thetas, idx = as_paths(thetas, idx)
        block = self.rows.gather(idx)
        W_v, b_v, e_v = self.unpack(V)
        U = np.matmul(block.X, W_v) + b_v[:, None, :]
        S, Se = self._curvature(thetas, self._path_predictor(thetas, block), block.y, U, e_v)
        return self._path_sums(block.X, *self._weighed(block.sample_weight, S, Se))

    def taylor_cache(self, theta0):
        """Per-row predictor, gradient terms and curvature state at ``theta0``, unweighted
        (:meth:`taylor_remainder_paths` applies the row weights): one full-data pass per
        expansion point, after which each remainder needs only the minibatch at theta."""
        t0 = np.asarray(theta0, dtype=float)[None]
        block = self.rows.gather(np.arange(self.n_samples)[None])
        Z0 = self._path_predictor(t0, block)
        R0, E0 = self.family.gradient_terms(Z0, block.y, self._extra(t0))
        return Z0[0], R0[0], None if E0 is None else E0[0], self.family.curvature_state(Z0, block.y)[0]

    def taylor_remainder_paths(self, thetas, theta0, idx, cache=None):
        thetas, idx = as_paths(thetas, idx)
        theta0 = np.asarray(theta0, dtype=float)
        Z0_all, R0_all, E0_all, C0_all = self.taylor_cache(theta0) if cache is None else cache
        block = self.rows.gather(idx)
        Z = self._path_predictor(thetas, block)
        R, E = self.family.gradient_terms(Z, block.y, self._extra(thetas))
        # The predictor is linear in theta: the direction theta - theta0 moves it by Z - Z0.
        n_w = self.n_params - self._n_extra
        S, Se = self.family.apply_curvature(
            self._extra(np.broadcast_to(theta0, thetas.shape)), C0_all[idx], Z - Z0_all[idx], (thetas - theta0)[:, n_w:]
        )
        R -= R0_all[idx]
        R -= S
        E = None if E is None else E - E0_all[idx] - Se
        # The cache holds the unweighted terms at theta0: the weights scale the remainder.
        return self._path_sums(block.X, *self._weighed(block.sample_weight, R, E))
