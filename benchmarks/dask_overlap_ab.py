"""Gathering the next queue's rows while the chains compute, against gathering each queue when it is used.

The default fit of ``benchmarks/dask_fit.py`` (HIGGS-like float32 array generated lazily on a
``LocalCluster``, persisted once) is timed with :attr:`DaskRows.overlap` on and off, alternately
(ABBA order, ``--reps`` of each), on the same cluster and array. Each fit is the whole user call
(its MAP's passes included). The draws of the two paths must be identical; the script checks.

Prints one JSON object: each fit's wall time, gathers and queues gathered ahead, the medians and
their ratio (off / on), and the machine's 1-minute load average before each fit. Usage::

    python benchmarks/dask_overlap_ab.py [--rows 20000000] [--reps 2]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dask_fit import close_client, lazy_data, local_client  # noqa: E402


def fit_once(X, y, overlap):
    from skbayes_sg import SGBayesLogisticRegression
    from skbayes_sg.rows import DaskRows

    sources = []
    init = DaskRows.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        sources.append(self)

    DaskRows.__init__, DaskRows.overlap = recording, overlap
    try:
        est = SGBayesLogisticRegression(random_state=0)
        load = os.getloadavg()[0]
        tic = time.perf_counter()
        est.fit(X, y)
        seconds = time.perf_counter() - tic
    finally:
        DaskRows.__init__, DaskRows.overlap = init, True
    rows = sources[0]
    record = {
        "overlap": overlap,
        "seconds": round(seconds, 1),
        "load_avg": round(load, 2),
        "bulk_gathers": rows.n_gathers,
        "gathered_ahead": {"used": rows.n_ahead_used, "missed": rows.n_ahead_missed},
    }
    return record, est.samples_


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--chunk-rows", type=int, default=500_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="4GB")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()

    import distributed

    client = local_client(args.workers, args.memory_limit)
    X, y = lazy_data(args.rows, args.chunk_rows)
    X, y = client.persist([X, y])
    distributed.wait([X, y])
    out = {"rows": args.rows, "chunk_rows": args.chunk_rows, "workers": args.workers, "fits": []}
    reference = None
    for rep in range(args.reps):
        for overlap in (True, False) if rep % 2 == 0 else (False, True):
            record, samples = fit_once(X, y, overlap)
            if reference is None:
                reference = samples
            record["draws_identical"] = bool(np.array_equal(samples, reference))
            out["fits"].append(record)
            print(json.dumps(record), file=sys.stderr, flush=True)
    med = {
        mode: float(np.median([f["seconds"] for f in out["fits"] if f["overlap"] == flag]))
        for mode, flag in (("on", True), ("off", False))
    }
    out["median_seconds"] = med
    out["ratio_off_over_on"] = round(med["off"] / med["on"], 3)
    out["draws_identical"] = all(f["draws_identical"] for f in out["fits"])
    print(json.dumps(out))
    close_client(client)


if __name__ == "__main__":
    main()
