"""Wall time of a default fit and of its parts, against scikit-learn in the same run.

- ``map``: the MAP start (``_map_estimate``: Newton for GLMs up to 250 parameters, L-BFGS
  beyond) against ``LogisticRegression(C=1/alpha)`` on the same data (a9a; breast cancer
  unstandardised; softmax on letter, 442 parameters).
- ``fit``: ``SGBayesLogisticRegression(random_state=0, n_jobs=2).fit`` on a9a, every default:
  wall time, its setup (MAP, Hessian, whitening, leverages, noise probe: a fit of 2
  iterations) and the chains, min bulk ESS, max R-hat, ESS per second.
- ``step``: seconds per iteration of one chain of each SG sampler in the default geometry
  on a9a (control variates, whitening; batch 200 and 500), as a ratio to SGHMC's.
- ``grid``: ``GridSearchCV`` of 2 samplers x 3 step sizes x 3 folds on breast cancer.

Prints one JSON object per line (and appends them to ``results/fit_time.jsonl``).

Usage::

    python benchmarks/fit_time.py [--parts map fit step grid]
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference import make_problem  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skbayes_sg import SGBayesLogisticRegression  # noqa: E402
from skbayes_sg._chains import ChainSpec, run_chain  # noqa: E402
from skbayes_sg._geometry import Geometry  # noqa: E402
from skbayes_sg.models import LogisticModel, SoftmaxModel  # noqa: E402
from skbayes_sg.models._map import _map_estimate  # noqa: E402
from skbayes_sg.samplers import (
    FitContext,  # noqa: E402
    get_sampler,  # noqa: E402
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).parent / "results" / "fit_time.jsonl"


def emit(row):
    print(json.dumps(row), flush=True)
    with open(OUT, "a") as f:
        f.write(json.dumps(row) + "\n")


def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def part_map():
    letter = np.load(SHARED / "letter.npz")
    Xl = letter["X"][:10500].astype(float)
    Xl = (Xl - Xl.mean(0)) / Xl.std(0)
    problems = {
        "a9a": make_problem("a9a")[:2],
        "breast_cancer_raw": make_problem("breast_cancer_raw")[:2],
        "letter_softmax": (Xl, letter["y"][:10500]),
    }
    for name, (X, y) in problems.items():
        K = np.unique(y).size
        model = LogisticModel(X, y) if K == 2 else SoftmaxModel(X, y, n_classes=K)
        ours = best_of(lambda: _map_estimate(model))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sk = best_of(lambda: LogisticRegression(C=1.0, max_iter=5000).fit(X, y))
        emit(
            {
                "part": "map",
                "problem": name,
                "n_params": model.n_params,
                "seconds": ours,
                "sklearn_seconds": sk,
                "ratio": ours / sk,
            }
        )


def part_fit():
    X, y, _, _ = make_problem("a9a")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        setup = best_of(lambda: SGBayesLogisticRegression(n_iter=2, burn_in=0, random_state=0, n_jobs=2).fit(X, y))
        t0 = time.perf_counter()
        est = SGBayesLogisticRegression(random_state=0, n_jobs=2).fit(X, y)
        total = time.perf_counter() - t0
        sk = best_of(lambda: LogisticRegression(C=1.0, max_iter=5000).fit(X, y))
    d = est.diagnostics_
    emit(
        {
            "part": "fit",
            "problem": "a9a",
            "seconds": total,
            "setup_seconds": setup,
            "chain_seconds": total - setup,
            "sklearn_seconds": sk,
            "ratio_to_sklearn": total / sk,
            "min_ess": float(d["ess"].min()),
            "max_rhat": float(d["rhat"].max()),
            "min_ess_per_second": float(d["ess"].min() / total),
            "step_size": d["step_size"],
            "batch_size": d["batch_size"],
            "c_step_products_per_iter": d.get("c_step_products_per_iter"),
        }
    )


def part_step():
    X, y, _, _ = make_problem("a9a")
    model = LogisticModel(X, y)
    for batch in (200, 500):
        costs = {}
        for name in ("sghmc", "sgld", "sgnht", "ccadl", "mccadl"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est = SGBayesLogisticRegression(
                    sampler=name, n_iter=20, n_chains=1, batch_size=batch, random_state=0
                ).fit(X, y)
            geometry = est._geometry
            chain_model = geometry.chain_model(model)
            gradient = geometry.gradient_spec(chain_model, batch, "replacement")
            start = Geometry.to_chain(chain_model, est.samples_[0, -1])
            sampler = get_sampler(name)
            costs[name] = (
                best_of(
                    lambda: run_chain(
                        ChainSpec(
                            sampler,
                            chain_model,
                            2000,
                            0,
                            1,
                            10,
                            gradient,
                            FitContext(step=(est.diagnostics_["step_size"], {})),
                        ),
                        start,
                        np.random.SeedSequence(0),
                    )
                )
                / 2000
            )
        for name, cost in costs.items():
            emit(
                {
                    "part": "step",
                    "problem": "a9a",
                    "batch_size": batch,
                    "sampler": name,
                    "seconds_per_iter": cost,
                    "ratio_to_sghmc": cost / costs["sghmc"],
                }
            )


def part_grid():
    X, y = load_breast_cancer(return_X_y=True)
    grid = GridSearchCV(
        make_pipeline(StandardScaler(), SGBayesLogisticRegression(random_state=0)),
        {
            "sgbayeslogisticregression__sampler": [
                get_sampler("mccadl").set_params(preconditioner="dense"),
                get_sampler("sghmc").set_params(preconditioner="dense"),
            ],
            "sgbayeslogisticregression__sampler__step_size": [0.1, 0.2, 0.3],
        },
        cv=3,
        scoring="neg_log_loss",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        grid.fit(X, y)
        seconds = time.perf_counter() - t0
    emit(
        {
            "part": "grid",
            "problem": "breast_cancer",
            "fits": 2 * 3 * 3 + 1,
            "seconds": seconds,
            "best_params": {k.split("__", 1)[1]: str(v) for k, v in grid.best_params_.items()},
            "best_score": float(grid.best_score_),
        }
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["map", "fit", "step", "grid"])
    args = parser.parse_args()
    for part in args.parts:
        globals()[f"part_{part}"]()


if __name__ == "__main__":
    main()
