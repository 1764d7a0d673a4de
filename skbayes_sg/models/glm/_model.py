"""The generalised linear model: a family over a row source.

Parameter layout (flat ``theta``): the ``D x K`` weight matrix ``W`` row-major, then ``K``
intercepts when ``fit_intercept``, then the family's extra parameters (the log noise
precision of linear regression). The linear predictor of row ``i`` is
``z_i = x_i W + b + offset_i``.

Prior: independent Gaussians ``N(0, 1 / alpha_j)`` on the weights and ``N(0, 1 /
alpha_intercept)`` on the intercepts. ``alpha`` is a float (isotropic, as in the papers) or
one precision per feature (per class and feature for several outputs); ``alpha_intercept``
defaults to ``alpha``, the papers' prior on *all* weights. The intercept is never left flat:
with separable data a flat intercept gives an improper posterior.
"""

import numpy as np

from ... import rows as _rows
from ...rows import as_row_source, transpose
from .._base import Model, RowData
from .._gradients import LinearPerExampleGradients, row_cache_closure
from ._curvature import CurvatureMixin
from ._paths import PathsMixin
from ._prior import GaussianPrior, prior_precisions
from ._row_state import RowStateMixin


def class_codes(y):
    """Integer class codes kept in their own dtype; other dtypes converted to ``intp``.

    The classifiers pass codes in the smallest unsigned dtype that holds them (one byte a
    row below 256 classes); widening them to int64 or float64 for the whole data would be
    8 bytes a row, the largest allocation of a fit on memmapped X. The row source converts
    each block's codes to the family's dtype.
    """
    if y is None:
        return None
    y = np.asarray(y)
    return y if y.dtype.kind in "iu" else y.astype(np.intp)


def weigh(w, R, extra=None):
    """``(R, extra)`` with each row scaled by its likelihood weight ``w`` (n,) (or (M, n) for
    a stack of paths), in place; as given when ``w`` is None."""
    if w is not None:
        R *= w[..., None]
        if extra is not None:
            extra *= w[..., None]
    return R, extra


def check_offset(offset, n_samples):
    """Validated per-row offsets as float64 (N,), or None."""
    if offset is None:
        return None
    offset = np.asarray(offset, dtype=np.float64)
    if offset.shape != (n_samples,):
        raise ValueError(f"offset has shape {offset.shape}; expected ({n_samples},), one offset per row.")
    if not np.all(np.isfinite(offset)):
        raise ValueError("offset contains NaN or infinity; give finite offsets (log exposure: exposure > 0).")
    return offset


