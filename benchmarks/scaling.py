"""How fits scale with the data size N, with out-of-core data, and with workers.

1. Per-iteration time against N at a fixed minibatch size: a9a replicated (dense and CSR)
   and synthetic data up to ``--max-rows`` rows held as a ``numpy.memmap`` on disk. The
   goal: the cost of an iteration does not depend on N (a fit's time is linear in the
   number of iterations, i.e. in passes times N / n).
2. Peak memory of a whole fit (``tracemalloc``: every allocation numpy and Python make;
   the memmap's pages are the OS's file cache, not allocations) against the data size:
   for memmapped X it stays far below the data, since minibatches read only their rows.
   What grows with N is the encoded labels alone, one byte a row (labels are checked and
   encoded by blocks of rows); ``peak_growth_b_per_row`` is the growth of the peak per
   added row from the previous size. Measured twice: for the SGNHT fit from zeros with a
   fixed step (minibatches only), and (``default_*`` fields) for a fit with the
   estimator's defaults: mCCAdL, ``init="map"`` (full-data L-BFGS) and ``step_size="auto"``
   (Lanczos on full-data Hessian-vector products), whose full-data passes run by blocks
   of rows, and mCCAdL's squared row norms computed per minibatch on memmapped X.
3. Chains against workers: wall time of 4 chains with ``n_jobs`` = 1 and 2.

Prints one JSON object per line. Usage::

    python benchmarks/scaling.py [--quick] [--max-rows 10000000] [--sections memmap]
"""

import argparse
import json
import os
import tempfile
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from skbayes_sg import SGBayesLogisticRegression
from skbayes_sg.samplers import SGNHT

SHARED = Path(__file__).resolve().parents[2] / "shared"
SECTIONS = ("a9a", "memmap", "workers")


def _fit(X, y, n_iter, n_chains=1, n_jobs=None, batch_size=500):
    est = SGBayesLogisticRegression(
        sampler=SGNHT(step_size=1e-4),
        n_iter=n_iter,
        n_chains=n_chains,
        n_jobs=n_jobs,
        batch_size=batch_size,
        init="zeros",
        random_state=0,
        max_draws=100,
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    return time.perf_counter() - t0


def fit_stats(X, y, n_iter):
    """Marginal seconds per iteration and peak traced memory (MB) of a whole fit.

    The per-iteration cost is the difference between fits of ``n_iter`` and ``n_iter // 10``
    iterations, so the once-per-fit work (validation reads all of X once) drops out.
    """
    # Best of three: on a shared machine the minimum is the least disturbed estimate.
    short = min(_fit(X, y, n_iter // 10) for _ in range(3))
    full = min(_fit(X, y, n_iter) for _ in range(2))
    tracemalloc.start()
    _fit(X, y, n_iter)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return (
        (full - short) / (n_iter - n_iter // 10),
        peak / 1e6,
        full - (full - short) * n_iter / (n_iter - n_iter // 10),
    )


def default_fit_stats(X, y, n_iter):
    """Wall time (s) and peak traced memory (MB) of a fit with the estimator's defaults
    (mCCAdL, init="map", step_size="auto", batch_size="auto"), one chain."""
    est = SGBayesLogisticRegression(n_iter=n_iter, n_chains=1, random_state=0, max_draws=100)
    tracemalloc.start()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak / 1e6


def synthetic_memmap(path, n_rows, n_features=20, chunk=500_000):
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n_rows, n_features))
    rng = np.random.default_rng(0)
    w = rng.normal(size=n_features)
    y = np.empty(n_rows)
    for start in range(0, n_rows, chunk):
        block = rng.normal(size=(min(chunk, n_rows - start), n_features))
        X[start : start + len(block)] = block
        y[start : start + len(block)] = block @ w + rng.logistic(size=len(block)) > 0
    X.flush()
    del X
    return np.load(path, mmap_mode="r"), y


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--max-rows", type=int, default=10_000_000)
    parser.add_argument(
        "--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="which parts to run (default: all)"
    )
    args = parser.parse_args()
    n_iter = 300 if args.quick else 2000
    max_rows = min(args.max_rows, 1_000_000) if args.quick else args.max_rows

    if "a9a" in args.sections or "workers" in args.sections:
        data = np.load(SHARED / "data" / "a9a.npz")
        X0, y0 = data["X_train"].astype(np.float64), data["y_train"]
    for reps in ((1, 4) if args.quick else (1, 4, 16)) if "a9a" in args.sections else ():
        X, y = np.tile(X0, (reps, 1)), np.tile(y0, reps)
        for kind, Xk in (("dense", X), ("csr", sp.csr_matrix(X))):
            per_iter, peak, fixed = fit_stats(Xk, y, n_iter)
            print(
                json.dumps(
                    {
                        "data": f"a9a x{reps}",
                        "format": kind,
                        "n_rows": X.shape[0],
                        "n_iter": n_iter,
                        "us_per_iter": round(1e6 * per_iter, 1),
                        "fixed_s": round(fixed, 3),
                        "peak_mb": round(peak, 1),
                    }
                ),
                flush=True,
            )
        del X

    with tempfile.TemporaryDirectory(dir=os.environ.get("SCALING_TMP")) as tmp:
        n, previous = 100_000, None
        while n <= max_rows and "memmap" in args.sections:
            path = os.path.join(tmp, f"x{n}.npy")
            X, y = synthetic_memmap(path, n)
            per_iter, peak, fixed = fit_stats(X, y, n_iter)
            default_s, default_peak = default_fit_stats(X, y, n_iter)
            data_mb = X.nbytes / 1e6
            row = {
                "data": "synthetic memmap",
                "n_rows": n,
                "n_features": X.shape[1],
                "data_mb": round(data_mb, 1),
                "n_iter": n_iter,
                "us_per_iter": round(1e6 * per_iter, 1),
                "fixed_s": round(fixed, 3),
                "peak_mb": round(peak, 3),
                "peak_over_data": round(peak / data_mb, 4),
                "default_fit_s": round(default_s, 2),
                "default_peak_mb": round(default_peak, 3),
                "default_peak_over_data": round(default_peak / data_mb, 4),
            }
            if previous is not None:
                row["peak_growth_b_per_row"] = round(1e6 * (peak - previous[1]) / (n - previous[0]), 2)
                row["default_peak_growth_b_per_row"] = round(1e6 * (default_peak - previous[2]) / (n - previous[0]), 2)
            print(json.dumps(row), flush=True)
            previous = (n, peak, default_peak)
            del X, y
            os.remove(path)  # the largest file is 1.6 GB: keep one on disk at a time
            n *= 10

    if "workers" not in args.sections:
        return
    X, y = np.tile(X0, (4, 1)), np.tile(y0, 4)
    for n_jobs in (1, 2):
        seconds = _fit(X, y, n_iter * 10, n_chains=4, n_jobs=n_jobs)
        print(
            json.dumps({"chains": 4, "n_jobs": n_jobs, "n_iter": n_iter * 10, "seconds": round(seconds, 2)}), flush=True
        )


if __name__ == "__main__":
    main()
