"""gadMALA / gadRWM (Titsias & Dellaportas 2019): the paper's tables, and the estimator's defaults.

Four parts (``--part``):

``paper``
    Reproduction of Table 1 (Neal's Gaussian) and Tables 2-6 (binary logistic regression)
    with the paper's settings, including its start ``L = 0.1 / sqrt(P) I``
    (``init_scale=None``). Neal's 100-d Gaussian: N(0, diag(s_1^2, ..., s_100^2)), s_i =
    0.01, 0.02, ..., 1, started at zero. Binary logistic regression on australian, german,
    heart, pima and ripley: features standardised, a bias column (the estimator's
    intercept, with the same N(0, 1) prior as the weights), prior N(0, I), started at zero.
    Every run: 20,000 adaptation iterations, then 20,000 kept draws (one chain), as in
    section 4.2. For gadMALA (full and diagonal L) and gadRWM: wall time of the whole run
    (adaptation, start-up and the estimator's diagnostics included), acceptance rate after
    adaptation, min / median / max ESS over coordinates and min ESS per second. Saves
    ``results/gadmala[_quick].json`` and ``.png``.
``defaults``
    Issue 16's claim: ``SGBayesLogisticRegression(sampler="gadmala", batch_size=None)`` with
    every other setting at its default (``n_iter="auto"``, ``burn_in="auto"``: 5% for the
    adaptive samplers started at Laplace draws, 4 chains, ``init="map"``,
    ``max_draws="auto"``: every draw, ``init_scale="map"``) on the five datasets,
    standardised and unstandardised (raw features), against blackjax NUTS run right after
    it on the same posterior. Also the fits of the earlier defaults, their settings made
    explicit so that the rows stay comparable across versions: ``n_iter=5000,
    burn_in=0.2, max_draws=1000`` (the defaults before ``n_iter="auto"``; with ``"auto"`` the
    first block was the same 5,000 iterations and the runs stopped there), the same with
    ``max_draws=None`` and with ``burn_in=0.05, max_draws=None``, and the paper's start
    (``GadMALA(init_scale=None)``) at the earlier defaults. ``--baseline SRC`` adds the
    defaults fit of the package at ``SRC`` (a source tree such as ``git archive REV``'s, in a
    subprocess with ``PYTHONPATH=SRC``, timed there the same way) on each dataset, right
    before the current one's, for a before/after ratio measured in one run. min ESS per
    second divides the smallest ESS over coordinates (Geyer's initial monotone sequence on
    the pooled split chains, ArviZ ``ess(method="mean")``, the paper's and the blackjax
    script's estimator) by the whole ``fit``'s wall time (the MAP, the curvature, the
    adaptation, the draws and the estimator's diagnostics). Saves
    ``results/gadmala_defaults.json`` and ``.png``.
``linreg``
    Bayesian linear regression with the noise precision sampled (``noise_precision=None``)
    on unscaled designs whose coefficient posterior sds span 1e-3 to 1e2, estimator
    defaults but ``alpha=1e-6`` (so that the prior does not cap the sds at 1), against the
    exact posterior by quadrature over ``log tau`` (``benchmarks/_exact_linreg.py``):
    the largest mean error in posterior sds, the sd ratios, R-hat. The paper's start at the
    same settings and with 20,000 adaptation iterations for comparison. Saves
    ``results/gadmala_linreg.json``.
``budget``
    Adaptation length: acceptance and min ESS per kept draw on german (standardised and
    raw) after 50 to 4,000 adaptation iterations, map start against the paper's start.
    Saves ``results/gadmala_budget.json``.

When ``~/anchor-venv`` exists (see ``../shared/bench/README.md``), blackjax runs in a
subprocess right after the gad samplers on each dataset (a ratio of speeds on a shared
machine is only fair side by side): ``../shared/bench/bench_blackjax_nuts_binary.py``
itself, and for the unstandardised data the same script with its standardisation line
removed (its source executed with that one line replaced, so that the NUTS settings stay
the script's: window adaptation, 500 warm-up, 20,000 draws). Its time is warm-up
(compilation included) plus a second, already compiled, sampling call.

Prints one JSON object per line.

Usage::

    python benchmarks/gadmala.py [--part paper] [--quick] [--repeats 1] [--no-blackjax]
    python benchmarks/gadmala.py --part defaults --repeats 3 [--baseline /tmp/before --baseline-label 98c02e3]
    python benchmarks/gadmala.py --part linreg --repeats 3
    python benchmarks/gadmala.py --part budget
"""

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg._chains import ChainSpec, run_chain
from skbayes_sg.models._base import Model
from skbayes_sg.samplers import GadMALA, GadRWM

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SHARED = HERE.parents[1] / "shared"
DATA = SHARED / "data"
ANCHOR_PY = Path.home() / "anchor-venv" / "bin" / "python"
ANCHOR_SCRIPT = SHARED / "bench" / "bench_blackjax_nuts_binary.py"
DATASETS = ("ripley", "pima", "heart", "australian", "german")
#: The paper's settings, its start L = 0.1 / sqrt(P) I included (init_scale=None).
METHODS = {
    "gadMALAf": lambda: GadMALA(init_scale=None),
    "gadMALAf-diag": lambda: GadMALA(cholesky="diag", init_scale=None),
    "gadRWM": lambda: GadRWM(init_scale=None),
}
#: The line of the blackjax script that standardises the features; removed for raw data.
STANDARDISE_LINE = "X = (X - X.mean(0)) / X.std(0, ddof=1)"
# The paper's figures for its gadMALAf (Table 1 and supplement Tables 2-6): time (s, MATLAB),
# acceptance, min / median / max ESS, min ESS/s.
PAPER_GADMALAF = {
    "neal100": (8.7, 0.556, 1413.4, 1987.4, 2580.8, 161.70),
    "australian": (8.1, 0.569, 3485.9, 4262.9, 4784.0, 443.97),
    "ripley": (3.3, 0.536, 8328.4, 8913.2, 9442.4, 2506.04),
    "pima": (4.6, 0.545, 5407.6, 5810.3, 6467.6, 1176.12),
    "heart": (4.1, 0.551, 3892.9, 4362.7, 4784.2, 946.98),
    "german": (11.0, 0.560, 2734.9, 3414.5, 3928.6, 252.91),
}


