"""Posterior accuracy of the estimators' defaults against exact posteriors, at any N.

What it measures
----------------
For each fit, the pooled draws' mean and standard deviation of every parameter against an
exact reference (closed form, quadrature, or long full-data HMC), in units of the
reference posterior sd:

* ``max_z``: ``max_i |mean_i - ref_mean_i| / ref_sd_i``;
* ``sd_ratio_min``, ``sd_ratio_max``: the extremes of ``sd_i / ref_sd_i``;
* ``mcse_med``: the median Monte Carlo standard error of the mean, ``mcse_mean_i / ref_sd_i``
  (``diagnostics_["mcse_mean"]``);
* ``ess_min`` (bulk), ``rhat_max``, ``step_size``, ``noise_eigenvalue``, ``seconds`` (wall
  time of ``fit``), ``ess_per_s``; the diagnostics' ``gradient``, ``preconditioner`` and
  ``batch_size``, and every warning ``fit`` raised.

Verdicts, per fit:

* ``pass_raw``: every coordinate has ``|mean error| < 0.1 sd`` and ``0.9 < sd ratio < 1.1``;
* ``pass_mcse``: every coordinate's mean error is below ``0.1 sd`` *or* within 3 MCSE, and
  every sd ratio is within 0.1 of 1 *or* within 3 MCSE of the sd ratio,
  ``sqrt(1 / (2 ESS))`` (the MCSE of a sd from ``ESS`` effective draws, relative); for the
  HMC references their own MCSEs are added in quadrature. The MCSE excuse is granted only
  to coordinates whose chains mixed (R-hat < 1.01 and bulk ESS >= 100 per chain, the
  library's own warning thresholds): a stuck chain's MCSE is as large as the sd and would
  excuse anything;
* ``rhat_ok``: ``max R-hat < 1.01``.

Parts (``--part``)
------------------
``gaussian``
    Bayesian linear regression with exact posteriors (``benchmarks/_exact_linreg.py``):
    N in {1e3, 1e4, 1e5, 1e6}, D in {5, 100}, features ``N(0, 1)``, true weights
    ``N(0, 1)``, intercept 0.5, noise sd 1, seeded by ``(N, D)``. Variant ``known``:
    ``SGBayesLinearRegression(noise_precision=1.0)``, posterior ``N(m, S)``. Variant
    ``sampled`` (the default ``noise_precision=None``: ``log tau`` is the last parameter,
    ``tau ~ Gamma(1e-6, 1e-6)``): exact moments by quadrature over ``log tau``. Every
    SG sampler (sgld, sghmc, sgnht, ccadl, mccadl) with all defaults (``random_state=0``) but
    the reference's prior (``alpha_intercept=alpha, normalize_y=False``: the papers').
    For comparison, at N in {1e4, 1e5}, D = 5, the old defaults (``gradient="minibatch"``,
    sampler ``preconditioner="none"``, ``batch_size=200``: the old ``"auto"``, which now
    means full data when N x P is small; ``n_iter=5000``, the old default length) for mccadl
    and sgld.
``a9a``
    Logistic regression on a9a against the stored HMC reference
    (``benchmarks/_reference.py``): each sampler with all defaults, each with
    ``gradient="minibatch"`` (whitening still on, ``n_iter=5000``), the old default (mccadl,
    ``gradient="minibatch"``, ``MCCAdL(preconditioner="none")``, ``batch_size=200``,
    ``n_iter=5000``), and mccadl and sgld
    with ``n_iter=20000`` to separate bias from Monte Carlo error. ``n_jobs=2``. The
    Laplace approximation's errors (from the reference) are reported alongside. Every fit
    passes the reference's prior, the papers' ``alpha = alpha_intercept = 1``.
``a9a_default``
    What a user gets: each sampler's ``SGBayesLogisticRegression(sampler=name,
    random_state=0, n_jobs=2).fit(X, y)`` on a9a with *no* prior argument (the default prior,
    ``alpha=1`` on the coefficients and ``alpha_intercept=0.01`` on the intercept) against
    the HMC reference of that prior, ``a9a_default``; and the Laplace approximation's
    errors. The part checks that the estimator's default prior is the reference's.
``poisson``
    ``SGBayesPoissonRegressor(sampler=name, random_state=0, n_jobs=2).fit(X, y)`` (the default
    prior ``alpha=1``, ``alpha_intercept=0.01``) on ``scales_2e3`` and ``scales_5e4``
    (synthetic counts from 4 raw ``N(0, s_j^2)`` features, ``s = 1e-3, 1e-1, 1e1, 1e3``, true
    weights ``0.3 / s_j`` but 0.5 on the first, intercept 0.5, seeded; N = 2,000 (full-data
    gradients) and 50,000 (minibatches of 200 with control variates)) and ``randhie``
    (statsmodels' RAND health insurance data, 20,190 x 9 raw covariates, ``y = mdvis``),
    against the exact posterior by importance sampling from a multivariate t at the Laplace
    approximation (``tests/_exact.py: poisson_reference``, 40,000 proposals; its ESS and
    MCSEs are reported and added in quadrature).
``unscaled``
    ``a9a_unscaled`` (three columns x1000) and ``breast_cancer_raw`` (raw features),
    default estimator (mccadl) and sgld, no user scaling; requirement: R-hat < 1.01 and the
    accuracy above.

Output
------
One JSON object per line on stdout (a ``meta`` line first: the repository's commit, the
path of the skbayes_sg imported, a hash of its sources and the files in which it differs
from the commit), appended to
``benchmarks/results/posterior_accuracy[_quick].jsonl``; markdown tables of the run on
stderr at the end; a PNG summary ``benchmarks/results/posterior_accuracy[_quick].png``
when matplotlib is available.

Usage (from the repo root; the full run took 16 minutes on 2 shared cores, peak memory ~1.2 GB)::

    nice python benchmarks/posterior_accuracy.py --part all
    nice python benchmarks/posterior_accuracy.py --part gaussian --quick    # smoke test
    python benchmarks/posterior_accuracy.py --report          # tables of the last run in the jsonl

While ``skbayes_sg/`` is being edited, run against a frozen copy of the last commit, so that
the main process and joblib's worker processes (which import the package afresh) see the same,
identifiable code::

    mkdir -p /tmp/skb_head && git archive HEAD skbayes_sg | tar -x -C /tmp/skb_head && \\
        PYTHONPATH=/tmp/skb_head nice python benchmarks/posterior_accuracy.py --part all

The ``meta`` line records which copy ran (``library_path``), a hash of its sources and the
files that differ from the commit.
"""

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import time
import traceback
import uuid
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _exact_linreg import known_noise_posterior, sampled_noise_posterior, sufficient_statistics  # noqa: E402
from _reference import load_reference, make_problem, problem_prior  # noqa: E402

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression  # noqa: E402
from skbayes_sg.samplers import SAMPLERS  # noqa: E402

