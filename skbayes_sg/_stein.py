"""The kernel Stein discrepancy (KSD) of a set of draws, and a bootstrap test of it.

Gorham & Mackey (2017), "Measuring sample quality with kernels": for draws ``x_i`` with
scores ``s_i = grad log p(x_i)`` of the target ``p``, the Stein kernel of a base kernel
``k`` is

    k_p(x, y) = s_x . s_y k(x, y) + s_x . grad_y k + s_y . grad_x k + tr(grad_x grad_y k),

whose mean under ``p`` is zero for every ``y``, and ``KSD^2 = sum_ij w_i w_j k_p(x_i, x_j)``
is the squared discrepancy of the weighted draws from ``p``. With the inverse multiquadric
(IMQ) base kernel ``k(x, y) = (c^2 + |x - y|^2)^beta``, ``-1 < beta < 0``, the KSD tends
to zero exactly when the draws converge weakly to ``p`` (their Theorem 8, for distantly
dissipative ``p`` such as the log-concave GLM posteriors), which is what makes it usable
to choose a sampler's step size. Only the score is needed, never the normalising constant.

The ground floor: NumPy only. The estimator layer computes the scores at fit, where the
data are at hand (``fit_statistics``); :mod:`skbayes_sg.metrics` is the public face.
"""

import numpy as np

#: Largest number of draws whose scores a fit computes (the KSD costs O(m^2 P) in the
#: kernel and m full-data gradients for the scores).
MAX_KSD_DRAWS = 1000
#: Fewest draws worth a KSD (below, the fit's budget of full-data gradients still pays for
#: this many: a KSD of a dozen draws would rank settings by noise): the bias test's own floor,
#: ``MIN_TEST_DRAWS``. Past a few million rows the budget is below it and these full passes
#: are the KSD's whole cost (at N = 4e6 a hundred of them cost as much as the chains).
MIN_KSD_DRAWS = 50
#: The scores of the KSD's draws touch at most this share of the rows the fit's gradient
#: estimator touched (``n_grad_evals``), at least ``MIN_KSD_DRAWS`` full passes. A full-data
#: pass is vectorised over the rows while the fit's minibatches each pay the Python
#: overhead of an iteration, so in wall time the share is far lower (a9a at defaults:
#: ``benchmarks/ksd_cost.py``).
KSD_ROW_SHARE = 0.5
#: Bootstrap replicates of the bias test and its level: a warning at fit must be rare on
#: exact draws, so the level is strict: the KSD must exceed every one of 999 replicates.
N_BOOTSTRAP = 999
BIAS_LEVEL = 0.001
#: Fewest nearly independent draws (thinned to the effective sample size) the test needs,
#: and the most it uses: its bootstrap costs O(m^2 N_BOOTSTRAP), 0.1 s at 1,000 draws, and
#: 500 nearly independent draws already see a bias of a tenth of a posterior sd.
MIN_TEST_DRAWS = 50
MAX_TEST_DRAWS = 500


def imq_stein_kernel(x, s, c=1.0, beta=-0.5):
    """The Stein kernel matrix ``k_p(x_i, x_j)`` of the IMQ kernel, shape (m, m).

    Parameters
    ----------
    x : ndarray of shape (m, P)
        Draws.
    s : ndarray of shape (m, P)
        Scores ``grad log p`` at the draws.
    c : float, default=1.0
        Scale of the IMQ kernel ``(c^2 + |x - y|^2)^beta``.
    beta : float, default=-0.5
        Exponent, in (-1, 0).

    Returns
    -------
    ndarray of shape (m, m)

    Notes
    -----
    With ``r = x - y`` and ``u = c^2 + |r|^2``: ``grad_x k = 2 beta u^(beta-1) r = -grad_y k``
    and ``tr(grad_x grad_y k) = -2 beta (P u^(beta-1) + 2 (beta - 1) u^(beta-2) |r|^2)``. All
    pairwise products come from three matrix products (``|x_i - x_j|^2``, ``s s'`` and the
    cross terms, each with its row and column sums as extra columns): O(m^2 P), no loop over pairs.
    """
    x, s = _checked(x, s, c, beta)
    return _kernel_block(x, s, x, s, c, beta)


def _checked(x, s, c, beta):
    x = np.asarray(x, dtype=float)
    s = np.asarray(s, dtype=float)
    if x.shape != s.shape or x.ndim != 2:
        raise ValueError(f"x and s must be (m, P) arrays of the same shape; got {x.shape} and {s.shape}.")
    if not c > 0:
        raise ValueError(f"c must be positive; got c={c!r}.")
    if not -1 < beta < 0:
        raise ValueError(f"beta must lie in (-1, 0) for the KSD to detect non-convergence; got beta={beta!r}.")
    return x, s


