"""Logistic regression on a dask array that lives on a cluster: accuracy, driver memory, passes, time.

A HIGGS-like float32 array of ``--rows`` x 28 is generated lazily, each chunk from its own seed on
the worker that holds it, on a ``LocalCluster`` of ``--workers`` worker processes (loopback).
Measured:

- accuracy of the default ``SGBayesLogisticRegression().fit(X, y)`` against the Laplace
  approximation at the MAP, which this script computes chunk by chunk (Newton's method with
  each chunk's gradient and Hessian summed on the driver; exact to far better than 0.1 sd at
  this N): rms of the posterior means' errors in Laplace sds, the sds' ratios, the largest
  R-hat;
- the driver's peak RSS growth during the fit (sampled every 20 ms);
- the full-data passes over X: the estimator's check of the values, and the passes of its
  :class:`~skbayes_sg.rows.DaskRows` (the MAP's Newton steps; the Hessian and gradient at the
  MAP come from the last step's sums), and its bulk gathers of minibatch rows;
- wall time, against dask-ml's ``LogisticRegression`` (same cluster, same persisted array) when
  dask-ml imports.

Prints one JSON object. Usage::

    python benchmarks/dask_fit.py [--rows 20000000] [--chunk-rows 500000] [--workers 2]
"""

import argparse
import json
import os
import sys
import threading
import time
import warnings

import numpy as np

D = 28


def _chunk_x(seed, n):
    """One chunk's features: 28 correlated HIGGS-like columns (float32), from its own seed."""
    rng = np.random.default_rng([seed, 1])
    Z = rng.standard_normal((n, D), dtype=np.float32)
    Z[:, 1::2] += 0.5 * Z[:, 0:-1:2]  # some correlation between neighbouring features
    return Z


def _chunk_y(seed, n, beta, b):
    X = _chunk_x(seed, n)
    rng = np.random.default_rng([seed, 2])
    p = 1.0 / (1.0 + np.exp(-(X.astype(np.float64) @ beta + b)))
    return (rng.random(n) < p).astype(np.int8)


def lazy_data(n_rows, chunk_rows, seed=0):
    import dask
    import dask.array as da

    rng = np.random.default_rng(seed)
    beta, b = 0.3 * rng.standard_normal(D), 0.2
    sizes = [min(chunk_rows, n_rows - s) for s in range(0, n_rows, chunk_rows)]
    X = da.concatenate(
        [
            da.from_delayed(dask.delayed(_chunk_x, pure=True)(i, n), shape=(n, D), dtype=np.float32)
            for i, n in enumerate(sizes)
        ]
    )
    y = da.concatenate(
        [
            da.from_delayed(dask.delayed(_chunk_y, pure=True)(i, n, beta, b), shape=(n,), dtype=np.int8)
            for i, n in enumerate(sizes)
        ]
    )
    return X, y


def _newton_terms(X, y, theta, alpha):
    """Log likelihood's gradient and negative Hessian of one chunk, with an intercept column."""
    Xa = np.hstack([X.astype(np.float64), np.ones((X.shape[0], 1))])
    p = 1.0 / (1.0 + np.exp(-(Xa @ theta)))
    g = Xa.T @ (y - p)
    H = (Xa * (p * (1 - p))[:, None]).T @ Xa
    return g, H


def laplace(client, X, y, alpha=1.0, tol=1e-10):
    """Mean and covariance of the Laplace approximation, chunk by chunk; and the passes it took."""
    import dask

    xs, ys = X.to_delayed().ravel(), y.to_delayed().ravel()
    theta = np.zeros(D + 1)
    prior = np.full(D + 1, alpha)  # the estimator's default prior: alpha on every coordinate
    passes = 0
    for _ in range(50):
        parts = [dask.delayed(_newton_terms)(xc, yc, theta, alpha) for xc, yc in zip(xs, ys)]
        results = client.gather(client.compute(parts))
        passes += 1
        g = sum(r[0] for r in results) - prior * theta
        H = sum(r[1] for r in results) + np.diag(prior)
        step = np.linalg.solve(H, g)
        theta = theta + step
        if np.sqrt(g @ step) < tol:
            break
    return theta, np.linalg.inv(H), passes


class PeakRSS:
    """Peak resident set size of this process during a ``with`` block, sampled every 20 ms."""

    def __enter__(self):
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def growth_mb(self):
        return (self.peak - self.start) / 2**20


def _log(out):
    """The results so far, on stderr (a long run keeps what it measured)."""
    print(json.dumps(out), file=sys.stderr, flush=True)


