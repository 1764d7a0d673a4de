"""Cost of the posterior predictive: ``predict_proba`` on 200,000 rows after a default fit.

A default ``SGBayesLogisticRegression(random_state=0)`` is fit on a9a (32,561 x 123, the
features as LIBSVM gives them); its test rows are tiled to 200,000 rows. In one run:

- ``before``: the predictive as computed before blocking (blocks of a few draws over all
  rows, ``model.predict_draws`` stacked and averaged: X re-read per block of 10 draws),
  over every stored draw;
- ``blocked_all_draws``: ``predict_proba`` with ``n_predict_draws=None`` (blocks of rows
  with every draw in one matrix product, the sigmoid in place, no (S, n, 2) stack);
- ``blocked_auto``: the default, ``n_predict_draws="auto"`` (for two classes the tangent
  control variate on 64 draws where a row's linear predictor spreads little, else draws
  thinned evenly to what keeps the predictive's Monte Carlo error within 0.05 posterior sd);
- ``sklearn``: ``LogisticRegression(C=1/alpha).predict_proba`` on the same rows;

with the ratios of each to ``sklearn`` and to ``before``, and the accuracy of the thinned
predictive: on 500 test rows, ``|p_auto - p_all|`` in posterior sds of ``p`` (median,
max) and the Monte Carlo standard error of the thinned average per row, estimated from
its own draws (``diagnostics.mcse_mean``), in posterior sds; and ``auto_accuracy``, what
``predict_proba`` returns at the default against the all-draws average.

Prints one JSON object (and writes it to ``results/predict_time.json``).

Usage::

    python benchmarks/predict_time.py [--rows 200000] [--repeats 3]
"""

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_info

from skbayes_sg import SGBayesLogisticRegression, diagnostics

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).parent / "results" / "predict_time.json"


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def before_predict_proba(est, X, chunk_floats=2**22):
    """The predictive as ``predict_proba`` computed it before blocking (commit d983190)."""
    X = est._check_X(X)
    thetas, weights = est._flat_samples(), est._flat_weights()
    proba = np.zeros((X.shape[0], est.classes_.size))
    size = max(1, chunk_floats // max(1, X.shape[0] * est.classes_.size))
    for i in range(0, thetas.shape[0], size):
        chunk = slice(i, i + size)
        proba += np.tensordot(weights[chunk], est._model.predict_draws(thetas[chunk], X), axes=1)
    return proba


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    data = np.load(SHARED / "a9a.npz")
    X, y, X_test = data["X_train"], data["y_train"], data["X_test"]
    reps = int(np.ceil(args.rows / X_test.shape[0]))
    X_pred = np.ascontiguousarray(np.tile(X_test, (reps, 1))[: args.rows])

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SGBayesLogisticRegression(random_state=0).fit(X, y)
    fit_seconds = time.perf_counter() - t0
    # alpha_ is a float on a9a (0/1 columns: the default 'auto' resolves to 1); the point
    # estimate only sets the comparison's work, so a per-feature alpha_ takes its mean.
    sk = LogisticRegression(C=1.0 / float(np.mean(est.alpha_)), max_iter=1000).fit(X, y)

    row = {
        "benchmark": "predict_time",
        "problem": "a9a test rows tiled",
        "rows": args.rows,
        "features": X.shape[1],
        "draws_stored": int(est.samples_.size // est.samples_.shape[-1]),
        "min_bulk_ess": float(np.min(est.diagnostics_["ess"])),
        "draws_auto": int(est.n_predict_draws_),
        "fit_seconds": fit_seconds,
        "cpu_count": os.cpu_count(),
        "blas_threads": [i.get("num_threads") for i in threadpool_info() if i.get("user_api") == "blas"],
    }

    t_before, p_before = best_of(lambda: before_predict_proba(est, X_pred), 1)
    est.set_params(n_predict_draws=None)
    t_all, p_all = best_of(lambda: est.predict_proba(X_pred), args.repeats)
    est.set_params(n_predict_draws="auto")
    t_auto, p_auto = best_of(lambda: est.predict_proba(X_pred), args.repeats)
    t_sk, _ = best_of(lambda: sk.predict_proba(X_pred), args.repeats)
    row.update(
        seconds={"before": t_before, "blocked_all_draws": t_all, "blocked_auto": t_auto, "sklearn": t_sk},
        ratio_to_sklearn={"before": t_before / t_sk, "blocked_all_draws": t_all / t_sk, "blocked_auto": t_auto / t_sk},
        speedup_over_before={"blocked_all_draws": t_before / t_all, "blocked_auto": t_before / t_auto},
        max_abs_diff_blocked_vs_before=float(np.abs(p_all - p_before).max()),
    )

    # Accuracy of the thinned predictive on 500 distinct test rows.
    rows = X_test[:500]
    p_draws = est.predict_proba_samples(rows)[:, :, 1]
    sd = p_draws.std(axis=0)
    ok = sd > 0
    index = est._predict_index()
    C = est.samples_.shape[0]
    kept = p_draws[index].reshape(C, -1, rows.shape[0])
    mcse = diagnostics.mcse_mean(kept)
    diff = np.abs(kept.mean(axis=(0, 1)) - p_draws.mean(axis=0))
    row["thinned_accuracy"] = {
        "abs_diff_in_sd_median": float(np.median(diff[ok] / sd[ok])),
        "abs_diff_in_sd_max": float(np.max(diff[ok] / sd[ok])),
        "mcse_in_sd_median": float(np.median(mcse[ok] / sd[ok])),
        "mcse_in_sd_max": float(np.max(mcse[ok] / sd[ok])),
        "abs_diff_max": float(diff.max()),
    }
    # What predict_proba returns at "auto" (for two classes the control variate on most rows)
    # against the average over every draw, in posterior sds.
    auto_diff = np.abs(est.predict_proba(rows)[:, 1] - p_draws.mean(axis=0))
    row["auto_accuracy"] = {
        "abs_diff_in_sd_median": float(np.median(auto_diff[ok] / sd[ok])),
        "abs_diff_in_sd_max": float(np.max(auto_diff[ok] / sd[ok])),
        "abs_diff_max": float(auto_diff.max()),
    }
    print(json.dumps(row, indent=1))
    OUT.write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