RESULTS = HERE / "results"
SG_SAMPLERS = ("sgld", "sghmc", "sgnht", "ccadl", "mccadl")
OLD_SAMPLERS = ("mccadl", "sgld")
GAUSS_N = (1_000, 10_000, 100_000, 1_000_000)
GAUSS_D = (5, 100)
OLD_N = (10_000, 100_000)
#: The old default minibatch (``batch_size="auto"`` was ``min(200, N)`` for every N).
OLD_BATCH = 200
#: The old default length, pinned for the old-default and plain-minibatch comparison rows:
#: under ``n_iter="auto"`` their unmixed chains would run to the 100,000-iteration ceiling.
OLD_N_ITER = 5000
INTERCEPT, NOISE_SD, ALPHA = 0.5, 1.0, 1.0
NOISE_A = NOISE_B = 1e-6
Z_TOL, SD_TOL, N_MCSE, RHAT_MAX = 0.1, 0.1, 3.0, 1.01
#: The MCSE excuse needs a coordinate with R-hat < 1.01 and bulk ESS >= 100 per chain.
ESS_FLOOR_PER_CHAIN = 100


# -- metadata ---------------------------------------------------------------------------
def _git(*args):
    try:
        return subprocess.run(["git", *args], cwd=HERE.parent, capture_output=True, text=True, timeout=30).stdout
    except Exception:  # noqa: BLE001 - metadata only
        return ""


def library_state():
    """The commit, and whether the skbayes_sg actually imported (possibly a snapshot put first on
    PYTHONPATH, see the usage note) differs from that commit's, with a hash of its sources."""
    import skbayes_sg

    root = Path(skbayes_sg.__file__).resolve().parent
    files = sorted(p for p in root.rglob("*.py"))
    digest = hashlib.sha1()
    changed = []
    for path in files:
        text = path.read_bytes()
        rel = path.relative_to(root).as_posix()
        digest.update(rel.encode() + b"\0" + text)
        if _git("show", f"HEAD:skbayes_sg/{rel}").encode() != text:
            changed.append(rel)
    return {
        "commit": _git("rev-parse", "--short", "HEAD").strip(),
        "library_path": str(root),
        "library_sha1": digest.hexdigest()[:10],
        "library_changed_vs_commit": changed,
    }


