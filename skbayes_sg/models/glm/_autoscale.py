"""``alpha="auto"``: the GLMs' default prior scaled to the features, by rstanarm's autoscale
rule (Gelman et al., *Regression and Other Stories*, sec. 9.5; rstanarm's ``priors``
vignette): a feature with more than two distinct values gets a prior scale per standard
deviation, a binary one per unit of its range (a 0/1 column: per unit), so that the prior,
and so the predictions, do not depend on the units a feature is measured in."""

import numpy as np
import scipy.sparse as sp

from ...rows import ordered_map

#: ``alpha="auto"``: a coefficient's prior sd is this many units of the linear predictor (of
#: ``y``'s sd for the linear regression) per standard deviation of its feature. 1 is the
#: prior the library always had on standardised features (and the L2 penalty of
#: ``LogisticRegression(C=1)`` there); rstanarm's and bambi's 2.5 leave a nearly separable
#: posterior a long ridge (breast cancer) for no gain in predictions.
AUTO_PRIOR_SCALE = 1.0

# Rows per block when the columns' moments are accumulated (a memmap is never read whole).
_BLOCK_ROWS = 4096
# Rows of a block that FeatureExtremes.of reads first for values strictly inside a column's range.
_HEAD_ROWS = 16


def feature_scales(X, sample_weight=None, center=True, size=None):
    """Per column of ``X`` its (weighted) standard deviation, or its root mean square when
    ``center`` is False (a model without intercept, centred at 0).

    Dense (also memory-mapped, read in row blocks) or sparse ``X``; ``sample_weight`` counts
    a row that many times (all ones give the unweighted result bit for bit). Each column is
    first divided by its largest ``|x|`` and shifted by the first row, so that features near
    1e300 do not overflow the squares and large means do not cancel the variance. ``size``:
    those largest ``|x|`` when the caller knows them (dense ``X``; a pass saved).
    """
    if hasattr(X, "reduce_blocks"):
        return _row_source_scales(X, center)
    n, D = X.shape
    if sample_weight is None and not sp.issparse(X):
        # Unit weights: no N-vector of ones (on large data a fresh allocation costs more than a
        # pass), one block's (their sum, n, is exact).
        w, total_w = None, float(n)
    else:
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
    starts = range(0, n, _BLOCK_ROWS)
    if size is None:
        size = np.zeros(D)
        for part in ordered_map(
            lambda start: np.abs(np.asarray(X[start : start + _BLOCK_ROWS], dtype=float)).max(axis=0), starts
        ):
            np.maximum(size, part, out=size)
    size = np.array(size, dtype=float)
    size[~(size > 0) | ~np.isfinite(size)] = 1.0
    shift = np.asarray(X[:1], dtype=float).ravel() / size if center else np.zeros(D)

    def moments(start):
        # One temporary a block, worked in place (the same values as (x / size - shift) and its square).
        block = np.asarray(X[start : start + _BLOCK_ROWS], dtype=float) / size
        block -= shift
        wb = np.ones(block.shape[0]) if w is None else w[start : start + _BLOCK_ROWS]
        m1 = wb @ block
        return m1, wb @ np.multiply(block, block, out=block)

    # The blocks' sums added in row order, as one thread adds them (on block_threads threads).
    s1, s2 = np.zeros(D), np.zeros(D)
    for m1, m2 in ordered_map(moments, starts):
        s1 += m1
        s2 += m2
    mean = s1 / total_w
    var = s2 / total_w - mean * mean if center else s2 / total_w
    return size * np.sqrt(np.maximum(var, 0.0))