class NealGaussian(Model):
    """Neal's (2010) Gaussian target N(0, diag(s^2)) with s = 0.01, ..., 1 (section 4.2)."""

    def __init__(self, n=100):
        self.s = np.linspace(0.01, 1.0, n)
        self.precision = 1.0 / self.s**2
        self.n_params = n
        self.n_samples = 1

    def log_posterior_and_grad(self, theta):
        grad = -self.precision * theta
        return 0.5 * float(theta @ grad), grad


def ess_mean(draws):
    """ESS per coordinate of one chain (n_draws, P): Geyer's initial monotone sequence.

    ArviZ's ``ess(method="mean")`` (split chain, no rank normalisation), as used by the
    blackjax script; skbayes_sg's own implementation of the same steps if ArviZ is absent.
    """
    try:
        import arviz as az
    except ImportError:
        from skbayes_sg import diagnostics

        x = np.asarray(draws, float).T[:, None, :]
        return diagnostics._ess_core(diagnostics._split_chains(x))
    return np.array([az.ess(draws[:, j], method="mean") for j in range(draws.shape[1])], dtype=float)


def load(name, standardise=True):
    z = np.load(DATA / f"{name}.npz")
    X = z["X"].astype(float)
    if standardise:
        X = (X - X.mean(axis=0)) / X.std(axis=0, ddof=1)
    return X, z["y"]


