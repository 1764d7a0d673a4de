"""Default HMC fits at several split trajectory lengths, over seeds: iterations, gradients, time.

For each dataset (breast cancer: ``SGBayesLogisticRegression``; diabetes:
``SGBayesLinearRegression``; wine: three-class ``SGBayesLogisticRegression``; features
standardised) and each length ``tau`` (in units of ``pi``; the default split integrator's
``SPLIT_LENGTH`` is 0.6), fits ``sampler=HMC(trajectory_length=tau * pi)`` (the default sampler of
these fits, with only the length set) for ``random_state`` 0..n-1 at ``n_jobs=2`` and reports
the mean iterations ``n_iter="auto"`` ran, the mean full-data gradient evaluations, the median
lowest bulk ESS, and the median and mean in-process wall time of ``fit`` (one warm-up fit
first). Timings are comparable only within one run. Prints one JSON object per dataset and length.

Usage::

    python benchmarks/hmc_split_length.py [--seeds 16] [--lengths 0.5 0.6] [--datasets cancer diabetes wine]
"""

import argparse
import json
import math
import time
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg.samplers import HMC

DATA = {
    "cancer": (load_breast_cancer, SGBayesLogisticRegression),
    "diabetes": (load_diabetes, SGBayesLinearRegression),
    "wine": (load_wine, SGBayesLogisticRegression),
}


def run(dataset, length, seeds):
    load, Est = DATA[dataset]
    X, y = load(return_X_y=True)
    X = StandardScaler().fit_transform(X)

    def fit(seed):
        return Est(sampler=HMC(trajectory_length=length * math.pi), random_state=seed, n_jobs=2).fit(X, y)

    fit(0)
    rows = []
    for seed in range(seeds):
        tic = time.perf_counter()
        est = fit(seed)
        d = est.diagnostics_
        rows.append((time.perf_counter() - tic, est.n_iter_, d["n_grad_evals"], float(np.min(d["ess"]))))
    t, n_iter, evals, ess = map(np.array, zip(*rows))
    return {
        "dataset": dataset,
        "length_pi": length,
        "seeds": seeds,
        "n_iter_mean": float(n_iter.mean()),
        "one_block": int(np.sum(n_iter == n_iter.min())),
        "grad_evals_mean": float(evals.mean()),
        "ess_min_median": float(np.median(ess)),
        "seconds_median": float(np.median(t)),
        "seconds_mean": float(t.mean()),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--lengths", type=float, nargs="+", default=[0.5, 0.6])
    parser.add_argument("--datasets", nargs="+", default=list(DATA), choices=list(DATA))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    for dataset in args.datasets:
        for length in args.lengths:
            print(json.dumps(run(dataset, length, args.seeds)), flush=True)


if __name__ == "__main__":
    main()