def _kernel_block(xa, sa, xb, sb, c, beta):
    """``k_p(xa_i, xb_j)``, shape (len(xa), len(xb)) (:func:`imq_stein_kernel`'s formula)."""
    P = xa.shape[1]
    # In place where possible: each (m, m) temporary costs as much as the arithmetic on it,
    # so five arrays, not a dozen; the sums of row and column terms ride in the products as
    # extra columns.
    sq_a, sq_b = np.einsum("ij,ij->i", xa, xa), np.einsum("ij,ij->i", xb, xb)
    a_a, a_b = np.einsum("ij,ij->i", sa, xa), np.einsum("ij,ij->i", sb, xb)  # s_i . x_i
    one_a, one_b = np.ones((xa.shape[0], 1)), np.ones((xb.shape[0], 1))
    # |x_i - x_j|^2 = [x_i, |x_i|^2, 1] . [-2 x_j, 1, |x_j|^2]
    r2 = np.hstack([xa, sq_a[:, None], one_a]) @ np.hstack([-2.0 * xb, one_b, sq_b[:, None]]).T
    np.maximum(r2, 0.0, out=r2)
    u = r2 + c * c
    # One power of u (a square root at beta = -1/2, ~10x cheaper per entry than a general
    # power), the others by division.
    ub = np.sqrt(u) if beta == -0.5 else u ** (-beta)
    np.divide(1.0, ub, out=ub)
    np.divide(r2, u, out=r2)  # r2 / u
    np.divide(ub, u, out=u)  # u^(beta - 1)
    # s_j . (x_i - x_j) - s_i . (x_i - x_j) - P = s_i . x_j + x_i . s_j - a_i - a_j - P
    cross = np.hstack([sa, xa, a_a[:, None], one_a]) @ np.hstack([xb, sb, -one_b, -(a_b + P)[:, None]]).T
    r2 *= 2.0 * (beta - 1.0)
    cross -= r2
    cross *= u
    cross *= 2.0 * beta
    K = sa @ sb.T
    K *= ub
    K += cross
    return K


#: Rows of the Stein kernel computed at once by :func:`stein_statistics`: its temporaries
#: (BLOCK x m) stay in cache and are reused, where the whole (m, m) matrix's first touch
#: (8 MB an array at m = 1,000) cost three times its arithmetic in a fresh process.
BLOCK = 64


def stein_statistics(x, s, keep=None, c=1.0, beta=-0.5):
    """``(ksd, K_keep)``: the V-statistic KSD of all draws (:func:`ksd_from_kernel` of the
    :func:`imq_stein_kernel` matrix) and that matrix's rows and columns ``keep`` (None when
    ``keep`` is None), without building the (m, m) matrix.

    The kernel is symmetric: row block ``i`` is computed against the columns from its own
    start on, and the blocks right of the diagonal count twice (m^2 / 2 entries in all).
    """
    x, s = _checked(x, s, c, beta)
    m = x.shape[0]
    total = 0.0
    K_keep = None
    if keep is not None:
        keep = np.asarray(keep)
        K_keep = np.empty((keep.size, keep.size))
        # Position of each kept draw in the kept matrix, -1 for the others.
        where = np.full(m, -1)
        where[keep] = np.arange(keep.size)
    for start in range(0, m, BLOCK):
        stop = min(start + BLOCK, m)
        Kb = _kernel_block(x[start:stop], s[start:stop], x[start:], s[start:], c, beta)
        total += Kb[:, : stop - start].sum() + 2.0 * Kb[:, stop - start :].sum()
        if K_keep is not None:
            rows = np.flatnonzero(where[start:stop] >= 0)
            cols = np.flatnonzero(where[start:] >= 0)
            if rows.size:
                block = Kb[np.ix_(rows, cols)]
                ia, ib = where[start + rows], where[start + cols]
                K_keep[np.ix_(ia, ib)] = block
                K_keep[np.ix_(ib, ia)] = block.T
    return float(np.sqrt(max(total / (m * m), 0.0))), K_keep


def ksd_from_kernel(K, weights=None):
    """The V-statistic ``sqrt(w' K w)`` (equal weights ``1 / m`` by default)."""
    if weights is None:
        value = K.mean()
    else:
        w = np.asarray(weights, dtype=float)
        value = w @ K @ w
    return float(np.sqrt(max(value, 0.0)))


def bootstrap_pvalue(K, n_bootstrap=N_BOOTSTRAP, seed=0):
    """p-value of ``KSD^2 = mean(K)`` under the hypothesis that the draws are independent
    draws of ``p``: the wild bootstrap of Chwialkowski, Strathmann & Gretton (2016) (with
    independent Rademacher multipliers, as for independent draws; Liu, Lee & Jordan 2016
    use multinomial weights to the same end).

    Under the hypothesis the V-statistic ``m KSD^2`` is degenerate, and
    ``(1 / m^2) sum_ij W_i W_j K_ij`` with random signs ``W`` has the same limit law. The
    draws must be (nearly) independent: autocorrelated draws inflate the statistic and not
    the bootstrap, so the caller thins them to their effective sample size first.
    """
    m = K.shape[0]
    rng = np.random.default_rng(seed)
    W = rng.choice(np.array([-1.0, 1.0]), size=(m, n_bootstrap))
    boot = np.einsum("ib,ib->b", W, K @ W) / (m * m)
    observed = K.mean()
    return float((1 + np.sum(boot >= observed)) / (1 + n_bootstrap))