# -- metrics ----------------------------------------------------------------------------
def _r(x, nd=4):
    """``x`` to ``nd`` significant digits (None for None, NaN and infinities)."""
    if x is None:
        return None
    x = float(x)
    return None if not np.isfinite(x) else float(f"{x:.{nd}g}")


def evaluate(est, ref_mean, ref_sd, names, ref_mcse=None, ref_ess=None):
    """Accuracy metrics of ``est``'s pooled draws against a reference mean and sd."""
    diag = est.diagnostics_
    P = ref_mean.size
    draws = est.samples_.reshape(-1, P)
    out = {}
    if not np.all(np.isfinite(draws)):
        out["diverged"] = True
        out["nonfinite_fraction"] = _r(np.mean(~np.isfinite(draws)), 6)
    mean = draws.mean(axis=0)
    sd = draws.std(axis=0, ddof=1)
    err = mean - ref_mean
    z = np.abs(err) / ref_sd
    ratio = sd / ref_sd
    ess = np.asarray(diag["ess"], dtype=float)
    rhat = np.asarray(diag["rhat"], dtype=float)
    mcse = np.asarray(diag["mcse_mean"], dtype=float)
    mcse_tot = np.sqrt(mcse**2 + (0.0 if ref_mcse is None else np.asarray(ref_mcse) ** 2))
    rel_sd_mcse = np.sqrt(1.0 / (2.0 * ess) + (0.0 if ref_ess is None else 1.0 / (2.0 * np.asarray(ref_ess))))
    with np.errstate(invalid="ignore"):
        mean_raw = z < Z_TOL
        sd_raw = np.abs(ratio - 1.0) < SD_TOL
        # An MCSE means something only where the chains mixed: a stuck chain (ESS ~ 4) has an
        # MCSE as large as the sd, which would excuse any error. There the raw test applies.
        trusted = (ess >= ESS_FLOOR_PER_CHAIN * est.samples_.shape[0]) & (rhat < RHAT_MAX)
        mean_ok = mean_raw | (trusted & (np.abs(err) < N_MCSE * mcse_tot))
        sd_ok = sd_raw | (trusted & (np.abs(ratio - 1.0) < N_MCSE * rel_sd_mcse))
    iz, ir = int(np.nanargmax(z)), int(np.nanargmax(np.abs(ratio - 1.0)))
    bad = np.flatnonzero(~(mean_ok & sd_ok))
    bad = bad[np.argsort(-np.maximum(z[bad] / Z_TOL, np.abs(ratio[bad] - 1) / SD_TOL))][:6]
    out.update(
        {
            "max_z": _r(np.nanmax(z)),
            "worst_z_param": names[iz],
            "worst_z_over_mcse": _r(np.abs(err[iz]) / mcse_tot[iz], 2),
            "sd_ratio_min": _r(np.nanmin(ratio)),
            "sd_ratio_max": _r(np.nanmax(ratio)),
            "worst_sd_param": names[ir],
            # The average over coordinates separates a systematic sd bias from Monte Carlo scatter.
            "sd_ratio_mean": _r(np.nanmean(ratio)),
            "z_rms": _r(np.sqrt(np.nanmean(z**2))),
            "mcse_med": _r(np.nanmedian(mcse / ref_sd)),
            "ess_min": _r(np.nanmin(ess), 5),
            "rhat_max": _r(np.nanmax(rhat)),
            "pass_raw": bool(np.all(mean_raw) and np.all(sd_raw)),
            "pass_mcse": bool(np.all(mean_ok) and np.all(sd_ok)),
            "rhat_ok": bool(np.nanmax(rhat) < RHAT_MAX) if np.isfinite(rhat).any() else False,
            "n_mean_fail_raw": int(np.sum(~mean_raw)),
            "n_sd_fail_raw": int(np.sum(~sd_raw)),
            "n_fail_mcse": int(np.sum(~(mean_ok & sd_ok))),
            "failing": [
                {
                    "param": names[j],
                    "z": _r(z[j], 3),
                    "z_over_mcse": _r(np.abs(err[j]) / mcse_tot[j], 2),
                    "sd_ratio": _r(ratio[j], 3),
                    "ratio_over_mcse": _r(np.abs(ratio[j] - 1) / rel_sd_mcse[j], 2),
                }
                for j in bad
            ],
        }
    )
    if names[-1] == "log_noise_precision":
        j = P - 1
        out["lognoise"] = {
            "z": _r(z[j]),
            "sd_ratio": _r(ratio[j]),
            "z_over_mcse": _r(np.abs(err[j]) / mcse_tot[j], 2),
            "ess": _r(ess[j], 5),
            "rhat": _r(rhat[j]),
        }
        out["max_z_weights"] = _r(np.nanmax(z[:-1]))
        out["sd_ratio_range_weights"] = [_r(np.nanmin(ratio[:-1])), _r(np.nanmax(ratio[:-1]))]
    for key in (
        "step_size",
        "noise_eigenvalue",
        "predicted_noise_error",
        "lambda_max",
        "gradient",
        "preconditioner",
        "batch_size",
        "kinetic_temperature",
    ):
        if key in diag:
            value = diag[key]
            out[key] = value if isinstance(value, (str, type(None))) else _r(value, 6)
    return out