class FeatureExtremes:
    """Per column: the smallest and largest value of the rows that count (weight > 0) and
    whether some value lies strictly between them (more than two distinct values).

    Two of them add (``+``) as the union of their rows, so a row source's block sums
    (:meth:`~skbayes_sg.rows.RowSource.reduce_blocks`, on dask workers too) combine them
    exactly: no row leaves the place it lives.

    Parameters
    ----------
    lo, hi : ndarray of shape (n_features,)
        The columns' smallest and largest values (``inf`` and ``-inf`` without rows).
    between : ndarray of bool, shape (n_features,)
        Whether a value lies strictly between ``lo`` and ``hi``.
    """

    def __init__(self, lo, hi, between):
        self.lo, self.hi, self.between = lo, hi, between

    @classmethod
    def empty(cls, n_features):
        """The extremes of no rows: the identity of ``+``."""
        return cls(np.full(n_features, np.inf), np.full(n_features, -np.inf), np.zeros(n_features, dtype=bool))

    @classmethod
    def of(cls, X, sample_weight=None):
        """The extremes of the rows of ``X`` (dense or sparse, never densified) with positive weight."""
        if sample_weight is not None:
            keep = np.asarray(sample_weight) > 0
            X = X[np.flatnonzero(keep)] if sp.issparse(X) else np.asarray(X)[keep]
        n, D = X.shape
        if n == 0:
            return cls.empty(D)
        if sp.issparse(X):
            return cls._of_sparse(sp.csr_matrix(X))
        X = np.asarray(X, dtype=float)
        # fmin/fmax: the features are finite (validated), and they skip min's NaN checks (20x).
        lo, hi = _column_reduce(np.fmin, X), _column_reduce(np.fmax, X)
        # A continuous column settles on its first rows (the middle one of three distinct values
        # lies strictly inside the range): only the columns they leave open are read whole.
        head = X[:_HEAD_ROWS]
        between = ((head > lo) & (head < hi)).any(axis=0)
        rest = np.flatnonzero(~between)
        if rest.size:
            Xr = X if rest.size == D else X[:, rest]
            inside = Xr > lo[rest]
            inside &= Xr < hi[rest]
            between[rest] = inside.any(axis=0)
        return cls(lo, hi, between)

    @classmethod
    def _of_sparse(cls, X):
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
        n, D = X.shape
        # scipy's min and max count the implicit zeros.
        lo = np.asarray(X.min(axis=0).todense(), dtype=float).ravel()
        hi = np.asarray(X.max(axis=0).todense(), dtype=float).ravel()
        col = X.indices
        inside = (X.data > lo[col]) & (X.data < hi[col])
        between = np.bincount(col[inside], minlength=D) > 0
        has_zero = np.bincount(col, minlength=D) < n
        return cls(lo, hi, between | (has_zero & (lo < 0) & (hi > 0)))

    def __add__(self, other):
        lo, hi = np.minimum(self.lo, other.lo), np.maximum(self.hi, other.hi)
        between = self.between | other.between
        for v in (self.lo, self.hi, other.lo, other.hi):
            between = between | ((v > lo) & (v < hi))
        return FeatureExtremes(lo, hi, between)

    def binary(self):
        """Columns with exactly two distinct values."""
        return ~self.between & (self.hi > self.lo)

    def range(self):
        """``hi - lo`` of every column."""
        return self.hi - self.lo


