"""SGBayesDRBMClassifier() against MLPClassifier() on digits, in the same run (issue 31).

The issue's target: the DRBM at its defaults (``n_jobs=2``, ``random_state=0``) within 2x the
wall time of scikit-learn's ``MLPClassifier()`` (defaults, ``random_state=0``), at no lower
test accuracy. Both fit the same 70/30 stratified split of ``load_digits`` (features / 16, the
issue's setting; ``--scale symmetric`` for [-1, 1]), each fit in a fresh subprocess
(``drbm_digits_defaults.py``'s runner), alternating DRBM and MLP so that both see the same
load. Each row reports the fit's wall time (``fit_s``), its CPU time over every process
(``fit_cpu_all_s``), test accuracy and log loss, and for the DRBM the predictive's convergence
diagnostics and ``n_iter_``. The last line is a summary: medians per label and the median of
the per-repeat ratios ``DRBM fit_s / MLP fit_s``.

``--trees A B ...`` runs the DRBM of each package root in turn (an A/B of two checkouts, the
MLP once per repeat); ``--config`` adds estimator parameters to every DRBM fit.

Wall times measured on a busy machine are not the machine's figures; the ratio of the same
run is what to compare. Prints JSON lines; ``--out`` also writes them to a file.

Usage::

    python benchmarks/drbm_vs_mlp.py [--repeats 3] [--trees /work/main .] [--config '{"n_hidden": 50}']
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drbm_digits_defaults as bench  # noqa: E402


def _summary(rows):
    out = {"benchmark": "drbm_vs_mlp", "summary": True}
    labels = sorted({r["label"] for r in rows})
    for label in labels:
        mine = [r for r in rows if r["label"] == label and "fit_s" in r]
        if mine:
            out[label] = {
                key: float(np.median([r[key] for r in mine]))
                for key in ("fit_s", "fit_cpu_all_s", "accuracy", "log_loss")
                if all(key in r for r in mine)
            }
    mlp = {r["repeat"]: r["fit_s"] for r in rows if r["label"] == "mlp" and "fit_s" in r}
    for label in labels:
        if label == "mlp":
            continue
        ratios = [r["fit_s"] / mlp[r["repeat"]] for r in rows if r["label"] == label and r.get("repeat") in mlp]
        if ratios:
            out[label]["ratio_to_mlp"] = ratios
            out[label]["median_ratio_to_mlp"] = float(np.median(ratios))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="random_state of both estimators")
    parser.add_argument("--n-jobs", type=int, default=2, help="the DRBM's n_jobs")
    parser.add_argument("--trees", nargs="+", default=[str(bench.ROOT)], help="package roots of the DRBM runs")
    parser.add_argument("--config", default="{}", help="extra DRBM parameters as JSON")
    parser.add_argument("--scale", choices=["unit", "symmetric"], default="unit")
    parser.add_argument("--out", help="also write the JSON lines here")
    args = parser.parse_args()
    params = {"n_jobs": args.n_jobs, **json.loads(args.config)}
    rows = []
    sink = open(args.out, "w") if args.out else None
    try:
        for rep in range(args.repeats):
            # Alternate the order too, so that neither side always runs first after the other.
            runs = [(f"drbm:{Path(t).resolve()}", "defaults", params, t) for t in args.trees] + [
                ("mlp", "mlp", {}, None)
            ]
            if rep % 2:
                runs.reverse()
            for label, kind, p, tree in runs:
                row = bench._run(kind, p, args.seed, tree, args.scale)
                row["label"], row["repeat"] = label, rep
                rows.append(row)
                print(json.dumps(row), flush=True)
                if sink:
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()  # a stopped run keeps its rows
        summary = _summary(rows)
        print(json.dumps(summary), flush=True)
        if sink:
            sink.write(json.dumps(summary) + "\n")
    finally:
        if sink:
            sink.close()


if __name__ == "__main__":
    main()
