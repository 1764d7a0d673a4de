"""Giles' allocation of samples and levels (Giles 2008, 2015, Algorithm 1), for any coupling."""

import math
import warnings
from dataclasses import dataclass, field
from numbers import Integral

import numpy as np
from joblib import Parallel, delayed

from .._chains import call_with_model


@dataclass
class MultilevelResult:
    """Outcome of :func:`~skbayes_sg.multilevel.estimate` / :func:`mlmc`.

    ``estimate`` (q,): ``sum_l mean(Delta_l)``, the estimate of ``E[g]`` (paper eq. 4), with
    ``rmse`` ``sqrt(sum_l V_l / N_l + bias^2)`` per coordinate and the ``target_rmse`` ``eps``
    aimed at. ``levels``: per level ``level``, ``step_size``, ``n_steps``, ``n_samples``
    (``N_l``), ``mean`` and ``var`` of ``Delta_l``, ``cost`` (``C_l``), ``n_grad_evals``.
    ``n_grad_evals`` (paths) and ``n_grad_evals_setup``: data items touched, the paper's cost;
    ``n_iter``: SGLD steps. ``converged``: False when ``max_levels`` was reached with the bias
    estimate above ``eps / sqrt 2``. ``weak_rate`` and ``variance_rate``: Giles' ``alpha`` and
    ``beta``, the fitted decay (log base 2, per level) of ``|E Delta_l|`` and ``V_l``.
    ``theta0``, ``step_size``, ``horizon``, ``batch_size``: ``theta_0, h_0, m, n``. With
    ``keep_draws``, ``draws`` (n_draws, P) and signed ``weights`` with
    ``sum_s weights[s] g(draws[s]) = estimate``.
    """

    estimate: np.ndarray
    rmse: np.ndarray
    target_rmse: np.ndarray
    levels: list
    n_grad_evals: int
    n_grad_evals_setup: int
    n_iter: int
    converged: bool
    weak_rate: float
    variance_rate: float
    theta0: np.ndarray = None
    step_size: float = None
    horizon: int = None
    batch_size: int = None
    draws: object = None
    weights: object = None
    extra: dict = field(default_factory=dict)


def _regress_rate(values):
    """``-slope`` of ``log2 values[l]`` against ``l >= 1`` (Giles' alpha, beta)."""
    ls, v = np.arange(1, len(values)), np.asarray(values[1:], dtype=float)
    ok = v > 0
    return -np.polyfit(ls[ok], np.log2(v[ok]), 1)[0] if ok.sum() >= 2 else np.nan


def _optimal_samples(Vl, Cl):
    """``N_l = ceil(2 sqrt(V_l / C_l) sum_k sqrt(V_k C_k))`` at unit (normalised) eps."""
    return np.ceil(2.0 * np.sqrt(Vl / Cl) * np.sum(np.sqrt(Vl * Cl))).astype(np.int64)


def _bias_estimate(ml, weak_rate):
    """Giles' remaining-bias estimate from the last three levels' ``|E Delta_l|``."""
    L = len(ml) - 1
    ks = [k for k in range(3) if L - k >= 1] or [0]
    return max(ml[L - k] * 2.0 ** (-weak_rate * k) for k in ks) / (2.0**weak_rate - 1.0)


def _moments(sum1, sum2, N):
    mean = sum1 / N[:, None]
    return mean, np.maximum(sum2 / N[:, None] - mean**2, 0.0) * N[:, None] / np.maximum(N - 1, 1)[:, None]