def _rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def fit_ours(X, y, random_state=0):
    from skbayes_sg import SGBayesLogisticRegression
    from skbayes_sg.rows import DaskRows

    sources = []
    init = DaskRows.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        sources.append(self)

    DaskRows.__init__ = recording
    try:
        est = SGBayesLogisticRegression(random_state=random_state)
        with warnings.catch_warnings(record=True) as caught, PeakRSS() as rss:
            warnings.simplefilter("always")
            tic = time.perf_counter()
            est.fit(X, y)
            seconds = time.perf_counter() - tic
    finally:
        DaskRows.__init__ = init
    return est, sources[0], seconds, rss.growth_mb, [str(w.message)[:200] for w in caught]


def fit_dask_ml(X, y, solver):
    try:
        from dask_ml.linear_model import LogisticRegression
    except ImportError:
        return None
    est = LogisticRegression(solver=solver, C=1.0)
    tic = time.perf_counter()
    est.fit(X, y)
    return {"solver": solver, "seconds": round(time.perf_counter() - tic, 1)}


def local_client(workers, memory_limit):
    """A client of a loopback ``LocalCluster`` of ``workers`` single-threaded worker processes."""
    import distributed

    cluster = distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",
        memory_limit=memory_limit,
        silence_logs=50,
    )
    return distributed.Client(cluster)


def close_client(client):
    """Close ``client`` and the cluster :func:`local_client` started for it."""
    cluster = client.cluster
    client.close()
    cluster.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--chunk-rows", type=int, default=500_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="4GB")
    parser.add_argument("--dask-ml-solvers", default="lbfgs")
    args = parser.parse_args()

    import distributed

    client = local_client(args.workers, args.memory_limit)
    out = {"rows": args.rows, "features": D, "chunk_rows": args.chunk_rows, "workers": args.workers}
    out["worker_memory_limit"] = args.memory_limit
    # the machine's load (1-minute average) when each stage starts: figures from a busy machine say so
    out["load_avg"] = {"start": round(os.getloadavg()[0], 2)}
    out["X_gb"] = round(args.rows * D * 4 / 1e9, 2)
    X, y = lazy_data(args.rows, args.chunk_rows)
    tic = time.perf_counter()
    X, y = client.persist([X, y])
    distributed.wait([X, y])
    out["generate_seconds"] = round(time.perf_counter() - tic, 1)

    out["load_avg"]["fit"] = round(os.getloadavg()[0], 2)
    est, rows, seconds, rss_mb, caught = fit_ours(X, y)
    out["fit_seconds"] = round(seconds, 1)
    out["driver_peak_rss_growth_mb"] = round(rss_mb, 1)
    from skbayes_sg import _dask

    # The values check reads X unless the default prior's pass (one of the model's) checks it.
    values_check = 0 if _dask._prior_pass_checks_X(est) else 1
    out["passes_over_X"] = values_check + rows.n_passes
    out["passes_detail"] = {"values_check": values_check, "model_passes": rows.n_passes, "label_scan_of_y": 1}
    out["bulk_gathers"] = rows.n_gathers
    # queues whose rows had been gathered ahead, while the chains computed the queue before
    out["queues_gathered_ahead"] = {"used": rows.n_ahead_used, "missed": rows.n_ahead_missed}
    out["warnings"] = caught
    d = est.diagnostics_
    out["fit"] = {k: d.get(k) for k in ("gradient", "preconditioner", "n_iter_blocks") if k in d}
    out["fit"]["n_iter"] = int(est.n_iter_) if hasattr(est, "n_iter_") else None
    out["fit"]["batch_size"] = est.batch_size

    _log(out)
    tic = time.perf_counter()
    mean, cov, lap_passes = laplace(client, X, y)
    out["laplace_seconds"] = round(time.perf_counter() - tic, 1)
    out["laplace_passes"] = lap_passes
    sd = np.sqrt(np.diag(cov))
    draws = est.samples_.reshape(-1, est.samples_.shape[-1])
    post_mean, post_sd = draws.mean(axis=0), draws.std(axis=0)
    summary = est.summary()
    out["accuracy"] = {
        "mean_error_rms_sd": round(float(np.sqrt(np.mean(((post_mean - mean) / sd) ** 2))), 4),
        "sd_ratio_min": round(float((post_sd / sd).min()), 3),
        "sd_ratio_max": round(float((post_sd / sd).max()), 3),
        "r_hat_max": round(float(np.max(summary["r_hat"])), 4),
    }
    _log(out)
    out["dask_ml"] = []
    out["load_avg"]["dask_ml"] = round(os.getloadavg()[0], 2)
    for solver in [s for s in args.dask_ml_solvers.split(",") if s]:
        result = fit_dask_ml(X, y, solver)
        if result is None:
            out["dask_ml"] = "not installed"
            break
        out["dask_ml"].append(result)
        _log(out)
    out["load_avg"]["end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))
    close_client(client)


if __name__ == "__main__":
    main()
