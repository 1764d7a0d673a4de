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
4. (``default``) The default fit against ``LogisticRegression`` on synthetic logistic data
   (D = 28 standard-normal features, N = 1e5, 1e6, 4e6), in one interleaved run: per N the
   median wall time of ``--repeats`` default fits (``--n-jobs``, default 2) and of as many
   ``LogisticRegression(C=1/alpha_)`` fits, their ratio, the set-up's share (everything
   before the first chain step: validation, MAP, Hessian, leverages, row sampler, noise
   probe) and the fit's exactness against the Laplace approximation at the MAP (rms of the
   posterior-mean error in Laplace sds, the range of the sd ratios, the largest R-hat).
   Then ``predict_proba`` on 200,000 rows after the N = 1e6 fit against
   ``LogisticRegression``'s (medians of ``--repeats``, interleaved). In one process, after
   the other sections; ``benchmarks/synthetic_scaling.py`` times the same fits each in a
   fresh process, two source trees interleaved.

Prints one JSON object per line. Usage::

    python benchmarks/scaling.py [--quick] [--max-rows 10000000] [--sections memmap]
    python benchmarks/scaling.py --sections default [--repeats 3] [--sizes 100000 1000000 4000000]
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
SECTIONS = ("a9a", "memmap", "workers", "default")
#: The default section's N (``--sizes``) and its prediction rows.
DEFAULT_SIZES = (100_000, 1_000_000, 4_000_000)
PREDICT_ROWS = 200_000


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


def synthetic_logistic(n_rows, n_features=28, seed=0):
    """Standard-normal features, coefficients N(0, 0.5^2), intercept 0.3, logistic labels."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    beta = 0.5 * rng.standard_normal(n_features)
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-(X @ beta + 0.3)))).astype(np.int64)
    return X, y


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def laplace_exactness(est, X, y):
    """The draws against the Laplace approximation at the MAP: rms posterior-mean error and the
    sd ratios in Laplace sds, and the largest R-hat."""
    from skbayes_sg.models import find_map

    model = est._build_model(X, y)
    theta_map, _ = find_map(model)
    sd = np.sqrt(np.diag(np.linalg.inv(model.hessian(theta_map))))
    draws = est.samples_.reshape(-1, est.samples_.shape[-1])
    z = (draws.mean(axis=0) - theta_map) / sd
    ratio = draws.std(axis=0) / sd
    return {
        "rms_mean_error_sd": round(float(np.sqrt(np.mean(z**2))), 4),
        "sd_ratio_min": round(float(ratio.min()), 4),
        "sd_ratio_max": round(float(ratio.max()), 4),
        "rhat_max": round(float(np.max(est.diagnostics_["rhat"])), 4),
    }


def default_vs_sklearn(sizes, repeats, n_jobs=2):
    """Section 4: the default fit and predict_proba against LogisticRegression, interleaved."""
    from sklearn.linear_model import LogisticRegression

    import skbayes_sg._fit._chain_fit as chain_fit

    chains_start = {}
    run_blocks = chain_fit.run_blocks

    def marked(*args, **kwargs):  # the set-up ends where the chains' first block starts
        chains_start["t"] = time.perf_counter()
        return run_blocks(*args, **kwargs)

    chain_fit.run_blocks = marked
    data = {n: synthetic_logistic(n) for n in sizes}
    times = {n: {"skbayes_sg": [], "sklearn": [], "setup": []} for n in sizes}
    fitted = {}
    for _ in range(repeats):
        for n, (X, y) in data.items():
            est = SGBayesLogisticRegression(random_state=0, n_jobs=n_jobs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                est.fit(X, y)
                times[n]["skbayes_sg"].append(time.perf_counter() - t0)
            times[n]["setup"].append(chains_start["t"] - t0)
            # The same prior where it is one precision (alpha="auto" may resolve to one per feature,
            # which LogisticRegression cannot take: then its default C, as a user would fit it).
            alpha = np.asarray(est.alpha_)
            lr = LogisticRegression(C=1.0 / float(alpha) if alpha.ndim == 0 else 1.0, max_iter=1000)
            times[n]["sklearn"].append(_timed(lambda: lr.fit(X, y))[0])
            fitted[n] = (est, lr)
    chain_fit.run_blocks = run_blocks
    for n, (X, y) in data.items():
        est = fitted[n][0]
        med = {k: float(np.median(v)) for k, v in times[n].items()}
        row = {
            "section": "default",
            "n_rows": n,
            "n_features": X.shape[1],
            "n_jobs": n_jobs,
            "repeats": repeats,
            "fit_s": round(med["skbayes_sg"], 3),
            "setup_s": round(med["setup"], 3),
            "sklearn_s": round(med["sklearn"], 3),
            "ratio": round(med["skbayes_sg"] / med["sklearn"], 2),
            "n_iter": int(est.n_iter_) if hasattr(est, "n_iter_") else None,
            "min_bulk_ess": round(float(np.min(est.diagnostics_["ess"])), 1),
        }
        row.update(laplace_exactness(est, X, y))
        print(json.dumps(row), flush=True)
    n_pred = 1_000_000 if 1_000_000 in fitted else max(fitted)
    est, lr = fitted[n_pred]
    X_pred = synthetic_logistic(PREDICT_ROWS, seed=1)[0]
    ours, theirs = [], []
    for _ in range(repeats):
        ours.append(_timed(lambda: est.predict_proba(X_pred))[0])
        theirs.append(_timed(lambda: lr.predict_proba(X_pred))[0])
    print(
        json.dumps(
            {
                "section": "default_predict_proba",
                "fit_rows": n_pred,
                "rows": PREDICT_ROWS,
                "draws": int(est.n_predict_draws_),
                "seconds": round(float(np.median(ours)), 4),
                "sklearn_s": round(float(np.median(theirs)), 4),
                "ratio": round(float(np.median(ours) / np.median(theirs)), 1),
            }
        ),
        flush=True,
    )


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
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of the default section")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES), help="N of the default section")
    parser.add_argument("--n-jobs", type=int, default=2, help="n_jobs of the default section's fits")
    args = parser.parse_args()
    if "default" in args.sections:
        default_vs_sklearn(args.sizes[:2] if args.quick else args.sizes, args.repeats, args.n_jobs)
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