def thinned_index(n_chains, n_draws, m):
    """Indices into the stacked draws ``(n_chains * n_draws,)``: ``ceil(m / n_chains)`` draws
    evenly spaced over each chain (every chain, first and last draw included), or all."""
    per_chain = int(np.ceil(m / n_chains))
    if per_chain >= n_draws:
        return np.arange(n_chains * n_draws)
    keep = np.unique(np.linspace(0, n_draws - 1, per_chain).round().astype(np.intp))
    return (np.arange(n_chains)[:, None] * n_draws + keep).ravel()


def n_ksd_draws(n_stored, n_grad_evals, n_samples):
    """How many draws the fit's KSD uses: at most ``MAX_KSD_DRAWS`` and the stored draws, and
    no more full-data scores than ``KSD_ROW_SHARE`` of the rows the fit touched allow (but
    ``MIN_KSD_DRAWS``)."""
    budget = int(KSD_ROW_SHARE * n_grad_evals / max(n_samples, 1))
    return int(min(n_stored, MAX_KSD_DRAWS, max(MIN_KSD_DRAWS, budget)))


def fit_statistics(chain_model, thetas, n_chains, n_grad_evals, geometry_whitened, to_chain):
    """The Stein ingredients of a fit: its thinned draws and their scores, in the KSD's
    coordinates.

    Parameters
    ----------
    chain_model : Model
        The model the chains ran on, holding the data (whitened or not).
    thetas : ndarray of shape (n_chains * n_draws, P)
        The stacked draws in the model's ``theta``.
    n_chains : int
    n_grad_evals : int
        Per-example gradients the fit evaluated (the scores' budget, :func:`n_ksd_draws`).
    geometry_whitened : bool
        Whether the chains ran in coordinates whitened at the MAP.
    to_chain : callable
        ``theta (m, P) -> chain coordinates``.

    Returns
    -------
    dict
        ``x`` and ``s`` (m, P): draws and scores in the KSD's coordinates; ``index``: their
        positions in the stacked draws; ``coordinates``: ``"whitened"`` (the chains' ``z``)
        or ``"scaled"`` (``theta`` times the root of the posterior's diagonal curvature
        at the draws' mean, when the chains ran in ``theta`` or a diagonal scaling of it).
    """
    S = thetas.shape[0]
    m = n_ksd_draws(S, n_grad_evals, chain_model.n_samples)
    index = thinned_index(n_chains, S // n_chains, m)
    z = np.atleast_2d(to_chain(thetas[index]))
    scores = chain_model.grad_log_posterior_draws(z)
    if geometry_whitened:
        return {"x": z, "s": scores, "index": index, "coordinates": "whitened"}
    # Not whitened: scale each coordinate by the posterior's curvature, so that c = 1 means
    # one posterior sd whatever the units of the features. The curvature at the draws'
    # mean, not at the MAP, which a plain-gradient fit never computes.
    d = np.abs(chain_model.hessian_diagonal(z.mean(axis=0)))
    scale = np.sqrt(np.where(d > 0, d, 1.0))
    return {"x": z * scale, "s": scores / scale, "index": index, "coordinates": "scaled"}


def bias_test_index(m, ess, n_chains):
    """Indices of the draws the bias test uses, or None for no test: the fit's ``m`` KSD
    draws (``n_chains`` equal runs, chain by chain) thinned further to about ``ess`` (the
    smallest bulk ESS of the parameters; at most ``MAX_TEST_DRAWS``), evenly over each chain,
    so that the test's draws are nearly independent, as the bootstrap assumes; below
    ``MIN_TEST_DRAWS`` of them there is no test."""
    if not np.isfinite(ess) or ess < MIN_TEST_DRAWS:
        return None
    keep = thinned_index(n_chains, m // n_chains, min(m, int(ess), MAX_TEST_DRAWS))
    return None if keep.size < MIN_TEST_DRAWS else keep


def fit_ksd(x, s, ess=None, n_chains=1, seed=0):
    """``(ksd, p_value)`` of a fit's KSD draws ``x`` and scores ``s`` (``n_chains`` equal runs,
    chain by chain): the KSD of all of them (:func:`stein_statistics`) and, given ``ess``,
    the bias test's :func:`bootstrap_pvalue` on the draws of :func:`bias_test_index` (None without
    ``ess`` or when there are too few)."""
    keep = None if ess is None else bias_test_index(len(x), ess, n_chains)
    ksd, K_keep = stein_statistics(x, s, keep)
    return ksd, None if K_keep is None else bootstrap_pvalue(K_keep, seed=seed)
