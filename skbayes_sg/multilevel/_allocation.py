"""Giles' allocation of samples and levels (Giles 2008, 2015, Algorithm 1) for :class:`CoupledSGLD`."""

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from .._chains import parallel_rounds, run_tasks

# Giles' algorithm starts from levels 0, 1 and 2: three points to fit the decay rates.
MIN_LEVELS = 2


@dataclass
class MultilevelResult:
    """Outcome of :func:`~skbayes_sg.multilevel.estimate` / :func:`mlmc`.

    ``estimate`` (q,) ``sum_l mean(Delta_l)`` of ``E[g]`` (paper eq. 4), its ``rmse``
    ``sqrt(sum_l V_l / N_l + bias^2)`` and ``target_rmse``; per level (``levels``) ``step_size``,
    ``n_steps``, ``n_samples`` ``N_l``, ``mean`` and ``var`` of ``Delta_l`` and ``cost`` ``C_l``.
    Cost in data items touched (paths, set-up); ``n_iter``: SGLD steps.
    ``converged``: False at ``max_levels`` with the bias above ``eps / sqrt 2``. ``weak_rate``,
    ``variance_rate``: Giles' ``alpha``, ``beta``. ``draws`` (n, P), ``weights``: with
    ``keep_draws``, ``sum_s weights[s] g(draws[s]) = estimate``. ``settings``: what the set-up
    chose (``theta0``, ``step_size``, ``horizon``, ``batch_size``: ``theta_0, h_0, m, n``).
    """

    estimate: np.ndarray
    rmse: np.ndarray
    target_rmse: np.ndarray
    levels: list
    n_grad_evals: int
    n_iter: int
    converged: bool
    weak_rate: float
    variance_rate: float
    draws: object = None
    weights: object = None
    n_grad_evals_setup: int = 0
    settings: dict = field(default_factory=dict)


def _regress_rate(values):  # -slope of log2 values[l] against l >= 1: Giles' alpha, beta
    ls, v = np.arange(1, len(values)), np.asarray(values[1:], dtype=float)
    ok = v > 0
    return -np.polyfit(ls[ok], np.log2(v[ok]), 1)[0] if ok.sum() >= 2 else np.nan


def _optimal_samples(Vl, Cl):  # N_l = ceil(2 sqrt(V_l / C_l) sum_k sqrt(V_k C_k)), eps = 1
    return np.ceil(2.0 * np.sqrt(Vl / Cl) * np.sum(np.sqrt(Vl * Cl))).astype(np.int64)


def _bias_estimate(ml, weak_rate):  # max_{k<3} |E Delta_{L-k}| 2^(-alpha k) / (2^alpha - 1), per column
    L = len(ml) - 1
    ks = [k for k in range(3) if L - k >= 1] or [0]
    return np.max([ml[L - k] * 2.0 ** (-weak_rate * k) for k in ks], axis=0) / (2.0**weak_rate - 1.0)


