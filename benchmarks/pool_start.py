"""What starting two joblib worker processes costs: loky's fresh interpreters against forked ones.

Each measurement is a fresh process that has imported skbayes_sg (as a fit's has) and holds a
32,560 x 124 float64 array (a9a's size); it times entering ``joblib.Parallel(n_jobs)`` with
the given backend (``forked``: the fits' own :class:`skbayes_sg._pools.WorkerPool`, a
standard-library pool forked with the gc frozen, whose tasks name the array its workers
inherited, as a fit's name its model) and its first round of ``n_jobs`` tasks, each importing
the package's sampler and minibatch modules (what a chain's first task imports), then a second round on
the same workers and the pool's shutdown. ``_pools.LOKY_START_SECONDS`` and
``_pools.FORK_START_SECONDS`` come from these figures. Prints one JSON object: per backend,
the median seconds of each phase and every run.

Usage::

    python benchmarks/pool_start.py [--repeats 5] [--n-jobs 2]
"""

import argparse
import json
from pathlib import Path

from _fresh import run_child

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
import skbayes_sg
from joblib import Parallel, delayed
backend, n_jobs = sys.argv[1], int(sys.argv[2])
X = np.random.default_rng(0).random((32560, 124))

def task(x, i):
    import skbayes_sg.minibatch, skbayes_sg.samplers
    from skbayes_sg._pools import resolve
    return resolve(x).shape[0] + i

tic = time.perf_counter()
if backend == "forked":  # the fits' own path: _pools.WorkerPool (the gc frozen while it forks)
    from skbayes_sg._pools import ForkedWorkers, WorkerPool
    pool = WorkerPool(n_jobs, X, lambda n, forked: ForkedWorkers(n) if forked else Parallel(n_jobs=n))
    parallel = pool.start()
    arg = pool.ship(X)  # the array's name, as a fit's tasks name its inherited model
else:
    parallel = Parallel(n_jobs=n_jobs, backend=backend).__enter__()
    arg = X
parallel(delayed(task)(arg, i) for i in range(n_jobs))
first = time.perf_counter() - tic
tic = time.perf_counter()
parallel(delayed(task)(arg, i) for i in range(n_jobs))
second = time.perf_counter() - tic
tic = time.perf_counter()
pool.close() if backend == "forked" else parallel.__exit__(None, None, None)
stop = time.perf_counter() - tic
print(json.dumps({"start_and_first_round": first, "second_round": second, "shutdown": stop}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-jobs", type=int, default=2)
    args = parser.parse_args()
    runs = {"loky": [], "multiprocessing": [], "forked": []}
    for _ in range(args.repeats):
        for backend in runs:  # interleaved
            runs[backend].append(run_child(ROOT, CHILD, [backend, args.n_jobs]))
    out = {"n_jobs": args.n_jobs, "repeats": args.repeats}
    for backend, rows in runs.items():
        phases = ("start_and_first_round", "second_round", "shutdown")
        out[backend] = {key: sorted(r[key] for r in rows)[len(rows) // 2] for key in phases}
        out[backend]["runs"] = rows
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
