"""Gradient noise of the two unbiased minibatch estimators of a *weighted* log likelihood.

With likelihood weights ``w_i`` the data term is ``sum_i w_i g_i``. Rows drawn with
probabilities ``p_i`` and reweighted by ``1 / (N p_i)`` keep the estimate unbiased for any
``p``; the question is where ``w_i`` goes:

* ``reweight``: the rows are drawn as without weights (uniformly for the plain estimator;
  with the unweighted leverages mixed with 5% uniform for the control variate) and each
  drawn row carries ``w_i`` in its reweighting;
* ``fold``: ``w_i`` is folded into the probabilities (``p_i`` proportional to ``w_i`` for the
  plain estimator, to the weighted leverage ``w_i h_i`` mixed with 5% of ``w_i / sum w`` for
  the control variate), so a drawn row's factor is ``w_i / (N p_i)``, the mean weight for
  the plain estimator; zero-weight rows are never drawn.

The noise covariance of the force from ``n`` rows is ``Sigma = N^2 / n Cov_p[c_i G_i]`` with
``G_i`` the row's weighted (whitened) gradient or gradient difference; it is computed here
exactly (all N rows, no Monte Carlo), in the whitened coordinates the chains run in, at
draws of the Laplace approximation of the weighted posterior (the point the automatic
step size probes), for ``n = 1`` (it scales as ``1 / n``). Reported: ``tr(Sigma)`` and its
largest eigenvalue ``sigma_max`` (which caps the automatic step size), averaged over the
draws, and the ratio reweight / fold.

Data: a9a (32,560 x 123, logistic regression, prior precision 1). Weight schemes:
``balanced`` (class_weight="balanced": 24% positives, weights 2.1 and 0.66), ``lognormal``
(``exp(1.5 Z)``, skewed), ``lognormal_zeros`` (the same with 30% of rows at zero),
``integer`` (uniform on 0..5, as duplicated rows).

    python benchmarks/sample_weight_variance.py > benchmarks/results/sample_weight_variance.json
"""

import json
import os
import sys

import numpy as np
from sklearn.utils.class_weight import compute_sample_weight

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from skbayes_sg._geometry import DEFENSIVE  # noqa: E402
from skbayes_sg.models import LogisticModel  # noqa: E402
from skbayes_sg.models._map import _map_estimate  # noqa: E402
from skbayes_sg.preconditioning import curvature_factor  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "a9a.npz")
N_POINTS = 4


def noise(G, p):
    """``tr(Sigma)`` and ``sigma_max`` of ``Sigma = N^2 Cov_p[G_i / (N p_i)]`` (n = 1)."""
    N = G.shape[0]
    keep = p > 0
    G, p = G[keep], p[keep]
    C = G / (N * p)[:, None]
    mean = p @ C
    cov = (C * p[:, None]).T @ C - np.outer(mean, mean)
    sigma = N * N * cov
    return float(np.trace(sigma)), float(np.linalg.eigvalsh(sigma)[-1])


def main():
    d = np.load(DATA)
    X, y = d["X_train"].astype(float), d["y_train"].astype(float)
    N = X.shape[0]
    rng = np.random.default_rng(0)
    z = rng.standard_normal(N)
    schemes = {
        "balanced": compute_sample_weight("balanced", y),
        "lognormal": np.exp(1.5 * z),
        "lognormal_zeros": np.exp(1.5 * z) * (rng.random(N) >= 0.3),
        "integer": rng.integers(0, 6, N).astype(float),
    }
    results = []
    for name, w in schemes.items():
        model = LogisticModel(X, y).set_sample_weight(w)
        theta_map = _map_estimate(model)
        L = curvature_factor(model, theta_map, "dense")
        unweighted = LogisticModel(X, y)
        h_w = model.leverage_scores(theta_map, L)  # w_i h_i
        h_0 = unweighted.leverage_scores(theta_map, L)  # h_i
        probs = {
            "minibatch": {"reweight": np.full(N, 1.0 / N), "fold": w / w.sum()},
            "control_variate": {
                "reweight": (1 - DEFENSIVE) * h_0 / h_0.sum() + DEFENSIVE / N,
                "fold": (1 - DEFENSIVE) * h_w / h_w.sum() + DEFENSIVE * w / w.sum(),
                "fold_uniform_defensive": (1 - DEFENSIVE) * h_w / h_w.sum() + DEFENSIVE / N,
            },
        }
        prng = np.random.default_rng(1)
        acc = {k: {o: np.zeros(2) for o in v} for k, v in probs.items()}
        for _ in range(N_POINTS):
            theta = theta_map + L @ prng.standard_normal(model.n_params)
            rows = np.arange(N)
            G = {
                "minibatch": model.per_example_gradients(theta, rows).to_dense() @ L,
                "control_variate": model.per_example_gradient_differences(theta, theta_map, rows).to_dense() @ L,
            }
            for kind, options in probs.items():
                for option, p in options.items():
                    acc[kind][option] += np.array(noise(G[kind], p)) / N_POINTS
        for kind, options in acc.items():
            row = {
                "weights": name,
                "gradient": kind,
                "n_zero_weight": int((w == 0).sum()),
                "weight_cv": float(w.std() / w.mean()),
            }
            for option, (tr, smax) in options.items():
                row[f"trace_{option}"] = tr
                row[f"sigma_max_{option}"] = smax
            row["trace_ratio_reweight_over_fold"] = row["trace_reweight"] / row["trace_fold"]
            row["sigma_max_ratio_reweight_over_fold"] = row["sigma_max_reweight"] / row["sigma_max_fold"]
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
    print(
        json.dumps(
            {
                "benchmark": "sample_weight_variance",
                "data": "a9a",
                "n_points": N_POINTS,
                "batch_size": 1,
                "units": "whitened",
                "results": results,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