def mlmc(coupled, g, sampler, *, rmse_units="absolute", seed=None, n_jobs=None, keep_draws=False, verbose=0):
    """Giles' adaptive multilevel Monte Carlo driver (Giles 2015, Algorithm 1) on ``coupled``.

    From levels 0, 1 and 2 with ``n_initial`` samples each, it sets ``N_l`` from the estimated
    ``V_l`` and ``C_l`` and adds levels while the bias estimate exceeds ``eps / sqrt 2``
    (:doc:`/maths/mlsgld`). Chunks of paths run in the chains' rounds of tasks
    (:func:`~skbayes_sg._chains.parallel_rounds`, a ``KeyboardInterrupt`` propagating once joblib
    stopped the workers); each chunk's size and random stream (a child of ``seed`` keyed by
    level, round and chunk), so the results, do not depend on ``n_jobs``.

    Parameters
    ----------
    coupled : CoupledSGLD
        The levels.
    g : callable or None
        Maps states (M, P) to (M,) or (M, q); None is the identity.
    sampler : MLSGLD
        Its ``target_rmse`` ``eps`` (a float, or here also an array of shape (q,)), ``n_initial``
        (samples per level in the first round and on each added level), ``max_levels`` and
        ``max_grad_evals`` (the budget of per-example gradient evaluations, checked before each round).
    rmse_units : {"absolute", "posterior_sd"}, default="absolute"
        ``eps`` as given, or in units of each ``g_j``'s sd at level 0.
    seed : numpy.random.SeedSequence, int or None
    n_jobs, verbose : int or None, int
        joblib's processes; above 0, a progress bar of the data items touched.
    keep_draws : bool, default=False
        Keep the states and their signed weights.

    Returns
    -------
    MultilevelResult
    """
    if rmse_units not in ("absolute", "posterior_sd"):
        raise ValueError(f"rmse_units must be 'absolute' or 'posterior_sd'; got {rmse_units!r}.")
    target, max_levels = np.asarray(sampler.target_rmse, dtype=float), sampler.max_levels
    if not np.all(np.isfinite(target)) or np.any(target <= 0):
        raise ValueError(f"target_rmse must be positive and finite; got {sampler.target_rmse!r}.")
    seed = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    chunk, L1 = coupled.chunk_size(), max_levels + 1
    cost = np.array([coupled.cost(level) for level in range(L1)], dtype=float)
    tally = _Tally(L1, MIN_LEVELS + 1)
    tally.dN[: tally.n_levels] = sampler.n_initial
    eps, rnd = None, 0
    model = coupled.grad_estimator.model
    coupled.grad_estimator.model = None  # shipped once per task beside the coupling, as the chains' model
    try:  # in the chains' rounds: one Parallel, workers stopped on Ctrl-C, one progress bar
        with parallel_rounds(n_jobs, verbose, desc="MLSGLD", unit="data items") as (parallel, bar):
            while tally.dN.sum() > 0:
                n_lev = tally.n_levels
                spent = float(tally.N @ cost)
                projected = spent + float(tally.dN[:n_lev] @ cost[:n_lev])
                _check_budget(sampler, projected)
                tasks = _round_tasks(seed, tally.dN, n_lev, chunk, rnd, g, keep_draws)
                tally.add(tasks, run_tasks(parallel, coupled, model, "sample", tasks), keep_draws)
                if bar is not None:
                    bar.total = int(projected)
                    bar.update(int(projected - spent))
                rnd += 1
                mean, var = tally.moments()
                if eps is None:  # from the first round: in units of g_j's sd at level 0 with "posterior_sd"
                    eps = _absolute_target(target, var[0], rmse_units)
                _allocate(tally, mean, var, eps, cost, sampler)
    finally:
        coupled.grad_estimator.model = model

    if not tally.converged:
        msg = f"MLSGLD reached max_levels={max_levels} with the estimated bias above target_rmse / sqrt(2); the "
        warnings.warn(msg + "estimate's RMSE may exceed the target. Increase max_levels or the horizon.", stacklevel=2)
    # The last round's moments are every level's: the loop ends only when no level gets samples.
    return _result(coupled, tally, mean, var, cost, eps, keep_draws)


class _Tally:
    """The running sums of Giles' algorithm: samples ``N`` per level, the sums of ``Delta_l`` and
    of its square, the kept states, the samples the next round adds (``dN``), the levels in use,
    the decay rates and whether the bias met the target."""

    def __init__(self, n_max, n_levels):
        self.N, self.dN = np.zeros(n_max, dtype=np.int64), np.zeros(n_max, dtype=np.int64)
        self.sum1 = self.sum2 = None
        self.kept = [[] for _ in range(n_max)]
        self.n_levels, self.converged = n_levels, True
        self.weak = self.var_rate = np.nan

    def add(self, tasks, results, keep_draws):
        """Add a round's :class:`~._coupling.LevelSample` results of ``tasks``."""
        for (level, size, *_), res in zip(tasks, results):
            if self.sum1 is None:
                self.sum1, self.sum2 = np.zeros((2, self.N.size, res.delta.shape[1]))
            self.sum1[level] += res.delta.sum(axis=0)
            self.sum2[level] += (res.delta**2).sum(axis=0)
            self.N[level] += size
            if keep_draws:
                self.kept[level].append((res.points, res.coefs))

    def moments(self):
        """Mean and (unbiased) variance of ``Delta_l`` per level in use, shape (levels, q)."""
        Nl = self.N[: self.n_levels, None]
        mean = self.sum1[: self.n_levels] / Nl
        var = np.maximum(self.sum2[: self.n_levels] / Nl - mean**2, 0.0) * Nl / np.maximum(Nl - 1, 1)
        return mean, var


def _check_budget(sampler, projected):
    """Raise when the round would take the estimate over ``sampler.max_grad_evals``."""
    if sampler.max_grad_evals is not None and projected > sampler.max_grad_evals:
        # The samples needed grow with the levels' variance, so with the features' scale:
        # unscaled data can ask for hours of paths.
        raise ValueError(
            f"the multilevel estimate would need about {projected:.3g} per-example gradient evaluations to "
            f"reach target_rmse, over max_grad_evals={sampler.max_grad_evals:.3g}. Increase target_rmse, "
            "standardise the features, or raise max_grad_evals."
        )


