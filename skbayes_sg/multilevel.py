"""Multilevel stochastic gradient Langevin dynamics (Nagapetyan, Szpruch, Vollmer, Zygalakis and Giles 2017).

SGLD at a fixed step size ``h`` is biased, and driving the bias down by shrinking ``h``
makes the RMSE of a posterior expectation fall only as ``c^(-1/3)`` in the cost ``c``. The
multilevel estimator (Giles 2008, 2015) writes the expectation at the finest level ``L`` as
a telescoping sum (paper eq. 4)

``E[g_L] = E[g_0] + sum_{l=1}^{L} E[g_l - g_{l-1}]``

over levels with step sizes ``h_l = h_0 2^-l`` and horizons ``T_l = m (l + 1) h_0``, and
estimates each term from independent samples of a *coupled* pair (fine path at ``h_l``,
coarse path at ``h_{l-1}``) whose difference ``Delta_l`` has a variance ``V_l`` that
decays with ``l``. Spending ``N_l ~ sqrt(V_l / C_l)`` samples on level ``l`` then reaches
RMSE ``eps`` at cost ``O(eps^-2)`` when ``V_l`` decays faster than the cost ``C_l`` grows
(the antithetic coupling), the ``c^(-1/2)`` rate of exact MCMC, without a Metropolis step.

This module gives

- :class:`CoupledSGLD`: the level couplings of the paper's section 3 (plain coupling, eq. 9;
  antithetic, eq. 10) and path averaging (section 3.3). Thousands of independent paths are
  stepped at once, vectorised over paths and minibatch rows. The stochastic gradient is
  not computed here: it is the estimators' gradient layer (:mod:`skbayes_sg.minibatch`),
  plain or the Taylor-based one of section 3.4, eq. 11
  (:class:`~skbayes_sg.minibatch.TaylorControlVariateGradient`), which the coupling
  evaluates for all paths at the rows it chose.
- :func:`mlmc`: Giles' adaptive driver (number of samples per level, number of levels),
  levels and chunks of paths run in parallel with joblib, reproducible whatever ``n_jobs``.
  It allocates samples to the levels of any coupling with the methods of
  :class:`CoupledSGLD` that it calls (see :func:`mlmc`).
- :func:`estimate`: the user-facing call, ``estimate(model, g, target_rmse)``.

The estimator's ``sampler=MLSGLD(...)`` (:mod:`skbayes_sg.samplers.mlsgld`) calls
:func:`estimate` with ``g`` the parameter vector and keeps the coupled endpoints as draws
with signed weights.
"""

import copy
import math
import warnings
from dataclasses import dataclass, field
from numbers import Integral

import numpy as np
from joblib import Parallel, delayed

from .exceptions import DivergenceError
from .minibatch import MinibatchGradient, TaylorControlVariateGradient

__all__ = ["CoupledSGLD", "LevelSample", "MultilevelResult", "estimate", "find_map", "mlmc"]

# Floats one vectorised chunk of paths may gather per step (paths x rows x features): bounds
# memory, and being independent of n_jobs keeps the random streams (one per chunk) fixed.
_CHUNK_FLOATS = 2**20


# -- the coupling's minibatches and steps ---------------------------------------------------
def _coarse_rows(rng, rows1, rows2):
    """The plain coupling's coarse minibatch: ``n`` of the ``2n`` fine rows without replacement.

    Each coarse minibatch is then again ``n`` independent draws of the fine rows' law, which
    is what keeps the telescoping sum exact (paper eq. 8).
    """
    if rows1 is None:
        return None
    n = rows1.shape[1]
    both = np.concatenate([rows1, rows2], axis=1)
    keys = rng.random(both.shape)
    pick = np.argpartition(keys, n - 1, axis=1)[:, :n]
    return np.take_along_axis(both, pick, axis=1)


def _sgld_step(thetas, target, h, rows, xi):
    """``S_{h, tau, xi}(theta) = theta + h F~(theta) + sqrt(2 h) xi`` (paper eq. 2), in place.

    ``target`` is the shared gradient estimator (:mod:`skbayes_sg.minibatch`), evaluated
    for all paths at the rows the coupling chose.
    """
    F = target.gradient_paths(thetas, rows)
    thetas += h * F
    thetas += math.sqrt(2.0 * h) * xi
    return thetas


