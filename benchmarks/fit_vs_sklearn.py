"""Wall time of default fits against scikit-learn's ``LogisticRegression``, in the same run.

- ``breast_cancer``: ``make_pipeline(StandardScaler(), SGBayesLogisticRegression(n_jobs=...))``
  against ``make_pipeline(StandardScaler(), LogisticRegression())`` on breast cancer (569 x 30);
- ``a9a``: ``SGBayesLogisticRegression(n_jobs=...)`` against ``LogisticRegression()`` on a9a's
  training split (32,561 x 123; ``shared/data/a9a.npz``);
- ``grid``: ``GridSearchCV`` of the breast-cancer pipeline with ``sampler=MCCAdL()`` over
  ``sampler__step_size`` in [0.01, 0.05, 0.2], ``cv=3``, against the ``LogisticRegression``
  pipeline's grid over ``C`` in [0.1, 1, 10], ``cv=3`` (``n_iter="auto"``: at ``h=0.01`` the
  chains run about 88,000 full-data iterations, so this case prices one mCCAdL iteration).

Both fits use ``random_state=0`` (the same work every run). Every measurement is a fresh
process (so a fit pays what a user's first fit pays: worker
processes, caches), timing ``fit`` alone with ``time.perf_counter``; the two libraries alternate
within each repeat and so do the source trees given with ``--trees`` (an interleaved A/B on a
shared machine). Prints one JSON object: per tree and case, the median seconds of each library,
their ratio, and every run.

Usage::

    python benchmarks/fit_vs_sklearn.py [--repeats 5] [--n-jobs 2] [--cases breast_cancer a9a grid]
                                        [--blas-threads 1] [--trees /path/to/tree_a /path/to/tree_b]
"""

import argparse
import json
import os
from pathlib import Path

from _fresh import run_child

ROOT = Path(__file__).resolve().parents[1]
A9A = Path(os.environ.get("A9A", ROOT.parent / "shared" / "data" / "a9a.npz"))

CHILD = r"""
import json, sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
case, lib, n_jobs, a9a = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from skbayes_sg import SGBayesLogisticRegression
if case == "breast_cancer":
    from sklearn.datasets import load_breast_cancer
    X, y = load_breast_cancer(return_X_y=True)
    sg = SGBayesLogisticRegression(n_jobs=n_jobs, random_state=0)
    est = make_pipeline(StandardScaler(), sg if lib == "skbayes_sg" else LogisticRegression())
elif case == "grid":
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import GridSearchCV
    from skbayes_sg.samplers import MCCAdL
    X, y = load_breast_cancer(return_X_y=True)
    if lib == "skbayes_sg":
        sg = SGBayesLogisticRegression(sampler=MCCAdL(), n_jobs=n_jobs, random_state=0)
        grid = {"sgbayeslogisticregression__sampler__step_size": [0.01, 0.05, 0.2]}
    else:
        sg, grid = LogisticRegression(), {"logisticregression__C": [0.1, 1.0, 10.0]}
    est = GridSearchCV(make_pipeline(StandardScaler(), sg), grid, cv=3)
else:
    d = np.load(a9a)
    X, y = d["X_train"], d["y_train"]
    est = SGBayesLogisticRegression(n_jobs=n_jobs, random_state=0) if lib == "skbayes_sg" else LogisticRegression()
tic = time.perf_counter()
est.fit(X, y)
seconds = time.perf_counter() - tic
out = {"seconds": seconds}
if lib == "skbayes_sg":
    sg = est.best_estimator_ if hasattr(est, "best_estimator_") else est
    sg = sg[-1] if hasattr(sg, "steps") else sg
    out["n_iter"] = int(sg.n_iter_)
    out["min_ess"] = float(np.min(sg.diagnostics_["ess"]))
print(json.dumps(out))
"""


def _run(tree, case, lib, n_jobs, blas_threads=None):
    env = None
    if blas_threads:
        env = {k: str(blas_threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return run_child(tree, CHILD, [case, lib, n_jobs, A9A], env)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--n-jobs", type=int, default=2)
    p.add_argument("--cases", nargs="+", default=["breast_cancer", "a9a"], choices=["breast_cancer", "a9a", "grid"])
    p.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        help="BLAS threads of every run (default: the libraries' own; skbayes_sg fits on one)",
    )
    p.add_argument("--trees", nargs="+", default=[str(ROOT)], help="source trees to compare (PYTHONPATH of each run)")
    args = p.parse_args(argv)
    runs = {tree: {case: {"skbayes_sg": [], "sklearn": []} for case in args.cases} for tree in args.trees}
    for _ in range(args.repeats):
        for case in args.cases:
            for tree in args.trees:
                for lib in ("skbayes_sg", "sklearn"):
                    runs[tree][case][lib].append(_run(tree, case, lib, args.n_jobs, args.blas_threads))
    report = {"n_jobs": args.n_jobs, "repeats": args.repeats, "blas_threads": args.blas_threads, "results": {}}
    for tree in args.trees:
        for case in args.cases:
            r = runs[tree][case]
            sg = sorted(x["seconds"] for x in r["skbayes_sg"])[len(r["skbayes_sg"]) // 2]
            sk = sorted(x["seconds"] for x in r["sklearn"])[len(r["sklearn"]) // 2]
            report["results"].setdefault(tree, {})[case] = {
                "skbayes_sg_median_s": round(sg, 4),
                "sklearn_median_s": round(sk, 4),
                "ratio": round(sg / sk, 1),
                "runs": r,
            }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