def _column_reduce(ufunc, X):
    """``ufunc.reduce(X, axis=0)`` of a C-ordered ``X`` (n, D) with ``k`` consecutive rows side by
    side, a (n / k, k D) view, then over the ``k``: a reduction along a row of D = 28 values
    runs at a third of the speed of one along ~1,000. Exact for min and max, whatever the order."""
    n, D = X.shape
    k = min(max(1, 1024 // max(D, 1)), n)
    m = n - n % k
    if k == 1 or not X.flags.c_contiguous:
        return ufunc.reduce(X, axis=0)
    out = ufunc.reduce(ufunc.reduce(X[:m].reshape(m // k, k * D), axis=0).reshape(k, D), axis=0)
    return out if m == n else ufunc(out, ufunc.reduce(X[m:], axis=0))


def feature_extremes(X, sample_weight=None):
    """:class:`FeatureExtremes` of dense (a memmap read in row blocks), sparse ``X`` or a row
    source (its blocks' extremes computed where they live)."""
    if hasattr(X, "reduce_blocks"):
        return X.reduce_blocks(lambda block: FeatureExtremes.of(block.X, block.sample_weight), 1 << 16)
    if sp.issparse(X):
        return FeatureExtremes.of(X, sample_weight)
    n, D = X.shape

    def of(start):
        w = None if sample_weight is None else sample_weight[start : start + _BLOCK_ROWS]
        return FeatureExtremes.of(X[start : start + _BLOCK_ROWS], w)

    total = FeatureExtremes.empty(D)
    for part in ordered_map(of, range(0, n, _BLOCK_ROWS)):
        total = total + part
    return total


def _row_source_scales(rows, center):
    """:func:`feature_scales` of a row source (the partitions of a dask array): one pass of
    per-block sums, with the row source's own weights, shifted by the first row so that large
    means do not cancel the variance."""
    return _row_source_moments(rows, center)[0]


def _row_source_moments(rows, center):
    """``(feature_scales, feature_extremes)`` of a row source in the same one pass over its
    blocks (on the workers that hold them, for a dask array)."""
    shift = np.asarray(rows.gather(np.array([0])).X, dtype=float).ravel() if center else 0.0

    def sums(block):
        Xb = np.asarray(block.X, dtype=float) - shift
        w = np.ones(Xb.shape[0]) if block.sample_weight is None else np.asarray(block.sample_weight, dtype=float)
        n_bad = int(Xb.size - np.count_nonzero(np.isfinite(Xb)))
        return float(w.sum()), w @ Xb, w @ (Xb * Xb), FeatureExtremes.of(block.X, block.sample_weight), n_bad

    total_w, s1, s2, extremes, n_bad = rows.reduce_blocks(sums, 1 << 16)
    if n_bad:
        # A dask fit under alpha="auto" checks X's values here, in this pass, not in one of its own.
        raise ValueError("X contains NaN or infinity; impute or drop those rows first.")
    if total_w <= 0:
        return np.zeros(rows.n_features), extremes
    mean = s1 / total_w
    var = s2 / total_w - mean * mean if center else s2 / total_w
    return np.sqrt(np.maximum(var, 0.0)), extremes


def auto_alpha(X, sample_weight=None, center=True):
    """The precisions of ``alpha="auto"``: ``alpha_j = (s_j / AUTO_PRIOR_SCALE)^2``, a prior
    sd of ``AUTO_PRIOR_SCALE`` per ``s_j`` of feature ``j`` whatever its units (rstanarm's
    autoscale rule), with ``s_j``:

    - a feature with more than two distinct values: its standard deviation (its root mean
      square when ``center`` is False, a model without intercept);
    - a binary feature (exactly two distinct values): its range ``max - min``, so that a
      0/1 column keeps ``alpha_j = 1`` however rare its ones (its sd would put a prior sd
      of 30 on a one-hot column set in one row of 1,000) and ``x1000`` of it has range 1000;
    - a constant feature (its coefficient the intercept's double): its absolute value, so
      that its contribution ``c w_j`` has a unit prior sd; an all-zero column, which the
      data never see, precision 1.

    Only rows with positive weight count. Returns a float when every feature gets the same
    precision (one-hot columns, for example): the isotropic prior, whose arithmetic is the
    scalar ``alpha``'s, draw for draw.
    """
    if hasattr(X, "reduce_blocks"):
        scale, extremes = _row_source_moments(X, center)
    else:
        extremes = feature_extremes(X, sample_weight)
        # Binary and constant columns need no pass for their standard deviations (one-hot data
        # such as a9a: none at all). Without weights every row counts in the extremes, whose
        # largest |x| are then the scales' (dense X: that pass saved).
        size = np.fmax(np.abs(extremes.lo), np.abs(extremes.hi)) if sample_weight is None else None
        scale = (
            feature_scales(X, sample_weight, center, None if sp.issparse(X) else size)
            if extremes.between.any()
            else np.zeros(extremes.lo.size)
        )
    binary, constant = extremes.binary(), extremes.hi == extremes.lo
    scale[binary] = extremes.range()[binary]
    scale[constant] = np.abs(extremes.lo[constant])
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, AUTO_PRIOR_SCALE)
    with np.errstate(over="ignore", under="ignore"):
        # Features of size 1e300 would square to inf: the largest finite precision instead,
        # so that the fit reaches the checks that name such features.
        alpha = (scale / AUTO_PRIOR_SCALE) ** 2
    alpha = np.clip(alpha, np.finfo(float).tiny, np.finfo(float).max)
    if alpha.size and np.all(alpha == alpha[0]):
        return float(alpha[0])
    return alpha


def resolve_alpha(alpha, previous, X, sample_weight=None, center=True):
    """The prior precisions a fit uses: ``alpha`` itself unless it is ``"auto"``, then
    ``previous`` (the ``alpha_`` of the fit a continued one carries on, so that the chains'
    target keeps its prior as data arrive) when it fits ``X``, else :func:`auto_alpha`."""
    if not (isinstance(alpha, str) and alpha == "auto"):
        return alpha
    n_features = X.n_features if hasattr(X, "n_features") else X.shape[1]
    if previous is not None and np.shape(previous) in ((), (n_features,)):
        return previous
    return auto_alpha(X, sample_weight, center)
