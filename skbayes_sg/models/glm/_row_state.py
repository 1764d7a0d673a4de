"""Per-row state of a GLM: squared row norms, whitened row weights, leverages, and the
gradient terms at a control variate's centre.

Kept only when the row source allows it (in-memory rows): for rows on disk each is
computed per minibatch instead, so a fit allocates nothing that grows with N.
"""

import numpy as np
import scipy.sparse as sp

from .._gradients import row_sq_norms, whitened_row_weights


class RowStateMixin:
    """Per-row caches of a :class:`~skbayes_sg.models.glm.GLM` (mixed into it)."""

    _row_sq_cache = None
    _row_weight_cache = None
    #: ``(theta_hat bytes, R_hat (N, K), extra_hat (N, k) or None)``: the per-example
    #: gradient terms of all rows at a control variate's centre (see :meth:`_centre_terms`).
    _centre_cache = None

    def _row_sq_norms(self, idx, X):
        """``||x_i||^2`` of the rows ``idx`` (features ``X``), for samplers that need tr(Sigma).

        In-memory X: gathered (O(n)) from the norms of all rows, computed on the first
        request; they take 8 bytes a row, at most 1/D of X itself, and spare mCCAdL 5-10% of
        its iteration time on a9a. Rows on disk: computed from the minibatch, O(n D) like its
        gradient, since a cache would be the one allocation of the fit that grows with N.
        """
        cache = self._row_sq_cache
        if cache is None:
            if not self._cache_row_norms:
                return row_sq_norms(X)
            # By blocks: X.multiply(X) of a whole sparse X would copy all its entries.
            cache = self._row_sq_cache = self.rows.map_rows(lambda b: row_sq_norms(b.X), self._block_rows())
        return cache if idx is None else cache[idx]

    def whitened_row_weights(self, L, idx):
        """``q_i = ||L' x~_i||^2`` of the rows ``idx`` for a one-output GLM, or None.

        ``x~_i`` is the row's gradient direction in ``theta`` (features, then 1 for the
        intercept, 0 for extra coordinates), so a whitened per-example gradient
        ``L' g_i = r_i L' x~_i`` has squared norm ``r_i^2 q_i``: the trace that mCCAdL's C
        step needs in whitened coordinates then costs O(n), not O(n P^2). Cached for all
        rows on first use (O(N D P) once, N floats) for in-memory X; computed per minibatch
        for rows on disk, whose fits keep no per-row state.
        """
        if self.n_outputs != 1:
            return None
        cache = self._row_weight_cache
        if cache is not None and cache[0] is L:
            return cache[1] if idx is None else cache[1][idx]
        if not self._cache_row_norms:
            return self._row_weights_of(L, self.rows.gather(idx).X)
        q = self.rows.map_rows(lambda b: self._row_weights_of(L, b.X), self._block_rows())
        self._row_weight_cache = (L, q)
        return q if idx is None else q[idx]

    def _row_weights_of(self, L, X):
        D = self.n_features
        if not isinstance(L, np.ndarray):  # a structured factor (CentredScaling): its own formula
            return L.row_weights(X)
        if L.ndim == 1:
            # Diagonal L: ||L' x~_i||^2 = sum_j L_j^2 x~_ij^2.
            X2 = X.multiply(X) if sp.issparse(X) else X * X
            q = np.asarray(X2 @ (L[:D] * L[:D])).ravel()
            return q + L[D] ** 2 if self.fit_intercept else q
        return whitened_row_weights(L, X, self.fit_intercept)

    def leverage_scores(self, theta, L):
        """Statistical leverages ``h_i = w_i x~_i' L L' x~_i`` of the rows at ``theta``, shape (N,).

        With ``L L' = H^-1`` at the MAP these are the diagonal of the hat matrix of the
        Laplace approximation (they sum to about the number of parameters the data
        determine), and ``w_i h_i``-proportional sampling is what makes the control-variate
        gradient's noise even across directions (see
        :class:`skbayes_sg.minibatch.ControlVariateGradient`). ``w_i`` sums the curvature
        weights over the outputs.
        """

        if self.n_outputs == 1 and self._cache_row_norms and (not isinstance(L, np.ndarray) or L.dtype == float):
            # q_i = ||L' x~_i||^2 is the chains' row weights too (whitened_row_weights, the
            # same L): computed once for both, an O(N D P) pass saved, and in the same pass
            # over X as the curvature weights when it is not cached yet (each block's values
            # are those of a pass of its own).
            weights = lambda block: self._predictor_weights(theta, block)[:, 0]  # noqa: E731
            cache = self._row_weight_cache
            if cache is not None and cache[0] is L:
                q, h = cache[1], self.rows.map_rows(weights, self._block_rows())
            else:
                both = lambda block: (self._row_weights_of(L, block.X), weights(block))  # noqa: E731
                q, h = self.rows.map_rows(both, self._block_rows(), (None, None))
                self._row_weight_cache = (L, q)
            h *= q  # in place: on large N a fresh N-vector costs more than the product
            return h

        def leverages(block):
            w = self._predictor_weights(theta, block).sum(axis=1)
            return w * self._row_weights_of(L, block.X)

        return self.rows.map_rows(leverages, self._block_rows())

    def _centre_terms(self, theta_hat, idx, block):
        """:meth:`_gradient_terms` at the control variate's centre ``theta_hat`` for the rows ``idx``.

        The centre is fixed for a whole chain, so for in-memory X its residuals ``R_hat`` (and
        extra terms) are computed once for all rows, one pass by blocks, and every minibatch
        gathers its rows' (O(n K)) instead of recomputing them (a product with X and the link,
        O(n D K): a third of a control-variate step on a9a). N K floats, K / D of X; not for
        rows on disk, whose fits keep no per-row state (see :meth:`_row_sq_norms`).
        """
        if not self._cache_row_norms:
            return self._gradient_terms(theta_hat, block)
        R_all, extra_all = self.centre_rows(theta_hat)
        take = self.rows.take_rows
        return take(R_all, idx), take(extra_all, idx)

    def centre_rows(self, theta_hat):
        """``(R_hat (N, K), extra_hat (N, k) or None)``: the gradient terms of all rows at
        ``theta_hat``, computed once and kept (read-only) while the centre stays; in-memory X."""
        theta_hat = np.asarray(theta_hat, dtype=float)
        key = theta_hat.tobytes()
        cache = self._centre_cache
        if cache is None or cache[0] != key:
            # Every call, the first included, reads the one pass over all rows: terms
            # computed on a gathered minibatch can differ from the pass's in the last bit
            # (another BLAS kernel for another shape), which would make the draws depend on
            # which call came first (a fit continued in parts would not repeat one fit).
            cache = self._centre_cache = (key, *self._all_gradient_terms(theta_hat))
        return cache[1], cache[2]

    def _all_gradient_terms(self, theta):
        """:meth:`_gradient_terms` of all rows, block by block: ``(R (N, K), extra (N, k) or None)``."""
        if self._n_extra:
            R_all, extra_all = self.rows.map_rows(
                lambda b: self._gradient_terms(theta, b), self._block_rows(), (self.n_outputs, self._n_extra)
            )
        else:
            R_all = self.rows.map_rows(lambda b: self._gradient_terms(theta, b)[0], self._block_rows(), self.n_outputs)
            extra_all = None
        # Shared by every later minibatch: read-only, so no caller can alter the centre.
        for a in (R_all, extra_all):
            if a is not None:
                a.flags.writeable = False
        return R_all, extra_all
