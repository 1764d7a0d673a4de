"""The bookkeeping of draws: a fit's record of its chains (joined to an earlier fit's when the
chains continue, thinned to ``max_draws``), signed-weight draws, and the fitted attributes and
diagnostics they give."""

from dataclasses import dataclass
from numbers import Integral

import numpy as np

from .. import diagnostics
from .._chains import coarsened_thin
from ..rows import pass_threads

#: What a continued fit (``warm_start``) carries over from the first fit's diagnostics.
FIT_INFO = ("lambda_max", "noise_eigenvalue", "predicted_noise_error", "gradient", "preconditioner")


@dataclass
class Record:
    """The draws a fit keeps: ``draws`` (n_chains, n_draws, P) in the user's units, ``stats``
    per draw, the thinning ``eff_thin``, ``n_grad_evals`` and ``n_iter`` over the whole record,
    the fit's ``info`` and the draws' ``summary`` (None: to be computed)."""

    draws: np.ndarray
    stats: dict
    eff_thin: int
    n_grad_evals: int
    n_iter: int
    info: dict
    summary: object


def join_records(old, new, progress, t0, t, eff_thin, max_draws):
    """The record of a chain continued exactly: old and new draws on one grid.

    ``old`` holds the draws of iterations ``n_burn + (j + 1) * eff_old - 1`` (the grid of the
    chains' ``progress`` before the continuation), ``new`` those of the grid ``eff_thin``
    (a multiple of ``eff_old``) in ``[t0, t)``. The old draws off the new grid are dropped,
    and the grid is coarsened by a whole factor while more than ``max_draws`` draws would
    remain, so the result is every draw on one grid from the burn-in to ``t``: what a
    single run of ``t`` iterations would have stored.

    Returns
    -------
    draws : ndarray of shape (n_chains, n_draws, P)
    stats : dict of ndarray of shape (n_chains, n_draws)
    eff_thin : int
    """
    (old_draws, old_stats), (new_draws, new_stats) = old, new
    n_burn, eff_old = progress["n_burn"], progress["eff_thin"]
    it_old = n_burn + (np.arange(old_draws.shape[1]) + 1) * eff_old - 1
    first_new = n_burn + eff_thin - 1
    if t0 > first_new:
        first_new += -(-(t0 - first_new) // eff_thin) * eff_thin
    it_new = first_new + np.arange(new_draws.shape[1]) * eff_thin
    if max_draws is not None and t - n_burn > max_draws * eff_thin:
        need = -(-(t - n_burn) // max_draws)
        eff_thin = coarsened_thin(eff_thin, need, t - n_burn)
    iteration = np.concatenate([it_old, it_new])
    keep = (iteration + 1 - n_burn) % eff_thin == 0
    keep_old, keep_new = keep[: it_old.size], keep[it_old.size :]
    draws = np.concatenate([old_draws[:, keep_old], new_draws[:, keep_new]], axis=1)
    stats = {k: np.concatenate([old_stats[k][:, keep_old], v[:, keep_new]], axis=1) for k, v in new_stats.items()}
    return draws, stats, eff_thin


def append_records(old, new, max_draws):
    """Old and new draws one after the other (chains continued without their thinning grid),
    the whole record thinned evenly to ``max_draws`` to keep memory bounded on long runs."""
    (old_draws, old_stats), (draws, stats) = old, new
    draws = np.concatenate([old_draws, draws], axis=1)
    stats = {k: np.concatenate([old_stats[k], v], axis=1) for k, v in stats.items()}
    if max_draws is not None and draws.shape[1] > max_draws:
        keep = np.linspace(0, draws.shape[1] - 1, max_draws).round().astype(int)
        draws = draws[:, keep]
        stats = {k: v[:, keep] for k, v in stats.items()}
    return draws, stats


def chain_record(est, runs, info, max_draws, resume, streaming, progress):
    """The :class:`Record` of a run of chains (:class:`~._run.Runs`): this run's draws, or for a
    ``warm_start`` continuation the whole record since the first fit's burn-in."""
    results, summary, eff_thin = runs.results, runs.summary, runs.eff_thin
    draws = np.stack([r.draws for r in results])
    affine = est._user_affine()
    if affine is not None:
        draws = draws * affine[0] + affine[1]
        if summary is not None:  # ESS and R-hat are affine-invariant, the MCSE scales
            summary = {**summary, "mcse_mean": summary["mcse_mean"] * np.abs(affine[0])}
    stats = {k: np.stack([r.stats[k] for r in results]) for k in results[0].stats}
    n_grad = sum(r.n_grad_evals for r in results)
    if not resume:
        return Record(draws, stats, eff_thin, n_grad, runs.n_run, info, summary)
    n_grad += est.diagnostics_["n_grad_evals"]
    n_iter = est.n_iter_ + runs.n_run
    if streaming:  # partial_fit keeps only this call's draws: they alone target the current posterior
        return Record(draws, stats, eff_thin, n_grad, n_iter, info, summary)
    old = (est.samples_, est.sample_stats_)
    if progress is not None:
        # One evenly spaced record from the burn-in on: what one fit of the whole length
        # would have stored.
        draws, stats, eff_thin = join_records(old, (draws, stats), progress[0], runs.t0, runs.t, eff_thin, max_draws)
    else:
        draws, stats = append_records(old, (draws, stats), max_draws)
    info = {**{k: est.diagnostics_[k] for k in FIT_INFO if k in est.diagnostics_}, **info}
    return Record(draws, stats, eff_thin, n_grad, n_iter, info, None)  # the record spans both fits


def set_chain_draws(est, sampler, model, y, runs, record, plan, exact_continuation):
    """Set ``est``'s fitted attributes from a :class:`Record` of chains, and keep what a later fit
    needs to continue them (``runs.states`` and ``runs.progress``)."""
    # Nothing to continue from if an interrupt left the chains at different iterations or one
    # part-way through an iteration.
    est._chain_states = runs.states
    est._chain_progress = runs.progress
    if runs.progress is not None and exact_continuation:
        for prog in est._chain_progress:
            prog["eff_thin"] = int(record.eff_thin)
    est._fit_round = plan.fit_round
    est._sampler = sampler
    est.n_iter_ = record.n_iter
    est.samples_ = record.draws
    est.sample_stats_ = record.stats
    est.sample_weight_ = None
    est._model = est._prediction_model(model)
    est.diagnostics_ = fit_diagnostics(runs.results, record, plan.batch_size, pass_threads(est.n_jobs))
    est._observed_y = y
    est._set_posterior_attributes(est._model)


def fit_diagnostics(results, record, batch_size, n_threads=1):
    """``diagnostics_`` of a chain fit: the step and the settings, convergence (ESS, R-hat, MCSE)
    and the means of the sampler's statistics and summaries over the chains. The parameters'
    summary, where ``n_iter="auto"`` did not leave it (the DRBM's 3,760 parameters: 0.9 s on
    digits), shares ``n_threads`` cores."""
    summary = diagnostics.summarize(record.draws, n_threads) if record.summary is None else record.summary
    diag = {
        "step_size": results[0].state.step_size,
        **record.info,
        "batch_size": batch_size,
        "thin": record.eff_thin,
        "n_grad_evals": int(record.n_grad_evals),
        "ess": summary["ess_bulk"],
        "ess_tail": summary["ess_tail"],
        "rhat": summary["rhat"],
        "mcse_mean": summary["mcse_mean"],
    }
    for name, values in record.stats.items():
        diag[f"mean_{name}"] = float(values.mean()) if values.size else float("nan")
    for key in results[0].summary:
        vals = [r.summary[key] for r in results]
        if isinstance(vals[0], np.ndarray):
            diag[key] = np.stack(vals)  # per chain (e.g. a learned proposal factor)
        else:
            diag[key] = sum(vals) if isinstance(vals[0], Integral) else float(np.mean(vals))
    return diag


def set_weighted_draws(est, sampler, model, draws, weights, diag):
    """Set ``est``'s fitted attributes from one set of signed-weight draws (no chains).

    For strategies such as multilevel SGLD: ``sum_s weights[s] f(draws[s])``, with ``draws``
    (n_draws, P) and ``weights`` (n_draws,), estimates the posterior expectation of ``f``;
    ``diag`` becomes ``diagnostics_``.
    """
    est._chain_states = est._chain_progress = None
    est._fit_round = 0
    est._sampler = sampler
    est.samples_ = np.asarray(draws)[None]
    affine = est._user_affine()
    if affine is not None:
        est.samples_ = est.samples_ * affine[0] + affine[1]
        for key in ("rmse", "target_rmse"):  # per-coordinate errors scale with the draws
            if np.shape(diag.get(key)) == affine[0].shape:
                diag[key] = diag[key] * np.abs(affine[0])
    est.sample_weight_ = np.asarray(weights, dtype=float)[None]
    est.sample_stats_ = {}
    est.n_iter_ = int(diag.get("n_iter", 0))
    est._model = est._prediction_model(model)
    est.diagnostics_ = dict(diag)
    est._stein = None  # signed weights: no KSD (see _ksd.score_draws)
    est._observed_y = None
    est._set_posterior_attributes(est._model)
    return est
