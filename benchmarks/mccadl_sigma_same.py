"""Is mCCAdL's ``sigma_estimate="same"`` as accurate as ``"independent"`` under the defaults?

Issue 15: the C step costs 1.86x an SGHMC step on a9a in the default setting with the
default ``sigma_estimate="independent"`` (a second minibatch of per-example gradients per
iteration), 1.09x with ``"same"`` (``Sigma`` from the force's own minibatch,
``benchmarks/mccadl_cstep.py``). ``"same"`` correlates ``Sigma`` with the noise the C step
damps, which biases the plain-gradient setting by several sd
(``benchmarks/mccadl_sigma_source.py``); under the estimators' control-variate gradients
the noise, and so the correlation, is small. This benchmark checks it on the exact
references of ``benchmarks/_reference.py``:

- ``a9a_default``: a9a with the estimators' default prior (no prior argument);
- ``synth_1e4``, ``synth_1e5``: synthetic logistic regression (D = 20) with the papers'
  prior ``alpha = alpha_intercept = 1``, passed explicitly (as ``posterior_accuracy.py``).

Each fit is ``SGBayesLogisticRegression(sampler=MCCAdL(sigma_estimate=s), random_state=seed)``,
every other setting default (``gradient="auto"``: control variates, whitening, auto step,
``n_iter="auto"``), for ``s`` in {independent, same} and several seeds. ``--plain`` adds
plain gradients on ``synth_1e4`` with both sources, first seed only (``gradient="minibatch"``,
``batch_size=200``, ``n_iter=5000`` as ``posterior_accuracy.py`` pins it): ``plain``, the
estimator's geometry otherwise (whitened, noise-aware auto step), and ``plain_papers``, the
papers' (``preconditioner="none"``, ``h = 0.2 / sqrt(lambda_max)``), see :data:`SETTINGS`.
``--linreg`` runs instead ``SGBayesLinearRegression``'s defaults (control variates too) on the
exact posteriors of ``posterior_accuracy.py``'s ``gaussian`` part (N = 1e4, 1e5; D = 5, 100;
``log tau`` sampled), see :data:`LINREG`.

Rows (``kind``):

``fit``
    One fit: ``posterior_accuracy.evaluate``'s metrics (``max_z``: worst ``|mean error|`` in
    reference sd; ``sd_ratio_min/max``; ``rhat_max``; ``worst_z_over_mcse`` ...) plus
    ``z_over_mcse_max`` / ``z_over_mcse_rms``: the mean errors in units of their Monte Carlo
    standard error (the fit's ``mcse_mean`` and the reference's, in quadrature; rms ~ 1 when
    there is no bias beyond Monte Carlo noise), and the per-coordinate ``mean``, ``sd``,
    ``mcse`` and ``ess`` (for the comparison rows).
``pooled``
    One source on one problem, its seeds pooled (mean of the fits' means and sds; MCSE
    ``sqrt(sum mcse^2) / k``): the same error metrics.
``compare``
    ``same`` minus ``independent`` on one problem, pooled over seeds, per coordinate:
    ``dmean_over_mcse_max/rms`` (difference of pooled means over the two pooled MCSEs in
    quadrature: the reference drops out), ``dmean_sd_max`` (in reference sd), and
    ``dsd_over_mcse_max/rms`` (difference of pooled sd ratios over
    ``sqrt(1/(2 ESS))`` of each, pooled likewise).

Appends to ``benchmarks/results/mccadl_sigma_same.jsonl``; ``--report`` prints the tables of
the rows there.

Usage::

    python benchmarks/mccadl_sigma_same.py [--problems a9a_default synth_1e4 synth_1e5]
        [--seeds 0 1 2] [--plain] [--n-jobs 2] [--report]
"""

import argparse
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _exact_linreg import sampled_noise_posterior, sufficient_statistics  # noqa: E402
from _reference import load_reference, make_problem, problem_prior  # noqa: E402
from posterior_accuracy import ALPHA, NOISE_A, NOISE_B, _r, gaussian_data, run_fit  # noqa: E402

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression  # noqa: E402
from skbayes_sg.samplers import MCCAdL  # noqa: E402

