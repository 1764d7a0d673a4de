"""gadMALA / gadRWM paper (Titsias & Dellaportas 2019): Table 1 (Neal's Gaussian) and Tables 2-6.

Neal's 100-d Gaussian: N(0, diag(s_1^2, ..., s_100^2)), s_i = 0.01, 0.02, ..., 1, started
at zero. Binary logistic regression on australian, german, heart, pima and ripley:
features standardised, a bias column (the estimator's intercept, with the same N(0, 1)
prior as the weights), prior N(0, I), started at zero. Every run: 20,000 adaptation
iterations, then 20,000 kept draws (one chain), as in section 4.2.

For gadMALA (full and diagonal L) and gadRWM: wall time of the whole run (adaptation,
start-up and the estimator's diagnostics included), acceptance rate after adaptation,
min / median / max ESS over coordinates (Geyer's initial monotone sequence on the raw
draws: ArviZ ``ess(method="mean")``, the paper's estimator, as the blackjax script uses),
and min ESS per second. When ``~/anchor-venv`` exists (see ``../shared/bench/README.md``),
blackjax NUTS and MALA run on the same datasets in the same invocation, in a subprocess
started right after the gad samplers on each dataset (a ratio of speeds on a shared machine
is only fair side by side); their time is warm-up (compilation included) plus sampling.

Prints one JSON object per line and saves ``results/gadmala[_quick].json`` and ``.png``
(min ESS per second per dataset, and the proposal scales learned on Neal's Gaussian).

Usage::

    python benchmarks/gadmala.py [--quick] [--repeats 1] [--no-blackjax]
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

from skbayes_sg import SGBayesLogisticRegression
from skbayes_sg._chains import run_chain
from skbayes_sg.models._base import Model
from skbayes_sg.samplers import GadMALA, GadRWM

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SHARED = HERE.parents[1] / "shared"
DATA = SHARED / "data"
ANCHOR_PY = Path.home() / "anchor-venv" / "bin" / "python"
ANCHOR_SCRIPT = SHARED / "bench" / "bench_blackjax_nuts_binary.py"
DATASETS = ("ripley", "pima", "heart", "australian", "german")
METHODS = {
    "gadMALAf": lambda: GadMALA(),
    "gadMALAf-diag": lambda: GadMALA(cholesky="diag"),
    "gadRWM": lambda: GadRWM(),
}
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


def load(name):
    z = np.load(DATA / f"{name}.npz")
    X = z["X"].astype(float)
    X = (X - X.mean(axis=0)) / X.std(axis=0, ddof=1)
    return X, z["y"]


def record(problem, method, seconds, accept, draws, extra=None):
    ess = ess_mean(draws)
    row = {
        "problem": problem, "method": method, "library": "skbayes_sg", "time_s": round(seconds, 3),
        "accept": round(float(accept), 3), "ess_min": round(float(ess.min()), 1),
        "ess_med": round(float(np.median(ess)), 1), "ess_max": round(float(ess.max()), 1),
        "min_ess_per_s": round(float(ess.min()) / seconds, 2), "load_avg_1min": os.getloadavg()[0],
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
        res = run_chain(sampler, model, np.zeros(model.n_params), n_adapt + n_keep, n_adapt, 1, None, None,
                        "replacement", np.random.SeedSequence(seed))
        seconds = time.perf_counter() - t0
        L = res.summary.get("proposal_cholesky", res.summary.get("proposal_scale"))
        scales[method] = np.sqrt((L**2).sum(axis=1)) if L.ndim == 2 else L
        rows.append(record("neal100", method, seconds, res.summary["acceptance_rate"], res.draws,
                           {"seed": seed, "n_adapt": n_adapt, "n_keep": n_keep}))
    return rows, model.s, scales


def run_binary(name, n_adapt, n_keep, seed):
    """Tables 2-6: one chain of the estimator per method, the whole ``fit`` timed."""
    X, y = load(name)
    rows = []
    for method, make in METHODS.items():
        clf = SGBayesLogisticRegression(sampler=make(), n_iter=n_adapt + n_keep, burn_in=n_adapt, batch_size=None,
                                        n_chains=1, init="zeros", max_draws=None, alpha=1.0, random_state=seed)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            # One chain: the estimator's R-hat warning does not apply.
            warnings.simplefilter("ignore")
            clf.fit(X, y)
        seconds = time.perf_counter() - t0
        rows.append(record(name, method, seconds, clf.diagnostics_["acceptance_rate"], clf.samples_[0],
                           {"seed": seed, "n_adapt": n_adapt, "n_keep": n_keep, "d": X.shape[1] + 1}))
    return rows


def run_blackjax(names):
    """blackjax NUTS and MALA from ../shared/bench, in the anchor venv; its JSON lines."""
    if not (ANCHOR_PY.exists() and ANCHOR_SCRIPT.exists()):
        print(json.dumps({"note": f"blackjax skipped: {ANCHOR_PY} not found"}), flush=True)
        return []
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    proc = subprocess.run([str(ANCHOR_PY), str(ANCHOR_SCRIPT), str(DATA), *names], capture_output=True,
                          text=True, env=env)
    rows = []
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        # Warm-up and compilation included, as for the gad samplers' whole fit.
        seconds = r["warmup_s"] + r["sample_s"]
        row = {"problem": r["dataset"], "method": r["method"].upper(), "library": "blackjax",
               "time_s": round(seconds, 3), "accept": r["accept"], "ess_min": r["ess_min"],
               "ess_med": r["ess_med"], "ess_max": r["ess_max"], "min_ess_per_s": r["min_ess_per_s_total"],
               "min_ess_per_s_sampling_only": r["min_ess_per_s_sampling"], "load_avg_1min": os.getloadavg()[0]}
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
    for (problem, method), rs in groups.items():
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
        vals = [next((r["min_ess_per_s"] for r in rows if r["problem"] == p and r["method"] == m), np.nan)
                for p in problems]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="5,000 + 5,000 iterations, ripley and german, no blackjax")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-blackjax", action="store_true")
    args = parser.parse_args()
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
    RESULTS.mkdir(exist_ok=True)
    meta = {"argv": sys.argv[1:], "n_adapt": n_adapt, "n_keep": n_keep, "repeats": args.repeats,
            "cpu_count": os.cpu_count(), "load_avg_1min": os.getloadavg()[0]}
    (RESULTS / f"gadmala{suffix}.json").write_text(json.dumps({"meta": meta, "rows": summary}, indent=1))
    plot(summary, s, scales, RESULTS / f"gadmala{suffix}.png")


if __name__ == "__main__":
    main()