def run_fit(est, X, y, ref_mean, ref_sd, ref_mcse=None, ref_ess=None):
    """Fit, time, evaluate; record warnings and exceptions instead of stopping the run."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        try:
            with np.errstate(all="ignore"):
                est.fit(X, y)
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            return {
                "error": f"{type(exc).__name__}: {exc}"[:500],
                "traceback": traceback.format_exc(limit=-3)[-1500:],
                "seconds": _r(time.perf_counter() - t0, 4),
            }
        seconds = time.perf_counter() - t0
    out = evaluate(est, ref_mean, ref_sd, est._param_names(), ref_mcse, ref_ess)
    out["seconds"] = _r(seconds, 4)
    out["ess_per_s"] = _r(out["ess_min"] / seconds, 3) if out["ess_min"] is not None else None
    out["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught})
    return out


# -- parts ------------------------------------------------------------------------------
def gaussian_data(N, D):
    rng = np.random.default_rng([20260501, N, D])
    w = rng.standard_normal(D)
    X = rng.standard_normal((N, D))
    y = X @ w
    y += INTERCEPT + NOISE_SD * rng.standard_normal(N)
    return X, y


def part_gaussian(emit, quick, samplers):
    Ns = (1_000, 10_000) if quick else GAUSS_N
    Ds = (5,) if quick else GAUSS_D
    old_N = (10_000,) if quick else OLD_N
    for D in Ds:
        for N in Ns:
            X, y = gaussian_data(N, D)
            stats = sufficient_statistics(X, y)
            t0 = time.perf_counter()
            refs = {
                "known": known_noise_posterior(stats, ALPHA, 1.0 / NOISE_SD**2),
                "sampled": sampled_noise_posterior(stats, ALPHA, NOISE_A, NOISE_B),
            }
            emit(
                {
                    "part": "gaussian",
                    "kind": "reference",
                    "N": N,
                    "D": D,
                    "seconds": _r(time.perf_counter() - t0, 3),
                    "edge_mass": refs["sampled"]["edge_mass"],
                    "log_tau_mean": _r(refs["sampled"]["mean"][-1], 6),
                    "log_tau_sd": _r(refs["sampled"]["sd"][-1], 6),
                }
            )
            configs = [(variant, name, "default") for variant in ("known", "sampled") for name in samplers]
            if D == 5 and N in old_N:
                configs += [
                    (variant, name, "old_default")
                    for variant in ("known", "sampled")
                    for name in OLD_SAMPLERS
                    if name in samplers
                ]
            for variant, name, config in configs:
                kw = {"noise_precision": 1.0 / NOISE_SD**2} if variant == "known" else {}
                if config == "old_default":
                    kw.update(
                        gradient="minibatch",
                        sampler=SAMPLERS[name](preconditioner="none"),
                        batch_size=OLD_BATCH,
                        n_iter=OLD_N_ITER,
                    )
                else:
                    kw.update(sampler=name)
                # The reference's prior: N(0, 1/ALPHA) on every weight, the intercept included, in y's units.
                est = SGBayesLinearRegression(
                    random_state=0, alpha=ALPHA, alpha_intercept=ALPHA, normalize_y=False, **kw
                )
                ref = refs[variant]
                rec = {
                    "part": "gaussian",
                    "kind": "fit",
                    "N": N,
                    "D": D,
                    "variant": variant,
                    "sampler": name,
                    "config": config,
                }
                rec.update(run_fit(est, X, y, ref["mean"], ref["sd"]))
                emit(rec)
            del X, y


def _estimator_prior(problem, default_prior, X):
    """Keyword arguments giving ``SGBayesLogisticRegression`` the prior of the reference ``problem``:
    none with ``default_prior`` (after checking that the estimator's defaults resolve to that
    prior on ``X``), else ``alpha`` and ``alpha_intercept`` explicitly (the papers' prior for the
    older problems). The default ``alpha="auto"`` (issue 30) gives a9a's 0/1 columns exactly
    ``alpha = 1``, the reference's prior: the ``a9a_default`` fits run at the true defaults."""
    from skbayes_sg.models.glm import auto_alpha

    alpha, alpha_intercept = problem_prior(problem)
    if not default_prior:
        return {"alpha": alpha, "alpha_intercept": alpha_intercept}
    defaults = SGBayesLogisticRegression().get_params()
    resolved = auto_alpha(X) if defaults["alpha"] == "auto" else defaults["alpha"]
    if not (np.ndim(resolved) == 0 and (resolved, defaults["alpha_intercept"]) == (alpha, alpha_intercept)):
        raise RuntimeError(
            f"the estimator's default prior (alpha={defaults['alpha']}, resolved {resolved}, alpha_intercept="
            f"{defaults['alpha_intercept']}) is not the prior of reference {problem!r} "
            f"(alpha={alpha}, alpha_intercept={alpha_intercept}): recompute the reference"
        )
    return {}


