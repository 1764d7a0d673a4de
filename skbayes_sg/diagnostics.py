"""MCMC convergence diagnostics, vectorised over parameters.

This module implements the rank-normalised split-:math:`\\hat{R}`, the bulk
and tail effective sample sizes (ESS) and the Monte Carlo standard error of
the mean of Vehtari et al. (2021), with the autocorrelation truncated by
Geyer's (1992) initial positive and initial monotone sequence estimators.

The numbers are meant to match ArviZ's defaults (``az.rhat(method="rank")``,
``az.ess(method="bulk")``, ``az.ess(method="tail")``,
``az.mcse(method="mean")``) to floating-point rounding, so the conventions
below are ArviZ's rather than the paper's wherever the two differ:

* a chain of ``n_draws`` draws is split into its first and its last
  ``n_draws // 2`` draws, so the middle draw of an odd-length chain is
  dropped;
* ranks are taken jointly over all split chains and back-transformed with
  Blom's offset ``(rank - 3/8) / (S - 3/4 + 1)`` before ``norm.ppf``;
* the integrated autocorrelation time is floored at ``1 / log10(S)``, where
  ``S`` is the number of split draws.

Unlike ArviZ, which loops over parameters in Python, everything here works on
an array of shape ``(n_chains, n_draws, n_params)`` at once: the Geyer
truncation loops over lag pairs and carries one mask per parameter.

Edge cases (per parameter)
--------------------------
* Fewer than 4 draws: every diagnostic is NaN (as in ArviZ); ``rhat`` is
  also NaN for fewer than 2 chains.
* Any non-finite value (NaN or +/-inf): every diagnostic is NaN. For NaN
  this is what ArviZ does. For +/-inf ArviZ's rank-based ``ess_bulk`` and
  ``ess_tail`` still return a finite number (ranks of infinities are
  well-defined); we return NaN instead because an infinite draw means the
  sampler has diverged and no ESS for it is meaningful.
* A constant parameter (range below ``np.finfo(float).resolution`` after
  splitting, which is ArviZ's test): ``ess_bulk`` and ``ess_tail`` equal the
  number of split draws ``n_chains * 2 * (n_draws // 2)``, ``mcse_mean`` is
  0 and ``rhat`` is NaN (its within-chain variance is 0/0). This is exactly
  ArviZ's output; we only silence the 0/0 warning.

References
----------
.. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Buerkner,
   P.-C. (2021). Rank-normalization, folding, and localization: an improved
   R-hat for assessing convergence of MCMC. *Bayesian Analysis* 16(2),
   667-718. arXiv:1903.08008.
.. [2] Geyer, C. J. (1992). Practical Markov chain Monte Carlo. *Statistical
   Science* 7(4), 473-483.
"""

import warnings

import numpy as np
from scipy import fft as _sp_fft
from scipy import special

__all__ = ["split_rhat", "ess_bulk", "ess_tail", "mcse_mean", "summarize"]

# ArviZ's thresholds: below 4 draws a split chain has fewer than 2 draws and
# no within-chain variance; R-hat compares chains, so it needs at least 2.
_MIN_DRAWS = 4
_MIN_CHAINS_RHAT = 2
# Blom (1958) offset used by ArviZ when turning ranks into normal scores.
_BLOM_C = 3.0 / 8.0
# Default tail probabilities of ArviZ's ``ess(method="tail")``.
_TAIL_PROBS = (0.05, 0.95)
# Upper bound on the number of float64 elements in one FFT block. The padded
# complex spectrum is several times the size of the input, so parameters are
# processed in blocks of about this many elements (512 KiB): buffers that stay in
# cache and are reused, where one 64 MiB block paid its first touch (breast
# cancer's 124 rows of 8 x 4,125: 30 ms in one block, 19 ms in blocks of 2^18). At
# 2^16 a default HMC fit's summary (124 rows of 8 x 225) takes 7.5 ms instead of 9.9,
# and 9.3 instead of 12.8 in a fresh process (whose 2 MiB buffers were fresh pages);
# 200 to 3,760 parameters take the same time either way. Each row's transform is its
# own, so the blocks do not change a bit of the result.
_FFT_BLOCK_ELEMENTS = 2**16