OUT = HERE / "results" / "mccadl_sigma_same.jsonl"
SOURCES = ("independent", "same")
#: Estimator and sampler keyword arguments of each setting. ``plain``: the estimator's
#: plain-gradient option (whitening and the noise-aware auto step kept) at batch 200 (the
#: auto batch is full data at synth_1e4's N x P); ``plain_papers``: the papers' setting of
#: ``mccadl_sigma_source.py`` (theta coordinates, the curvature step 0.2 / sqrt(lambda_max)
#: at the MAP, 5.12e-3 on synth_1e4), where the correlation bias was measured.
SETTINGS = {
    "default": ({}, {}),
    "plain": ({"gradient": "minibatch", "batch_size": 200, "n_iter": 5000}, {}),
    "plain_papers": (
        {"gradient": "minibatch", "batch_size": 200, "n_iter": 5000},
        {"preconditioner": "none", "step_size": 0.0051235213085822975},
    ),
}


def _commit():
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent, capture_output=True, text=True
    ).stdout.strip()


#: Linear-regression problems of ``posterior_accuracy.py``'s ``gaussian`` part (``--linreg``):
#: ``linreg_<N>_<D>``, the default ``noise_precision=None`` (``log tau`` sampled), exact
#: posterior moments by quadrature.
LINREG = {f"linreg_{N}_{D}": (N, D) for N in (10_000, 100_000) for D in (5, 100)}


def linreg_problem(problem):
    """Data and exact reference (no Monte Carlo error) of a ``linreg_<N>_<D>`` problem."""
    N, D = LINREG[problem]
    X, y = gaussian_data(N, D)
    post = sampled_noise_posterior(sufficient_statistics(X, y), ALPHA, NOISE_A, NOISE_B)
    P = post["mean"].size
    ref = {
        "mean": np.asarray(post["mean"]),
        "sd": np.asarray(post["sd"]),
        "mcse_mean": np.zeros(P),
        "ess_bulk": np.full(P, np.inf),
    }
    return X, y, ref


def prior_kwargs(problem):
    """The reference's prior, explicit (``a9a_default``'s is ``alpha=1``, ``alpha_intercept=0.01``:
    the estimators' defaults before ``alpha="auto"``, issue 30)."""
    if problem in LINREG:  # posterior_accuracy.py's gaussian part
        return {"alpha": ALPHA, "alpha_intercept": ALPHA, "normalize_y": False}
    alpha, alpha_intercept = problem_prior(problem)
    return {"alpha": alpha, "alpha_intercept": alpha_intercept}


def error_metrics(mean, sd, mcse, ess, ref):
    """Errors against the reference, in sd and in MCSE units."""
    z = (mean - ref["mean"]) / ref["sd"]
    mcse_tot = np.sqrt(mcse**2 + ref["mcse_mean"] ** 2)
    zm = np.abs(mean - ref["mean"]) / mcse_tot
    ratio = sd / ref["sd"]
    ratio_mcse = np.sqrt(1.0 / (2.0 * ess) + 1.0 / (2.0 * ref["ess_bulk"]))
    rm = np.abs(ratio - 1.0) / ratio_mcse
    return {
        "max_z": _r(np.abs(z).max()),
        "z_rms": _r(np.sqrt(np.mean(z**2))),
        "z_over_mcse_max": _r(zm.max(), 3),
        "z_over_mcse_rms": _r(np.sqrt(np.mean(zm**2)), 3),
        "sd_ratio_min": _r(ratio.min()),
        "sd_ratio_max": _r(ratio.max()),
        "sd_ratio_mean": _r(ratio.mean()),
        "sd_over_mcse_max": _r(rm.max(), 3),
        "sd_over_mcse_rms": _r(np.sqrt(np.mean(rm**2)), 3),
    }


