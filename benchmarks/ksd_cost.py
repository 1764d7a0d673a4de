"""What the kernel Stein discrepancy costs a fit: a9a at defaults (issue 29: at most 25%).

``fit`` scores its thinned draws for the KSD and runs the bias test while the data are at
hand (``skbayes_sg._fit._ksd.score_draws``). This times that step inside the fit and the fit
without it (the same fit, draws identical), and prints JSON.

Run: ``python benchmarks/ksd_cost.py``.
"""

import json
import time
from pathlib import Path

import numpy as np

from skbayes_sg._fit import _chain_fit
from skbayes_sg.linear_model import SGBayesLogisticRegression

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "a9a.npz"


def main(repeats=3):
    data = np.load(DATA)
    X, y = data["X_train"], data["y_train"]
    spent = []
    original = _chain_fit.score_draws

    def timed(*args):
        t = time.perf_counter()
        original(*args)
        spent.append(time.perf_counter() - t)

    _chain_fit.score_draws = timed
    fits, ksd_times, est = [], [], None
    try:
        for _ in range(repeats):
            t = time.perf_counter()
            est = SGBayesLogisticRegression(random_state=0).fit(X, y)
            fits.append(time.perf_counter() - t)
            ksd_times.append(spent[-1])
    finally:
        _chain_fit.score_draws = original
    fit_without = np.array(fits) - np.array(ksd_times)
    out = {
        "data": "a9a (32,560 x 123)",
        "estimator": "SGBayesLogisticRegression(random_state=0) at defaults",
        "ksd_draws": int(est._stein["x"].shape[0]),
        "stored_draws": int(np.prod(est.samples_.shape[:2])),
        "ksd": est.diagnostics_["ksd"],
        "ksd_pvalue": est.diagnostics_.get("ksd_pvalue"),
        "fit_seconds_without_ksd_median": float(np.median(fit_without)),
        "ksd_seconds_median": float(np.median(ksd_times)),
        "ksd_share_of_fit": float(np.median(np.array(ksd_times) / fit_without)),
        "budget_share": 0.25,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