# ---------------------------------------------------------------------------
# Input handling
#
# Internally draws are stored as (P, C, N), parameter-major, so that each
# parameter's (chain, draw) block is contiguous, exactly as ArviZ sees it.
# Sorting, ranking and FFTs then run along the contiguous last axis, which is
# several times faster than along a strided one for large P.
# ---------------------------------------------------------------------------
def _prepare(samples):
    """Return ``(x, bad, scalar)`` with ``x`` of shape (P, C, D), float.

    ``bad`` flags parameters containing any non-finite value. Their draws are
    replaced by zeros so that the vectorised code never sees NaN or inf (which
    would otherwise poison ranks and FFTs and emit warnings); the caller
    overwrites their results with NaN.
    """
    x = np.asarray(samples, dtype=float)
    if x.ndim == 2:
        scalar = True
        x = x[:, :, np.newaxis]
    elif x.ndim == 3:
        scalar = False
    else:
        raise ValueError(
            f"samples must have shape (n_chains, n_draws) or (n_chains, n_draws, n_params); got shape {x.shape}"
        )
    if x.shape[0] < 1:
        raise ValueError("samples must contain at least one chain")
    x = np.ascontiguousarray(np.moveaxis(x, 2, 0))
    bad = ~np.isfinite(x).all(axis=(1, 2))
    if bad.any():
        # ``x`` may still be a view of the caller's array (e.g. one
        # parameter), which must not be modified.
        x = x.copy()
        x[bad] = 0.0
    return x, bad, scalar


def _unit_scaled(x):
    """``(x / scale, scale)``: each parameter of ``x`` (P, C, N) divided by a power of two
    near its largest |draw|.

    Exact (every diagnostic is the same, bit for bit, as on ``x``), and the squares in the
    autocovariances cannot overflow for draws of any size (chains run far out under a
    near-flat prior).
    """
    largest = np.abs(x).max(axis=(1, 2)) if x.size else np.zeros(x.shape[0])
    exponent = np.frexp(largest)[1]
    scale = np.ldexp(1.0, np.where(largest > 0, exponent, 0))
    return x / scale[:, None, None], scale


def _finish(values, bad, scalar):
    """Apply the NaN mask and return a float (2-D input) or an array."""
    values = np.where(bad, np.nan, np.asarray(values, dtype=float))
    if scalar:
        return float(values[0])
    return values


def _nan_result(x, scalar):
    values = np.full(x.shape[0], np.nan)
    return float(values[0]) if scalar else values


# ---------------------------------------------------------------------------
# Building blocks (all on arrays of shape (P, C, N))
# ---------------------------------------------------------------------------
def _split_chains(x):
    """Split each chain in halves and stack them as separate chains.

    ArviZ takes the first and the *last* ``n // 2`` draws, so for odd ``n``
    the middle draw is discarded rather than given to either half.
    """
    n = x.shape[2]
    half = n // 2
    return np.concatenate((x[:, :, :half], x[:, :, n - half :]), axis=1)


def _z_scale(x):
    """Rank-normalise each parameter jointly over all chains and draws."""
    p, c, n = x.shape
    size = c * n
    flat = x.reshape(p, size)
    # Ranks must be pooled across chains: R-hat relies on one chain's draws
    # ranking systematically above another's.
    order = np.argsort(flat, axis=1)
    ordered = np.sort(flat, axis=1)  # cheaper than gathering by ``order``
    # The normal score of each position in sorted order, computed once for all
    # parameters: without ties the ranks are the positions, and the same numbers as
    # ``ndtri`` of every element come for size rather than p * size evaluations.
    scores = _normal_scores(np.arange(1.0, size + 1), size)
    values = np.tile(scores, p)
    # Runs of equal values, all rows at once: position i * size + k of the flattened sorted
    # rows is tied to the next where ordered[i, k] == ordered[i, k + 1]. A row's last position
    # never is, so no run crosses into the next row. A run takes the score of its average rank
    # (the mean of its positions in its row, plus one), computed once per run: an exact
    # sampler's rejections repeat draws, so every row of its draws has runs, but far fewer of
    # them than draws.
    tied = np.flatnonzero(ordered[:, 1:] == ordered[:, :-1])
    if tied.size:
        tied += tied // (size - 1)  # from the (p, size - 1) comparisons to the (p, size) rows
        first, last = _tie_runs(tied)
        lengths = last - first + 1
        run_scores = _normal_scores(0.5 * (first % size + last % size) + 1.0, size)
        values[_run_positions(first, lengths)] = np.repeat(run_scores, lengths)
    # Each sorted position's score goes back to its draw: one scatter over all rows.
    z = np.empty((p, size))
    np.put(z, order + (size * np.arange(p))[:, None], values)
    return z.reshape(p, c, n)


