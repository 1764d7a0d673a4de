"""Cost of advancing the chains in rounds (what lets Ctrl-C keep the draws), against one round.

Since the interrupt support, ``advance_chains`` runs the chains in rounds of about
``skbayes_sg._chains.ROUND_SECONDS`` (1 s) of wall time, so that the calling process holds
every chain between rounds even when they run in joblib worker processes. This times a
default ``SGBayesLogisticRegression(random_state=0, n_jobs=...).fit`` (every default:
``n_iter="auto"``, MAP start, whitening, control variates) on breast cancer (standardised)
and a9a with the default rounds and with ``ROUND_SECONDS = inf`` (one round per block, as
before), alternating the two so that the machine's load hits both alike, and checks that
the draws are bit-identical.

Prints one JSON object per line (and writes them to ``results/chunked_rounds.jsonl``).

Usage::

    python benchmarks/chunked_rounds.py [--repeats 3] [--problems breast_cancer a9a] [--n-jobs 1 2]
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference import make_problem  # noqa: E402

from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import skbayes_sg._chains as chains  # noqa: E402
from skbayes_sg import SGBayesLogisticRegression  # noqa: E402

OUT = Path(__file__).parent / "results" / "chunked_rounds.jsonl"


def data(name):
    if name == "breast_cancer":
        X, y = load_breast_cancer(return_X_y=True)
        return StandardScaler().fit_transform(X), y
    return make_problem(name)[:2]


def timed_fit(X, y, n_jobs, round_seconds):
    chains.ROUND_SECONDS = round_seconds
    rounds = []
    advance = chains.Parallel.__call__

    def counting(self, iterable):
        rounds.append(1)
        return advance(self, iterable)

    chains.Parallel.__call__ = counting
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            est = SGBayesLogisticRegression(random_state=0, n_jobs=n_jobs).fit(X, y)
            seconds = time.perf_counter() - t0
    finally:
        chains.Parallel.__call__ = advance
    return seconds, len(rounds), est.samples_


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--problems", nargs="+", default=["breast_cancer", "a9a"])
    parser.add_argument("--n-jobs", nargs="+", type=int, default=[1, 2])
    args = parser.parse_args()
    default = chains.ROUND_SECONDS
    rows = []
    for name in args.problems:
        X, y = data(name)
        for n_jobs in args.n_jobs:
            timed_fit(X, y, n_jobs, default)  # warm-up: worker processes, caches
            times = {"rounds": [], "one_round": []}
            counts, identical, reference = {}, True, None
            for _ in range(args.repeats):
                for label, rs in (("rounds", default), ("one_round", np.inf)):
                    seconds, n_rounds, samples = timed_fit(X, y, n_jobs, rs)
                    times[label].append(seconds)
                    counts[label] = n_rounds
                    reference = samples if reference is None else reference
                    identical &= bool(np.array_equal(samples, reference))
            row = {"problem": name, "n_jobs": n_jobs, "repeats": args.repeats,
                   "seconds_rounds": times["rounds"], "seconds_one_round": times["one_round"],
                   "median_ratio": float(np.median(times["rounds"]) / np.median(times["one_round"])),
                   "min_ratio": float(min(times["rounds"]) / min(times["one_round"])),
                   "parallel_calls_rounds": counts["rounds"], "parallel_calls_one_round": counts["one_round"],
                   "draws_identical": identical, "round_seconds": default}
            print(json.dumps(row), flush=True)
            rows.append(row)
    with open(OUT, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