class GLM(RowData, GaussianPrior, RowStateMixin, CurvatureMixin, PathsMixin, Model):
    """A generalised linear model: a :class:`~skbayes_sg.models.glm.Family` over a row source.

    Parameters
    ----------
    X : ndarray, sparse matrix, numpy.memmap of shape (N, D), or a RowSource
        The rows (see :func:`skbayes_sg.rows.as_row_source`); None for a prediction-only model
        is not accepted here (see :meth:`without_data`).
    y : ndarray of shape (N,)
    family : Family
    alpha : float or array of shape (D,) or (K, D), default=1.0
        Prior precision of the weights.
    fit_intercept : bool, default=True
    alpha_intercept : float or None, default=None
        Prior precision of the intercepts; None gives them ``alpha`` (a float).
    offset : array of shape (N,) or None, default=None
        Added to every output's linear predictor of its row (``log`` exposure for counts).
    """

    _data_attributes = ("rows", "_row_sq_cache", "_row_weight_cache", "_centre_cache")
    _supports_sample_weight = True

    def __init__(self, X, y, family, *, alpha=1.0, fit_intercept=True, alpha_intercept=None, offset=None):
        self.family = family
        K = self.n_outputs = family.n_outputs
        self._n_extra = family.n_extra
        self.fit_intercept = bool(fit_intercept)
        self.rows = as_row_source(X, y, y_dtype=family.y_dtype, padded=K == 1)
        if offset is not None:
            self.rows.offset = check_offset(offset, self.rows.n_rows)
        self.n_samples, self.n_features = self.rows.n_rows, self.rows.n_features
        self.n_params = self.n_features * K + (K if fit_intercept else 0) + self._n_extra
        self.alpha, self.alpha_intercept, self.prior_precision = prior_precisions(
            alpha, alpha_intercept, self.n_features, K, self.fit_intercept
        )

    # -- the data, through the row source -------------------------------------------------
    @property
    def _cache_row_norms(self):
        """Whether the model keeps per-row state (False for rows on disk)."""
        return self.rows is None or self.rows.keeps_row_state

    def _block_rows(self):
        """Rows per block of a full-data pass (see :data:`skbayes_sg.rows.BLOCK_ELEMENTS`)."""
        return max(1, _rows.BLOCK_ELEMENTS // self.n_outputs)

    def _extra(self, theta):
        """The family's extra parameters of ``theta`` (P,) or of a stack (..., P)."""
        return theta[..., self.n_params - self._n_extra :]

    # -- parameter layout ------------------------------------------------------------------
    def unpack(self, theta):
        """Split ``theta`` (P,) or a stack (S, P) into ``(W, b, extra)``.

        ``W`` has shape (..., D, K), ``b`` (..., K) (zeros without intercept) and
        ``extra`` (..., n_extra).
        """
        theta = np.asarray(theta)
        D, K = self.n_features, self.n_outputs
        lead = theta.shape[:-1]
        W = theta[..., : D * K].reshape(*lead, D, K)
        pos = D * K
        if self.fit_intercept:
            b = theta[..., pos : pos + K]
            pos += K
        else:
            b = np.zeros((*lead, K))
        return W, b, theta[..., pos:]

    def param_names(self, feature_names=None, class_names=None):
        """Names in ``theta``'s order: ``coef[feature]`` (``coef[class, feature]`` for
        several outputs), ``intercept`` (``intercept[class]``) and the extra coordinates."""
        D, K = self.n_features, self.n_outputs
        feats = [f"x{d}" for d in range(D)] if feature_names is None else [str(f) for f in feature_names]
        if K == 1:
            names = [f"coef[{f}]" for f in feats] + (["intercept"] if self.fit_intercept else [])
        else:
            classes = [str(c) for c in (range(K) if class_names is None else class_names)]
            names = [f"coef[{c}, {f}]" for f in feats for c in classes]
            names += [f"intercept[{c}]" for c in classes] if self.fit_intercept else []
        return names + self.family.extra_names()

    def _linear_predictor(self, theta, X, offset=None):
        """``Z = X W + b (+ offset)``, shape (n, K)."""
        D, K = self.n_features, self.n_outputs
        if K == 1:
            # Hot path of every minibatch step: a matrix-vector product (gemv, cheaper than
            # a one-column gemm) on a view of theta, no unpacking.
            z = X @ theta[:D]
            if self.fit_intercept:
                z += theta[D]
            if offset is not None:
                z += offset
            return z[:, None]
        W, b, _ = self.unpack(theta)
        Z = X @ W + b
        if offset is not None:
            Z += offset[:, None]
        return Z

    # -- likelihood ------------------------------------------------------------------------
    def _gradient_terms(self, theta, block):
        """``(R, extra)`` of the per-example gradients of a block (see
        :class:`LinearPerExampleGradients`): residuals (n, K) and extra coordinates or None."""
        Z = self._linear_predictor(theta, block.X, block.offset)
        return self.family.gradient_terms(Z, block.y, self._extra(theta))

    def _row_sq_norms_of(self, idx, X):
        """The closure an operator of the rows ``idx`` (features ``X``) gets its norms from."""
        return row_cache_closure(lambda: self._row_sq_norms(idx, X), self._cache_row_norms)

    def per_example_gradients(self, theta, idx):
        block = self.rows.gather(idx, products_only=True)
        R, extra = weigh(block.sample_weight, *self._gradient_terms(theta, block))
        X = block.X
        return LinearPerExampleGradients(X, R, self.fit_intercept, extra, row_sq_norms=self._row_sq_norms_of(idx, X))

    def per_example_gradient_differences(self, theta, theta_hat, idx):
        """``g_i(theta) - g_i(theta_hat)`` for the rows ``idx``, as one operator.

        The differences of a GLM's per-example gradients share the rows' features: only the
        residuals differ, so the operator is a :class:`LinearPerExampleGradients` with
        ``R(theta) - R(theta_hat)``, one gather of the minibatch for both points.
        """
        block = self.rows.gather(idx, products_only=True)
        R, extra = self._gradient_terms(theta, block)
        R_hat, extra_hat = self._centre_terms(theta_hat, idx, block)
        R -= R_hat
        if extra is not None:
            extra -= extra_hat
        # The centre's terms are cached unweighted; the weights scale the difference.
        R, extra = weigh(block.sample_weight, R, extra)
        X = block.X
        return LinearPerExampleGradients(X, R, self.fit_intercept, extra, row_sq_norms=self._row_sq_norms_of(idx, X))

    def log_likelihood_and_grad(self, theta, idx=None):
        """Summed log likelihood of rows ``idx`` (all rows if None) and its gradient (P,).

        All rows are processed in blocks of the row source: the pass's memory is bounded by
        a block, not N, which matters on memmapped X (the MAP start and the exact samplers
        make such passes).
        """
        if idx is not None:
            return self._loglik_and_grad_block(theta, self.rows.gather(idx))
        return self.rows.reduce_blocks(lambda block: self._loglik_and_grad_block(theta, block), self._block_rows())

    def _loglik_and_grad_block(self, theta, block):
        """Log likelihood summed over a block's rows (weighted) and its gradient."""
        X = block.X
        Z = self._linear_predictor(theta, X, block.offset)
        ll, R, R_sum, E_sum = self.family.loglik_and_gradient_sums(Z, block.y, block.sample_weight, self._extra(theta))
        D, K = self.n_features, self.n_outputs
        grad = np.empty(self.n_params)
        grad[: D * K] = np.asarray(transpose(X) @ R).ravel()
        pos = D * K
        if self.fit_intercept:
            grad[pos : pos + K] = R_sum
            pos += K
        if E_sum is not None:
            grad[pos:] = E_sum
        return ll, grad

    # -- predictive --------------------------------------------------------------------------
    def predict_draws(self, thetas, X, offset=None):
        """The family's predictive under each draw (class probabilities (S, n, K), means (S, n))."""
        return self.family.predict_draws(*self.unpack(thetas), X, offset)

    def predict_mean(self, thetas, weights, X, offset=None):
        """Weighted average of :meth:`predict_draws` over the draws."""
        mean = self.family.predict_mean(*self.unpack(np.atleast_2d(thetas)), weights, X, offset)
        if mean is None:
            return np.tensordot(weights, self.predict_draws(thetas, X, offset), axes=1)
        return mean

    @property
    def has_predictive_control_variate(self):
        """Whether :meth:`predict_mean_control_variate` applies: one linear predictor and a
        family with a Taylor control variate (the binary logistic regression)."""
        return self.n_outputs == 1 and hasattr(self.family, "predict_mean_control_variate")

    def predict_mean_control_variate(self, thetas, mean, X, offset=None):
        """``(p, v)``: the family's predictive mean over all draws, shape (n,), estimated from
        the draws ``thetas`` (K, P) with the tangent control variate, whose exact mean needs
        only the draws' ``mean`` (P,); and ``v`` (n,), the K draws' spread of the linear
        predictor about its mean (the remainder's Monte Carlo error grows with it)."""
        W, b, _ = self.unpack(np.atleast_2d(thetas))
        Wm, bm, _ = self.unpack(mean)
        m = np.asarray(X @ Wm[:, 0]).ravel() + bm[0]
        Z = np.asarray(X @ W[..., 0].T) + b[:, 0]
        if offset is not None:
            offset = np.asarray(offset, dtype=float)
            m += offset
            Z += offset[:, None]
        return self.family.predict_mean_control_variate(Z, m)

    def log_likelihood_draws(self, thetas, X, y, offset=None):
        """``log p(y_i | x_i, theta_s)``, shape (S, n)."""
        return self.family.log_likelihood_draws(*self.unpack(np.atleast_2d(thetas)), X, y, offset)