def _normal_scores(ranks, size):
    """Blom's normal scores of ``ranks`` among ``size`` draws."""
    u = (ranks - _BLOM_C) / (size - 2 * _BLOM_C + 1)
    # ndtri is what norm.ppf evaluates (times scale 1 plus loc 0, both exact),
    # minus its argument checking and broadcasting overhead.
    return special.ndtri(u)


def _sorted_ranks(ties):
    """Average ranks (from 1) of the values of a sorted row, given ``ties``, which of its
    neighbours are equal (``row[1:] == row[:-1]``): every element of a run of equal
    values gets the mean of the run's positions, plus one; the others their position
    plus one. Only the runs are touched, so a row with a few ties (the folded draws of
    the tail R-hat tie at the median) costs little more than one without."""
    size = ties.size + 1
    ranks = np.arange(1.0, size + 1)
    tied = np.flatnonzero(ties)
    if tied.size:
        first, last = _tie_runs(tied)
        lengths = last - first + 1
        ranks[_run_positions(first, lengths)] = np.repeat(0.5 * (first + last) + 1.0, lengths)
    return ranks


def _tie_runs(tied):
    """``(first, last)``: the positions that open and close each run of equal values of a
    sorted row, given ``tied`` (non-empty), the positions ``i`` with ``row[i] == row[i + 1]``."""
    # Runs of consecutive tied pairs: run k covers positions first[k] .. last[k].
    breaks = np.flatnonzero(np.diff(tied) > 1)
    first = tied[np.concatenate(([0], breaks + 1))]
    last = tied[np.concatenate((breaks, [tied.size - 1]))] + 1
    return first, last


def _run_positions(first, lengths):
    """Every position of the runs starting at ``first`` with ``lengths``, run after run."""
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(first, lengths) + offsets


def _average_ranks(x):
    """``scipy.stats.rankdata(x, method="average", axis=1)`` for a 2-D float array.

    One argsort, where rankdata sorts twice, and the ties resolved on the sorted rows
    (:func:`_sorted_ranks`): the folded draws of the tail R-hat always tie at the median.
    ``n_iter="auto"`` computes the diagnostics after every block, so they must be cheap.
    """
    order = np.argsort(x, axis=1)
    ordered = np.sort(x, axis=1)
    ranks = np.empty(x.shape)
    for i in range(x.shape[0]):
        ranks[i, order[i]] = _sorted_ranks(ordered[i, 1:] == ordered[i, :-1])
    return ranks


