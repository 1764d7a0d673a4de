"""The GLMs' Gaussian prior on the weights and intercepts, and the default ``alpha="auto"``
that scales it to the features."""

import numpy as np
import scipy.sparse as sp

#: ``alpha="auto"``: a coefficient's prior sd is this many units of the linear predictor (of
#: ``y``'s sd for the linear regression) per standard deviation of its feature. 1 is the
#: prior the library always had on standardised features (and the L2 penalty of
#: ``LogisticRegression(C=1)`` there); rstanarm's and bambi's 2.5 leave a nearly separable
#: posterior a long ridge (breast cancer) for no gain in predictions.
AUTO_PRIOR_SCALE = 1.0

# Rows per block when the columns' moments are accumulated (a memmap is never read whole).
_BLOCK_ROWS = 4096


def feature_scales(X, sample_weight=None, center=True):
    """Per column of ``X`` its (weighted) standard deviation, or its root mean square when
    ``center`` is False (a model without intercept, centred at 0).

    Dense (also memory-mapped, read in row blocks) or sparse ``X``; ``sample_weight`` counts
    a row that many times (all ones give the unweighted result bit for bit). Each column is
    first divided by its largest ``|x|`` and shifted by the first row, so that features near
    1e300 do not overflow the squares and large means do not cancel the variance.
    """
    if hasattr(X, "reduce_blocks"):
        return _row_source_scales(X, center)
    n, D = X.shape
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    total_w = float(w.sum())
    if total_w <= 0 or n == 0:
        return np.zeros(D)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        size = np.asarray(abs(X).max(axis=0).todense()).ravel()
        size[~(size > 0) | ~np.isfinite(size)] = 1.0
        Xs = X @ sp.diags(1.0 / size)
        mean = np.asarray(Xs.T @ w).ravel() / total_w
        sq = np.asarray(Xs.multiply(Xs).T @ w).ravel() / total_w
        var = sq - mean * mean if center else sq
        return size * np.sqrt(np.maximum(var, 0.0))
    size = np.zeros(D)
    for start in range(0, n, _BLOCK_ROWS):
        np.maximum(size, np.abs(np.asarray(X[start : start + _BLOCK_ROWS], dtype=float)).max(axis=0), out=size)
    size[~(size > 0) | ~np.isfinite(size)] = 1.0
    shift = np.asarray(X[:1], dtype=float).ravel() / size if center else np.zeros(D)
    s1, s2 = np.zeros(D), np.zeros(D)
    for start in range(0, n, _BLOCK_ROWS):
        block = np.asarray(X[start : start + _BLOCK_ROWS], dtype=float) / size - shift
        wb = w[start : start + _BLOCK_ROWS]
        s1 += wb @ block
        s2 += wb @ (block * block)
    mean = s1 / total_w
    var = s2 / total_w - mean * mean if center else s2 / total_w
    return size * np.sqrt(np.maximum(var, 0.0))


def _row_source_scales(rows, center):
    """:func:`feature_scales` of a row source (the partitions of a dask array): one pass of
    per-block sums, with the row source's own weights, shifted by the first row so that large
    means do not cancel the variance."""
    shift = np.asarray(rows.gather(np.array([0])).X, dtype=float).ravel() if center else 0.0

    def sums(block):
        Xb = np.asarray(block.X, dtype=float) - shift
        w = np.ones(Xb.shape[0]) if block.sample_weight is None else np.asarray(block.sample_weight, dtype=float)
        return float(w.sum()), w @ Xb, w @ (Xb * Xb)

    total_w, s1, s2 = rows.reduce_blocks(sums, 1 << 16)
    if total_w <= 0:
        return np.zeros(rows.n_features)
    mean = s1 / total_w
    var = s2 / total_w - mean * mean if center else s2 / total_w
    return np.sqrt(np.maximum(var, 0.0))


def auto_alpha(X, sample_weight=None, center=True):
    """The precisions of ``alpha="auto"``: ``alpha_j = (sd_j / AUTO_PRIOR_SCALE)^2``, a prior
    of ``AUTO_PRIOR_SCALE`` per standard deviation of feature ``j`` whatever its units.

    A column without spread (constant) takes its root mean square instead, and an all-zero
    column (whose coefficient the data never see) precision 1.
    """
    scale = feature_scales(X, sample_weight, center)
    if center:
        flat = ~(scale > 0)
        if flat.any():
            scale[flat] = feature_scales(X, sample_weight, center=False)[flat]
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, AUTO_PRIOR_SCALE)
    with np.errstate(over="ignore", under="ignore"):
        # Features of size 1e300 would square to inf: the largest finite precision instead,
        # so that the fit reaches the checks that name such features.
        alpha = (scale / AUTO_PRIOR_SCALE) ** 2
    return np.clip(alpha, np.finfo(float).tiny, np.finfo(float).max)


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


def resolve_alpha(alpha, previous, X, sample_weight=None, center=True):
    """The prior precisions a fit uses: ``alpha`` itself unless it is ``"auto"``, then
    ``previous`` (the ``alpha_`` of the fit a continued one carries on, so that the chains'
    target keeps its prior as data arrive) when it fits ``X``, else :func:`auto_alpha`."""
    if not (isinstance(alpha, str) and alpha == "auto"):
        return alpha
    n_features = X.n_features if hasattr(X, "n_features") else X.shape[1]
    if previous is not None and np.shape(previous) == (n_features,):
        return previous
    return auto_alpha(X, sample_weight, center)