def _round_tasks(seed, dN, n_lev, chunk, rnd, g, keep_draws):
    """A round's chunks of paths, of sizes independent of n_jobs, on streams keyed by (level, round, chunk)."""
    tasks = []
    for lv in range(n_lev):
        for j, start in enumerate(range(0, dN[lv], chunk)):
            sd = np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, lv, rnd, j))
            tasks.append((lv, int(min(chunk, dN[lv] - start)), np.random.default_rng(sd), g, keep_draws))
    return tasks


def _absolute_target(target, var0, rmse_units):
    """``eps`` per output: ``target``, in units of each output's sd at level 0 with "posterior_sd"."""
    scale = np.sqrt(var0) if rmse_units == "posterior_sd" else np.ones_like(var0)
    if np.any(scale <= 0):
        raise ValueError("rmse_units='posterior_sd': g has zero spread at level 0; use absolute units.")
    if target.ndim and target.shape != scale.shape:
        raise ValueError(f"target_rmse has shape {target.shape}; g has {scale.size} outputs.")
    return target * scale


def _allocate(tally, mean, var, eps, cost, sampler):
    """Giles' update of the rates, of the samples each level gets next (``tally.dN``) and of the
    levels: a level is added while the bias estimate exceeds ``eps / sqrt 2``."""
    n_lev = tally.n_levels
    # Normalised by eps_j and maximised over coordinates: one scalar problem, eps = 1.
    ml, Vl = np.max(np.abs(mean) / eps, axis=1), np.max(var / eps**2, axis=1)
    # Giles' guard against (near) zero estimates on the finer levels.
    a_guard = tally.weak if np.isfinite(tally.weak) else 1.0
    b_guard = tally.var_rate if np.isfinite(tally.var_rate) else 1.0
    for level in range(2, n_lev):
        ml[level] = max(ml[level], 0.5 * ml[level - 1] / 2**a_guard)
        Vl[level] = max(Vl[level], 0.5 * Vl[level - 1] / 2**b_guard)
    weak, var_rate = (max(0.5, 1.0 if not np.isfinite(r) else r) for r in map(_regress_rate, (ml, Vl)))
    tally.weak, tally.var_rate = weak, var_rate
    N, dN = tally.N, tally.dN
    dN[:] = 0
    dN[:n_lev] = np.maximum(0, _optimal_samples(Vl, cost[:n_lev]) - N[:n_lev])
    if np.all(dN[:n_lev] <= 0.01 * N[:n_lev]) and _bias_estimate(ml, weak) > 1.0 / math.sqrt(2.0):
        if n_lev - 1 >= sampler.max_levels:
            tally.converged = False
        else:
            Vl = np.append(Vl, Vl[-1] / 2**var_rate)
            n_lev = tally.n_levels = n_lev + 1
            Ns = _optimal_samples(Vl, cost[:n_lev])
            Ns[-1] = max(Ns[-1], sampler.n_initial)
            dN[:n_lev] = np.maximum(0, Ns - N[:n_lev])


def _result(coupled, tally, mean, var, cost, eps, keep_draws):
    """The :class:`MultilevelResult` of the final round's moments."""
    n_lev = tally.n_levels
    Nl = tally.N[:n_lev]
    levels = [
        {
            "level": lv,
            "step_size": coupled.step_size(lv),
            "n_steps": coupled.n_steps(lv),
            "n_samples": int(n),
            "mean": m,
            "var": v,
            "cost": float(c),
        }
        for lv, (n, m, v, c) in enumerate(zip(Nl, mean, var, cost))
    ]
    evals = int(Nl @ cost[:n_lev])
    result = MultilevelResult(
        estimate=mean.sum(axis=0),
        rmse=np.sqrt((var / Nl[:, None]).sum(axis=0) + _bias_estimate(np.abs(mean), tally.weak) ** 2),
        target_rmse=np.asarray(eps, dtype=float),
        levels=levels,
        n_grad_evals=evals,
        n_iter=evals // coupled.batch_size,
        converged=tally.converged,
        weak_rate=float(tally.weak),
        variance_rate=float(tally.var_rate),
    )
    if keep_draws:
        pieces = [(pts, coefs / Nl[lv]) for lv in range(n_lev) for pts, coefs in tally.kept[lv]]
        result.draws = np.concatenate([pts.reshape(-1, pts.shape[-1]) for pts, _ in pieces])
        result.weights = np.concatenate([np.tile(w, pts.shape[0]) for pts, w in pieces])
    return result
