"""CPU time of the a9a default fit's chains, source trees interleaved: where wall time is unreliable.

Each run is a fresh process fitting ``SGBayesLogisticRegression(n_jobs=2, random_state=0)`` on a9a's
training split (``shared/data/a9a.npz``; all four chains advance in this process, stacked) and
reports the CPU time of the calling thread (``time.thread_time``, which a machine's other
processes do not add to, unlike wall time) for the whole fit and for the sampler's batched
iterations (``step_batch``) alone, with a hash of the draws (equal across trees whose draws are
bit-identical). The trees alternate within each repeat. Prints one JSON object: per tree the
medians and every run, and each tree's median ratio to the first tree's.

Usage::

    python benchmarks/a9a_chain_cpu.py [--repeats 5] --trees /path/to/tree_a /path/to/tree_b
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
A9A = Path(os.environ.get("A9A", ROOT.parent / "shared" / "data" / "a9a.npz"))

CHILD = r"""
import hashlib, json, sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
from skbayes_sg import SGBayesLogisticRegression
from skbayes_sg.samplers import MCCAdL
spent = [0.0]
step_batch = MCCAdL.step_batch
def timed(self, *args):
    t = time.thread_time()
    out = step_batch(self, *args)
    spent[0] += time.thread_time() - t
    return out
MCCAdL.step_batch = timed
d = np.load(sys.argv[1], allow_pickle=True)
est = SGBayesLogisticRegression(n_jobs=2, random_state=0)
t = time.thread_time()
est.fit(d["X_train"], d["y_train"])
fit = time.thread_time() - t
digest = hashlib.sha1(np.ascontiguousarray(est.samples_).tobytes()).hexdigest()[:16]
print(json.dumps({"fit_cpu_s": fit, "step_batch_cpu_s": spent[0], "draws": digest}))
"""


def _run(tree):
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", CHILD, str(A9A)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--trees", nargs="+", default=[str(ROOT)], help="source trees to compare (PYTHONPATH of each run)")
    args = p.parse_args(argv)
    runs = {tree: [] for tree in args.trees}
    for _ in range(args.repeats):
        for tree in args.trees:
            runs[tree].append(_run(tree))
    results = {}
    for tree, rs in runs.items():
        results[tree] = {
            "fit_cpu_median_s": round(statistics.median(r["fit_cpu_s"] for r in rs), 4),
            "step_batch_cpu_median_s": round(statistics.median(r["step_batch_cpu_s"] for r in rs), 4),
            "draws": sorted({r["draws"] for r in rs}),
            "runs": rs,
        }
    first = results[args.trees[0]]
    for res in results.values():
        res["fit_cpu_ratio_to_first"] = round(res["fit_cpu_median_s"] / first["fit_cpu_median_s"], 3)
        ratio = res["step_batch_cpu_median_s"] / first["step_batch_cpu_median_s"]
        res["step_batch_cpu_ratio_to_first"] = round(ratio, 3)
    print(json.dumps({"repeats": args.repeats, "results": results}))


if __name__ == "__main__":
    main()
