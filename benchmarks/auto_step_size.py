"""How the constant c of ``step_size="auto"`` trades accuracy for mixing.

``"auto"`` sets ``h = c / sqrt(lambda_max)`` for the momentum samplers (``c / lambda_max``
for SGLD). This sweeps c on Bayesian logistic regression of the breast-cancer data
(standardised, 398 training rows, batch 200, 4 chains of ``--n-iter`` iterations) and
compares each run with a reference (full-data gradients, small fixed step, long chains):
the ratio of marginal standard deviations, the largest error of the posterior means in
reference standard deviations, worst R-hat and smallest bulk ESS. It is the experiment
behind the constants documented on each sampler.

Prints one JSON object per line. Usage::

    python benchmarks/auto_step_size.py [--quick]
"""

import argparse
import json

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGBayesLogisticRegression
from skbayes_sg.samplers import SAMPLERS


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n-iter", type=int, default=8000)
    args = parser.parse_args()
    n_iter = 2000 if args.quick else args.n_iter
    X, y = load_breast_cancer(return_X_y=True)
    X_train, _, y_train, _ = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    X_train = StandardScaler().fit_transform(X_train)

    ref = SGBayesLogisticRegression(
        sampler=SAMPLERS["sgnht"](step_size=0.003),
        batch_size=None,
        n_iter=10 * n_iter,
        n_chains=4,
        random_state=1,
        max_draws=2000,
    )
    ref.fit(X_train, y_train)
    flat = ref.samples_.reshape(-1, ref.samples_.shape[-1])
    ref_mean, ref_sd = flat.mean(axis=0), flat.std(axis=0)
    print(
        json.dumps(
            {
                "reference": "sgnht full data h=0.003",
                "n_iter": 10 * n_iter,
                "min_ess": round(float(np.nanmin(ref.diagnostics_["ess"]))),
                "max_rhat": round(float(np.nanmax(ref.diagnostics_["rhat"])), 3),
            }
        ),
        flush=True,
    )

    grid = {"sgld": [0.02, 0.05, 0.1, 0.2], "sghmc": [0.1, 0.2, 0.3, 0.5], "sgnht": [0.1, 0.2, 0.3, 0.5]}
    for name, constants in grid.items():
        cls = SAMPLERS[name]
        default = cls._auto_step_constant
        for c in constants:
            cls._auto_step_constant = c
            try:
                est = SGBayesLogisticRegression(sampler=name, n_iter=n_iter, random_state=0).fit(X_train, y_train)
            finally:
                cls._auto_step_constant = default
            draws = est.samples_.reshape(-1, est.samples_.shape[-1])
            ratio = draws.std(axis=0) / ref_sd
            print(
                json.dumps(
                    {
                        "sampler": name,
                        "c": c,
                        "default": c == default,
                        "h": round(est.diagnostics_["step_size"], 5),
                        "sd_ratio_median": round(float(np.median(ratio)), 3),
                        "sd_ratio_range": [round(float(ratio.min()), 3), round(float(ratio.max()), 3)],
                        "max_mean_error_sd": round(float(np.abs((draws.mean(axis=0) - ref_mean) / ref_sd).max()), 3),
                        "max_rhat": round(float(np.nanmax(est.diagnostics_["rhat"])), 3),
                        "min_ess": round(float(np.nanmin(est.diagnostics_["ess"]))),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
