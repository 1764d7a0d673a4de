"""Where a default fit's time goes outside the chains' iterations, for one or more trees.

For each tree (a checkout of this repository; fresh process per tree, trees alternated
``--rounds`` times), fits ``make_pipeline(StandardScaler(), SGBayesLogisticRegression(n_jobs=2,
random_state=0))`` on breast cancer ``--repeats`` times and times, by wrapping the fit's
functions: the chains (``advance_chains``), the run-length diagnostics (``_run_length_summary``),
the kernel Stein discrepancy (``score_draws``), the plan (MAP, Hessian, step size:
``plan_fresh``), the draws bookkeeping (``set_chain_draws``) and the warnings (``warn_fit``);
``non_chain`` is the whole fit minus the chains. ``LogisticRegression``'s pipeline is timed
in the same process. Medians over the repeats, milliseconds, wall clock and CPU
(``--clock process``: less sensitive to other processes on a busy machine). One JSON line
per tree and round.

Usage::

    python benchmarks/fit_overhead.py --trees /path/to/main /path/to/branch [--rounds 3]
"""

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time, warnings
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from skbayes_sg import SGBayesLogisticRegression
from skbayes_sg._fit import _run
import skbayes_sg._fit._chain_fit as cf
from skbayes_sg import _estimator

clock = time.process_time if sys.argv[2] == "process" else time.perf_counter
acc = {}

def timed(name, f):
    def g(*a, **k):
        t = clock()
        try:
            return f(*a, **k)
        finally:
            acc[name] = acc.get(name, 0.0) + clock() - t
    return g

_run.advance_chains = timed("chains", _run.advance_chains)
_estimator.BaseSGBayes._run_length_summary = timed("summary", _estimator.BaseSGBayes._run_length_summary)
for name in ("score_draws", "plan_fresh", "set_chain_draws", "warn_fit"):
    setattr(cf, name, timed(name, getattr(cf, name)))
X, y = load_breast_cancer(return_X_y=True)
warnings.simplefilter("ignore")
rows = []
for _ in range(int(sys.argv[1])):
    acc.clear()
    t = clock()
    make_pipeline(StandardScaler(), SGBayesLogisticRegression(n_jobs=2, random_state=0)).fit(X, y)
    acc["total"] = clock() - t
    acc["non_chain"] = acc["total"] - acc["chains"]
    t = clock()
    make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y)
    acc["logistic_regression"] = clock() - t
    rows.append(dict(acc))
print(json.dumps({k: round(1e3 * float(np.median([r.get(k, 0.0) for r in rows])), 1) for k in rows[0]}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", nargs="+", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", choices=["wall", "process"], default="wall")
    args = parser.parse_args()
    for r in range(args.rounds):
        for tree in args.trees:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(args.repeats), args.clock],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            row = {"tree": tree, "round": r, "clock": args.clock, "ms": json.loads(out.stdout.strip().splitlines()[-1])}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