def part_logistic(emit, quick, samplers, problems, configs_for, default_prior=False):
    part = configs_for.__name__.replace("_configs", "")
    for problem in problems:
        X, y, alpha, fit_intercept = make_problem(problem)
        ref = load_reference(problem)
        prior_kw = _estimator_prior(problem, default_prior, X)
        prior = {
            "alpha": problem_prior(problem)[0],
            "alpha_intercept": problem_prior(problem)[1],
            "prior_passed": bool(prior_kw),
        }
        lap_z = np.abs(ref["map"] - ref["mean"]) / ref["sd"]
        lap_ratio = ref["laplace_sd"] / ref["sd"]
        emit(
            {
                "part": part,
                "kind": "laplace",
                "problem": problem,
                "N": int(X.shape[0]),
                "D": int(X.shape[1]),
                "sampler": "laplace",
                "config": "laplace",
                **prior,
                "max_z": _r(lap_z.max()),
                "worst_z_index": int(lap_z.argmax()),
                "sd_ratio_min": _r(lap_ratio.min()),
                "sd_ratio_max": _r(lap_ratio.max()),
                "sd_ratio_mean": _r(lap_ratio.mean()),
                "laplace_mean_dev_max": _r(ref["laplace_mean_dev_max"]),
                "laplace_sd_dev_max": _r(ref["laplace_sd_dev_max"]),
                "ref_ess_bulk_min": _r(ref["ess_bulk_min"], 5),
                "ref_rhat_max": _r(ref["rhat_max"]),
                "ref_mcse_med": _r(np.median(ref["mcse_mean"] / ref["sd"])),
            }
        )
        for name, config, kw in configs_for(quick, samplers):
            est = SGBayesLogisticRegression(random_state=0, n_jobs=2, fit_intercept=fit_intercept, **prior_kw, **kw)
            rec = {
                "part": part,
                "kind": "fit",
                "problem": problem,
                "N": int(X.shape[0]),
                "D": int(X.shape[1]),
                "sampler": name,
                "config": config,
                "n_iter": est.n_iter,
                **prior,
            }
            rec.update(run_fit(est, X, y, ref["mean"], ref["sd"], ref["mcse_mean"], ref["ess_bulk"]))
            emit(rec)
        del X, y


def poisson_problem(name):
    """``(X, y)`` of a Poisson accuracy problem (see the ``poisson`` part)."""
    if name == "randhie":
        import statsmodels.datasets

        data = statsmodels.datasets.randhie.load_pandas()
        return data.exog.to_numpy(float), data.endog.to_numpy(float)
    N = {"scales_2e3": 2000, "scales_5e4": 50_000}[name]
    rng = np.random.default_rng([20261127, N])
    scales = np.array([1e-3, 1e-1, 1e1, 1e3])
    X = rng.standard_normal((N, 4)) * scales
    coef = 0.3 / scales
    coef[0] = 0.5
    return X, rng.poisson(np.exp(0.5 + X @ coef)).astype(float)


def part_poisson(emit, quick, samplers):
    sys.path.insert(0, str(HERE.parent))
    from skbayes_sg import SGBayesPoissonRegressor
    from tests._exact import poisson_reference

    for problem in ("scales_2e3",) if quick else ("scales_2e3", "scales_5e4", "randhie"):
        X, y = poisson_problem(problem)
        t0 = time.perf_counter()
        ref = poisson_reference(X, y, n_draws=10_000 if quick else 40_000)
        base = {"part": "poisson", "problem": problem, "N": int(X.shape[0]), "D": int(X.shape[1])}
        emit({**base, "kind": "reference", "ref_ess": _r(ref.ess, 5), "seconds": _r(time.perf_counter() - t0, 3)})
        for name in samplers:
            est = SGBayesPoissonRegressor(sampler=name, random_state=0, n_jobs=2)
            rec = {**base, "kind": "fit", "sampler": name, "config": "default", "ref_ess": _r(ref.ess, 5)}
            rec.update(run_fit(est, X, y, ref.mean, ref.sd, ref.mcse_mean, np.full(ref.mean.size, ref.ess)))
            emit(rec)


