"""Gradient steps per second of one chain on a9a, and the fixed cost of a ``fit`` call.

Bayesian logistic regression on a9a (32,561 x 123 binary features plus an intercept,
batch 500), one chain through the library's own fit loop (``_chains.run_chain``: the
sampler step, minibatch draw, finiteness checks and draw storage) with one BLAS thread, as
the estimators run their chains, for every registered SG sampler and both minibatch
schemes. The setting is blackjax's: plain minibatch gradients in theta at h = 1e-4 (the
estimators' default whitened control-variate setting is timed by
``mccadl_throughput.py``). When the reference environment of ``../shared/bench`` exists
(``~/anchor-venv`` with jax and blackjax, see its README), blackjax's own SGLD / SGHMC /
SGNHT integrators are timed in the same invocation and the ratio is printed, so the
comparison is taken on one machine at one time; each side keeps its best of ``--repeats``
runs, the blackjax runs interleaved with ours.

Prints one JSON object per line and writes them to ``results/throughput.jsonl`` (``--out``).
Usage::

    python benchmarks/throughput.py [--passes 20] [--repeats 3] [--quick] [--no-blackjax] [--out FILE]
                                    [--samplers sgld,sghmc,sgnht]

``--samplers`` times only those (and skips the mCCAdL variant unless ``mccadl`` is listed):
on a loaded machine shorter rounds interleave ours and blackjax's more finely.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from skbayes_sg import SGBayesLogisticRegression
from skbayes_sg._chains import ChainSpec, run_chain
from skbayes_sg.minibatch import GradientSpec
from skbayes_sg.models import LogisticModel
from skbayes_sg.samplers import SAMPLERS, FitContext

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
RESULTS = Path(__file__).resolve().parent / "results"
ANCHOR = Path.home() / "anchor-venv" / "bin" / "python"
BATCH = 500


def load_a9a():
    data = np.load(SHARED / "data" / "a9a.npz")
    return data["X_train"].astype(np.float64), data["y_train"].astype(np.float64)


def time_chain(sampler, model, n_steps, scheme, h):
    t0 = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        gradient = GradientSpec(BATCH, scheme)
        spec = ChainSpec(sampler, model, n_steps, n_steps // 5, 10, 1000, gradient, FitContext(step=(h, {})))
        res = run_chain(spec, np.zeros(model.n_params), np.random.SeedSequence(0))
    seconds = time.perf_counter() - t0
    assert np.isfinite(res.draws).all()
    return seconds


def fit_fixed_cost(X, y):
    """Wall time of fit() minus the time its iterations take: validation, MAP, auto step, diagnostics."""
    est = SGBayesLogisticRegression(n_iter=50, n_chains=1, random_state=0)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 50 iterations do not converge, by design
        est.fit(X, y)
    total = time.perf_counter() - t0
    return total


def blackjax(passes, h, A):
    if not ANCHOR.exists():
        return {}
    script = SHARED / "bench" / "bench_blackjax_sgmcmc.py"
    out = subprocess.run(
        [str(ANCHOR), str(script), str(SHARED / "data" / "a9a.npz"), str(passes), str(h), str(A)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {r["sampler"]: r for r in rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=float, default=100.0, help="data passes per chain")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the best is kept")
    parser.add_argument("--quick", action="store_true", help="2 passes, no blackjax")
    parser.add_argument("--no-blackjax", action="store_true")
    parser.add_argument("--out", default=str(RESULTS / "throughput.jsonl"))
    parser.add_argument("--samplers", default=None, help="comma-separated subset of sgld,sghmc,sgnht,ccadl,mccadl")
    args = parser.parse_args()
    passes = 2.0 if args.quick else args.passes
    repeats = 1 if args.quick else args.repeats
    X, y = load_a9a()
    model = LogisticModel(X, y, alpha=1.0)
    n_steps = int(passes * X.shape[0] / BATCH)
    h, A = 1e-4, 1.0
    names = [n for n in ("sgld", "sghmc", "sgnht", "ccadl", "mccadl") if n in SAMPLERS]
    # mCCAdL's C step with a fresh Sigma minibatch every iteration, the default before
    # sigma_refresh="auto" (which here, with plain gradients, reuses each for 64 iterations).
    variants = {"mccadl[sigma_refresh=1]": lambda: SAMPLERS["mccadl"](friction=A, sigma_refresh=1)}
    if args.samplers:
        wanted = args.samplers.split(",")
        names = [n for n in names if n in wanted]
        variants = {k: v for k, v in variants.items() if "mccadl" in wanted}
    with_blackjax = not (args.quick or args.no_blackjax) and ANCHOR.exists()
    rows = []

    def emit(row):
        rows.append(row)
        print(json.dumps(row), flush=True)

    # Repeated in rounds, ours then blackjax's, and the best of each kept: on a shared
    # machine the minimum is the least disturbed estimate, and interleaving gives both
    # libraries the same chances of a quiet moment.
    best, ref = {}, {}
    for _ in range(repeats):
        for scheme in ("replacement", "epochs"):
            for name in names + list(variants):
                if name in variants:
                    sampler = variants[name]()
                else:
                    cls = SAMPLERS[name]
                    sampler = cls(friction=A) if "friction" in cls().get_params() else cls()
                seconds = time_chain(sampler, model, n_steps, scheme, h)
                best[(name, scheme)] = min(best.get((name, scheme), np.inf), seconds)
        if with_blackjax:
            for name, row in blackjax(passes, h, A).items():
                if name not in ref or row["steps_per_s"] > ref[name]["steps_per_s"]:
                    ref[name] = row
    ours = {key: n_steps / seconds for key, seconds in best.items()}
    for (name, scheme), seconds in best.items():
        emit(
            {
                "library": "skbayes_sg",
                "sampler": name,
                "batch_scheme": scheme,
                "batch": BATCH,
                "h": h,
                "blas_threads": 1,
                "steps": n_steps,
                "seconds": round(seconds, 3),
                "steps_per_s": round(n_steps / seconds),
            }
        )
    for scheme in ("replacement", "epochs"):
        if ("mccadl", scheme) in ours:
            emit(
                {
                    "ratio": "mccadl iteration cost over sghmc (ours)",
                    "batch_scheme": scheme,
                    "cost_ratio": round(ours[("sghmc", scheme)] / ours[("mccadl", scheme)], 2),
                }
            )
    fixed = min(fit_fixed_cost(X, y) for _ in range(repeats))
    emit(
        {
            "library": "skbayes_sg",
            "what": "fit() with n_iter=50, one chain, init='map', "
            "step_size='auto' (fixed cost: validation, MAP, curvature, noise probe, diagnostics)",
            "seconds": round(fixed, 3),
        }
    )
    if not with_blackjax:
        if not (args.quick or args.no_blackjax):
            emit({"blackjax": "skipped: ~/anchor-venv not found (see ../shared/bench/README.md)"})
    else:
        for name, row in ref.items():
            emit({"library": "blackjax", **row})
            for scheme in ("replacement", "epochs"):
                if (name, scheme) in ours:
                    emit(
                        {
                            "ratio": f"skbayes_sg/{scheme} over blackjax",
                            "sampler": name,
                            "speedup": round(ours[(name, scheme)] / row["steps_per_s"], 2),
                        }
                    )
                if name == "sghmc":
                    for variant in ["mccadl", *variants]:
                        if (variant, scheme) in ours:
                            emit(
                                {
                                    "ratio": f"skbayes_sg {variant}/{scheme} over blackjax sghmc",
                                    "speedup": round(ours[(variant, scheme)] / row["steps_per_s"], 2),
                                }
                            )
    if not args.quick:
        with open(args.out, "w") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    sys.exit(main())
