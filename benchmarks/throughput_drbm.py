"""Cost of one sampler iteration on the letter DRBM (n = 1,000, P = 4,326), SGHMC against mCCAdL.

The performance goal of the DRBM issue: one mCCAdL iteration costs at most 3x one SGHMC
iteration on letter with H = 100 hidden units and minibatches of 1,000 rows drawn with
replacement. Every sampler runs ``--warmup`` iterations from the same random start (so
the covariance seen by mCCAdL's C step is that of a chain under way, not of the start),
then ``--iters`` timed iterations; the time per iteration is the median over the timed
ones. Also timed: one minibatch gradient (the structured per-example operator built and
its mean taken) and one product with the noise covariance ``Sigma v`` (two operator
products), the two building blocks; and the operator's memory against the n x P matrix
it replaces.

Prints one JSON object per line; saves ``benchmarks/results/drbm_throughput.json``. Usage::

    python benchmarks/throughput_drbm.py [--quick] [--h 0.02] [--A 10]
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models.drbm import DRBMModel
from skbayes_sg.samplers import SAMPLERS

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "letter.npz"
RESULTS = ROOT / "benchmarks" / "results"
N_TRAIN, H, BATCH = 10_500, 100, 1_000


def median_ms(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def time_sampler(name, model, theta0, h, A, warmup, iters):
    sampler = SAMPLERS[name](step_size=h, friction=A)
    rng = np.random.default_rng(0)
    target = MinibatchGradient(model, BATCH, "replacement")
    state = sampler.init_state(theta0.copy(), target, rng, h)
    for _ in range(warmup):
        state = sampler.step(state, target, rng)
    before = dict(sampler.chain_summary(state))
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        state = sampler.step(state, target, rng)
        times.append(time.perf_counter() - t0)
    out = {"benchmark": "throughput_drbm", "sampler": name, "h": h, "A": A, "ms_per_iter": 1e3 * float(np.median(times)),
           "finite": bool(np.all(np.isfinite(state.theta)))}
    after = sampler.chain_summary(state)
    if "c_step_products_per_iter" in after:
        # Average over the timed iterations only (the summary averages over the whole run).
        n_all = warmup + iters
        timed = (after["c_step_products_per_iter"] * n_all - before["c_step_products_per_iter"] * warmup) / iters
        out["c_step_products_per_iter"] = timed
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 warm-up and 20 timed iterations")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--h", type=float, default=2e-2)
    parser.add_argument("--A", type=float, default=10.0)
    args = parser.parse_args()
    warmup, iters = (20, 20) if args.quick else (args.warmup, args.iters)

    data = np.load(DATA)
    X = data["X"][:N_TRAIN].astype(np.float64) / 15.0
    y = data["y"][:N_TRAIN].astype(np.intp)
    model = DRBMModel(X, y, n_classes=26, n_hidden=H, random_state=0)
    theta0 = model.initial_point()
    rng = np.random.default_rng(1)
    idx = rng.integers(0, N_TRAIN, BATCH)
    grads = model.per_example_gradients(theta0, idx)
    v = rng.standard_normal(model.n_params)
    blocks = {
        "benchmark": "throughput_drbm", "n_batch": BATCH, "n_params": model.n_params,
        "gradient_ms": median_ms(lambda: model.per_example_gradients(theta0, idx).mean(), 20),
        "covariance_matvec_ms": median_ms(lambda: grads.covariance_matvec(v), 50),
        "operator_MB": (grads.A.nbytes + grads.a.nbytes + grads.r.nbytes + grads._a_op.nbytes
                        + grads._X_op.nbytes) / 1e6,
        "dense_G_MB": BATCH * model.n_params * 8 / 1e6,
    }
    print(json.dumps(blocks), flush=True)
    rows = [blocks]
    by_name = {}
    for name in ("sghmc", "sgnht", "ccadl", "mccadl"):
        if name not in SAMPLERS:
            print(json.dumps({"benchmark": "throughput_drbm", "sampler": name, "skipped": "not available"}))
            continue
        r = time_sampler(name, model, theta0, args.h, args.A, warmup, iters)
        by_name[name] = r
        rows.append(r)
        print(json.dumps(r), flush=True)
    if "sghmc" in by_name and "mccadl" in by_name:
        ratio = {"benchmark": "throughput_drbm", "ratio_mccadl_to_sghmc":
                 by_name["mccadl"]["ms_per_iter"] / by_name["sghmc"]["ms_per_iter"], "goal": 3.0}
        rows.append(ratio)
        print(json.dumps(ratio), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drbm_throughput.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
