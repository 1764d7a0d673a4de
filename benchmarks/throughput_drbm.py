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

The kernel's precision (``--dtype float64 float32``, the model's ``dtype``) is timed in
turn, and ``--base PATH`` times the same on the package at ``PATH`` (a checkout of an
earlier commit, in a subprocess, in the same run) so that before/after ratios come from
one run on one machine state; rows carry ``"code": "base"`` or ``"head"``.

Prints one JSON object per line; saves ``benchmarks/results/drbm_throughput.json``. Usage::

    python benchmarks/throughput_drbm.py [--quick] [--h 0.02] [--A 10] [--base /tmp/base]
"""

import argparse
import inspect
import json
import os
import subprocess
import sys
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


def time_sampler(name, model, theta0, h, A, warmup, iters, tags):
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
    out = {"benchmark": "throughput_drbm", **tags, "sampler": name, "h": h, "A": A,
           "ms_per_iter": 1e3 * float(np.median(times)), "finite": bool(np.all(np.isfinite(state.theta)))}
    after = sampler.chain_summary(state)
    if "c_step_products_per_iter" in after:
        # Average over the timed iterations only (the summary averages over the whole run).
        n_all = warmup + iters
        timed = (after["c_step_products_per_iter"] * n_all - before["c_step_products_per_iter"] * warmup) / iters
        out["c_step_products_per_iter"] = timed
    return out


def measure(dtype, h, A, warmup, iters, code):
    """Rows of one kernel precision: the building blocks, then each sampler's iteration."""
    data = np.load(DATA)
    X = data["X"][:N_TRAIN].astype(np.float64) / 15.0
    y = data["y"][:N_TRAIN].astype(np.intp)
    kw = {"dtype": dtype} if "dtype" in inspect.signature(DRBMModel).parameters else {}
    if dtype != "float64" and not kw:
        return []  # this code has no single-precision kernel
    model = DRBMModel(X, y, n_classes=26, n_hidden=H, random_state=0, **kw)
    tags = {"code": code, "dtype": dtype}
    theta0 = model.initial_point()
    rng = np.random.default_rng(1)
    idx = rng.integers(0, N_TRAIN, BATCH)
    grads = model.per_example_gradients(theta0, idx)
    v = rng.standard_normal(model.n_params)
    blocks = {
        "benchmark": "throughput_drbm", **tags, "n_batch": BATCH, "n_params": model.n_params,
        "gradient_ms": median_ms(lambda: model.per_example_gradients(theta0, idx).mean(), 20),
        "full_gradient_ms": median_ms(lambda: model.log_likelihood_and_grad(theta0), 5),
        "predict_100_draws_ms": median_ms(lambda: model.log_proba_draws(np.tile(theta0, (100, 1)), X[:1000]), 3),
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
            continue
        r = time_sampler(name, model, theta0, h, A, warmup, iters, tags)
        by_name[name] = r
        rows.append(r)
        print(json.dumps(r), flush=True)
    if "sghmc" in by_name and "mccadl" in by_name:
        ratio = {"benchmark": "throughput_drbm", **tags, "ratio_mccadl_to_sghmc":
                 by_name["mccadl"]["ms_per_iter"] / by_name["sghmc"]["ms_per_iter"], "goal": 3.0}
        rows.append(ratio)
        print(json.dumps(ratio), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 warm-up and 20 timed iterations")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--h", type=float, default=2e-2)
    parser.add_argument("--A", type=float, default=10.0)
    parser.add_argument("--dtype", nargs="+", default=["float64", "float32"])
    parser.add_argument("--base", help="package root of an earlier commit, timed in the same run")
    parser.add_argument("--code", default="head", help=argparse.SUPPRESS)
    parser.add_argument("--no-save", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    warmup, iters = (20, 20) if args.quick else (args.warmup, args.iters)
    # One BLAS thread, as the estimator's chains run: on a shared machine threads only add noise.
    from threadpoolctl import threadpool_limits

    rows = []
    with threadpool_limits(limits=1, user_api="blas"):
        if args.base:
            env = {**os.environ, "PYTHONPATH": args.base}
            cmd = [sys.executable, __file__, "--code", "base", "--no-save", "--dtype", "float64",
                   "--warmup", str(warmup), "--iters", str(iters), "--h", str(args.h), "--A", str(args.A)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            for line in out.stdout.splitlines():
                rows.append(json.loads(line))
                print(line, flush=True)
        for dtype in args.dtype:
            rows += measure(dtype, args.h, args.A, warmup, iters, args.code)
    if args.base:
        base = {r["sampler"]: r for r in rows if r.get("code") == "base" and "sampler" in r}
        base_blocks = next(r for r in rows if r.get("code") == "base" and "gradient_ms" in r)
        for r in [r for r in rows if r.get("code") == "head" and "gradient_ms" in r]:
            speedup = {"benchmark": "throughput_drbm", "speedup_vs_base": r["dtype"],
                       **{k: base_blocks[k] / r[k] for k in ("gradient_ms", "full_gradient_ms", "predict_100_draws_ms")}}
            speedup.update({f"{name}_iter": base[name]["ms_per_iter"] / h["ms_per_iter"]
                            for name, h in ((r2["sampler"], r2) for r2 in rows
                                            if r2.get("code") == "head" and r2.get("dtype") == r["dtype"]
                                            and "sampler" in r2) if name in base})
            rows.append(speedup)
            print(json.dumps(speedup), flush=True)
    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "drbm_throughput.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
