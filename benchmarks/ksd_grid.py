"""Does GridSearchCV(scoring=ksd_scorer) pick a good sampler setting? (issue 29)

Two SGLD step-size grids, plain minibatch gradients (batch 200) in ``theta`` coordinates
(``preconditioner="none"``), where the step size decides between slow mixing (small h)
and bias (large h):

* ``linreg``: exact Gaussian linear regression, N = 2,000, D = 5, known noise precision 1,
  ``normalize_y=False``, no intercept, prior N(0, I); exact posterior in closed form
  (``benchmarks/_exact_linreg.py``); h = 3e-6 .. 3e-4.
* ``logistic``: the synthetic logistic regression ``synth_1e4`` (N = 10,000, D = 20) against
  its long full-data HMC reference (``benchmarks/_reference.py``).

For each setting: the exact error of the full-data fit (rms of the mean errors in
posterior sds + the worst ``|sd ratio - 1|``), and the 3-fold cross-validated scores of
``ksd_scorer`` and of the held-out metric (``neg_mean_squared_error`` /
``neg_log_loss``), from one multi-metric GridSearchCV (three splits training on 90% of
the rows, see ``CV``). Prints JSON: per setting the three
figures, which setting each scorer picks, the picked setting's exact error relative to
the best, and the Spearman correlation of the KSD with the exact error.

Run: ``python benchmarks/ksd_grid.py [--quick]``; results in ``benchmarks/results/ksd_grid.json``.
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr
from sklearn.model_selection import GridSearchCV, ShuffleSplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _exact_linreg import known_noise_posterior, sufficient_statistics  # noqa: E402
from _reference import load_reference, make_problem  # noqa: E402

from skbayes_sg.linear_model import SGBayesLinearRegression, SGBayesLogisticRegression  # noqa: E402
from skbayes_sg.metrics import ksd_scorer  # noqa: E402
from skbayes_sg.samplers import SGLD  # noqa: E402

#: Three splits training on 90% of the rows. A step size acts relative to N (the curvature
#: and the gradient noise grow with it), so a fold trained on fewer rows runs a relatively
#: smaller step: with 3-fold CV (2/3 of the rows) the KSD picked a step 1.5x too large for
#: the full data (3e-5 where 1e-5 is best on linreg, exact error 1.44x the best's).
CV = ShuffleSplit(3, test_size=0.1, random_state=0)


def exact_error(est, mean, sd):
    """rms of the mean errors in posterior sds + worst |sd ratio - 1|."""
    flat = est.samples_.reshape(-1, est.samples_.shape[-1])
    z = (flat.mean(axis=0) - mean) / sd
    return float(np.sqrt(np.mean(z**2)) + np.max(np.abs(flat.std(axis=0) / sd - 1.0)))


def linreg_problem(seed=0, N=2000, D=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    y = X @ rng.standard_normal(D) + rng.standard_normal(N)
    post = known_noise_posterior(sufficient_statistics(X, y, fit_intercept=False), alpha=1.0, tau=1.0)
    est = SGBayesLinearRegression(
        sampler=SGLD(step_size=1e-5, preconditioner="none"),
        gradient="minibatch",
        batch_size=200,
        normalize_y=False,
        noise_precision=1.0,
        fit_intercept=False,
        alpha=1.0,
        random_state=0,
    )
    return X, y, post["mean"], post["sd"], est, "neg_mean_squared_error"


def logistic_problem():
    X, y, alpha, _ = make_problem("synth_1e4")
    ref = load_reference("synth_1e4")
    est = SGBayesLogisticRegression(
        sampler=SGLD(step_size=1e-5, preconditioner="none"),
        gradient="minibatch",
        batch_size=200,
        alpha=alpha,
        alpha_intercept=alpha,
        random_state=0,
    )
    return X, y, ref["mean"], ref["sd"], est, "neg_log_loss"


def run(name, problem, steps, n_iter):
    X, y, mean, sd, est, held_out = problem
    est.set_params(n_iter=n_iter)
    grid = [SGLD(step_size=h, preconditioner="none") for h in steps]
    errors, seconds = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the poor settings warn, as they should
        for sampler in grid:
            t = time.perf_counter()
            errors.append(exact_error(est.set_params(sampler=sampler).fit(X, y), mean, sd))
            seconds.append(time.perf_counter() - t)
        search = GridSearchCV(
            est,
            {"sampler": grid},
            scoring={"ksd": ksd_scorer, "held_out": held_out},
            refit=False,
            cv=CV,
        ).fit(X, y)
    res = search.cv_results_
    ksd = -np.asarray(res["mean_test_ksd"])
    held = np.asarray(res["mean_test_held_out"])
    errors = np.asarray(errors)
    best = int(np.argmin(errors))
    pick_ksd, pick_held = int(np.argmax(-ksd)), int(np.argmax(held))
    return {
        "problem": name,
        "n_iter": n_iter,
        "settings": [
            {"step_size": h, "exact_error": e, "cv_ksd": k, f"cv_{held_out}": s, "fit_seconds": t}
            for h, e, k, s, t in zip(steps, errors, ksd, held, seconds)
        ],
        "best_step_size": steps[best],
        "ksd_picks": steps[pick_ksd],
        "ksd_pick_error_over_best": float(errors[pick_ksd] / errors[best]),
        f"{held_out}_picks": steps[pick_held],
        f"{held_out}_pick_error_over_best": float(errors[pick_held] / errors[best]),
        "spearman_ksd_vs_exact_error": float(spearmanr(ksd, errors).statistic),
        f"spearman_{held_out}_vs_exact_error": float(spearmanr(-held, errors).statistic),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    n_iter = 2000 if args.quick else 10000
    t = time.perf_counter()
    out = {
        "grids": [
            run("linreg", linreg_problem(), [3e-6, 1e-5, 3e-5, 6e-5, 1e-4, 2e-4, 3e-4], n_iter),
            run("logistic", logistic_problem(), [3e-6, 1e-5, 3e-5, 6e-5, 1e-4, 2e-4, 3e-4], n_iter),
        ]
    }
    out["seconds"] = time.perf_counter() - t
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
