"""Cost of one mCCAdL (and CCAdL) iteration relative to SGHMC and SGNHT on a9a.

Bayesian logistic regression on a9a (P = 124, batch 500 with replacement), the samplers
stepped directly (no fit loop), interleaved in rounds so that all see the same machine
load; the best round of each is kept. At h = 1e-4 (the throughput benchmark's step) and at
each sampler's ``step_size="auto"``. Reports steps per second, the ratio to SGHMC, and
mCCAdL's mean number of products with Sigma per iteration (the C step's cost driver).
When ``~/anchor-venv`` exists (see ``../shared/bench/README.md``) blackjax's SGHMC is timed
in the same invocation.

Prints one JSON object per line and saves ``results/mccadl_throughput[_quick].jsonl``.

Usage::

    python benchmarks/mccadl_throughput.py [--quick] [--no-blackjax]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models import LogisticModel
from skbayes_sg.samplers import CCAdL, MCCAdL, SGHMC, SGNHT

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
RESULTS = Path(__file__).resolve().parent / "results"
ANCHOR = Path.home() / "anchor-venv" / "bin" / "python"
BATCH = 500


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-blackjax", action="store_true")
    args = parser.parse_args()
    rounds, steps = (3, 200) if args.quick else (7, 600)
    data = np.load(SHARED / "data" / "a9a.npz")
    model = LogisticModel(data["X_train"].astype(float), data["y_train"].astype(float), alpha=1.0)
    theta0 = np.zeros(model.n_params)
    rows = []
    for h_mode in (1e-4, "auto"):
        chains = {}
        for cls in (SGHMC, SGNHT, CCAdL, MCCAdL):
            sampler = cls(friction=1.0)
            h = sampler.resolve_step_size(model, theta0)[0] if h_mode == "auto" else h_mode
            rng = np.random.default_rng(0)
            target = MinibatchGradient(model, BATCH)
            state = sampler.init_state(theta0, target, rng, h)
            for _ in range(100):
                state = sampler.step(state, target, rng)
            chains[cls.__name__] = [sampler, state, target, rng, h, np.inf]
        for _ in range(rounds):
            for chain in chains.values():
                sampler, state, target, rng = chain[:4]
                t0 = time.perf_counter()
                for _ in range(steps):
                    state = sampler.step(state, target, rng)
                chain[5] = min(chain[5], (time.perf_counter() - t0) / steps)
                chain[1] = state
        base = chains["SGHMC"][5]
        for name, (sampler, state, _, _, h, sec) in chains.items():
            row = {"library": "skbayes_sg", "h_mode": h_mode, "sampler": name, "h": h, "batch": BATCH,
                   "us_per_step": round(1e6 * sec, 1), "steps_per_s": round(1.0 / sec),
                   "ratio_to_sghmc": round(sec / base, 2)}
            if name == "MCCAdL":
                row["c_step_products_per_iter"] = round(state.extra["c_products"] / state.extra["n_steps"], 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if not (args.quick or args.no_blackjax) and ANCHOR.exists():
        out = subprocess.run([str(ANCHOR), str(SHARED / "bench" / "bench_blackjax_sgmcmc.py"),
                              str(SHARED / "data" / "a9a.npz"), "20", "1e-4", "1"],
                             capture_output=True, text=True, check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        ref = {r["sampler"]: r for r in (json.loads(line) for line in out.stdout.splitlines() if line.startswith("{"))}
        if "sghmc" in ref:
            bj = ref["sghmc"]["steps_per_s"]
            mine = next(r["steps_per_s"] for r in rows if r["sampler"] == "MCCAdL" and r["h_mode"] == 1e-4)
            row = {"library": "blackjax", "sampler": "sghmc", "h": 1e-4, "steps_per_s": bj,
                   "mccadl_over_blackjax_sghmc": round(mine / bj, 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"mccadl_throughput{'_quick' if args.quick else ''}.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    sys.exit(main())