def a9a_configs(quick, samplers):
    n_iter = {"n_iter": 1000} if quick else {}
    out = [(name, "default", {"sampler": name, **n_iter}) for name in samplers]
    if not quick:
        out += [
            (name, "minibatch", {"sampler": name, "gradient": "minibatch", "n_iter": OLD_N_ITER}) for name in samplers
        ]
    if "mccadl" in samplers:
        out.append(
            (
                "mccadl",
                "old_default",
                {
                    "sampler": SAMPLERS["mccadl"](preconditioner="none"),
                    "gradient": "minibatch",
                    "batch_size": OLD_BATCH,
                    "n_iter": OLD_N_ITER,
                    **n_iter,
                },
            )
        )
    if not quick:
        out += [(name, "n_iter=20000", {"sampler": name, "n_iter": 20000}) for name in OLD_SAMPLERS if name in samplers]
    return out


def a9a_default_configs(quick, samplers):
    n_iter = {"n_iter": 1000} if quick else {}
    return [(name, "default", {"sampler": name, **n_iter}) for name in samplers]


def unscaled_configs(quick, samplers):
    n_iter = {"n_iter": 1000} if quick else {}
    return [(name, "default", {"sampler": name, **n_iter}) for name in ("mccadl", "sgld") if name in samplers]


# -- report -----------------------------------------------------------------------------
def _fmt(v, nd=3):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        if v != 0 and (abs(v) < 1e-2 or abs(v) >= 1e4):
            return f"{v:.2g}"
        return f"{v:.{nd}g}"
    return str(v)


def markdown_tables(records):
    lines = []
    fits = [r for r in records if r.get("kind") == "fit"]
    g = [r for r in fits if r["part"] == "gaussian"]
    if g:
        lines += [
            "### gaussian",
            "",
            "| N | D | noise | sampler | config | max z (w) | z log tau | sd ratio (w) (mean) | sd ratio log tau "
            "| mcse med | ESS min | R-hat max | h | sigma_max | batch | gradient/precond | s | raw | mcse-adj |",
            "|" + "---|" * 19,
        ]
        for r in g:
            if "error" in r:
                lines.append(
                    f"| {r['N']:.0e} | {r['D']} | {r['variant']} | {r['sampler']} | {r['config']} | "
                    f"ERROR: {r['error'][:80]} |" + " |" * 13
                )
                continue
            ln = r.get("lognoise", {})
            rng_w = r.get("sd_ratio_range_weights", [r["sd_ratio_min"], r["sd_ratio_max"]])
            lines.append(
                f"| {r['N']:.0e} | {r['D']} | {r['variant']} | {r['sampler']} | {r['config']} | "
                f"{_fmt(r.get('max_z_weights', r['max_z']))} | {_fmt(ln.get('z'))} | "
                f"{_fmt(rng_w[0])}-{_fmt(rng_w[1])} ({_fmt(r['sd_ratio_mean'])}) | {_fmt(ln.get('sd_ratio'))} | "
                f"{_fmt(r['mcse_med'])} | "
                f"{_fmt(r['ess_min'])} | {_fmt(r['rhat_max'])} | {_fmt(r.get('step_size'))} | "
                f"{_fmt(r.get('noise_eigenvalue'))} | {_fmt(r.get('batch_size'))} | "
                f"{r.get('gradient')}/{r.get('preconditioner')} | {_fmt(r['seconds'])} | "
                f"{_fmt(r['pass_raw'])} | {_fmt(r['pass_mcse'])} |"
            )
        lines.append("")
    for part in ("a9a", "a9a_default", "unscaled", "poisson"):
        rows = [r for r in records if r.get("part") == part and r.get("kind") in ("fit", "laplace")]
        if not rows:
            continue
        lines += [
            f"### {part}",
            "",
            "| problem | sampler | config | s | ESS min | R-hat max | ESS/s | max z | sd ratio (mean) | mcse med "
            "| h | sigma_max | gradient/precond | raw | mcse-adj | R-hat ok |",
            "|" + "---|" * 16,
        ]
        for r in rows:
            if "error" in r:
                lines.append(
                    f"| {r['problem']} | {r['sampler']} | {r['config']} | ERROR: {r['error'][:80]} |" + " |" * 12
                )
                continue
            if r["kind"] == "laplace":
                lines.append(
                    f"| {r['problem']} | Laplace | (reference HMC: ESS {_fmt(r['ref_ess_bulk_min'])}, "
                    f"R-hat {_fmt(r['ref_rhat_max'])}) | - | - | - | - | {_fmt(r['max_z'])} | "
                    f"{_fmt(r['sd_ratio_min'])}-{_fmt(r['sd_ratio_max'])} ({_fmt(r['sd_ratio_mean'])}) | "
                    f"{_fmt(r['ref_mcse_med'])} "
                    "| - | - | - | - | - | - |"
                )
                continue
            lines.append(
                f"| {r['problem']} | {r['sampler']} | {r['config']} | {_fmt(r['seconds'])} | {_fmt(r['ess_min'])} | "
                f"{_fmt(r['rhat_max'])} | {_fmt(r['ess_per_s'])} | {_fmt(r['max_z'])} | "
                f"{_fmt(r['sd_ratio_min'])}-{_fmt(r['sd_ratio_max'])} ({_fmt(r['sd_ratio_mean'])}) | "
                f"{_fmt(r['mcse_med'])} | {_fmt(r.get('step_size'))} | {_fmt(r.get('noise_eigenvalue'))} | "
                f"{r.get('gradient')}/{r.get('preconditioner')} | {_fmt(r['pass_raw'])} | {_fmt(r['pass_mcse'])} | "
                f"{_fmt(r['rhat_ok'])} |"
            )
        lines.append("")
    bad = [
        r
        for r in fits
        if "error" in r or not r.get("pass_mcse", False) or not r.get("rhat_ok", False) or r.get("warnings")
    ]
    if bad:
        lines += ["### failures, errors and warnings", ""]
        for r in bad:
            where = (
                f"{r['part']} {r.get('problem', '')} N={r['N']} D={r['D']} {r.get('variant', '')} {r['sampler']} "
                f"{r['config']}"
            )
            if "error" in r:
                lines.append(f"- {where}: ERROR {r['error']}")
                continue
            msg = []
            if not r["pass_mcse"]:
                msg.append(
                    "fails (MCSE-adjusted): "
                    + "; ".join(
                        f"{f['param']} z={f['z']} ({f['z_over_mcse']} mcse) sd ratio={f['sd_ratio']}"
                        for f in r["failing"]
                    )
                )
            if not r["rhat_ok"]:
                msg.append(f"R-hat {r['rhat_max']}")
            if r.get("warnings"):
                msg.append("warnings: " + " | ".join(w[:120] for w in r["warnings"]))
            lines.append(f"- {where}: " + "; ".join(msg))
    return "\n".join(lines)


