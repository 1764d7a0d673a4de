"""Input fuzz sweep (issue 20): generated cases through the estimators, outcomes counted.

Draws cases with the strategies of ``tests/test_property.py`` (data of odd shapes, dtypes,
containers and scales; hyperparameters from each estimator's ``_parameter_constraints``)
and classifies each outcome as ``fit`` (finite predictions of the right shape, no foreign
warning, nothing printed by C libraries), ``ValueError:<what the message names>``, or
``bad:<reason>``. Prints JSON: the counts per estimator and outcome, the library's own
warnings per fit, and every bad case's description, and writes it to
``benchmarks/results/fuzz_outcomes.json``.

Usage::

    python benchmarks/fuzz_sweep.py [--cases 1200] [--seed 20] [--out PATH]
"""

import argparse
import collections
import json
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import hypothesis  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402

from tests.test_property import cases, run_case  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1200, help="generated cases (all estimators together)")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--dump", default=None, help="pickle the bad cases to this file (for debugging)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "fuzz_outcomes.json"))
    args = parser.parse_args()

    counts = collections.Counter()
    by_estimator = collections.defaultdict(collections.Counter)
    own_warnings = collections.Counter()
    bad = []
    bad_cases = []
    examples = {}
    slowest = []
    tmpdir = tempfile.mkdtemp(prefix="fuzz_sweep_")
    start = time.perf_counter()

    @hypothesis.seed(args.seed)
    @settings(
        max_examples=args.cases,
        deadline=None,
        database=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(cases())
    def sweep(case):
        kind, params, X, y, what, container = case
        t0 = time.perf_counter()
        outcome, detail, n_warn = run_case(kind, params, X, y, container, tmpdir)
        elapsed = time.perf_counter() - t0
        slowest.append((round(elapsed, 2), kind, outcome, what, {k: repr(v) for k, v in params.items()}))
        slowest.sort(key=lambda row: -row[0])
        del slowest[5:]
        if sum(counts.values()) % 100 == 99:
            print(f"{sum(counts.values()) + 1} cases, {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        counts[outcome] += 1
        by_estimator[kind][outcome] += 1
        own_warnings[kind] += n_warn
        if not outcome.startswith(("fit", "bad")):
            examples.setdefault(outcome, detail[:300])
        if outcome.startswith("bad"):
            bad_cases.append(case)
            bad.append(
                {
                    "estimator": kind,
                    "outcome": outcome,
                    "detail": detail,
                    "data": what,
                    "params": {k: repr(v) for k, v in params.items()},
                }
            )

    sweep()
    if args.dump:
        import pickle

        with open(args.dump, "wb") as f:
            pickle.dump(bad_cases, f)
    n = sum(counts.values())
    result = {
        "benchmark": "fuzz_sweep",
        "seed": args.seed,
        "cases": n,
        "seconds": round(time.perf_counter() - start, 1),
        "outcomes": dict(sorted(counts.items())),
        "fit": counts["fit"],
        "value_error": sum(v for k, v in counts.items() if k.startswith("ValueError")),
        "bad": sum(v for k, v in counts.items() if k.startswith("bad")),
        "by_estimator": {k: dict(sorted(v.items())) for k, v in sorted(by_estimator.items())},
        "own_warnings_per_case": {
            k: round(own_warnings[k] / max(1, sum(by_estimator[k].values())), 3) for k in sorted(by_estimator)
        },
        "error_examples": dict(sorted(examples.items())),
        "slowest_cases": slowest,
        "bad_cases": bad,
        "python": platform.python_version(),
        "hypothesis": hypothesis.__version__,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
