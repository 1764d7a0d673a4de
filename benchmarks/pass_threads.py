"""The fit's full-data passes on one thread and on two (``rows.block_threads``), by CPU time.

On synthetic logistic data (D = 28 standard-normal features, N rows) each pass a default fit
makes over all rows (the log posterior's gradient, as the MAP's Newton steps take it; the
Hessian; the leverages with the whitened row weights; the KSD's scores of 100 draws) runs with
one block thread and with two. Per pass: the process's CPU seconds and those of the busiest
thread (the caller's own included), the pass's length on idle cores. Unlike wall time on a
shared machine, both are meaningful under contention: the same CPU total and a busiest thread
at half of it mean the pass takes half the wall time on two idle cores. The results are
bit-identical (checked here too).

Prints one JSON object. Usage::

    python benchmarks/pass_threads.py [--rows 4000000]
"""

import argparse
import json
import threading
import time

import numpy as np

import skbayes_sg.rows._source as source
from skbayes_sg._blas import one_blas_thread
from skbayes_sg.models import LogisticModel
from skbayes_sg.rows import block_threads


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4_000_000)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.rows, 28))
    y = (rng.random(args.rows) < 0.5).astype(float)
    model = LogisticModel(X, y, alpha=1.0)
    theta, thetas = 0.01 * rng.standard_normal(29), 0.01 * rng.standard_normal((100, 29))
    L = np.linalg.cholesky(np.linalg.inv(model.hessian(theta)))
    busy = {}
    threaded = source._threaded

    def timed(f):  # each block's CPU time, by the thread that ran it
        def call(item):
            tic = time.thread_time()
            try:
                return f(item)
            finally:
                key = threading.get_ident()
                busy[key] = busy.get(key, 0.0) + time.thread_time() - tic

        return call

    source._threaded = lambda f, items, n: threaded(timed(f), items, n)
    passes = {
        "gradient": lambda: model.log_posterior_and_grad(theta)[1],
        "hessian": lambda: model.hessian(theta),
        "leverages": lambda: model.leverage_scores(theta, L),
        "ksd_scores_100": lambda: model.grad_log_posterior_draws(thetas),
    }
    report = {"rows": args.rows, "features": 28, "passes": {}}
    with one_blas_thread():
        for name, f in passes.items():
            results = {}
            for k in (1, 2):
                busy.clear()
                model._row_weight_cache = None  # the leverages' row weights are cached after a pass
                cpu, own = time.process_time(), time.thread_time()
                with block_threads(k):
                    results[k] = f()
                cpu, own = time.process_time() - cpu, time.thread_time() - own
                report["passes"].setdefault(name, {})[f"threads_{k}"] = {
                    "cpu_s": round(cpu, 3),
                    "busiest_thread_s": round(max([own, *busy.values()]), 3),
                }
            report["passes"][name]["identical"] = bool(np.array_equal(results[1], results[2]))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