def record(problem, method, seconds, accept, draws, extra=None):
    ess = ess_mean(draws)
    row = {
        "problem": problem,
        "method": method,
        "library": "skbayes_sg",
        "time_s": round(seconds, 3),
        "accept": round(float(accept), 3),
        "ess_min": round(float(ess.min()), 1),
        "ess_med": round(float(np.median(ess)), 1),
        "ess_max": round(float(ess.max()), 1),
        "min_ess_per_s": round(float(ess.min()) / seconds, 2),
        "load_avg_1min": os.getloadavg()[0],
        **(extra or {}),
    }
    paper = PAPER_GADMALAF.get(problem)
    if paper and method == "gadMALAf":
        row["paper_ess_min"], row["paper_min_ess_per_s"] = paper[2], paper[5]
    print(json.dumps(row), flush=True)
    return row


def run_neal(n_adapt, n_keep, seed):
    """Table 1: one chain through the library's fit loop on Neal's Gaussian."""
    model = NealGaussian()
    rows, scales = [], {}
    for method, make in METHODS.items():
        sampler = make()
        t0 = time.perf_counter()
        spec = ChainSpec(sampler, model, n_adapt + n_keep, n_adapt)
        res = run_chain(spec, np.zeros(model.n_params), np.random.SeedSequence(seed))
        seconds = time.perf_counter() - t0
        L = res.summary.get("proposal_cholesky", res.summary.get("proposal_scale"))
        scales[method] = np.sqrt((L**2).sum(axis=1)) if L.ndim == 2 else L
        rows.append(
            record(
                "neal100",
                method,
                seconds,
                res.summary["acceptance_rate"],
                res.draws,
                {"seed": seed, "n_adapt": n_adapt, "n_keep": n_keep},
            )
        )
    return rows, model.s, scales


def run_binary(name, n_adapt, n_keep, seed):
    """Tables 2-6: one chain of the estimator per method, the whole ``fit`` timed."""
    X, y = load(name)
    rows = []
    for method, make in METHODS.items():
        clf = SGBayesLogisticRegression(
            sampler=make(),
            n_iter=n_adapt + n_keep,
            burn_in=n_adapt,
            batch_size=None,
            n_chains=1,
            init="zeros",
            max_draws=None,
            alpha=1.0,
            alpha_intercept=1.0,
            random_state=seed,
        )
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            # One chain: the estimator's R-hat warning does not apply.
            warnings.simplefilter("ignore")
            clf.fit(X, y)
        seconds = time.perf_counter() - t0
        rows.append(
            record(
                name,
                method,
                seconds,
                clf.diagnostics_["acceptance_rate"],
                clf.samples_[0],
                {"seed": seed, "n_adapt": n_adapt, "n_keep": n_keep, "d": X.shape[1] + 1},
            )
        )
    return rows


