"""Cost of one mCCAdL (and CCAdL) iteration relative to SGHMC and SGNHT on a9a.

Bayesian logistic regression on a9a (P = 124), the samplers stepped directly (no
estimator loop), interleaved in rounds so that all see the same machine load; the best
round of each is kept. Two settings:

- ``plain``: theta coordinates, plain minibatch gradients (batch 500 with replacement), at
  h = 1e-4 (the throughput benchmark's step) and at each sampler's ``step_size="auto"``;
  one BLAS thread, as the estimators run their chains;
- ``default``: what ``SGBayesLogisticRegression(sampler=...).fit`` runs: the chains in
  coordinates whitened at the MAP, control-variate gradients with leverage-sampled rows,
  each sampler's automatic step, at batch 500 and at ``batch_size="auto"``; chains stepped
  with one BLAS thread, as the estimator runs them. mCCAdL with ``sigma_estimate``
  ``"independent"`` (the default) and ``"same"``, and the prototype of an independent Sigma
  minibatch of a quarter of the force's rows (``mccadl_sigma_source.py``, whose accuracy
  runs say why it is not the default).

Reports microseconds per step, the ratio to SGHMC in the same setting, and mCCAdL's mean
number of products with Sigma per iteration and share of C steps that went to Lanczos
(the Taylor/Lanczos switch, at the step sizes the automatic rule picks). ``--profile``
prints where each sampler's default-setting step spends its time (cProfile, by own time).
When ``~/anchor-venv`` exists (see ``../shared/bench/README.md``) blackjax's SGHMC is
timed in the same invocation.

Prints one JSON object per line and saves ``results/mccadl_throughput[_quick].jsonl``.

Usage::

    python benchmarks/mccadl_throughput.py [--quick] [--no-blackjax] [--profile]
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models import LogisticModel
from skbayes_sg.samplers import SGHMC, SGLD, SGNHT, CCAdL, FitContext, MCCAdL

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _default_chain import default_chain  # noqa: E402
from mccadl_sigma_source import SmallSigmaMCCAdL  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
RESULTS = Path(__file__).resolve().parent / "results"
ANCHOR = Path.home() / "anchor-venv" / "bin" / "python"
BATCH = 500


def best_of_rounds(chains, rounds, steps, step):
    """Seconds per step of each chain, the minimum over ``rounds`` interleaved rounds."""
    best = {name: np.inf for name in chains}
    for _ in range(rounds):
        for name, chain in chains.items():
            t0 = time.perf_counter()
            step(chain, steps)
            best[name] = min(best[name], (time.perf_counter() - t0) / steps)
    return best


def c_step_stats(state):
    summary = state.summary()
    return {
        "c_step_products_per_iter": round(summary["c_step_products_per_iter"], 2),
        "c_step_lanczos_fraction": round(summary["c_step_lanczos_fraction"], 3),
        "sigma_minibatches_per_iter": round(summary["sigma_minibatches_per_iter"], 3),
    }


def plain_rows(model, rounds, steps):
    """The samplers on theta with plain minibatch gradients, at h = 1e-4 and the auto step."""
    theta0 = np.zeros(model.n_params)
    rows = []
    for h_mode in (1e-4, "auto"):
        chains = {}
        for cls in (SGHMC, SGNHT, CCAdL, MCCAdL, "MCCAdL_refresh1"):
            # MCCAdL: sigma_refresh="auto", with these plain gradients a Sigma minibatch every
            # 64 iterations, averaged; MCCAdL_refresh1: a fresh one every iteration.
            sampler = MCCAdL(friction=1.0, sigma_refresh=1) if cls == "MCCAdL_refresh1" else cls(friction=1.0)
            h = sampler.resolve_step_size(model, theta0)[0] if h_mode == "auto" else h_mode
            rng = np.random.default_rng(0)
            target = MinibatchGradient(model, BATCH)
            state = sampler.init_state(theta0, target, rng, FitContext(step=(h, {})))
            for _ in range(100):
                state, _ = sampler.step(state, target, rng)
            chains[cls if isinstance(cls, str) else cls.__name__] = [sampler, state, target, rng, h]

        def step(chain, n):
            sampler, state, target, rng = chain[:4]
            for _ in range(n):
                state, _ = sampler.step(state, target, rng)
            chain[1] = state

        with threadpool_limits(limits=1, user_api="blas"):
            best = best_of_rounds(chains, rounds, steps, step)
        for name, (_, state, _, _, h) in chains.items():
            row = {
                "library": "skbayes_sg",
                "setting": "plain",
                "h_mode": h_mode,
                "sampler": name,
                "h": h,
                "batch": BATCH,
                "us_per_step": round(1e6 * best[name], 1),
                "steps_per_s": round(1.0 / best[name]),
                "ratio_to_sghmc": round(best[name] / best["SGHMC"], 2),
            }
            if name.startswith("MCCAdL"):
                row.update(c_step_stats(state))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


DEFAULT_SAMPLERS = {
    "SGHMC": SGHMC,
    "SGLD": SGLD,
    "SGNHT": SGNHT,
    "MCCAdL": MCCAdL,
    "MCCAdL_same": lambda: MCCAdL(sigma_estimate="same"),
    "MCCAdL_sigma_quarter": lambda: SmallSigmaMCCAdL(0.25),
}


def default_chains(X, y, model, batch):
    """One chain per sampler in the geometry and at the step size a default fit uses."""
    chains = {}
    for name, make in DEFAULT_SAMPLERS.items():
        chains[name] = default_chain(X, y, model, make(), batch)
    return chains


def default_rows(X, y, model, rounds, steps, profile):
    rows = []
    for batch in (BATCH, "auto"):
        chains = default_chains(X, y, model, batch)
        with threadpool_limits(limits=1, user_api="blas"):
            for runner, _, _ in chains.values():
                runner.advance(200)  # warm-up: caches, the C step's norm estimate
            best = best_of_rounds(chains, rounds, steps, lambda chain, n: chain[0].advance(n))
            if profile:
                for name, (runner, _, _) in chains.items():
                    prof = cProfile.Profile()
                    prof.runcall(runner.advance, 3000)
                    out = io.StringIO()
                    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
                    print(
                        f"--- profile: {name}, default setting, batch {batch}, 3000 steps\n"
                        + "\n".join(out.getvalue().splitlines()[4:]),
                        flush=True,
                    )
        for name, (runner, n, h) in chains.items():
            row = {
                "library": "skbayes_sg",
                "setting": "default",
                "batch_option": batch,
                "batch": n,
                "sampler": name,
                "h": h,
                "us_per_step": round(1e6 * best[name], 1),
                "steps_per_s": round(1.0 / best[name]),
                "ratio_to_sghmc": round(best[name] / best["SGHMC"], 2),
            }
            if name.startswith("MCCAdL"):
                row.update(c_step_stats(runner.state))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-blackjax", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile of the default-setting steps")
    args = parser.parse_args()
    rounds, steps = (3, 200) if args.quick else (7, 600)
    data = np.load(SHARED / "data" / "a9a.npz")
    X, y = data["X_train"].astype(float), data["y_train"].astype(float)
    model = LogisticModel(X, y, alpha=1.0)
    rows = plain_rows(model, rounds, steps)
    rows += default_rows(X, y, model, rounds, steps, args.profile)
    if not (args.quick or args.no_blackjax) and ANCHOR.exists():
        out = subprocess.run(
            [
                str(ANCHOR),
                str(SHARED / "bench" / "bench_blackjax_sgmcmc.py"),
                str(SHARED / "data" / "a9a.npz"),
                "20",
                "1e-4",
                "1",
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        ref = {r["sampler"]: r for r in (json.loads(line) for line in out.stdout.splitlines() if line.startswith("{"))}
        if "sghmc" in ref:
            bj = ref["sghmc"]["steps_per_s"]
            mine = next(r["steps_per_s"] for r in rows if r["sampler"] == "MCCAdL" and r.get("h_mode") == 1e-4)
            row = {
                "library": "blackjax",
                "sampler": "sghmc",
                "h": 1e-4,
                "steps_per_s": bj,
                "mccadl_over_blackjax_sghmc": round(mine / bj, 2),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"mccadl_throughput{'_quick' if args.quick else ''}.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    sys.exit(main())
