"""The default fit against ``LogisticRegression`` on synthetic logistic data as N grows.

Synthetic logistic regression (``scaling.synthetic_logistic``: D = 28 standard-normal
features, coefficients N(0, 0.5^2), intercept 0.3, fixed seed) at N = 1e5, 1e6, 4e6.
Every measurement is a fresh process (a user's first fit: worker processes, caches), which
generates the data, then times ``SGBayesLogisticRegression(n_jobs=..., random_state=0).fit``
or ``LogisticRegression().fit`` alone (``time.perf_counter``). The libraries alternate within
each repeat, and so do the source trees given with ``--trees`` (an interleaved A/B on a
shared machine); one process at a time, so at most one copy of the largest X is in memory.

Each skbayes_sg run also checks its draws against the Laplace approximation at the MAP
(after the timed fit): the rms of the posterior-mean error in Laplace sds, the range of the
sd ratios and the largest R-hat (the fit is right when the rms is below 0.1, the ratios
within 0.9-1.1 and R-hat below 1.01), and reports the set-up's share of the fit (wall time
before the chains' first step: validation, prior, MAP, Hessian, row sampler, step size).

Prints one JSON object: per tree and N, the median seconds of each library, their ratio,
the median set-up seconds, the exactness figures (of the last run; the draws are the same
every run) and every run.

Usage::

    python benchmarks/synthetic_scaling.py [--repeats 3] [--n-jobs 2] [--sizes 100000 1000000 4000000]
                                           [--trees /path/to/tree_a /path/to/tree_b]
"""

import argparse
import json
import sys
from pathlib import Path

from _fresh import run_child

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SIZES = (100_000, 1_000_000, 4_000_000)

CHILD = r"""
import json, sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
n_rows, lib, n_jobs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(0)
X = rng.standard_normal((n_rows, 28))
beta = 0.5 * rng.standard_normal(28)
y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-(X @ beta + 0.3)))).astype(np.int64)
from sklearn.linear_model import LogisticRegression
from skbayes_sg import SGBayesLogisticRegression
out = {}
if lib == "skbayes_sg":
    import skbayes_sg._fit._chain_fit as chain_fit
    run_blocks, marks = chain_fit.run_blocks, {}
    def marked(*args, **kwargs):  # the set-up ends where the chains' first block starts
        marks.setdefault("t", time.perf_counter())
        return run_blocks(*args, **kwargs)
    chain_fit.run_blocks = marked
    est = SGBayesLogisticRegression(n_jobs=n_jobs, random_state=0)
else:
    est = LogisticRegression()
tic = time.perf_counter()
est.fit(X, y)
out["seconds"] = time.perf_counter() - tic
if lib == "skbayes_sg":
    from benchmarks.scaling import laplace_exactness
    out["setup_seconds"] = marks["t"] - tic
    out.update(n_iter=int(est.n_iter_), min_ess=float(np.min(est.diagnostics_["ess"])))
    out.update(laplace_exactness(est, X, y))
print(json.dumps(out))
"""


def _run(tree, n_rows, lib, n_jobs):
    return run_child(tree, CHILD, [n_rows, lib, n_jobs])


def _median(values):
    values, half = sorted(values), len(values) // 2
    return values[half] if len(values) % 2 else 0.5 * (values[half - 1] + values[half])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--n-jobs", type=int, default=2)
    p.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    p.add_argument("--trees", nargs="+", default=[str(ROOT)], help="source trees to compare (PYTHONPATH of each run)")
    args = p.parse_args(argv)
    runs = {tree: {n: {"skbayes_sg": [], "sklearn": []} for n in args.sizes} for tree in args.trees}
    for _ in range(args.repeats):
        for n in args.sizes:
            for tree in args.trees:
                for lib in ("skbayes_sg", "sklearn"):
                    runs[tree][n][lib].append(_run(tree, n, lib, args.n_jobs))
                    run = {"tree": tree, "n_rows": n, "lib": lib, **runs[tree][n][lib][-1]}
                    print(json.dumps(run), file=sys.stderr)  # progress
    report = {"n_jobs": args.n_jobs, "repeats": args.repeats, "results": {}}
    for tree in args.trees:
        for n in args.sizes:
            r = runs[tree][n]
            sg = _median([x["seconds"] for x in r["skbayes_sg"]])
            sk = _median([x["seconds"] for x in r["sklearn"]])
            last = r["skbayes_sg"][-1]
            report["results"].setdefault(tree, {})[str(n)] = {
                "skbayes_sg_median_s": round(sg, 3),
                "setup_median_s": round(_median([x["setup_seconds"] for x in r["skbayes_sg"]]), 3),
                "sklearn_median_s": round(sk, 3),
                "ratio": round(sg / sk, 2),
                "exact": all(
                    (last["rms_mean_error_sd"] < 0.1, 0.9 <= last["sd_ratio_min"], last["sd_ratio_max"] <= 1.1)
                )
                and last["rhat_max"] < 1.01,
                **{k: round(last[k], 4) for k in ("rms_mean_error_sd", "sd_ratio_min", "sd_ratio_max", "rhat_max")},
                "n_iter": last["n_iter"],
                "min_ess": round(last["min_ess"], 1),
                "runs": r,
            }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