def run_blackjax(names, nuts_only=False, standardise=True, problem_suffix=""):
    """blackjax NUTS (and MALA) from ../shared/bench, in the anchor venv; its JSON lines.

    ``standardise=False`` runs the same script on the raw features: its source, with the
    one standardising line replaced by ``pass``, executed as the script (same argv).
    """
    if not (ANCHOR_PY.exists() and ANCHOR_SCRIPT.exists()):
        print(json.dumps({"note": f"blackjax skipped: {ANCHOR_PY} not found"}), flush=True)
        return []
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    )
    args = [str(DATA), *names] + (["--nuts-only"] if nuts_only else [])
    if standardise:
        cmd = [str(ANCHOR_PY), str(ANCHOR_SCRIPT), *args]
    else:
        if STANDARDISE_LINE not in ANCHOR_SCRIPT.read_text():
            print(json.dumps({"note": "blackjax raw skipped: the script's standardising line changed"}), flush=True)
            return []
        code = (
            "import sys; path = sys.argv.pop(1); src = open(path).read(); "
            f"exec(compile(src.replace({STANDARDISE_LINE!r}, 'pass'), path, 'exec'))"
        )
        cmd = [str(ANCHOR_PY), "-c", code, str(ANCHOR_SCRIPT), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    rows = []
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        # Warm-up and compilation included, as for the gad samplers' whole fit.
        seconds = r["warmup_s"] + r["sample_s"]
        row = {
            "problem": r["dataset"] + problem_suffix,
            "method": r["method"].upper(),
            "library": "blackjax",
            "time_s": round(seconds, 3),
            "accept": r["accept"],
            "ess_min": r["ess_min"],
            "ess_med": r["ess_med"],
            "ess_max": r["ess_max"],
            "min_ess_per_s": r["min_ess_per_s_total"],
            "min_ess_per_s_sampling_only": r["min_ess_per_s_sampling"],
            "load_avg_1min": os.getloadavg()[0],
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    if proc.returncode:
        print(json.dumps({"note": "blackjax failed", "stderr": proc.stderr[-500:]}), flush=True)
    return rows


def mean_rows(rows):
    """Average the numeric fields of repeated runs of the same (problem, method)."""
    groups = {}
    for r in rows:
        groups.setdefault((r["problem"], r["method"]), []).append(r)
    out = []
    for rs in groups.values():
        row = dict(rs[0])
        for k, v in rs[0].items():
            if isinstance(v, float) and k not in ("seed", "load_avg_1min"):
                row[k] = round(float(np.mean([r[k] for r in rs])), 3)
        row["load_avg_1min"] = round(float(np.mean([r.get("load_avg_1min", np.nan) for r in rs])), 2)
        if len(rs) > 1:
            row["min_ess_per_s_sd"] = round(float(np.std([r["min_ess_per_s"] for r in rs], ddof=1)), 2)
            row["repeats"] = len(rs)
        out.append(row)
    return out


def plot(rows, s, scales, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    problems = [p for p in ("neal100", *DATASETS) if any(r["problem"] == p for r in rows)]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / len(methods)
    for k, m in enumerate(methods):
        vals = [
            next((r["min_ess_per_s"] for r in rows if r["problem"] == p and r["method"] == m), np.nan) for p in problems
        ]
        ax1.bar(np.arange(len(problems)) + k * width, vals, width, label=m)
    ax1.set_xticks(np.arange(len(problems)) + 0.4 - width / 2, problems)
    ax1.set_yscale("log")
    ax1.set_ylabel("min ESS per second (whole run)")
    ax1.legend(fontsize=8)
    ax1.set_title("Efficiency, one chain, 20k adapt + 20k kept")
    ax2.plot(s, s, "k--", label="target sd $s_i$")
    for m, sc in scales.items():
        ax2.plot(s, sc, label=m)
    ax2.set_xlabel("$s_i$")
    ax2.set_ylabel(r"learned proposal sd $\sqrt{(LL^\top)_{ii}}$")
    ax2.set_title("Neal's Gaussian: learned L (Figure 2, row 2)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# -- part "defaults": the estimator as a user gets it -------------------------------------------

#: The earlier defaults (before n_iter="auto", whose first block for the adaptive samplers
#: was then the same 5,000 iterations, and before burn_in and max_draws "auto").
OLD_DEFAULTS = {"n_iter": 5000, "burn_in": 0.2, "max_draws": 1000}
#: The fits of part "defaults": estimator keyword arguments on top of
#: ``SGBayesLogisticRegression(sampler=..., batch_size=None, random_state=seed)``.
DEFAULT_FITS = {
    "gadMALA defaults": lambda: {"sampler": "gadmala"},
    "old defaults (n_iter=5000, burn_in=0.2, max_draws=1000)": lambda: {"sampler": "gadmala", **OLD_DEFAULTS},
    "old defaults, max_draws=None": lambda: {"sampler": "gadmala", **OLD_DEFAULTS, "max_draws": None},
    "old defaults, burn_in=0.05, max_draws=None": lambda: {
        "sampler": "gadmala",
        **OLD_DEFAULTS,
        "burn_in": 0.05,
        "max_draws": None,
    },
    "paper start (init_scale=None), old defaults": lambda: {"sampler": GadMALA(init_scale=None), **OLD_DEFAULTS},
}


def pooled_ess(draws):
    """ESS per coordinate of several chains (n_chains, n_draws, P): Geyer's initial monotone
    sequence on split chains, ArviZ ``ess(method="mean")`` (skbayes_sg's copy without ArviZ)."""
    try:
        import arviz as az
    except ImportError:
        from skbayes_sg import diagnostics

        x = np.moveaxis(np.asarray(draws, float), 2, 0)
        return np.array([diagnostics._ess_core(diagnostics._split_chains(v[None])) for v in x]).ravel()
    return np.array([az.ess(draws[:, :, j], method="mean") for j in range(draws.shape[2])], dtype=float)


def run_defaults(name, standardise, seed, fits=None):
    """One fit per :data:`DEFAULT_FITS` entry (or ``fits``), the whole ``fit`` timed; its rows."""
    X, y = load(name, standardise)
    scaling = "standardised" if standardise else "raw"
    rows = []
    for method, make in (fits or DEFAULT_FITS).items():
        clf = SGBayesLogisticRegression(batch_size=None, random_state=seed, alpha_intercept=1.0, **make())
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            clf.fit(X, y)
        seconds = time.perf_counter() - t0
        diag = clf.diagnostics_
        ess = pooled_ess(clf.samples_)
        row = {
            "problem": f"{name} ({scaling})",
            "dataset": name,
            "scaling": scaling,
            "method": method,
            "library": "skbayes_sg",
            "seed": seed,
            "time_s": round(seconds, 3),
            "accept": round(float(diag["acceptance_rate"]), 3),
            "adapt_accept": round(float(diag["adapt_acceptance_rate"]), 3),
            "ess_min": round(float(ess.min()), 1),
            "ess_med": round(float(np.median(ess)), 1),
            "ess_max": round(float(ess.max()), 1),
            "min_ess_per_s": round(float(ess.min()) / seconds, 2),
            "ess_bulk_min": round(float(diag["ess"].min()), 1),
            "rhat_max": round(float(diag["rhat"].max()), 4),
            "n_draws": int(clf.samples_.shape[1]),
            "thin": int(diag["thin"]),
            "draws_MB": round(clf.samples_.nbytes / 2**20, 2),
            "d": X.shape[1] + 1,
            "n_iter": int(clf.n_iter_),
            "n_adapt": int(diag.get("n_adapt_steps", 0)) // clf.n_chains,
            "warnings": sorted({type(w.message).__name__ for w in caught}),
            "load_avg_1min": os.getloadavg()[0],
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def run_baseline(src, label, name, standardise, seed):
    """The defaults fit of the package at ``src``: this script, in a subprocess importing
    skbayes_sg from ``src`` (``--part baseline-fit``); its row, method relabelled."""
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--part",
        "baseline-fit",
        "--dataset",
        name,
        "--seed",
        str(seed),
    ] + ([] if standardise else ["--raw"])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not rows:
        print(json.dumps({"note": "baseline failed", "stderr": proc.stderr[-500:]}), flush=True)
        return []
    row = {**rows[0], "method": f"gadMALA defaults at {label}", "baseline_src": str(src)}
    print(json.dumps(row), flush=True)
    return [row]


def part_baseline_fit(args):
    """The child of :func:`run_baseline`: one defaults fit with whatever skbayes_sg imports."""
    import skbayes_sg

    assert Path(skbayes_sg.__file__).resolve().is_relative_to(Path(os.environ["PYTHONPATH"]).resolve())
    warm_up()
    run_defaults(args.dataset, not args.raw, args.seed, {"gadMALA defaults": lambda: {"sampler": "gadmala"}})


def warm_up():
    """One short untimed fit, so that no timed fit pays the process's first-call costs (lazy
    imports, joblib's and threadpoolctl's set-up): each baseline fit runs in a fresh process."""
    X, y = load("ripley")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SGBayesLogisticRegression(sampler="gadmala", batch_size=None, n_iter=200, burn_in=50, random_state=0).fit(X, y)


def plot_defaults(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    methods = [*dict.fromkeys(r["method"] for r in rows if r.get("library") == "skbayes_sg"), "NUTS"]
    width = 0.8 / len(methods)
    for ax, scaling in zip(axes, ("standardised", "raw")):
        for k, m in enumerate(methods):
            vals = [
                next(
                    (
                        r["min_ess_per_s"]
                        for r in rows
                        if r.get("dataset", r["problem"].split()[0]) == d
                        and r.get("scaling") == scaling
                        and r["method"] == m
                    ),
                    np.nan,
                )
                for d in DATASETS
            ]
            ax.bar(np.arange(len(DATASETS)) + k * width, vals, width, label=m)
        ax.set_xticks(np.arange(len(DATASETS)) + 0.4 - width / 2, DATASETS)
        ax.set_yscale("log")
        ax.set_title(f"{scaling} features: estimator defaults vs blackjax NUTS")
    axes[0].set_ylabel("min ESS per second (whole fit)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)


def ratio_table(rows):
    """Per dataset and scaling: min ESS/s of each gadMALA fit over NUTS's in the same repeat."""
    out = []
    keys = {(r["dataset"], r["scaling"]) for r in rows if r.get("library") == "skbayes_sg"}
    for dataset, scaling in sorted(keys):
        nuts = {
            r["seed"]: r
            for r in rows
            if r.get("dataset") == dataset and r.get("scaling") == scaling and r["method"] == "NUTS"
        }
        for method in dict.fromkeys(r["method"] for r in rows if r.get("library") == "skbayes_sg"):
            ours = [
                r
                for r in rows
                if r.get("dataset") == dataset
                and r.get("scaling") == scaling
                and r["method"] == method
                and r["seed"] in nuts
            ]
            if not ours:
                continue
            ratios = [r["min_ess_per_s"] / nuts[r["seed"]]["min_ess_per_s"] for r in ours]
            out.append(
                {
                    "dataset": dataset,
                    "scaling": scaling,
                    "method": method,
                    "ratio_to_nuts_mean": round(float(np.mean(ratios)), 2),
                    "ratio_to_nuts_min": round(float(np.min(ratios)), 2),
                    "repeats": len(ratios),
                }
            )
    return out


def _revision(repo):
    """``git describe --always --dirty`` of ``repo`` (what the current rows ran); for a tree
    exported by ``git archive`` (no ``.git``), the first line of its ``REV`` file, or None."""
    proc = subprocess.run(["git", "-C", str(repo), "describe", "--always", "--dirty"], capture_output=True, text=True)
    if proc.returncode == 0 and proc.stdout.strip():
        return proc.stdout.strip()
    rev = Path(repo) / "REV"
    return rev.read_text().split("\n")[0].strip() if rev.exists() else None


def part_defaults(args):
    warm_up()
    rows = []
    for rep in range(args.repeats):
        seed = args.seed + rep
        for name in DATASETS:
            for standardise in (True, False):
                if args.baseline:
                    rows += run_baseline(args.baseline, args.baseline_label, name, standardise, seed)
                rows += run_defaults(name, standardise, seed)
                if not args.no_blackjax:
                    scaling = "standardised" if standardise else "raw"
                    for r in run_blackjax(
                        [name], nuts_only=True, standardise=standardise, problem_suffix=f" ({scaling})"
                    ):
                        r.update(dataset=name, scaling=scaling, seed=seed)
                        rows.append(r)
    summary = mean_rows(rows)
    ratios = ratio_table(rows)
    for r in ratios:
        print(json.dumps(r), flush=True)
    meta = {
        "argv": sys.argv[1:],
        "repeats": args.repeats,
        "cpu_count": os.cpu_count(),
        "load_avg_1min": os.getloadavg()[0],
        "revision": _revision(HERE.parent),
        "baseline": None if args.baseline is None else {"src": str(args.baseline), "label": args.baseline_label},
    }
    (RESULTS / "gadmala_defaults.json").write_text(
        json.dumps({"meta": meta, "rows": summary, "ratios": ratios, "runs": rows}, indent=1)
    )
    plot_defaults(summary, RESULTS / "gadmala_defaults.png")


# -- part "linreg": any scale, noise sampled ------------------------------------------------------

#: Coefficient posterior sds the unscaled designs are built for.
LINREG_SDS = np.logspace(-3, 2, 8)
LINREG_ALPHA = 1e-6


def unscaled_design(seed, N=1000, noise_sd=0.5):
    """Column ``j`` is ``s_j (z + m_j)``, ``z ~ N(0, 1)``, ``m_j ~ U(-2, 2)`` (correlated with the
    intercept), ``s_j = noise_sd / (sqrt(N) sd_j)`` for a posterior sd near ``sd_j``; weights
    of a few sds, intercept 1.5, noise sd ``noise_sd``."""
    rng = np.random.default_rng(seed)
    X = (
        noise_sd
        / (np.sqrt(N) * LINREG_SDS)
        * (rng.standard_normal((N, LINREG_SDS.size)) + rng.uniform(-2, 2, LINREG_SDS.size))
    )
    y = X @ (3 * LINREG_SDS * rng.standard_normal(LINREG_SDS.size)) + 1.5 + noise_sd * rng.standard_normal(N)
    return X, y


def part_linreg(args):
    sys.path.insert(0, str(HERE))
    from _exact_linreg import sampled_noise_posterior, sufficient_statistics

    fits = {
        "gadMALA defaults": dict(sampler="gadmala"),
        "gadMALA paper start, defaults": dict(sampler=GadMALA(init_scale=None)),
        "gadMALA paper start, 20k adaptation": dict(sampler=GadMALA(init_scale=None), n_iter=25_000, burn_in=20_000),
    }
    rows = []
    for rep in range(args.repeats):
        seed = args.seed + rep
        X, y = unscaled_design(seed)
        ref = sampled_noise_posterior(sufficient_statistics(X, y), LINREG_ALPHA, 1e-6, 1e-6)
        for method, kw in fits.items():
            reg = SGBayesLinearRegression(
                batch_size=None,
                alpha=LINREG_ALPHA,
                alpha_intercept=LINREG_ALPHA,
                normalize_y=False,
                random_state=seed,
                **kw,
            )
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                reg.fit(X, y)
            seconds = time.perf_counter() - t0
            flat = reg.samples_.reshape(-1, reg.samples_.shape[-1])
            z = (flat.mean(axis=0) - ref["mean"]) / ref["sd"]
            ratio = flat.std(axis=0, ddof=1) / ref["sd"]
            rhat = reg.diagnostics_["rhat"]
            row = {
                "problem": "linreg_unscaled",
                "method": method,
                "seed": seed,
                "time_s": round(seconds, 3),
                "ref_sd_min": float(ref["sd"][:-2].min()),
                "ref_sd_max": float(ref["sd"][:-2].max()),
                "max_abs_mean_err_sd": round(float(np.abs(z).max()), 4),
                "mean_err_sd_log_tau": round(float(z[-1]), 4),
                "sd_ratio_min": round(float(ratio.min()), 4),
                "sd_ratio_max": round(float(ratio.max()), 4),
                "rhat_max": round(float(rhat.max()), 4),
                "rhat_log_tau": round(float(rhat[-1]), 4),
                "ess_bulk_min": round(float(reg.diagnostics_["ess"].min()), 1),
                "accept": round(float(reg.diagnostics_["acceptance_rate"]), 3),
                "pass": bool(np.abs(z).max() < 0.1 and np.abs(ratio - 1).max() < 0.1 and rhat.max() < 1.01),
                "warnings": sorted({type(w.message).__name__ for w in caught}),
                "load_avg_1min": os.getloadavg()[0],
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    meta = {
        "argv": sys.argv[1:],
        "repeats": args.repeats,
        "alpha": LINREG_ALPHA,
        "N": 1000,
        "design_sds": LINREG_SDS.tolist(),
    }
    (RESULTS / "gadmala_linreg.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))


# -- part "budget": how much adaptation the map start needs ---------------------------------------


def part_budget(args):
    n_keep = 4000
    rows = []
    for standardise in (True, False):
        X, y = load("german", standardise)
        for start, make in (("map", lambda: GadMALA()), ("paper", lambda: GadMALA(init_scale=None))):
            for n_adapt in (50, 100, 250, 1000, 4000):
                for rep in range(args.repeats):
                    seed = args.seed + rep
                    clf = SGBayesLogisticRegression(
                        sampler=make(),
                        batch_size=None,
                        n_iter=n_adapt + n_keep,
                        burn_in=n_adapt,
                        max_draws=None,
                        alpha_intercept=1.0,
                        random_state=seed,
                    )
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        clf.fit(X, y)
                    ess = pooled_ess(clf.samples_)
                    row = {
                        "problem": f"german ({'standardised' if standardise else 'raw'})",
                        "start": start,
                        "n_adapt": n_adapt,
                        "n_keep": n_keep,
                        "seed": seed,
                        "accept": round(float(clf.diagnostics_["acceptance_rate"]), 3),
                        "ess_min": round(float(ess.min()), 1),
                        "ess_min_per_kept_draw": round(float(ess.min()) / (4 * n_keep), 4),
                        "rhat_max": round(float(clf.diagnostics_["rhat"].max()), 4),
                    }
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    (RESULTS / "gadmala_budget.json").write_text(json.dumps({"meta": {"argv": sys.argv[1:]}, "runs": rows}, indent=1))


def part_paper(args):
    n_adapt = n_keep = 5_000 if args.quick else 20_000
    names = ("ripley", "german") if args.quick else DATASETS
    with_blackjax = not (args.quick or args.no_blackjax)
    rows, s, scales = [], None, None
    for rep in range(args.repeats):
        seed = args.seed + rep
        neal_rows, s, neal_scales = run_neal(n_adapt, n_keep, seed)
        scales = scales or neal_scales
        rows += neal_rows
        for name in names:
            rows += run_binary(name, n_adapt, n_keep, seed)
            if with_blackjax:
                # Right after ours on the same dataset: on a shared machine the load changes
                # from minute to minute, and a ratio of speeds is only fair side by side.
                rows += run_blackjax([name])
    summary = mean_rows(rows)
    suffix = "_quick" if args.quick else ""
    meta = {
        "argv": sys.argv[1:],
        "n_adapt": n_adapt,
        "n_keep": n_keep,
        "repeats": args.repeats,
        "cpu_count": os.cpu_count(),
        "load_avg_1min": os.getloadavg()[0],
    }
    (RESULTS / f"gadmala{suffix}.json").write_text(json.dumps({"meta": meta, "rows": summary}, indent=1))
    plot(summary, s, scales, RESULTS / f"gadmala{suffix}.png")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("paper", "defaults", "linreg", "budget", "baseline-fit"), default="paper")
    parser.add_argument(
        "--quick", action="store_true", help="paper part: 5,000 + 5,000 iterations, ripley and german, no blackjax"
    )
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-blackjax", action="store_true")
    parser.add_argument("--baseline", type=Path, help="defaults part: also fit with the package at this source tree")
    parser.add_argument("--baseline-label", default="baseline")
    # The child process of --baseline (part "baseline-fit").
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    {
        "paper": part_paper,
        "defaults": part_defaults,
        "linreg": part_linreg,
        "budget": part_budget,
        "baseline-fit": part_baseline_fit,
    }[args.part](args)


if __name__ == "__main__":
    main()
