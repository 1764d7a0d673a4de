"""Second derivatives of a GLM: Hessian-vector products, per-example Hessian products,
curvature weights and dense Hessians, all from the family's curvature in the predictor.

For a GLM row the log likelihood depends on ``theta`` only through its predictor
``z_i`` (K,) and the extra parameters, so with ``x~_i = (x_i, 1)``
``H_i v = [x_i S_i', S_i, Se_i]``, where ``(S_i, Se_i)`` is the family's
:meth:`~skbayes_sg.models.glm.Family.apply_curvature` along the direction's change of
predictor ``U_i = x~_i V``: the same structure as the per-example gradients.
"""

import numpy as np
import scipy.sparse as sp

from ...rows import transpose
from .._gradients import LinearPerExampleGradients


class CurvatureMixin:
    """Curvature of a :class:`~skbayes_sg.models.glm.GLM` (mixed into it)."""

    def _curvature(self, theta, Z, y, U, e_v):
        """``(S, Se)``: the family's curvature at the predictor ``Z`` along ``U``, ``e_v``."""
        family = self.family
        return family.apply_curvature(self._extra(theta), family.curvature_state(Z, y), U, e_v)

    def _hvp_terms(self, theta, v, block):
        """``(S, Se)`` of :meth:`_curvature` for a block's rows and the direction ``v``."""
        X = block.X
        Z = self._linear_predictor(theta, X, block.offset)
        W_v, b_v, e_v = self.unpack(v)
        U = X @ W_v + (b_v if self.fit_intercept else 0.0)
        return self._curvature(theta, Z, block.y, np.asarray(U), e_v)

    def per_example_hvp(self, theta, v, idx):
        """Per-example Hessian-vector products ``H_i v`` of the log likelihood, as an operator.

        Rows of the returned :class:`LinearPerExampleGradients` are ``H_i v`` for the rows
        ``idx``; its ``mean() * n_batch`` is their sum. Exact, O(n D K).
        """
        block = self.rows.gather(idx)
        S, Se = self._weighed(block.sample_weight, *self._hvp_terms(theta, v, block))
        return LinearPerExampleGradients(block.X, S, self.fit_intercept, Se)

    @staticmethod
    def _weighed(w, S, Se):
        if w is not None:
            S *= w[..., None]
            if Se is not None:
                Se *= w[..., None]
        return S, Se

    def _hvp_sum(self, theta, v, block):
        """``sum_i w_i H_i v`` over a block's rows: the operator's ``mean() * n`` without its
        transpose of X (see :func:`skbayes_sg.rows.transpose`)."""
        S, Se = self._weighed(block.sample_weight, *self._hvp_terms(theta, v, block))
        D, K = self.n_features, self.n_outputs
        out = np.empty(self.n_params)
        out[: D * K] = np.asarray(transpose(block.X) @ S).ravel()
        pos = D * K
        if self.fit_intercept:
            out[pos : pos + K] = S.sum(axis=0)
            pos += K
        if Se is not None:
            out[pos:] = Se.sum(axis=0)
        return out

    def loglik_hvp(self, theta, v, idx=None):
        """``sum_{i in idx} (Hess log p(y_i | x_i, theta)) v`` over rows ``idx``, exactly.

        With ``idx=None`` (all rows, as the ``"auto"`` step size's Lanczos iteration asks)
        the sum runs over blocks of rows, so its memory does not grow with N.
        """
        if idx is None:
            return self.rows.reduce_blocks(lambda block: self._hvp_sum(theta, v, block), self._block_rows())
        ops = self.per_example_hvp(theta, v, idx)
        return ops.mean() * ops.n_batch

    def hessian_vector_product(self, theta, v, eps=None):
        """Exact Hessian of the negative log posterior times ``v`` (one pass over the data)."""
        out = -self.loglik_hvp(theta, v)
        n_w = self.n_params - self._n_extra
        out[:n_w] += self.prior_precision * v[:n_w]
        if self._n_extra:
            out[n_w:] -= self._extra_prior_hvp(theta, v)
        return out

    def _predictor_weights(self, theta, block):
        """``w_ik = -d^2 loglik_i / dz_ik^2``, shape (n, K): the curvature of each example in
        its own linear predictor (``s (1 - s)`` for the logistic, ``tau`` for the Gaussian),
        times the row's likelihood weight when given."""
        Z = self._linear_predictor(theta, block.X, block.offset)
        n, K = Z.shape
        e_v = np.zeros(self._n_extra)
        W = np.empty((n, K))
        for k in range(K):
            U = np.zeros((n, K))
            U[:, k] = 1.0
            W[:, k] = -self._curvature(theta, Z, block.y, U, e_v)[0][:, k]
        if block.sample_weight is not None:
            W *= block.sample_weight[:, None]
        return W

    def _extra_hessian_columns(self, theta, H):
        """Fill the rows and columns of the extra coordinates of ``H`` by Hessian-vector products."""
        P = self.n_params
        for j in range(P - self._n_extra, P):
            e = np.zeros(P)
            e[j] = 1.0
            col = self.hessian_vector_product(theta, e)
            H[:, j] = col
            H[j, :] = col

    def hessian(self, theta):
        """Dense Hessian of the negative log posterior, ``X~' diag(w) X~ + diag(prior_precision)`` for one
        output (one pass over row blocks, O(N D^2)), the extra coordinates by products.
        Several outputs fall back on :meth:`_hessian_multi`."""
        if self.n_outputs != 1:
            return self._hessian_multi(theta)
        P = self.n_params
        n_w = P - self._n_extra
        H = np.zeros((P, P))
        H[:n_w, :n_w] = self.rows.reduce_blocks(lambda block: self._hessian_block(theta, block), self._block_rows())
        H[np.arange(n_w), np.arange(n_w)] += self.prior_precision
        if self._n_extra:
            self._extra_hessian_columns(theta, H)
        return H

    def hessian_of_rows(self, theta, idx):
        """The Hessian of the negative log posterior with the likelihood's part estimated from
        the rows ``idx`` (their sum scaled by ``N / len(idx)``), or None for a family with
        extra parameters. O(len(idx) P^2): Newton's first steps on large data
        (:func:`skbayes_sg.models._map._newton_map`)."""
        if self._n_extra:
            return None
        Dt = self.n_features + (1 if self.fit_intercept else 0)
        H = 0.0
        step = self._block_rows()
        for start in range(0, len(idx), step):  # by blocks: the memory of a full-data pass's block
            block = self.rows.gather(idx[start : start + step])
            if self.n_outputs == 1:
                H = H + self._hessian_block(theta, block)
            else:
                H = H + self._hessian_multi_block(theta, block, Dt).reshape(self.n_params, self.n_params)
        H *= self.n_samples / len(idx)
        H[np.diag_indices_from(H)] += self.prior_precision
        return H

    def _hessian_block(self, theta, block):
        """A block's ``X~' diag(w) X~`` (one output), shape (D (+ 1), D (+ 1))."""
        X = block.X
        D = self.n_features
        w = self._predictor_weights(theta, block)[:, 0]
        if sp.issparse(X):
            XtWX = np.asarray((X.T @ sp.diags(w) @ X).todense())
            Xtw = np.asarray(X.T @ w).ravel()
        else:
            Xw = X * w[:, None]
            XtWX = X.T @ Xw
            Xtw = Xw.sum(axis=0)
        Dt = D + (1 if self.fit_intercept else 0)
        H = np.zeros((Dt, Dt))
        H[:D, :D] += XtWX
        if self.fit_intercept:
            H[:D, D] += Xtw
            H[D, :D] += Xtw
            H[D, D] += w.sum()
        return H

    def _hessian_multi(self, theta):
        """Dense Hessian for several outputs: ``sum_i x~_i x~_i' (x) W_i + diag(prior_precision)``.

        ``W_i[k, l] = -d^2 loglik_i / dz_k dz_l`` (``s_k (delta_kl - s_l)`` for the softmax);
        with ``x~_i = [x_i, 1]`` the coordinate ``(j, k)`` of ``theta`` is ``j K + k`` for the
        weights and the intercepts alike, so the Hessian is the ``(D+1, K, D+1, K)`` array of
        the ``K (K + 1) / 2`` products ``X~' diag(W_kl) X~``, one pass over row blocks.
        """
        if self._n_extra:
            return super().hessian(theta)
        D, K = self.n_features, self.n_outputs
        Dt = D + (1 if self.fit_intercept else 0)
        H4 = self.rows.reduce_blocks(lambda block: self._hessian_multi_block(theta, block, Dt), self._block_rows())
        H = H4.reshape(Dt * K, Dt * K)
        H[np.diag_indices_from(H)] += self.prior_precision
        return H

    def _hessian_multi_block(self, theta, block, Dt):
        X, y, sw = block.X, block.y, block.sample_weight
        K = self.n_outputs
        H4 = np.zeros((Dt, K, Dt, K))
        Xt = X.toarray() if sp.issparse(X) else np.asarray(X)
        if self.fit_intercept:
            Xt = np.hstack([Xt, np.ones((Xt.shape[0], 1))])
        Z = self._linear_predictor(theta, X, block.offset)
        n = Z.shape[0]
        for k in range(K):
            U = np.zeros((n, K))
            U[:, k] = 1.0
            Wk = -self._curvature(theta, Z, y, U, np.zeros(0))[0]  # column l: W_i[l, k]
            if sw is not None:
                Wk *= sw[:, None]
            for l in range(k, K):
                A = Xt.T @ (Xt * Wk[:, l : l + 1])
                H4[:, l, :, k] += A
                if l != k:
                    H4[:, k, :, l] += A.T
        return H4

    def hessian_diagonal(self, theta):
        """Diagonal of the Hessian, ``sum_i w_ik x_ij^2 + prior_precision``, O(N D K) over row blocks."""
        D, K, P = self.n_features, self.n_outputs, self.n_params
        n_w = P - self._n_extra

        def block_diagonal(block):
            X = block.X
            W = self._predictor_weights(theta, block)
            X2 = X.multiply(X) if sp.issparse(X) else X * X
            d = np.zeros(n_w)
            d[: D * K] += np.asarray(X2.T @ W).ravel()
            if self.fit_intercept:
                d[D * K : D * K + K] += W.sum(axis=0)
            return d

        diag = np.zeros(P)
        diag[:n_w] = self.rows.reduce_blocks(block_diagonal, self._block_rows())
        diag[:n_w] += self.prior_precision
        for j in range(n_w, P):
            e = np.zeros(P)
            e[j] = 1.0
            diag[j] = self.hessian_vector_product(theta, e)[j]
        return diag
