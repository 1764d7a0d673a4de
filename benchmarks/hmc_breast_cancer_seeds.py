"""The default HMC fit on breast cancer against the stored exact reference, over seeds.

For each ``random_state``: ``SGBayesLogisticRegression(alpha=1.0, alpha_intercept=1.0)`` on
the raw features (the reference's prior, ``benchmarks/results/reference_breast_cancer_raw.npz``),
the pooled draws' mean errors in reference sds (max and rms), the sd ratios' extremes, the
largest R-hat, the smallest bulk and tail ESS, the iterations ``n_iter="auto"`` ran and the
sampler's leapfrog steps per iteration, step and acceptance; and the default fit on
standardised features (the Pipeline's): its iterations, smallest ESS and full-data gradient
passes per chain. Prints one JSON object per seed.

Usage::

    python benchmarks/hmc_breast_cancer_seeds.py [seed ...]   # default: 0 1 2 3
"""

import json
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGBayesLogisticRegression

REFERENCE = Path(__file__).resolve().parent / "results" / "reference_breast_cancer_raw.npz"


def main(seeds):
    warnings.simplefilter("ignore")
    ref = np.load(REFERENCE)
    X, y = load_breast_cancer(return_X_y=True)
    X_std = StandardScaler().fit_transform(X)
    for seed in seeds:
        est = SGBayesLogisticRegression(alpha=1.0, alpha_intercept=1.0, random_state=seed).fit(X, y)
        flat = est.samples_.reshape(-1, est.samples_.shape[-1])
        err = (flat.mean(0) - ref["mean"]) / ref["sd"]
        ratio = flat.std(0, ddof=1) / ref["sd"]
        d = est.diagnostics_
        std = SGBayesLogisticRegression(random_state=seed).fit(X_std, y)
        s = std.diagnostics_
        row = {
            "seed": seed,
            "max_err_sd": float(np.abs(err).max()),
            "rms_err_sd": float(np.sqrt(np.mean(err**2))),
            "sd_ratio": [float(ratio.min()), float(ratio.max())],
            "rhat_max": float(d["rhat"].max()),
            "ess_min": float(d["ess"].min()),
            "ess_tail_min": float(d["ess_tail"].min()),
            "n_iter": int(est.n_iter_),
            "leapfrog_per_iter": d["leapfrog_per_iter"],
            "step_size": d["step_size"],
            "acceptance_rate": d["acceptance_rate"],
            "standardised": {
                "n_iter": int(std.n_iter_),
                "ess_min": float(s["ess"].min()),
                "rhat_max": float(s["rhat"].max()),
                "gradient_passes_per_chain": s["n_grad_evals"] / X.shape[0] / std.n_chains,
            },
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [0, 1, 2, 3])
