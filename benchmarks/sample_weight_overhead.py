"""Cost of likelihood weights per gradient evaluation, as ratios to the unweighted cost.

On a9a (logistic regression, whitened at the MAP as the default fit runs), times in one
process, in alternating blocks, the median over 21 blocks of:

* ``minibatch``: one plain minibatch force (n = 200): uniform rows without weights; rows
  drawn in proportion to the weights (alias table) and scaled, with weights;
* ``control_variate``: one control-variate force (n = 200) with leverage-sampled rows;
* ``full``: one full-data log posterior and gradient (what gadMALA evaluates per iteration).

Weights: class_weight="balanced". Only ratios are meaningful (the machine is shared).

    python benchmarks/sample_weight_overhead.py > benchmarks/results/sample_weight_overhead.json
"""

import json
import os
import sys
import time

import numpy as np
from sklearn.utils.class_weight import compute_sample_weight
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from skbayes_sg._geometry import leverage_probabilities, weight_probabilities  # noqa: E402
from skbayes_sg.minibatch import ControlVariateGradient, MinibatchGradient  # noqa: E402
from skbayes_sg.models import LogisticModel, WhitenedModel  # noqa: E402
from skbayes_sg.models._map import _map_estimate  # noqa: E402
from skbayes_sg.preconditioning import curvature_factor  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "a9a.npz")


def per_call(fns, n_calls, repeats=21):
    """Median seconds per call of each function, timed in alternating blocks (so that the
    load of a shared machine drifts over all of them alike)."""
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            t = time.perf_counter()
            for _ in range(n_calls):
                fn()
            out.append((time.perf_counter() - t) / n_calls)
    return [float(np.median(t)) for t in times]


def targets(model):
    theta_map = _map_estimate(model)
    L = curvature_factor(model, theta_map, "dense")
    chain = WhitenedModel(model, theta_map, L)
    centre = chain.from_theta(theta_map)
    plain = MinibatchGradient(chain, 200, row_probabilities=weight_probabilities(model))
    cv = ControlVariateGradient(
        chain, 200, theta_hat=centre, row_probabilities=leverage_probabilities(model, theta_map, L)
    )
    return chain, plain, cv


@threadpool_limits.wrap(limits=1, user_api="blas")
def main():
    d = np.load(DATA)
    X, y = d["X_train"].astype(float), d["y_train"].astype(float)
    w = compute_sample_weight("balanced", y)
    runs = {"unweighted": targets(LogisticModel(X, y)), "weighted": targets(LogisticModel(X, y).set_sample_weight(w))}
    z = np.random.default_rng(0).standard_normal(X.shape[1] + 1)
    out = {}
    for kind in ("minibatch", "control_variate", "full"):
        fns = []
        for chain, plain, cv in runs.values():
            rng = np.random.default_rng(1)
            if kind == "minibatch":
                fns.append(lambda plain=plain, rng=rng: plain.gradient(z, rng))
            elif kind == "control_variate":
                fns.append(lambda cv=cv, rng=rng: cv.gradient(z, rng))
            else:
                fns.append(lambda chain=chain: chain.log_posterior_and_grad(z))
        for name, t in zip(runs, per_call(fns, 500 if kind != "full" else 5)):
            out[(kind, name)] = t
    rows = [
        {
            "gradient": kind,
            "seconds_unweighted": out[(kind, "unweighted")],
            "seconds_weighted": out[(kind, "weighted")],
            "ratio_weighted_over_unweighted": out[(kind, "weighted")] / out[(kind, "unweighted")],
        }
        for kind in ("minibatch", "control_variate", "full")
    ]
    print(
        json.dumps(
            {
                "benchmark": "sample_weight_overhead",
                "data": "a9a",
                "weights": "balanced",
                "batch_size": 200,
                "results": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
