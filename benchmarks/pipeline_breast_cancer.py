"""Wall time of the default fit in a Pipeline on breast cancer against the LogisticRegression pipeline.

``make_pipeline(StandardScaler(), SGBayesLogisticRegression(n_jobs=..., random_state=0))`` against
``make_pipeline(StandardScaler(), LogisticRegression())``, each fit in a fresh process (imports not
timed), the trees given by ``--trees`` interleaved with scikit-learn run by run; prints JSON with the
medians and their ratios per tree, of the first fit in the process and of a second, warm fit (issue
31's small-data target: at most 10x).

    python benchmarks/pipeline_breast_cancer.py --trees /path/to/main . --repeats 5 --n-jobs 2
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

_CHILD = """
import time, json, warnings
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
X, y = load_breast_cancer(return_X_y=True)
which = {which!r}
if which == "sklearn":
    est = make_pipeline(StandardScaler(), LogisticRegression())
else:
    from skbayes_sg import SGBayesLogisticRegression
    est = make_pipeline(StandardScaler(), SGBayesLogisticRegression(n_jobs={n_jobs}, random_state=0))
warnings.simplefilter("ignore")
tic = time.perf_counter()
est.fit(X, y)
out = {{"seconds": time.perf_counter() - tic}}
# A second fit in the same process: without the first call's one-off costs (lazy imports, BLAS
# and thread-pool set-up), which dominate LogisticRegression's first fit on 569 rows.
tic = time.perf_counter()
est.fit(X, y)
out["warm_seconds"] = time.perf_counter() - tic
if which != "sklearn":
    d = est[-1].diagnostics_
    out.update(sampler=type(est[-1]._sampler).__name__ if hasattr(est[-1], "_sampler") else None,
               n_iter=int(est[-1].n_iter_), min_ess=float(d["ess"].min()))
print(json.dumps(out))
"""


def _run(tree, which, n_jobs):
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    code = _CHILD.format(which=which, n_jobs=n_jobs)
    # Run from the tree: ``python -c`` puts the working directory first on sys.path.
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=os.path.abspath(tree), capture_output=True, text=True, check=True
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", default=["."])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    runs = {tree: {"skbayes_sg": [], "sklearn": []} for tree in args.trees}
    for _ in range(args.repeats):
        for tree in args.trees:
            runs[tree]["skbayes_sg"].append(_run(tree, "skbayes_sg", args.n_jobs))
            runs[tree]["sklearn"].append(_run(tree, "sklearn", args.n_jobs))
    results = {}
    for tree, r in runs.items():
        ours = float(np.median([x["seconds"] for x in r["skbayes_sg"]]))
        theirs = float(np.median([x["seconds"] for x in r["sklearn"]]))
        ours_warm = float(np.median([x["warm_seconds"] for x in r["skbayes_sg"]]))
        theirs_warm = float(np.median([x["warm_seconds"] for x in r["sklearn"]]))
        results[tree] = {
            "skbayes_sg_median_s": ours,
            "sklearn_median_s": theirs,
            "ratio": ours / theirs,
            "warm_ratio": ours_warm / theirs_warm,
            "skbayes_sg_warm_median_s": ours_warm,
            "sklearn_warm_median_s": theirs_warm,
            "runs": r,
        }
    print(json.dumps({"n_jobs": args.n_jobs, "repeats": args.repeats, "results": results}))


if __name__ == "__main__":
    main()
