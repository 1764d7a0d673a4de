"""gadMALA at the estimator's defaults against blackjax NUTS: min ESS per second, same run.

Issue 31's claim: ``SGBayesLogisticRegression(sampler="gadmala", batch_size=None)``, every other
setting at its default, reaches at least blackjax NUTS's min ESS per second on the five binary
classification sets of the gadMALA paper (Titsias & Dellaportas 2019, section 4.2: australian,
german, heart, pima, ripley; features standardised, an intercept with the same N(0, 1) prior as
the weights).

Each repeat runs, per data set, the two libraries one right after the other, their order
alternating between repeats (a busy machine slows whichever runs in a busier moment):

- skbayes_sg: a fresh Python process per fit (``PYTHONPATH`` = the tree under test), timing
  the whole ``fit`` call (the MAP, the curvature, the adaptation, the draws and the estimator's
  diagnostics; the process's first fit, so first-call costs included). ``--trees A B`` runs
  several source trees in the same run (a before / after ratio).
- blackjax: ``../shared/bench/bench_blackjax_nuts_binary.py --nuts-only`` in ``~/anchor-venv``
  (window adaptation, 500 warm-up, 20,000 draws); its time is warm-up (compilation included)
  plus a second, compiled sampling call, as that script reports it (``min_ess_per_s_total``).

min ESS on both sides is ArviZ's ``ess(method="mean")`` (Geyer's initial monotone sequence on
split chains, the blackjax script's estimator and the paper's) per coordinate, the minimum
over coordinates; for skbayes_sg over its pooled chains (4 by default). Prints one JSON object
per fit, then one per (tree, data set) with the median over repeats of the ratio of the two
min ESS per second in the same repeat, and a last line with all of them.

Usage::

    python benchmarks/gadmala_vs_nuts.py [--repeats 3] [--trees ../main .] [--n-jobs 2] [--out results/x_busy.json]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared"
DATA = SHARED / "data"
ANCHOR_PY = Path.home() / "anchor-venv" / "bin" / "python"
ANCHOR_SCRIPT = SHARED / "bench" / "bench_blackjax_nuts_binary.py"
DATASETS = ("australian", "german", "heart", "pima", "ripley")
ONE_THREAD = dict(
    OMP_NUM_THREADS="1",
    OPENBLAS_NUM_THREADS="1",
    MKL_NUM_THREADS="1",
    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
)


def child(name, seed, n_jobs=None):
    """One defaults fit in this (fresh) process (``n_jobs`` as given); prints its JSON row."""
    t_import = time.perf_counter()
    from skbayes_sg import SGBayesLogisticRegression

    t_import = time.perf_counter() - t_import
    z = np.load(DATA / f"{name}.npz")
    X = z["X"].astype(np.float64)
    X = (X - X.mean(0)) / X.std(0, ddof=1)  # as the blackjax script
    clf = SGBayesLogisticRegression(
        sampler="gadmala", batch_size=None, random_state=seed, alpha_intercept=1.0, n_jobs=n_jobs
    )
    t0, c0 = time.perf_counter(), time.process_time()
    clf.fit(X, z["y"])
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    ess = min_ess(clf.samples_)
    from skbayes_sg import _chains  # noqa: PLC0415 (after the timed fit)

    print(
        json.dumps(
            {
                "library": "skbayes_sg",
                "seconds": round(seconds, 3),
                "import_s": round(t_import, 3),
                # This process's CPU time (less sensitive than wall time to a busy machine).
                "cpu_s": round(cpu, 3),
                "ess_min": round(ess, 1),
                "min_ess_per_s": round(ess / seconds, 1),
                "n_iter": int(clf.n_iter_),
                "n_chains": int(clf.samples_.shape[0]),
                "accept": round(float(clf.diagnostics_["acceptance_rate"]), 3),
                # Whether the chains moved to a process pool (n_jobs > 1 and a long enough run).
                "process_pool": bool(getattr(_chains, "_POOLS_STARTED", ())),
            }
        )
    )


def min_ess(samples):
    """Smallest ArviZ ``ess(method="mean")`` over coordinates of ``samples`` (chains, draws, P)."""
    import arviz as az

    return float(min(az.ess(samples[:, :, j], method="mean") for j in range(samples.shape[2])))


def run_ours(tree, name, seed, n_jobs=None):
    env = dict(os.environ, PYTHONPATH=str(tree), **ONE_THREAD)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--seed", str(seed)]
    cmd += [] if n_jobs is None else ["--n-jobs", str(n_jobs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not rows:
        raise RuntimeError(f"skbayes_sg fit failed on {name} ({tree}): {proc.stderr[-800:]}")
    return rows[0]


def run_nuts(name):
    env = dict(os.environ, **ONE_THREAD)
    proc = subprocess.run(
        [str(ANCHOR_PY), str(ANCHOR_SCRIPT), str(DATA), name, "--nuts-only"], capture_output=True, text=True, env=env
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not rows:
        raise RuntimeError(f"blackjax failed on {name}: {proc.stderr[-800:]}")
    r = rows[0]
    return {
        "library": "blackjax NUTS",
        "seconds": round(r["warmup_s"] + r["sample_s"], 3),
        "ess_min": r["ess_min"],
        "min_ess_per_s": r["min_ess_per_s_total"],
        "accept": r["accept"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trees", nargs="+", type=Path, default=[HERE.parent], help="source trees of skbayes_sg")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--n-jobs", type=int, help="the estimator's n_jobs (default: its default, None)")
    parser.add_argument("--out", type=Path, help="also write the rows and ratios here (JSON)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.seed, args.n_jobs)
    if not ANCHOR_PY.exists():
        sys.exit(f"{ANCHOR_PY} not found: see {SHARED / 'bench' / 'README.md'}")
    trees = [t.resolve() for t in args.trees]
    rows = []
    for rep in range(args.repeats):
        seed = args.seed + rep
        for name in args.datasets:
            order = ["nuts", *trees] if rep % 2 else [*trees, "nuts"]
            for who in order:
                row = run_nuts(name) if who == "nuts" else {**run_ours(who, name, seed, args.n_jobs), "tree": str(who)}
                row.update(dataset=name, repeat=rep, seed=seed, load_avg_1min=round(os.getloadavg()[0], 2))
                print(json.dumps(row), flush=True)
                rows.append(row)
    ratios = ratio_table(rows, trees, args.datasets)
    for r in ratios:
        print(json.dumps(r), flush=True)
    summary = {"argv": sys.argv[1:], "n_jobs": args.n_jobs, "cpu_count": os.cpu_count(), "ratios": ratios, "rows": rows}
    print(json.dumps({"median_ratios": {f"{r['tree']}:{r['dataset']}": r["median_ratio"] for r in ratios}}))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


def ratio_table(rows, trees, datasets):
    """Per tree and data set: the median over repeats of (ours / NUTS) min ESS per second,
    each ratio from the same repeat."""
    out = []
    for tree in trees:
        for name in datasets:
            nuts = {r["repeat"]: r for r in rows if r["dataset"] == name and r["library"] != "skbayes_sg"}
            ours = [r for r in rows if r["dataset"] == name and r.get("tree") == str(tree) and r["repeat"] in nuts]
            ratios = [r["min_ess_per_s"] / nuts[r["repeat"]]["min_ess_per_s"] for r in ours]
            out.append(
                {
                    "tree": str(tree),
                    "dataset": name,
                    "median_ratio": round(float(np.median(ratios)), 2),
                    "ratios": [round(x, 2) for x in ratios],
                    "median_seconds": round(float(np.median([r["seconds"] for r in ours])), 3),
                    "median_nuts_seconds": round(float(np.median([r["seconds"] for r in nuts.values()])), 3),
                }
            )
    return out


if __name__ == "__main__":
    main()