def plot(records, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fits = [r for r in records if r.get("kind") == "fit" and "error" not in r]
    fig, axes = plt.subplots(2, 3, figsize=(17, 9))
    colors = dict(zip(SG_SAMPLERS, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    styles = {5: "-", 100: "--"}
    for ax, variant in zip(axes[0, :2], ("known", "sampled")):
        for name in SG_SAMPLERS:
            for D in GAUSS_D:
                rows = sorted(
                    (
                        r
                        for r in fits
                        if r["part"] == "gaussian"
                        and r["config"] == "default"
                        and r["variant"] == variant
                        and r["sampler"] == name
                        and r["D"] == D
                    ),
                    key=lambda r: r["N"],
                )
                if rows:
                    ax.plot(
                        [r["N"] for r in rows],
                        [r["max_z"] for r in rows],
                        styles[D],
                        marker="o",
                        color=colors[name],
                        label=f"{name} D={D}",
                    )
            old = sorted(
                (
                    r
                    for r in fits
                    if r["part"] == "gaussian"
                    and r["config"] == "old_default"
                    and r["variant"] == variant
                    and r["sampler"] == name
                ),
                key=lambda r: r["N"],
            )
            if old:
                ax.plot(
                    [r["N"] for r in old],
                    [r["max_z"] for r in old],
                    ":",
                    marker="x",
                    color=colors[name],
                    label=f"{name} old default D=5",
                )
        ax.axhline(Z_TOL, color="k", lw=0.8)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="N",
            ylabel="max |mean error| / sd",
            title=f"linear regression, {variant} noise precision",
        )
    axes[0, 0].legend(fontsize=6, ncol=2)
    ax = axes[0, 2]
    for name in SG_SAMPLERS:
        for variant, marker in (("known", "o"), ("sampled", "s")):
            for D in GAUSS_D:
                rows = sorted(
                    (
                        r
                        for r in fits
                        if r["part"] == "gaussian"
                        and r["config"] == "default"
                        and r["variant"] == variant
                        and r["sampler"] == name
                        and r["D"] == D
                    ),
                    key=lambda r: r["N"],
                )
                if rows:
                    dev = [max(abs(r["sd_ratio_min"] - 1), abs(r["sd_ratio_max"] - 1)) for r in rows]
                    ax.plot([r["N"] for r in rows], dev, styles[D], marker=marker, color=colors[name], ms=4)
    ax.axhline(SD_TOL, color="k", lw=0.8)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="N",
        ylabel="max |sd ratio - 1|",
        title="linear regression sd (o known, s sampled; -- D=100)",
    )
    for ax, part, key, label in (
        (axes[1, 0], "a9a", "max_z", "max |mean error| / sd"),
        (axes[1, 1], "a9a", "ess_per_s", "min bulk ESS per second"),
        (axes[1, 2], "unscaled", "max_z", "max |mean error| / sd"),
    ):
        # The a9a panels show both priors' parts (a9a: the papers', a9a_default: the estimators').
        rows = [
            r
            for r in records
            if r.get("part") in ((part, "a9a_default") if part == "a9a" else (part,))
            and r.get("kind") in ("fit", "laplace")
            and "error" not in r
            and r.get(key) is not None
        ]
        if not rows:
            ax.set_visible(False)
            continue
        labels = [f"{r.get('problem', '')[:11]} {r['sampler']} {r['config']}" for r in rows]
        vals = [r[key] for r in rows]
        ax.barh(range(len(rows)), vals, color=[colors.get(r["sampler"], "grey") for r in rows])
        ax.set_yticks(range(len(rows)), labels, fontsize=6)
        ax.invert_yaxis()
        if key == "max_z":
            ax.axvline(Z_TOL, color="k", lw=0.8)
        else:
            ax.set_xscale("log")
        ax.set(xlabel=label, title=f"{part} logistic regression vs HMC")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# -- main -------------------------------------------------------------------------------
def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--part", choices=("gaussian", "a9a", "a9a_default", "unscaled", "poisson", "all"), default="all"
    )
    parser.add_argument("--quick", action="store_true", help="small smoke version (N <= 1e4, D = 5, few fits)")
    parser.add_argument(
        "--samplers",
        default=None,
        help="comma-separated subset of " + ",".join(SG_SAMPLERS) + " (default: all; quick: mccadl,sgld)",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="print the tables of the last run in the jsonl and redraw the PNG; run nothing",
    )
    args = parser.parse_args()
    suffix = "_quick" if args.quick else ""
    out_path = RESULTS / f"posterior_accuracy{suffix}.jsonl"
    png_path = RESULTS / f"posterior_accuracy{suffix}.png"
    if args.report:
        records = [json.loads(line) for line in out_path.read_text().splitlines() if line.strip()]
        last = records[-1]["run"]
        records = [r for r in records if r.get("run") == last]
        print(markdown_tables(records))
        plot(records, png_path)
        return
    samplers = tuple(args.samplers.split(",")) if args.samplers else (("mccadl", "sgld") if args.quick else SG_SAMPLERS)
    run_id = uuid.uuid4().hex[:8]
    records = []
    RESULTS.mkdir(exist_ok=True)

    def emit(rec):
        rec = {"run": run_id, **rec}
        records.append(rec)
        line = json.dumps(rec)
        print(line, flush=True)
        with open(out_path, "a") as fh:
            fh.write(line + "\n")

    import sklearn

    emit(
        {
            "kind": "meta",
            "part": args.part,
            "quick": args.quick,
            "samplers": list(samplers),
            "argv": sys.argv[1:],
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **library_state(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "sklearn": sklearn.__version__,
        }
    )
    parts = ("gaussian", "a9a", "a9a_default", "unscaled", "poisson") if args.part == "all" else (args.part,)
    t0 = time.perf_counter()
    for part in parts:
        if part == "gaussian":
            part_gaussian(emit, args.quick, samplers)
        elif part == "a9a":
            part_logistic(emit, args.quick, samplers, ("a9a",), a9a_configs)
        elif part == "poisson":
            part_poisson(emit, args.quick, samplers)
        elif part == "a9a_default":
            part_logistic(emit, args.quick, samplers, ("a9a_default",), a9a_default_configs, default_prior=True)
        else:
            problems = ("breast_cancer_raw",) if args.quick else ("a9a_unscaled", "breast_cancer_raw")
            part_logistic(emit, args.quick, samplers, problems, unscaled_configs)
    emit({"kind": "done", "seconds": _r(time.perf_counter() - t0, 5)})
    print(markdown_tables(records), file=sys.stderr)
    if plot(records, png_path):
        print(f"wrote {png_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