def mlmc(coupled, g, target_rmse, *, rmse_units="absolute", n_initial=100, min_levels=2, max_levels=10,
         seed=None, n_jobs=None, keep_draws=False, verbose=0, max_grad_evals=None):
    """Giles' adaptive multilevel Monte Carlo driver (Giles 2015, Algorithm 1) on ``coupled``.

    From levels ``0..min_levels`` with ``n_initial`` samples each it repeats: estimate ``V_l``
    and ``|E Delta_l|`` (per coordinate of ``g``, normalised by ``eps_j``, maximised over
    coordinates); set ``N_l = ceil(2 eps^-2 sqrt(V_l / C_l) sum_k sqrt(V_k C_k))``; run the
    missing samples; once no level needs more, add a level while the bias estimate
    ``max_{k<3} |E Delta_{L-k}| 2^(-alpha k) / (2^alpha - 1)`` exceeds ``eps / sqrt 2``.
    Chunks of paths run as the chains' tasks (:func:`~skbayes_sg._chains.call_with_model`),
    each on a child of ``seed`` keyed by (level, round, chunk) and of a size independent of
    ``n_jobs``: results are bit-identical whatever ``n_jobs``.

    Parameters
    ----------
    coupled : CoupledSGLD
        The levels; the driver calls ``sample``, ``cost``, ``chunk_size``, ``level_info`` and
        ``settings``, and ships ``coupled.grad_estimator.model`` beside it.
    g : callable or None
        Maps states (M, P) to (M,) or (M, q); None is the identity.
    target_rmse : float or array of shape (q,)
        ``eps``; with ``rmse_units="posterior_sd"``, ``eps_j = target_rmse * sd_j`` with
        ``sd_j`` that of ``g_j`` at level 0.
    n_initial : int, default=100
        Samples per level in the first round and on each added level.
    min_levels, max_levels : int, default=2, 10
    seed : numpy.random.SeedSequence, int or None
    keep_draws : bool, default=False
        Keep the states and their signed weights.
    max_grad_evals : float or None, default=None
        Budget of per-example gradient evaluations, checked before each round (spent plus
        the round's); over it a ``ValueError`` names the fixes.
    rmse_units, n_jobs, verbose
        See ``target_rmse``; joblib's.

    Returns
    -------
    MultilevelResult
    """
    if rmse_units not in ("absolute", "posterior_sd"):
        raise ValueError(f"rmse_units must be 'absolute' or 'posterior_sd'; got {rmse_units!r}.")
    target = np.asarray(target_rmse, dtype=float)
    if not np.all(np.isfinite(target)) or np.any(target <= 0):
        raise ValueError(f"target_rmse must be positive and finite; got {target_rmse!r}.")
    if not (isinstance(min_levels, Integral) and isinstance(max_levels, Integral) and 0 <= min_levels <= max_levels):
        raise ValueError(f"need integers 0 <= min_levels <= max_levels; got {min_levels!r}, {max_levels!r}.")
    seed = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    chunk, n_lev = coupled.chunk_size(), int(min_levels) + 1
    N, evals, dN = (np.zeros(max_levels + 1, dtype=np.int64) for _ in range(3))
    cost = np.array([coupled.cost(level) for level in range(max_levels + 1)], dtype=float)
    sum1 = sum2 = eps = None
    steps, rnd, converged = 0, 0, True
    kept = [[] for _ in range(max_levels + 1)]
    dN[:n_lev] = n_initial
    weak = var_rate = np.nan
    model = coupled.grad_estimator.model
    coupled.grad_estimator.model = None  # shipped once per task beside the coupling, as the chains' model
    # One managed Parallel for all rounds: joblib keeps its workers between rounds.
    try:
        with Parallel(n_jobs=n_jobs, verbose=verbose) as parallel:
            while dN.sum() > 0:
                projected = float(evals.sum() + np.dot(dN[:n_lev], cost[:n_lev]))
                if max_grad_evals is not None and projected > max_grad_evals:
                    # The samples needed grow with the levels' variance, so with the features'
                    # scale: unscaled data can ask for hours of paths.
                    raise ValueError(
                        f"the multilevel estimate would need about {projected:.3g} per-example gradient evaluations"
                        f" to reach target_rmse, over max_grad_evals={max_grad_evals:.3g}. Increase target_rmse, "
                        "standardise the features, or raise max_grad_evals.")
                tasks = [(level, min(chunk, int(dN[level]) - start),
                          np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, level, rnd, j)))
                         for level in range(n_lev) for j, start in enumerate(range(0, int(dN[level]), chunk))]
                results = parallel(delayed(call_with_model)(coupled, model, "sample", lv, size,
                                                            np.random.default_rng(sd), g, keep_draws)
                                   for lv, size, sd in tasks)
                for (level, size, _), res in zip(tasks, results):
                    if sum1 is None:
                        sum1, sum2 = (np.zeros((max_levels + 1, res.delta.shape[1])) for _ in range(2))
                    sum1[level] += res.delta.sum(axis=0)
                    sum2[level] += (res.delta**2).sum(axis=0)
                    N[level] += size
                    evals[level] += res.n_grad_evals
                    steps += res.n_steps
                    if keep_draws:
                        kept[level].append((res.points, res.coefs))
                rnd += 1
                Nl = N[:n_lev]
                mean, var = _moments(sum1[:n_lev], sum2[:n_lev], Nl)
                if eps is None:
                    if rmse_units == "posterior_sd":
                        if np.any(var[0] <= 0):
                            raise ValueError("rmse_units='posterior_sd': g has zero spread at level 0; use "
                                             "absolute units.")
                        eps = target * np.sqrt(var[0])
                    else:
                        eps = np.broadcast_to(target, mean.shape[1:]).astype(float)
                # Normalised by eps_j and maximised over coordinates: one scalar problem, eps = 1.
                ml, Vl = np.max(np.abs(mean) / eps, axis=1), np.max(var / eps**2, axis=1)
                # Giles' guard against (near) zero estimates on the finer levels.
                a_guard = weak if np.isfinite(weak) else 1.0
                b_guard = var_rate if np.isfinite(var_rate) else 1.0
                for level in range(2, n_lev):
                    ml[level] = max(ml[level], 0.5 * ml[level - 1] / 2**a_guard)
                    Vl[level] = max(Vl[level], 0.5 * Vl[level - 1] / 2**b_guard)
                weak, var_rate = (max(0.5, 1.0 if not np.isfinite(r) else r) for r in map(_regress_rate, (ml, Vl)))
                Ns = _optimal_samples(Vl, cost[:n_lev])
                dN[:] = 0
                dN[:n_lev] = np.maximum(0, Ns - Nl)
                if np.all(dN[:n_lev] <= 0.01 * Nl) and _bias_estimate(ml, weak) > 1.0 / math.sqrt(2.0):
                    if n_lev - 1 >= max_levels:
                        converged = False
                    else:
                        Vl = np.append(Vl, Vl[-1] / 2**var_rate)
                        n_lev += 1
                        Ns = _optimal_samples(Vl, cost[:n_lev])
                        Ns[-1] = max(Ns[-1], n_initial)
                        dN[:n_lev] = np.maximum(0, Ns - N[:n_lev])
    finally:
        coupled.grad_estimator.model = model

    Nl = N[:n_lev]
    mean, var = _moments(sum1[:n_lev], sum2[:n_lev], Nl)
    bias = np.array([_bias_estimate(np.abs(mean[:, j]), weak) for j in range(mean.shape[1])])
    if not converged:
        warnings.warn(
            f"MLSGLD reached max_levels={max_levels} with the estimated bias above target_rmse / sqrt(2); the "
            "estimate's RMSE may exceed the target. Increase max_levels or the horizon.", UserWarning)
    levels = [{"level": lv, **coupled.level_info(lv), "n_samples": int(Nl[lv]), "mean": mean[lv].copy(),
               "var": var[lv].copy(), "cost": float(cost[lv]), "n_grad_evals": int(evals[lv])}
              for lv in range(n_lev)]
    result = MultilevelResult(
        estimate=mean.sum(axis=0), rmse=np.sqrt((var / Nl[:, None]).sum(axis=0) + bias**2),
        target_rmse=np.asarray(eps, dtype=float), levels=levels, n_grad_evals=int(evals.sum()),
        n_grad_evals_setup=0, n_iter=int(steps), converged=converged, weak_rate=float(weak),
        variance_rate=float(var_rate), **coupled.settings())
    if keep_draws:
        result.draws = np.concatenate([pts.reshape(-1, pts.shape[-1]) for lv in range(n_lev) for pts, _ in kept[lv]])
        result.weights = np.concatenate([np.tile(coefs / Nl[lv], pts.shape[0])
                                         for lv in range(n_lev) for pts, coefs in kept[lv]])
    return result