def _mean_autocov(x):
    """Chain-averaged autocovariance for every lag, shape (N, P).

    Uses the same FFT recipe as ArviZ (zero-padding to ``next_fast_len(2N)``
    so that the circular correlation equals the linear one, biased 1/N
    normalisation), with the chains' power spectra averaged before the one
    inverse transform per parameter (the transform is linear): the same
    autocovariances to rounding, for a quarter of the transforms.
    """
    p, c, n = x.shape
    m = _sp_fft.next_fast_len(2 * n)
    out = np.empty((n, p))
    block = max(1, _FFT_BLOCK_ELEMENTS // max(1, c * m))
    for start in range(0, p, block):
        xb = x[start : start + block]
        # Centred and zero-padded in one buffer, which the transform may overwrite.
        padded = np.zeros(xb.shape[:2] + (m,))
        np.subtract(xb, xb.mean(axis=2, keepdims=True), out=padded[:, :, :n])
        spec = _sp_fft.rfft(padded, axis=2, overwrite_x=True)
        power = spec.real**2
        power += spec.imag**2
        cov = _sp_fft.irfft(power.mean(axis=1), n=m, axis=1)[:, :n]
        cov /= n
        out[:, start : start + block] = cov.T
    return out


def _ess_core(x):
    """ESS of (already split) chains ``x`` of shape (P, C, N).

    Mirrors ArviZ's ``_ess`` step for step, with the Geyer sequences run over
    lag pairs while a boolean mask per parameter records which parameters
    are still inside their initial positive sequence. Lag-indexed arrays are
    (N, P) so that each lag is a contiguous row.
    """
    p, c, n = x.shape
    size = c * n
    # ArviZ's constant-chain test; without it the autocorrelation of a
    # constant would be 0/0.
    const = (x.max(axis=(1, 2)) - x.min(axis=(1, 2))) < np.finfo(float).resolution

    acov = _mean_autocov(x)
    chain_mean = x.mean(axis=2)
    mean_var = acov[0] * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if c > 1:
        var_plus = var_plus + np.var(chain_mean, axis=1, ddof=1)

    with np.errstate(invalid="ignore", divide="ignore"):
        # Same operation order as ArviZ so that values agree to rounding.
        rho = 1.0 - (mean_var - acov) / var_plus

    rho_t = np.zeros((n, p))
    rho_t[0] = 1.0
    rho_even = np.ones(p)
    rho_odd = rho[1].copy()
    rho_t[1] = rho_odd

    # Geyer's initial positive sequence: sum lag pairs while their sum is
    # positive. ``t`` is each parameter's own loop counter, so that max_t is
    # exactly what ArviZ's scalar loop would leave behind.
    t = np.ones(p, dtype=np.intp)
    active = np.ones(p, dtype=bool)
    lag = 1
    while lag < n - 3:
        active &= (rho_even + rho_odd) > 0.0
        if not active.any():
            break
        ev = rho[lag + 1]
        od = rho[lag + 2]
        rho_even = np.where(active, ev, rho_even)
        rho_odd = np.where(active, od, rho_odd)
        # A pair with a negative sum ends the sequence and is not kept, but
        # its even term may still be used below.
        keep = active & ((ev + od) >= 0)
        rho_t[lag + 1] = np.where(keep, ev, rho_t[lag + 1])
        rho_t[lag + 2] = np.where(keep, od, rho_t[lag + 2])
        t += 2 * active
        lag += 2

    max_t = t - 2
    cols = np.arange(p)
    # ArviZ's "improve estimation" step: keep a positive last even term.
    rho_t[max_t + 1, cols] = np.where(rho_even > 0, rho_even, rho_t[max_t + 1, cols])

    # Geyer's initial monotone sequence: make the pair sums non-increasing.
    # Each pair depends on the (possibly already lowered) previous pair, so
    # this is sequential in the lag but vectorised over parameters.
    lag = 1
    max_lag = max_t.max() if p else -1
    while lag <= max_lag - 2:
        within = lag <= max_t - 2
        prev = rho_t[lag - 1] + rho_t[lag]
        cur = rho_t[lag + 1] + rho_t[lag + 2]
        lower = within & (cur > prev)
        half = prev / 2.0
        rho_t[lag + 1] = np.where(lower, half, rho_t[lag + 1])
        rho_t[lag + 2] = np.where(lower, half, rho_t[lag + 2])
        lag += 2

    lags = np.arange(n)[:, np.newaxis]
    head = np.where(lags < (max_t + 1), rho_t, 0.0).sum(axis=0)
    tau_hat = -1.0 + 2.0 * head + rho_t[max_t + 1, cols]
    # Floor from ArviZ: keeps antithetic chains from reporting absurd ESS.
    tau_hat = np.maximum(tau_hat, 1.0 / np.log10(size))
    ess = size / tau_hat
    ess = np.where(np.isnan(rho_t).any(axis=0), np.nan, ess)
    return np.where(const, float(size), ess)


def _rhat_core(x):
    """Classic (non-split) potential scale reduction of chains ``x``."""
    n = x.shape[2]
    chain_mean = x.mean(axis=2)
    chain_var = np.var(x, axis=2, ddof=1)
    between = n * np.var(chain_mean, axis=1, ddof=1)
    within = chain_var.mean(axis=1)
    # A constant parameter gives 0/0 = NaN, which is ArviZ's answer too.
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def _rhat_from_split(split, z_split):
    bulk = _rhat_core(z_split)
    folded = np.abs(split - np.median(split, axis=(1, 2), keepdims=True))
    tail = _rhat_core(_z_scale(folded))
    # Python's ``max(bulk, tail)`` as used by ArviZ: NaN in ``bulk`` wins,
    # NaN in ``tail`` is ignored.
    return np.where(tail > bulk, tail, bulk)


def _quantiles_type7(x, probs):
    """Quantiles of all draws of each parameter, one array of shape (P, 1, 1) per prob.

    Reproduces ``scipy.stats.mstats.mquantiles(alphap=1, betap=1)`` (used by
    ArviZ) operation for operation: ``np.quantile`` rounds its interpolation
    weight differently, and the quantile is compared with ``<=`` against the
    draws, so a one-ulp difference could flip an indicator. One sort serves
    every prob.
    """
    p, c, d = x.shape
    count = c * d
    xs = np.sort(x.reshape(p, count), axis=1)
    out = []
    for prob in probs:
        aleph = count * prob + (1.0 + prob * (1.0 - 1.0 - 1.0))
        k = int(np.floor(np.clip(aleph, 1, count - 1)))
        gamma = np.clip(aleph - k, 0, 1)
        out.append(((1.0 - gamma) * xs[:, k - 1] + gamma * xs[:, k])[:, np.newaxis, np.newaxis])
    return out


def _tail_indicators(x, split=None, out=None):
    """The split indicators ``x <= q05`` and ``x <= q95`` whose ESS the tail ESS is,
    stacked along the parameters: shape (2P, 2C, N // 2), written into ``out`` if given.
    ``split``: ``_split_chains(x)``, when the caller has it (the indicators of the split
    chains are the split chains' indicators)."""
    split = _split_chains(x) if split is None else split
    p = x.shape[0]
    out = np.empty((2 * p,) + split.shape[1:]) if out is None else out
    for i, q in enumerate(_quantiles_type7(x, _TAIL_PROBS)):
        np.less_equal(split, q, out=out[i * p : (i + 1) * p])
    return out


def _tail_min(ess):
    """The tail ESS from the ESS of :func:`_tail_indicators`: Python's ``min(low, high)``
    as used by ArviZ."""
    low, high = np.split(ess, 2)
    return np.where(high < low, high, low)


def _ess_tail_core(x):
    return _tail_min(_ess_core(_tail_indicators(x)))


def _mcse_mean_core(x):
    ess = _ess_core(_split_chains(x))
    sd = np.std(x, axis=(1, 2), ddof=1)
    return sd / np.sqrt(ess)


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------
def split_rhat(samples):
    """Rank-normalised split R-hat.

    The larger of the bulk R-hat (on rank-normalised split chains) and the
    tail R-hat (on rank-normalised split chains folded about their median),
    following Vehtari et al. (2021). Equals ArviZ's
    ``az.rhat(..., method="rank")``.

    Parameters
    ----------
    samples : array_like
        Draws of shape ``(n_chains, n_draws, n_params)``, or
        ``(n_chains, n_draws)`` for a single parameter.

    Returns
    -------
    rhat : ndarray of shape (n_params,) or float
        R-hat per parameter; a float for 2-D input. Values above about 1.01
        indicate that the chains have not mixed. NaN for fewer than 2
        chains, fewer than 4 draws, non-finite draws or a constant
        parameter.

    See Also
    --------
    ess_bulk, ess_tail, summarize

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(4, 500, 3))
    >>> split_rhat(x).shape
    (3,)
    """
    x, bad, scalar = _prepare(samples)
    if x.shape[2] < _MIN_DRAWS or x.shape[1] < _MIN_CHAINS_RHAT or x.shape[0] == 0:
        return _nan_result(x, scalar)
    split = _split_chains(_unit_scaled(x)[0])
    return _finish(_rhat_from_split(split, _z_scale(split)), bad, scalar)


def ess_bulk(samples):
    """Bulk effective sample size.

    ESS of the rank-normalised split chains, with the autocorrelation sum
    truncated by Geyer's initial positive and initial monotone sequence.
    Equals ArviZ's ``az.ess(..., method="bulk")``.

    Parameters
    ----------
    samples : array_like
        Draws of shape ``(n_chains, n_draws, n_params)``, or
        ``(n_chains, n_draws)`` for a single parameter.

    Returns
    -------
    ess : ndarray of shape (n_params,) or float
        Bulk ESS per parameter; a float for 2-D input. NaN for fewer than 4
        draws or non-finite draws; the number of split draws for a constant
        parameter.

    See Also
    --------
    ess_tail, mcse_mean, summarize

    Notes
    -----
    For anticorrelated chains the ESS can exceed the number of draws; it is
    capped at ``S * log10(S)`` for ``S`` split draws.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(4, 1000))
    >>> 3000 < ess_bulk(x) < 5000
    True
    """
    x, bad, scalar = _prepare(samples)
    if x.shape[2] < _MIN_DRAWS or x.shape[0] == 0:
        return _nan_result(x, scalar)
    return _finish(_ess_core(_z_scale(_split_chains(_unit_scaled(x)[0]))), bad, scalar)


def ess_tail(samples):
    """Tail effective sample size.

    The smaller of the ESS of the indicators ``x <= q05`` and ``x <= q95``
    on split chains, where the quantiles are taken over all draws (R's type
    7). Equals ArviZ's ``az.ess(..., method="tail")``.

    Parameters
    ----------
    samples : array_like
        Draws of shape ``(n_chains, n_draws, n_params)``, or
        ``(n_chains, n_draws)`` for a single parameter.

    Returns
    -------
    ess : ndarray of shape (n_params,) or float
        Tail ESS per parameter; a float for 2-D input. NaN for fewer than 4
        draws or non-finite draws; the number of split draws for a constant
        parameter.

    See Also
    --------
    ess_bulk, summarize
    """
    x, bad, scalar = _prepare(samples)
    if x.shape[2] < _MIN_DRAWS or x.shape[0] == 0:
        return _nan_result(x, scalar)
    return _finish(_ess_tail_core(_unit_scaled(x)[0]), bad, scalar)


def mcse_mean(samples):
    """Monte Carlo standard error of the posterior mean.

    ``sd / sqrt(ess_mean)``, where ``sd`` is the standard deviation (ddof=1)
    of all draws and ``ess_mean`` the ESS of the split chains on the
    original (not rank-normalised) scale. Equals ArviZ's
    ``az.mcse(..., method="mean")``.

    Parameters
    ----------
    samples : array_like
        Draws of shape ``(n_chains, n_draws, n_params)``, or
        ``(n_chains, n_draws)`` for a single parameter.

    Returns
    -------
    mcse : ndarray of shape (n_params,) or float
        Standard error per parameter; a float for 2-D input. NaN for fewer
        than 4 draws or non-finite draws; 0 for a constant parameter.

    See Also
    --------
    ess_bulk, summarize
    """
    x, bad, scalar = _prepare(samples)
    if x.shape[2] < _MIN_DRAWS or x.shape[0] == 0:
        return _nan_result(x, scalar)
    x, scale = _unit_scaled(x)
    return _finish(_mcse_mean_core(x) * scale, bad, scalar)


def summarize(samples, n_threads=1):
    """Posterior summary and convergence diagnostics per parameter.

    Shares the split and rank-normalised arrays between R-hat and bulk ESS,
    so it is cheaper than calling the individual functions.

    Parameters
    ----------
    samples : array_like
        Draws of shape ``(n_chains, n_draws, n_params)``, or
        ``(n_chains, n_draws)`` for a single parameter.
    n_threads : int, default=1
        Threads that share the parameters (each parameter's numbers are computed alone, so
        the result is the same): NumPy's sorts and SciPy's transforms release the GIL, and
        ``n_iter="auto"`` summarises its draws after every block while the chains' worker
        processes wait.

    Returns
    -------
    summary : dict
        Keys ``"mean"``, ``"sd"`` (ddof=1, over all chains and draws),
        ``"ess_bulk"``, ``"ess_tail"``, ``"rhat"`` and ``"mcse_mean"``, each
        an ndarray of shape (n_params,) (a float for 2-D input). Mean and sd
        are plain numpy statistics of the draws (so NaN or inf propagate);
        the diagnostics follow the conventions of :func:`ess_bulk`,
        :func:`ess_tail`, :func:`split_rhat` and :func:`mcse_mean`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> s = summarize(rng.normal(size=(4, 200, 2)))
    >>> sorted(s)
    ['ess_bulk', 'ess_tail', 'mcse_mean', 'mean', 'rhat', 'sd']
    """
    if n_threads > 1 and np.ndim(samples) == 3 and np.size(samples) >= _THREAD_MIN_ELEMENTS:
        return _summarize_threaded(samples, n_threads)
    x, bad, scalar = _prepare(samples)
    # Mean and sd are plain statistics of the draws, so NaN/inf must reach
    # them; ``x`` has had non-finite parameters zeroed.
    raw = np.asarray(samples, dtype=float)
    if raw.ndim == 2:
        raw = raw[:, :, np.newaxis]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"), warnings.catch_warnings():
        # One draw in all (max_draws=1, one chain) has no sd: NaN, without numpy's
        # "Degrees of freedom <= 0" warning reaching the user; draws beyond 1e154 have an
        # infinite sd, without its "overflow".
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {"mean": raw.mean(axis=(0, 1)), "sd": raw.std(axis=(0, 1), ddof=1)}
    n_params, n_chains, n_draws = x.shape
    nan = np.full(n_params, np.nan)
    if n_draws < _MIN_DRAWS or n_params == 0:
        out.update(ess_bulk=nan, ess_tail=nan, rhat=nan, mcse_mean=nan)
    else:
        x, scale = _unit_scaled(x)
        split = _split_chains(x)
        z_split = _z_scale(split)
        # Every ESS in one pass (bulk, the two tail indicators, the mean's): the FFTs and
        # Geyer's sequences run once over 4P rows, which give each row what it alone would.
        rows = np.empty((4 * n_params,) + split.shape[1:])
        rows[:n_params] = z_split
        _tail_indicators(x, split, out=rows[n_params : 3 * n_params])
        rows[3 * n_params :] = split
        ess = np.split(_ess_core(rows), [n_params, 3 * n_params])
        out["ess_bulk"] = ess[0]
        out["ess_tail"] = _tail_min(ess[1])
        if n_chains < _MIN_CHAINS_RHAT:
            out["rhat"] = nan
        else:
            out["rhat"] = _rhat_from_split(split, z_split)
        sd = np.std(x, axis=(1, 2), ddof=1)
        out["mcse_mean"] = sd / np.sqrt(ess[2]) * scale
        for key in ("ess_bulk", "ess_tail", "rhat", "mcse_mean"):
            out[key] = np.where(bad, np.nan, out[key])
    if scalar:
        return {k: float(v[0]) for k, v in out.items()}
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


#: Fewest draws (all parameters) that :func:`summarize` shares among threads: below, starting
#: them costs more than they save.
_THREAD_MIN_ELEMENTS = 2**16


def _summarize_threaded(samples, n_threads):
    """:func:`summarize` with the parameters in ``n_threads`` contiguous groups, one per thread."""
    from concurrent.futures import ThreadPoolExecutor

    samples = np.asarray(samples)
    P = samples.shape[2]
    bounds = np.linspace(0, P, min(n_threads, P) + 1).round().astype(int)
    groups = [samples[:, :, a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(len(groups), thread_name_prefix="skbayes_sg-summary") as pool:
        parts = list(pool.map(summarize, groups))
    return {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}


class PosteriorSummary(dict):
    """Per-parameter posterior summary: a dict of equal-length columns.

    Keys: ``"parameter"`` (names), ``"mean"``, ``"sd"``, ``"ci_lower"``, ``"ci_upper"``
    (equal-tailed credible interval of level :attr:`ci`), ``"ess_bulk"``, ``"ess_tail"``,
    ``"r_hat"`` and ``"mcse_mean"``, and for the GLM estimators ``"prior_sd"`` (the sd of
    each coefficient's Gaussian prior in the user's units; NaN for other parameters).
    ``str()`` formats it as a table, so ``print(est.summary())`` reads like Stan's or ArviZ's summary without pandas
    (``pandas.DataFrame(est.summary())`` gives a data frame where pandas is installed).

    Attributes
    ----------
    ci : float
        Level of the credible interval.
    ksd : float or None
        Kernel Stein discrepancy of the draws (``diagnostics_["ksd"]``, see
        :func:`skbayes_sg.metrics.kernel_stein_discrepancy`), shown below the table; None
        when the fit computed none.
    """

    ci = 0.9
    ksd = None

    def to_string(self, max_rows=None):
        """The table as text; ``max_rows`` keeps the first rows only."""
        lo, hi = 50 * (1 - self.ci), 50 * (1 + self.ci)
        headers = ["parameter", "mean", "sd", f"{lo:g}%", f"{hi:g}%", "ess_bulk", "ess_tail", "r_hat"]
        keys = ["mean", "sd", "ci_lower", "ci_upper", "ess_bulk", "ess_tail", "r_hat"]
        if "prior_sd" in self:  # the prior's sd in the user's units, where the estimator gives it
            headers.append("prior_sd")
            keys.append("prior_sd")
        n = len(self["parameter"])
        rows = range(n if max_rows is None else min(n, max_rows))
        cells = [[str(self["parameter"][i])] + [_fmt(self[k][i], k) for k in keys] for i in rows]
        widths = [max(len(h), *(len(c[j]) for c in cells)) if cells else len(h) for j, h in enumerate(headers)]
        lines = ["  ".join(h.ljust(w) if j == 0 else h.rjust(w) for j, (h, w) in enumerate(zip(headers, widths)))]
        for c in cells:
            lines.append("  ".join(v.ljust(w) if j == 0 else v.rjust(w) for j, (v, w) in enumerate(zip(c, widths))))
        if max_rows is not None and n > max_rows:
            lines.append(f"... ({n - max_rows} more parameters)")
        if self.ksd is not None:
            lines.append(f"kernel Stein discrepancy of the draws: {self.ksd:.4g}")
        return "\n".join(lines)

    def __str__(self):
        return self.to_string()


def _fmt(value, key):
    if not np.isfinite(value):
        return "nan"
    if key.startswith("ess"):
        return f"{value:.0f}"
    if key == "r_hat":
        return f"{value:.3f}"
    return f"{value:.4g}"


def posterior_summary(samples, names=None, ci=0.9, weights=None):
    """Posterior means, sds, credible intervals and convergence diagnostics per parameter.

    Parameters
    ----------
    samples : array_like of shape (n_chains, n_draws, n_params)
    names : list of str, optional
        Parameter names (``theta[j]`` by default).
    ci : float, default=0.9
        Level of the equal-tailed credible interval.
    weights : array_like of shape (n_chains, n_draws), optional
        Signed weights summing to one (multilevel estimates): means and sds are weighted;
        quantiles and the chain diagnostics are undefined for signed weights and reported
        as NaN.

    Returns
    -------
    PosteriorSummary
    """
    samples = np.asarray(samples, dtype=float)
    P = samples.shape[-1]
    names = [f"theta[{j}]" for j in range(P)] if names is None else list(names)
    out = PosteriorSummary(parameter=names)
    out.ci = float(ci)
    flat = samples.reshape(-1, P)
    if weights is None:
        diag = summarize(samples)
        lower, upper = np.quantile(flat, [(1 - ci) / 2, (1 + ci) / 2], axis=0)
        out.update(
            mean=diag["mean"],
            sd=diag["sd"],
            ci_lower=lower,
            ci_upper=upper,
            ess_bulk=diag["ess_bulk"],
            ess_tail=diag["ess_tail"],
            r_hat=diag["rhat"],
            mcse_mean=diag["mcse_mean"],
        )
    else:
        w = np.asarray(weights, dtype=float).reshape(-1)
        mean = w @ flat
        sd = np.sqrt(np.maximum(w @ (flat - mean) ** 2, 0.0))
        nan = np.full(P, np.nan)
        out.update(mean=mean, sd=sd, ci_lower=nan, ci_upper=nan, ess_bulk=nan, ess_tail=nan, r_hat=nan, mcse_mean=nan)
    return out
