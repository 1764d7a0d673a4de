"""Where ``sampler="auto"`` should switch from full-data HMC to minibatch mCCAdL.

Synthetic logistic regression (standard-normal features, coefficients ``2 N(0, 1) / sqrt(D)``,
intercept 0.3, fixed seed) at the given sizes ``N x D``; for each, the default
``SGBayesLogisticRegression(n_jobs=2, random_state=0)`` with ``sampler="hmc", batch_size=None``
and with ``sampler="mccadl"`` (its default minibatches), and ``LogisticRegression()``, each the
best of ``--repeats`` in-process fits, with the iterations and lowest bulk ESS. The rule in
``_estimator.EXACT_WORK`` takes HMC while ``N (D + 1 + 30) <= 2e6``. Prints one JSON object per size.

Usage::

    python benchmarks/auto_sampler_crossover.py [--repeats 2] [--sizes 10000x28 20000x28 ...]
"""

import argparse
import json
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression

from skbayes_sg import SGBayesLogisticRegression

SIZES = ["10000x28", "20000x28", "35000x28", "50000x28", "10000x100", "100000x10", "3000x300"]


def _data(n, D):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, D))
    beta = 2.0 * rng.standard_normal(D) / np.sqrt(D)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ beta + 0.3)))).astype(np.int64)
    return X, y


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sizes", nargs="+", default=SIZES)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    for size in args.sizes:
        n, D = (int(v) for v in size.split("x"))
        X, y = _data(n, D)
        row = {"size": size, "work": n * (D + 1 + 30)}
        arms = (("lr", None), ("hmc", {"sampler": "hmc", "batch_size": None}), ("mccadl", {"sampler": "mccadl"}))
        for name, kw in arms:
            times = []
            for _ in range(args.repeats):
                est = LogisticRegression() if kw is None else SGBayesLogisticRegression(n_jobs=2, random_state=0, **kw)
                tic = time.perf_counter()
                est.fit(X, y)
                times.append(time.perf_counter() - tic)
            row[name] = {"seconds": min(times)}
            if kw is not None:
                row[name].update(n_iter=int(est.n_iter_), min_ess=float(np.min(est.diagnostics_["ess"])))
        row["hmc_over_mccadl"] = row["hmc"]["seconds"] / row["mccadl"]["seconds"]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