def fit_row(problem, source, seed, setting, X, y, ref, n_jobs):
    kw, skw = SETTINGS[setting]
    cls = SGBayesLinearRegression if problem in LINREG else SGBayesLogisticRegression
    est = cls(
        sampler=MCCAdL(sigma_estimate=source, **skw), random_state=seed, n_jobs=n_jobs, **prior_kwargs(problem), **kw
    )
    row = {"kind": "fit", "problem": problem, "setting": setting, "sigma_estimate": source, "seed": seed}
    row.update(run_fit(est, X, y, ref["mean"], ref["sd"], ref["mcse_mean"], ref["ess_bulk"]))
    if "error" in row:
        return row
    draws = est.samples_.reshape(-1, ref["mean"].size)
    mean, sd = draws.mean(axis=0), draws.std(axis=0, ddof=1)
    mcse = np.asarray(est.diagnostics_["mcse_mean"], dtype=float)
    ess = np.asarray(est.diagnostics_["ess"], dtype=float)
    row.update({k: v for k, v in error_metrics(mean, sd, mcse, ess, ref).items() if k not in row})
    row.update(
        {
            "n_iter_": int(est.n_iter_),
            "c_step_products_per_iter": _r(np.mean(est.diagnostics_.get("c_step_products_per_iter", np.nan))),
            "mean": [_r(v, 6) for v in mean],
            "sd": [_r(v, 6) for v in sd],
            "mcse": [_r(v, 4) for v in mcse],
            "ess": [_r(v, 4) for v in ess],
        }
    )
    return row


def pooled(rows):
    """Mean, sd, MCSE and ESS of several fits (seeds) pooled."""
    k = len(rows)
    mean = np.mean([r["mean"] for r in rows], axis=0)
    sd = np.mean([r["sd"] for r in rows], axis=0)
    mcse = np.sqrt(np.sum(np.square([r["mcse"] for r in rows]), axis=0)) / k
    ess = np.sum([r["ess"] for r in rows], axis=0)
    return mean, sd, mcse, ess


def summaries(fits, refs):
    """The ``pooled`` and ``compare`` rows of the fits."""
    out = []
    keys = sorted({(r["problem"], r["setting"]) for r in fits})
    for problem, setting in keys:
        ref = refs[problem]
        by = {}
        for source in SOURCES:
            rs = [
                r
                for r in fits
                if (r["problem"], r["setting"], r["sigma_estimate"]) == (problem, setting, source) and "mean" in r
            ]
            if rs:
                by[source] = pooled(rs)
                out.append(
                    {
                        "kind": "pooled",
                        "problem": problem,
                        "setting": setting,
                        "sigma_estimate": source,
                        "seeds": [r["seed"] for r in rs],
                        "rhat_max": max(r["rhat_max"] for r in rs),
                        **error_metrics(*by[source], ref),
                    }
                )
        if len(by) == 2:
            (mi, si, ci, ei), (ms, ss, cs, es) = by["independent"], by["same"]
            dz = (ms - mi) / np.sqrt(ci**2 + cs**2)
            dr = (ss - si) / ref["sd"] / np.sqrt(1.0 / (2.0 * ei) + 1.0 / (2.0 * es))
            out.append(
                {
                    "kind": "compare",
                    "problem": problem,
                    "setting": setting,
                    "a": "same",
                    "b": "independent",
                    "dmean_over_mcse_max": _r(np.abs(dz).max(), 3),
                    "dmean_over_mcse_rms": _r(np.sqrt(np.mean(dz**2)), 3),
                    "dmean_sd_max": _r(np.max(np.abs(ms - mi) / ref["sd"])),
                    "dsd_ratio_max": _r(np.max(np.abs(ss - si) / ref["sd"])),
                    "dsd_over_mcse_max": _r(np.abs(dr).max(), 3),
                    "dsd_over_mcse_rms": _r(np.sqrt(np.mean(dr**2)), 3),
                    "n_params": int(mi.size),
                }
            )
    return out