# -- one level ----------------------------------------------------------------------------------
@dataclass
class LevelSample:
    """Independent samples of one level's correction ``Delta_l``.

    Attributes
    ----------
    delta : ndarray of shape (M, q)
        ``Delta_l`` per path: ``g_0`` at level 0, ``g(fine) - g(coarse)`` above.
    points : ndarray of shape (M, k, P) or None
        The states ``g`` was evaluated at (fine first, then the coarse one(s)), when kept.
    coefs : ndarray of shape (k,)
        ``Delta_l = sum_j coefs[j] g(points[:, j])``: positive for fine states, negative
        for coarse ones.
    n_grad_evals : int
        Per-example gradient evaluations (data items touched), the paper's cost unit.
    n_steps : int
        SGLD steps taken over all paths (fine and coarse).
    """

    delta: np.ndarray
    points: object
    coefs: np.ndarray
    n_grad_evals: int
    n_steps: int


class CoupledSGLD:
    """The levels of multilevel SGLD: coupled fine and coarse SGLD paths (paper section 3).

    Level ``l`` has step size ``h_l = h_0 2^-l`` and horizon ``T_l = m (l + 1) h_0``, that is
    ``s_l = m (l + 1) 2^l`` steps (section 4.1). Every path starts at ``theta_0``.

    - Level 0: ``Delta_0 = g(theta_{s_0})`` for one SGLD path at ``h_0``.
    - Level ``l >= 1`` (Algorithm 1): the fine path first runs ``(T_l - T_{l-1}) / h_l`` steps
      alone, then fine and coarse paths run jointly for ``T_{l-1}``: two fine steps with
      Gaussian increments ``xi_1, xi_2`` and minibatches ``tau_1, tau_2`` per coarse step with
      increment ``(xi_1 + xi_2) / sqrt(2)`` (eq. 9). The coarse path is thus a level ``l - 1``
      path, so the telescoping sum is exact, and the contraction of the Langevin flow
      (eq. 6) brings it to within ``O(h)`` of the fine one whatever the different start.
      Plain coupling: the coarse minibatch is ``n`` rows drawn without replacement from
      ``(tau_1, tau_2)`` (eq. 8); ``V_l = O(h_l)``.
    - Antithetic (Algorithm 2, eq. 10): two coarse paths, ``c+`` using ``tau_1`` and ``c-``
      using ``tau_2``, and ``Delta_l = g(f) - (g(c+) + g(c-)) / 2``: the first-order
      minibatch error cancels in the average and ``V_l = O(h_l^2)``.
    - Averaging (section 3.3): ``g`` is averaged over the last ``p_l`` states of each path
      instead of taken at the endpoint. The window must cover the same time
      ``p_l h_l = p_0 h_0`` on every level, or the fine and coarse averages would cover
      different stretches and ``V_l`` would not decay; we use ``p_0 = ceil(s_0 / 2)`` (the
      paper's ``p_l = s_l / 2`` at level 0) and ``p_l = p_0 2^l``.

    Parameters
    ----------
    model : Model
    theta0 : ndarray of shape (P,)
        Start of every path and expansion point of the Taylor gradient (the MAP in the paper).
    step_size : float
        ``h_0``.
    horizon : int
        ``m``: level 0 runs ``m`` steps, and each level adds ``T_0 = m h_0`` of time.
    batch_size : int or None
        Minibatch size ``n`` (``None``: full data).
    antithetic, taylor, averaging : bool
        The variants of sections 3.2, 3.4 and 3.3.
    H_loglik : ndarray of shape (P, P), optional
        Full-data log-likelihood Hessian at ``theta0``, if already computed.

    Attributes
    ----------
    target : MinibatchGradient
        The stochastic force of every path, the estimators' gradient layer: a
        :class:`~skbayes_sg.minibatch.TaylorControlVariateGradient` centred at ``theta0``
        with ``taylor`` (and a minibatch), a plain
        :class:`~skbayes_sg.minibatch.MinibatchGradient` otherwise. The coupling draws the
        rows (:meth:`~skbayes_sg.minibatch.MinibatchGradient.draw_rows`) and evaluates it
        for all paths at once at the rows it chose
        (:meth:`~skbayes_sg.minibatch.MinibatchGradient.gradient_paths`).
    """

    def __init__(self, model, theta0, step_size, horizon, batch_size, *, antithetic=True, taylor=True,
                 averaging=False, H_loglik=None):
        self.model = model
        self.theta0 = np.asarray(theta0, dtype=float).copy()
        self.h0 = float(step_size)
        self.m = int(horizon)
        self.antithetic = bool(antithetic)
        self.averaging = bool(averaging)
        target = MinibatchGradient(model, batch_size)
        if taylor and not target.full:
            target = TaylorControlVariateGradient(model, batch_size, theta_hat=self.theta0, H_hat=H_loglik)
        self.target = target
        self.taylor = isinstance(target, TaylorControlVariateGradient)
        self.p0 = (self.m + 1) // 2

    @property
    def batch_size(self):
        """``n``: rows per minibatch (``N`` for the full data)."""
        return self.target.batch_size

    # -- level geometry ------------------------------------------------------------------
    def step_size(self, level):
        """``h_l = h_0 2^-l``."""
        return self.h0 * 2.0**-level

    def n_steps(self, level):
        """``s_l = T_l / h_l = m (l + 1) 2^l``."""
        return self.m * (level + 1) * 2**level

    def window(self, level):
        """States averaged per path at ``level`` (1 without averaging)."""
        return self.p0 * 2**level if self.averaging else 1

    def cost(self, level):
        """Data items touched per sample of ``Delta_level`` (fine steps, plus coarse ones)."""
        n = self.batch_size
        fine = self.n_steps(level) * n
        if level == 0:
            return fine
        return fine + self.n_steps(level - 1) * n * (2 if self.antithetic else 1)

    def chunk_size(self):
        """Paths stepped together: bounded so a gathered minibatch stack stays small."""
        width = self.batch_size * max(1, getattr(self.model, "n_features", self.theta0.size))
        return int(max(16, min(4096, _CHUNK_FLOATS // width)))

    def level_info(self, level):
        """What the driver's per-level table reports of ``level``'s paths.

        Parameters
        ----------
        level : int

        Returns
        -------
        dict
            ``step_size`` (``h_l``) and ``n_steps`` (``s_l``, per fine path).
        """
        return {"step_size": self.step_size(level), "n_steps": self.n_steps(level)}

    def settings(self):
        """What the driver's result reports of the levels' set-up.

        Returns
        -------
        dict
            ``theta0``, ``step_size`` (``h_0``), ``horizon`` (``m``) and ``batch_size`` (``n``).
        """
        return {"theta0": self.theta0, "step_size": self.h0, "horizon": self.m, "batch_size": self.batch_size}

    # -- simulation --------------------------------------------------------------------------
    def sample(self, level, n_paths, rng, g=None, keep_points=False):
        """Simulate ``n_paths`` independent samples of ``Delta_level``.

        Parameters
        ----------
        level : int
        n_paths : int
        rng : numpy.random.Generator
        g : callable, optional
            Maps states (M, P) to (M,) or (M, q); identity by default.
        keep_points : bool, default=False
            Keep the states ``g`` was evaluated at (for signed-weight draws).

        Returns
        -------
        LevelSample
        """
        g = _identity if g is None else g
        M, P = int(n_paths), self.theta0.size
        h = self.step_size(level)
        s = self.n_steps(level)
        pf = self.window(level)
        rec = _Recorder(g, keep_points)
        fine = np.tile(self.theta0, (M, 1))
        xi = np.empty((M, P))
        target = self.target

        def fine_step(j, rows, noise):
            _sgld_step(fine, target, h, rows, noise)
            if j > s - pf:
                rec.add(fine, 1.0 / pf)

        if level == 0:
            for j in range(1, s + 1):
                fine_step(j, target.draw_rows(rng, M), rng.standard_normal((M, P), out=xi))
            self._check(fine, level)
            return rec.result(M * s * self.batch_size, M * s)

        s_c = self.n_steps(level - 1)
        n_alone = s - 2 * s_c
        for j in range(1, n_alone + 1):
            fine_step(j, target.draw_rows(rng, M), rng.standard_normal((M, P), out=xi))
        n_coarse_paths = 2 if self.antithetic else 1
        coarse = np.tile(self.theta0, (n_coarse_paths * M, 1))
        pc = self.window(level - 1)
        coef_c = -1.0 / (pc * n_coarse_paths)
        xi2 = np.empty((M, P))
        xi_c = np.empty((n_coarse_paths * M, P))
        for k in range(1, s_c + 1):
            rows1 = target.draw_rows(rng, M)
            rng.standard_normal((M, P), out=xi)
            fine_step(n_alone + 2 * k - 1, rows1, xi)
            rows2 = target.draw_rows(rng, M)
            rng.standard_normal((M, P), out=xi2)
            fine_step(n_alone + 2 * k, rows2, xi2)
            self._coarse_step(coarse, 2.0 * h, rows1, rows2, xi, xi2, xi_c, rng)
            if k > s_c - pc:
                for c in range(n_coarse_paths):
                    rec.add(coarse[c * M:(c + 1) * M], coef_c)
        self._check(fine, level)
        self._check(coarse, level)
        n_evals = M * self.batch_size * (s + s_c * n_coarse_paths)
        return rec.result(n_evals, M * (s + s_c * n_coarse_paths))

    def _coarse_step(self, coarse, h, rows1, rows2, xi1, xi2, xi_c, rng):
        """One coarse step at ``h = 2 h_l`` driven by the two fine steps it spans.

        Increment ``(xi_1 + xi_2) / sqrt(2)`` (eq. 9). Antithetic (eq. 10): the coarse paths
        ``c+`` (first half of ``coarse``) and ``c-`` take the fine steps' rows ``tau_1`` and
        ``tau_2``; plain (eq. 8): ``n`` of the ``2n`` fine rows without replacement.
        ``xi_c`` (one increment per coarse path) is workspace.
        """
        M = xi1.shape[0]
        np.add(xi1, xi2, out=xi_c[:M])
        xi_c[:M] *= 1.0 / math.sqrt(2.0)
        if self.antithetic:
            xi_c[M:] = xi_c[:M]
            rows = None if rows1 is None else np.concatenate([rows1, rows2])
        else:
            rows = _coarse_rows(rng, rows1, rows2)
        _sgld_step(coarse, self.target, h, rows, xi_c)

    def _check(self, thetas, level):
        if not np.isfinite(thetas).all():
            raise DivergenceError(
                f"MLSGLD diverged at level {level} (step size h_l = {self.step_size(level):.4g}): the paths "
                f"became non-finite. Use a smaller step_size (for example {self.h0 / 4:.3g}), or standardise "
                "the features.",
                sampler="MLSGLD", step_size=self.step_size(level),
            )


def _identity(thetas):
    return thetas


class _Recorder:
    """Accumulates ``sum_j coef_j g(state_j)`` per path, keeping the states if asked."""

    def __init__(self, g, keep):
        self.g = g
        self.keep = keep
        self.acc = None
        self.points = []
        self.coefs = []

    def add(self, thetas, coef):
        vals = np.asarray(self.g(thetas), dtype=float)
        vals = vals.reshape(thetas.shape[0], -1)
        if self.acc is None:
            self.acc = np.zeros_like(vals)
        self.acc += coef * vals
        self.coefs.append(coef)
        if self.keep:
            self.points.append(thetas.copy())

    def result(self, n_evals, n_steps):
        points = np.stack(self.points, axis=1) if self.keep else None
        return LevelSample(self.acc, points, np.asarray(self.coefs), int(n_evals), int(n_steps))


# -- the MLMC driver -----------------------------------------------------------------------------
@dataclass
class MultilevelResult:
    """Outcome of :func:`estimate` / :func:`mlmc`.

    Attributes
    ----------
    estimate : ndarray of shape (q,)
        ``sum_l mean(Delta_l)``, the multilevel estimate of ``E[g]``.
    rmse : ndarray of shape (q,)
        Estimated RMSE per coordinate: ``sqrt(sum_l V_l / N_l + bias^2)`` with Giles' bias
        estimate from the last levels.
    target_rmse : ndarray of shape (q,)
        The ``eps`` per coordinate that the driver aimed at.
    levels : list of dict
        Per level: ``level``, ``step_size``, ``n_steps`` (per path), ``n_samples`` (``N_l``),
        ``mean`` and ``var`` (of ``Delta_l``, per coordinate), ``cost`` (data items per
        sample, ``C_l``), ``n_grad_evals``.
    n_grad_evals : int
        Data items touched by all paths (the paper's cost; excludes the set-up).
    n_grad_evals_setup : int
        Data items touched by the set-up: MAP, Hessian and full gradient at ``theta_0``.
    n_iter : int
        SGLD steps over all paths.
    converged : bool
        False when ``max_levels`` was reached with the bias estimate still above
        ``eps / sqrt(2)``.
    alpha, beta : float
        Fitted decay rates of ``|E Delta_l|`` and ``V_l`` in ``l`` (log base 2).
    draws, weights : ndarray or None
        With ``keep_draws``: states (n_draws, P) and signed weights (n_draws,) such that
        ``sum_s weights[s] g(draws[s])`` equals :attr:`estimate`.
    theta0 : ndarray of shape (P,)
    step_size : float
        ``h_0``.
    horizon : int
        ``m``.
    batch_size : int
    """

    estimate: np.ndarray
    rmse: np.ndarray
    target_rmse: np.ndarray
    levels: list
    n_grad_evals: int
    n_grad_evals_setup: int
    n_iter: int
    converged: bool
    alpha: float
    beta: float
    theta0: np.ndarray = None
    step_size: float = None
    horizon: int = None
    batch_size: int = None
    draws: object = None
    weights: object = None
    extra: dict = field(default_factory=dict)


def _run_chunk(coupled, level, n_paths, seed, g, keep_points):
    # A diverging path overflows before the check in CoupledSGLD.sample raises
    # DivergenceError (naming the step size and the fix); numpy's overflow warnings from
    # the paths would only be noise, as in the chains (_chains.ChainRunner.advance).
    with np.errstate(over="ignore", invalid="ignore"):
        return coupled.sample(level, n_paths, np.random.default_rng(seed), g, keep_points)


def _regress_rate(values, start=1):
    """``-slope`` of ``log2 values[l]`` against ``l`` for ``l >= start`` (Giles' alpha, beta)."""
    ls = np.arange(start, len(values))
    v = np.asarray(values[start:], dtype=float)
    ok = v > 0
    if ok.sum() < 2:
        return np.nan
    slope = np.polyfit(ls[ok], np.log2(v[ok]), 1)[0]
    return -slope


def mlmc(coupled, g, target_rmse, *, rmse_units="absolute", n_initial=100, min_levels=2, max_levels=10,
         seed=None, n_jobs=None, keep_draws=False, verbose=0, max_grad_evals=None):
    """Giles' adaptive multilevel Monte Carlo driver (Giles 2015, Algorithm 1) on ``coupled``.

    Starting from levels ``0..min_levels`` with ``n_initial`` samples each, it repeats:
    estimate ``V_l`` and ``|E Delta_l|`` per level (per coordinate of ``g``, normalised by the
    target ``eps_j``, and maximised over coordinates so that every coordinate meets its
    target); set ``N_l = ceil(2 eps^-2 sqrt(V_l / C_l) sum_k sqrt(V_k C_k))`` (variance
    ``eps^2 / 2``) with ``C_l`` the exact data items per sample; run the missing samples; and,
    once no level needs more, add a level while the bias estimate
    ``max_{k=0,1,2} |E Delta_{L-k}| 2^(-alpha k) / (2^alpha - 1)`` exceeds ``eps / sqrt(2)``.
    So ``MSE <= eps^2`` up to the accuracy of these estimates.

    Levels and chunks of paths of one round run in parallel with joblib; each chunk's
    random stream is a child of ``seed`` keyed by (level, round, chunk), and chunk sizes do
    not depend on ``n_jobs``, so results are bit-identical whatever ``n_jobs``.

    Parameters
    ----------
    coupled : CoupledSGLD
        The levels. The driver only allocates samples to them: it calls their
        ``sample(level, n_paths, rng, g, keep_points)``, ``cost(level)`` and
        ``chunk_size()``, and reports ``level_info(level)`` and ``settings()``.
    g : callable or None
        Maps states (M, P) to (M,) or (M, q); None is the identity (the parameter vector).
    target_rmse : float or array of shape (q,)
        ``eps``.
    rmse_units : {"absolute", "posterior_sd"}, default="absolute"
        ``"posterior_sd"``: ``eps_j = target_rmse * sd_j`` with ``sd_j`` the standard
        deviation of ``g_j`` at level 0 (an estimate of its posterior sd), fixed after the
        first round.
    n_initial : int, default=100
        Samples per level in the first round and on each newly added level.
    min_levels, max_levels : int, default=2, 10
        ``L`` starts at ``min_levels`` and stops at ``max_levels``.
    seed : numpy.random.SeedSequence, int or None
    n_jobs : int or None
    keep_draws : bool, default=False
        Keep the states and their signed weights.
    verbose : int, default=0
    max_grad_evals : float or None, default=None
        Before each round, the per-example gradient evaluations spent so far plus the
        round's are compared with this budget; over it, a ``ValueError`` says how many the
        target needs (None: no budget).

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
    chunk = coupled.chunk_size()
    L = int(min_levels)
    n_lev = L + 1
    N = np.zeros(max_levels + 1, dtype=np.int64)
    cost = np.array([coupled.cost(level) for level in range(max_levels + 1)], dtype=float)
    sum1 = sum2 = None
    evals = np.zeros(max_levels + 1, dtype=np.int64)
    steps = 0
    kept = [[] for _ in range(max_levels + 1)]
    dN = np.zeros(max_levels + 1, dtype=np.int64)
    dN[:n_lev] = n_initial
    eps = None
    alpha = beta = np.nan
    converged = True
    rnd = 0
    # One managed Parallel for all rounds: joblib then keeps its workers between rounds instead
    # of starting a pool per round (seconds a round with backends such as Ray or dask).
    with Parallel(n_jobs=n_jobs, verbose=verbose) as parallel:
        while dN.sum() > 0:
            projected = float(evals.sum() + np.dot(dN[:n_lev], cost[:n_lev]))
            if max_grad_evals is not None and projected > max_grad_evals:
                # The samples the target needs grow with the levels' variance, which grows with
                # the features' scale: unscaled data can ask for hours of paths.
                raise ValueError(
                    f"the multilevel estimate would need about {projected:.3g} per-example gradient evaluations to "
                    f"reach target_rmse, over max_grad_evals={max_grad_evals:.3g}. Increase target_rmse, "
                    "standardise the features, or raise max_grad_evals.")
            tasks = []
            for level in range(n_lev):
                for j, start in enumerate(range(0, int(dN[level]), chunk)):
                    size = min(chunk, int(dN[level]) - start)
                    child = np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, level, rnd, j))
                    tasks.append((level, size, child))
            results = parallel(delayed(_run_chunk)(coupled, lv, size, sd, g, keep_draws) for lv, size, sd in tasks)
            for (level, size, _), res in zip(tasks, results):
                if sum1 is None:
                    q = res.delta.shape[1]
                    sum1 = np.zeros((max_levels + 1, q))
                    sum2 = np.zeros((max_levels + 1, q))
                sum1[level] += res.delta.sum(axis=0)
                sum2[level] += (res.delta**2).sum(axis=0)
                N[level] += size
                evals[level] += res.n_grad_evals
                steps += res.n_steps
                if keep_draws:
                    kept[level].append((res.points, res.coefs))
            rnd += 1
            Nl = N[:n_lev]
            mean = sum1[:n_lev] / Nl[:, None]
            var = np.maximum(sum2[:n_lev] / Nl[:, None] - mean**2, 0.0) * Nl[:, None] / np.maximum(Nl - 1, 1)[:, None]
            if eps is None:
                if rmse_units == "posterior_sd":
                    sd = np.sqrt(var[0])
                    if np.any(sd <= 0):
                        raise ValueError("rmse_units='posterior_sd': g has zero spread at level 0; use absolute units.")
                    eps = target * sd
                else:
                    eps = np.broadcast_to(target, mean.shape[1:]).astype(float)
            # Normalised by eps_j and maximised over coordinates: one scalar problem with eps = 1.
            ml = np.max(np.abs(mean) / eps, axis=1)
            Vl = np.max(var / eps**2, axis=1)
            # Giles' guard against (near) zero estimates on the finer levels.
            a_guard = alpha if np.isfinite(alpha) else 1.0
            b_guard = beta if np.isfinite(beta) else 1.0
            for level in range(2, n_lev):
                ml[level] = max(ml[level], 0.5 * ml[level - 1] / 2**a_guard)
                Vl[level] = max(Vl[level], 0.5 * Vl[level - 1] / 2**b_guard)
            alpha = max(0.5, _nan_to(_regress_rate(ml), 1.0))
            beta = max(0.5, _nan_to(_regress_rate(Vl), 1.0))
            Cl = cost[:n_lev]
            Ns = _optimal_samples(Vl, Cl)
            dN[:] = 0
            dN[:n_lev] = np.maximum(0, Ns - Nl)
            if np.all(dN[:n_lev] <= 0.01 * Nl):
                rem = _bias_estimate(ml, alpha)
                if rem > 1.0 / math.sqrt(2.0):
                    if n_lev - 1 >= max_levels:
                        converged = False
                    else:
                        Vl = np.append(Vl, Vl[-1] / 2**beta)
                        n_lev += 1
                        Ns = _optimal_samples(Vl, cost[:n_lev])
                        Ns[-1] = max(Ns[-1], n_initial)
                        dN[:n_lev] = np.maximum(0, Ns - N[:n_lev])

    Nl = N[:n_lev]
    mean = sum1[:n_lev] / Nl[:, None]
    var = np.maximum(sum2[:n_lev] / Nl[:, None] - mean**2, 0.0) * Nl[:, None] / np.maximum(Nl - 1, 1)[:, None]
    bias = np.array([_bias_estimate(np.abs(mean[:, j]), alpha) for j in range(mean.shape[1])])
    rmse = np.sqrt((var / Nl[:, None]).sum(axis=0) + bias**2)
    if not converged:
        warnings.warn(
            f"MLSGLD reached max_levels={max_levels} with the estimated bias above target_rmse / sqrt(2); the "
            "estimate's RMSE may exceed the target. Increase max_levels or the horizon.", UserWarning,
        )
    levels = [
        {"level": lv, **coupled.level_info(lv), "n_samples": int(Nl[lv]), "mean": mean[lv].copy(),
         "var": var[lv].copy(), "cost": float(cost[lv]), "n_grad_evals": int(evals[lv])}
        for lv in range(n_lev)
    ]
    result = MultilevelResult(
        estimate=mean.sum(axis=0), rmse=rmse, target_rmse=np.asarray(eps, dtype=float), levels=levels,
        n_grad_evals=int(evals.sum()), n_grad_evals_setup=0, n_iter=int(steps), converged=converged,
        alpha=float(alpha), beta=float(beta), **coupled.settings(),
    )
    if keep_draws:
        draws, weights = [], []
        for lv in range(n_lev):
            for points, coefs in kept[lv]:
                draws.append(points.reshape(-1, points.shape[-1]))
                weights.append(np.tile(coefs / Nl[lv], points.shape[0]))
        result.draws = np.concatenate(draws)
        result.weights = np.concatenate(weights)
    return result


def _nan_to(x, default):
    return default if not np.isfinite(x) else x


def _optimal_samples(Vl, Cl):
    """``N_l = ceil(2 sqrt(V_l / C_l) sum_k sqrt(V_k C_k))`` at unit (normalised) eps."""
    return np.ceil(2.0 * np.sqrt(Vl / Cl) * np.sum(np.sqrt(Vl * Cl))).astype(np.int64)


def _bias_estimate(ml, alpha):
    """Giles' remaining-bias estimate from the last three levels' ``|E Delta_l|``."""
    L = len(ml) - 1
    ks = [k for k in range(3) if L - k >= 1] or [0]
    return max(ml[L - k] * 2.0 ** (-alpha * k) for k in ks) / (2.0**alpha - 1.0)


# -- set-up and the public call ---------------------------------------------------------------
def find_map(model):
    """The estimators' maximum a posteriori point, and the full-data passes it took.

    :func:`skbayes_sg._estimator._map_estimate` (damped Newton for the GLMs of moderate
    width, as in the paper's section 4, L-BFGS otherwise): the point the estimators pass
    as ``theta0`` with ``init="map"``, so that :func:`estimate` and an estimator with
    ``sampler=MLSGLD()`` start from, and expand around, the same point.

    Parameters
    ----------
    model : Model

    Returns
    -------
    theta_map : ndarray of shape (P,)
    n_passes : int
        Full-data passes used (log posterior and gradient, Hessian), for the set-up cost.
    """
    # Imported here: the estimator layer imports the samplers, and so this module.
    from ._estimator import _map_estimate

    n_passes = 0

    def counted(method):
        def call(*args, **kwargs):
            nonlocal n_passes
            n_passes += 1
            return method(*args, **kwargs)
        return call

    # A shallow copy (the data shared) whose full-data calls count themselves: the MAP
    # routine is the estimators', which keeps no count.
    probe = copy.copy(model)
    probe.log_posterior_and_grad = counted(model.log_posterior_and_grad)
    probe.hessian = counted(model.hessian)
    return _map_estimate(probe), n_passes


#: Largest ``horizon="auto"`` (steps per level-0 path); beyond it :func:`estimate` raises.
MAX_AUTO_HORIZON = 100_000


def estimate(model, g=None, target_rmse=0.1, *, theta0=None, rmse_units="absolute", antithetic=True, taylor=True,
             averaging=False, step_size="auto", horizon="auto", batch_size="auto", n_initial=100, min_levels=2,
             max_levels=10, n_jobs=None, random_state=None, keep_draws=False, verbose=0, max_grad_evals=None):
    """Multilevel SGLD estimate of the posterior expectation ``E[g(theta)]``.

    Builds the coupled levels (:class:`CoupledSGLD`) and runs Giles' driver (:func:`mlmc`)
    until the estimated RMSE is below ``target_rmse``. Cost is counted in data items touched
    (per-example gradient evaluations), the paper's unit.

    Parameters
    ----------
    model : Model
        For instance ``LogisticModel(X, y)`` from :mod:`skbayes_sg.models`.
    g : callable or None, default=None
        Vectorised: maps states (M, P) to (M,) or (M, q). None estimates the posterior mean.
    target_rmse : float or array of shape (q,), default=0.1
        ``eps`` (see ``rmse_units``).
    theta0 : ndarray of shape (P,), optional
        Start of every path and Taylor expansion point; the MAP (Newton-Raphson) by default.
    rmse_units : {"absolute", "posterior_sd"}, default="absolute"
        Whether ``eps`` is absolute or relative to each coordinate's posterior standard
        deviation (estimated at level 0).
    antithetic : bool, default=True
        Antithetic coupling (section 3.2), ``V_l = O(h_l^2)``; False gives the plain one
        (section 3.1), ``V_l = O(h_l)``.
    taylor : bool, default=True
        Taylor-based stochastic gradient around ``theta0`` (section 3.4). Needs the full-data
        Hessian at ``theta0`` (a P x P matrix, formed once).
    averaging : bool, default=False
        Average ``g`` over the last part of each path (section 3.3). With ``keep_draws``
        every averaged state is kept.
    step_size : float or "auto", default="auto"
        ``h_0``. ``"auto"``: ``0.25 / lambda_max`` with ``lambda_max`` the largest eigenvalue
        of the negative log posterior's Hessian at ``theta0`` (for the paper's logistic
        regression with N(0, 1) covariates this is close to its ``h_0 = 1 / N``).
    horizon : int or "auto", default="auto"
        ``m`` of ``T_l = m (l + 1) h_0``. ``"auto"``: ``max(5, ceil(1 / (h_0 lambda_min)))``,
        so that each level adds at least one relaxation time of the slowest direction
        (the paper's ``m = 5`` for its well-conditioned example).
    batch_size : int, "auto" or None, default="auto"
        ``n``; ``"auto"`` is the paper's ``ceil(N^(1/3))``, ``None`` the full data.
    n_initial : int, default=100
        Samples per level in the driver's first round.
    min_levels, max_levels : int, default=2, 10
    n_jobs : int or None
        Parallel workers for levels and chunks (joblib).
    random_state : int, SeedSequence or None
    keep_draws : bool, default=False
        Keep the states with signed weights (``result.draws``, ``result.weights``).
    verbose : int, default=0
    max_grad_evals : float or None, default=None
        Budget of per-example gradient evaluations (see :func:`mlmc`); None: no budget.

    Returns
    -------
    MultilevelResult
        ``result.estimate``, ``result.rmse`` and the per-level table ``result.levels``.

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg.models import LogisticModel
    >>> from skbayes_sg.multilevel import estimate
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((1000, 2))
    >>> y = (rng.random(1000) < 1 / (1 + np.exp(-X @ [1.0, -0.5]))).astype(float)
    >>> res = estimate(LogisticModel(X, y), target_rmse=0.2, rmse_units="posterior_sd", random_state=0)
    >>> res.estimate.shape
    (3,)
    """
    N = model.n_samples
    setup = 0
    if theta0 is None:
        theta0, passes = find_map(model)
        setup += passes * N
    theta0 = np.asarray(theta0, dtype=float)
    if batch_size == "auto":
        batch_size = int(math.ceil(N ** (1.0 / 3.0) - 1e-9))
    elif batch_size is not None and (not isinstance(batch_size, Integral) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int, 'auto' or None; got {batch_size!r}.")
    H_ll = model.loglik_hessian(theta0)
    H_post = model.posterior_hessian(theta0)
    setup += 2 * N
    curv = np.linalg.eigvalsh(-0.5 * (H_post + H_post.T))
    lam_max = float(max(abs(curv[-1]), 1e-12))
    lam_min = float(curv[0])
    if isinstance(step_size, str):
        if step_size != "auto":
            raise ValueError(f"step_size must be a positive float or 'auto'; got {step_size!r}.")
        step_size = 0.25 / lam_max
    if isinstance(horizon, str):
        if horizon != "auto":
            raise ValueError(f"horizon must be a positive int or 'auto'; got {horizon!r}.")
        if lam_min <= 0:
            raise ValueError("horizon='auto' needs a log posterior that is strictly concave at theta0 "
                             "(start from the MAP), or give horizon explicitly.")
        horizon = max(5, int(math.ceil(1.0 / (step_size * lam_min))))
        if horizon > MAX_AUTO_HORIZON:
            # m grows with the condition number (m = 4 lam_max / lam_min at the auto step):
            # a near-flat direction (duplicated or constant features under a weak prior, a
            # DRBM mode) made it 1e8 steps per path on 10 rows, a fit that never returns.
            raise ValueError(
                f"horizon='auto' would run {horizon:.3g} steps per path: the log posterior at theta0 is "
                f"ill-conditioned (curvatures from {lam_min:.3g} to {lam_max:.3g}). Standardise the features and "
                "drop duplicated or constant ones, increase alpha, give horizon explicitly, or use a "
                "single-level sampler.")
    coupled = CoupledSGLD(model, theta0, step_size, horizon, batch_size, antithetic=antithetic, taylor=taylor,
                          averaging=averaging, H_loglik=H_ll)
    if coupled.taylor:
        setup += N
    seed = random_state if isinstance(random_state, np.random.SeedSequence) else np.random.SeedSequence(random_state)
    result = mlmc(coupled, g, target_rmse, rmse_units=rmse_units, n_initial=n_initial, min_levels=min_levels,
                  max_levels=max_levels, seed=seed, n_jobs=n_jobs, keep_draws=keep_draws, verbose=verbose,
                  max_grad_evals=max_grad_evals)
    result.n_grad_evals_setup = int(setup)
    result.extra.update({"lambda_max": lam_max, "lambda_min": lam_min})
    return result
