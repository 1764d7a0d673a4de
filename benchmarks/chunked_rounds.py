"""Cost of advancing the chains in rounds (what lets Ctrl-C keep the draws), against one round.

Since the interrupt support, ``advance_chains`` runs the chains in rounds of about
``skbayes_sg._chains.ROUND_SECONDS`` (1 s) of wall time, so that the calling process holds
every chain between rounds even when they run in joblib worker processes. This times a
default ``SGBayesLogisticRegression(random_state=0, n_jobs=...).fit`` (every default:
``n_iter="auto"``, MAP start, whitening, control variates) on breast cancer (standardised)
and a9a with the default rounds and with ``ROUND_SECONDS = inf`` (one round per block, as
before), alternating the two so that the machine's load hits both alike, and checks that
the draws are bit-identical. On a shared machine the end-to-end ratio is noisier than the
effect, so the cost of a round is also measured directly: the same fit with the smallest
rounds (``ROUND_SECONDS = 0``: 64 iterations each, many more rounds) against one round per
block; the extra seconds per extra round, times the extra rounds of the default, over the
one-round fit's time, is the default's overhead (``overhead_estimate``). With ``n_jobs=1``
CPU times (``time.process_time``, immune to other processes' load) are reported too.

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
            t0, c0 = time.perf_counter(), time.process_time()
            est = SGBayesLogisticRegression(random_state=0, n_jobs=n_jobs).fit(X, y)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        chains.Parallel.__call__ = advance
    return seconds, cpu, len(rounds), est.samples_


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
            configs = (("rounds", default), ("one_round", np.inf), ("smallest_rounds", 0.0))
            wall = {label: [] for label, _ in configs}
            cpu = {label: [] for label, _ in configs}
            counts, identical, reference = {}, True, None
            for _ in range(args.repeats):
                for label, rs in configs:
                    seconds, cpu_seconds, n_rounds, samples = timed_fit(X, y, n_jobs, rs)
                    wall[label].append(seconds)
                    cpu[label].append(cpu_seconds)
                    counts[label] = n_rounds
                    reference = samples if reference is None else reference
                    identical &= bool(np.array_equal(samples, reference))
            med = {label: float(np.median(v)) for label, v in wall.items()}
            per_round = (med["smallest_rounds"] - med["one_round"]) / max(
                1, counts["smallest_rounds"] - counts["one_round"]
            )
            row = {
                "problem": name,
                "n_jobs": n_jobs,
                "repeats": args.repeats,
                "wall_seconds": wall,
                "cpu_seconds_this_process": cpu,
                "parallel_calls": counts,
                "median_ratio_rounds_to_one_round": med["rounds"] / med["one_round"],
                "seconds_per_extra_round": per_round,
                "overhead_estimate": per_round * (counts["rounds"] - counts["one_round"]) / med["one_round"],
                "draws_identical": identical,
                "round_seconds": default,
            }
            if n_jobs == 1:
                row["cpu_median_ratio_rounds_to_one_round"] = float(
                    np.median(cpu["rounds"]) / np.median(cpu["one_round"])
                )
            print(json.dumps(row), flush=True)
            rows.append(row)
    with open(OUT, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