def report(rows):
    fits = [r for r in rows if r.get("kind") == "fit"]
    print(
        "| problem | setting | source | seed | h | n_iter | max |z| (sd) | max z/MCSE | rms z/MCSE | "
        "sd ratio range | R-hat max | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in fits:
        if "error" in r:
            print(
                f"| {r['problem']} | {r['setting']} | {r['sigma_estimate']} | {r['seed']} | error: {r['error'][:60]} |"
            )
            continue
        print(
            f"| {r['problem']} | {r['setting']} | {r['sigma_estimate']} | {r['seed']} | {r.get('step_size')} | "
            f"{r['n_iter_']} | {r['max_z']:.3f} | {r['z_over_mcse_max']:.2f} | {r['z_over_mcse_rms']:.2f} | "
            f"{r['sd_ratio_min']:.3f}-{r['sd_ratio_max']:.3f} | {r['rhat_max']:.4f} | {r['seconds']:.1f} |"
        )
    print(
        "\n| problem | setting | source | seeds | max |z| (sd) | rms z (sd) | max z/MCSE | rms z/MCSE | "
        "sd ratio range | max sd/MCSE | R-hat max |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("kind") == "pooled":
            print(
                f"| {r['problem']} | {r['setting']} | {r['sigma_estimate']} | {len(r['seeds'])} | "
                f"{r['max_z']:.3f} | {r['z_rms']:.3f} | {r['z_over_mcse_max']:.2f} | {r['z_over_mcse_rms']:.2f} | "
                f"{r['sd_ratio_min']:.3f}-{r['sd_ratio_max']:.3f} | {r['sd_over_mcse_max']:.2f} | "
                f"{r['rhat_max']:.4f} |"
            )
    print(
        "\n| problem | setting | same - independent: max |dmean|/MCSE | rms | max |dmean| (sd) | max |dsd| (sd) | "
        "max |dsd|/MCSE | rms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("kind") == "compare":
            print(
                f"| {r['problem']} | {r['setting']} | {r['dmean_over_mcse_max']:.2f} | "
                f"{r['dmean_over_mcse_rms']:.2f} | {r['dmean_sd_max']:.3f} | {r['dsd_ratio_max']:.3f} | "
                f"{r['dsd_over_mcse_max']:.2f} | {r['dsd_over_mcse_rms']:.2f} |"
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", default=["a9a_default", "synth_1e4", "synth_1e5"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--sources", nargs="+", default=list(SOURCES), choices=SOURCES)
    parser.add_argument("--plain", action="store_true", help="also gradient='minibatch' on synth_1e4")
    parser.add_argument("--plain-only", action="store_true", help="only the plain-gradient rows")
    parser.add_argument(
        "--linreg",
        action="store_true",
        help="only SGBayesLinearRegression's defaults on the exact linear-regression posteriors",
    )
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--report", action="store_true", help="print the tables of the saved rows")
    args = parser.parse_args()
    if args.report:
        rows = [json.loads(line) for line in open(OUT)]
        fits = [r for r in rows if r.get("kind") == "fit"]
        refs = {
            p: linreg_problem(p)[2] if p in LINREG else load_reference(p) for p in sorted({r["problem"] for r in fits})
        }
        report(fits + summaries(fits, refs))
        return
    runs = [] if args.plain_only or args.linreg else [(p, "default") for p in args.problems]
    if args.linreg:
        runs = [(p, "default") for p in LINREG]
    if args.plain or args.plain_only:
        runs += [("synth_1e4", "plain"), ("synth_1e4", "plain_papers")]
    commit = _commit()
    OUT.parent.mkdir(exist_ok=True)
    for problem, setting in runs:
        if problem in LINREG:
            X, y, ref = linreg_problem(problem)
        else:
            X, y, _, _ = make_problem(problem)
            ref = load_reference(problem)
        seeds = args.seeds if setting == "default" else args.seeds[:1]
        # Interleaved: seed by seed, both sources, so load drifts hit both alike.
        for seed in seeds:
            for source in args.sources:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    row = fit_row(problem, source, seed, setting, X, y, ref, args.n_jobs)
                row["commit"] = commit
                print(
                    json.dumps({k: v for k, v in row.items() if k not in ("mean", "sd", "mcse", "ess", "failing")}),
                    flush=True,
                )
                with open(OUT, "a") as fh:
                    fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    sys.exit(main())
