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
earlier commit) in the same run, each in a fresh subprocess, alternating ``--rounds``
times; rows carry ``"code": "base"`` or ``"head"``. Every timing is reported as a median
and a minimum over its repeats, and the closing ``"summary"`` rows give the minimum over
rounds and the before/after ratios of those minima: on a shared machine the minimum is
the timing least disturbed by other processes. ``--data digits`` times digits (10
classes, batches of 200) instead of letter.

Prints one JSON object per line; saves ``benchmarks/results/drbm_throughput.json``. Usage::

    python benchmarks/throughput_drbm.py [--quick] [--h 0.02] [--A 10] [--base /tmp/base] [--rounds 3]
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
    """Median and minimum wall time of ``fn`` in ms (the minimum is the least disturbed by
    other processes on a shared machine)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times)), 1e3 * float(np.min(times))


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
           "ms_per_iter": 1e3 * float(np.median(times)), "min_ms_per_iter": 1e3 * float(np.min(times)),
           "finite": bool(np.all(np.isfinite(state.theta)))}
    after = sampler.chain_summary(state)
    if "c_step_products_per_iter" in after:
        # Average over the timed iterations only (the summary averages over the whole run).
        n_all = warmup + iters
        timed = (after["c_step_products_per_iter"] * n_all - before["c_step_products_per_iter"] * warmup) / iters
        out["c_step_products_per_iter"] = timed
    return out


def _load(data):
    if data == "letter":
        d = np.load(DATA)
        return d["X"][:N_TRAIN].astype(np.float64) / 15.0, d["y"][:N_TRAIN].astype(np.intp), 26, BATCH
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X / 16.0, y.astype(np.intp), 10, 200


def measure(dtype, h, A, warmup, iters, code, data="letter"):
    """Rows of one kernel precision: the building blocks, then each sampler's iteration."""
    X, y, C, batch = _load(data)
    kw = {"dtype": dtype} if "dtype" in inspect.signature(DRBMModel).parameters else {}
    if dtype != "float64" and not kw:
        return []  # this code has no single-precision kernel
    model = DRBMModel(X, y, n_classes=C, n_hidden=H, random_state=0, **kw)
    tags = {"code": code, "dtype": dtype, "data": data}
    theta0 = model.initial_point()
    rng = np.random.default_rng(1)
    idx = rng.integers(0, X.shape[0], batch)
    grads = model.per_example_gradients(theta0, idx)
    v = rng.standard_normal(model.n_params)
    blocks = {"benchmark": "throughput_drbm", **tags, "n_batch": batch, "n_params": model.n_params}
    for key, fn, repeat in (
            ("gradient_ms", lambda: model.per_example_gradients(theta0, idx).mean(), 20),
            ("full_gradient_ms", lambda: model.log_likelihood_and_grad(theta0), 5),
            ("predict_100_draws_ms", lambda: model.log_proba_draws(np.tile(theta0, (100, 1)), X[:1000]), 3),
            ("covariance_matvec_ms", lambda: grads.covariance_matvec(v), 50)):
        blocks[key], blocks["min_" + key] = median_ms(fn, repeat)
    blocks.update(operator_MB=(grads.A.nbytes + grads.a.nbytes + grads.r.nbytes + grads._a_op.nbytes
                               + grads._X_op.nbytes) / 1e6, dense_G_MB=batch * model.n_params * 8 / 1e6)
    rows = [blocks]
    for name in ("sghmc", "sgnht", "ccadl", "mccadl"):
        if name in SAMPLERS:
            rows.append(time_sampler(name, model, theta0, h, A, warmup, iters, tags))
    return rows


def _subprocess(package, code, dtype, args, warmup, iters):
    env = {**os.environ, "PYTHONPATH": str(package)}
    cmd = [sys.executable, __file__, "--one", code, "--dtype", dtype, "--data", args.data, "--warmup", str(warmup),
           "--iters", str(iters), "--h", str(args.h), "--A", str(args.A)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 warm-up and 20 timed iterations")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--h", type=float, default=2e-2)
    parser.add_argument("--A", type=float, default=10.0)
    parser.add_argument("--dtype", nargs="+", default=["float64", "float32"])
    parser.add_argument("--data", choices=["letter", "digits"], default="letter",
                        help="letter (H = 100, C = 26, batches of 1,000) or digits (C = 10, batches of 200)")
    parser.add_argument("--base", help="package root of an earlier commit, timed in the same run")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate base and head this many times; ratios use the minimum over rounds")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    warmup, iters = (20, 20) if args.quick else (args.warmup, args.iters)
    # One BLAS thread, as the estimator's chains run: on a shared machine threads only add noise.
    from threadpoolctl import threadpool_limits

    if args.one:
        with threadpool_limits(limits=1, user_api="blas"):
            for dtype in args.dtype:
                for row in measure(dtype, args.h, args.A, warmup, iters, args.one, args.data):
                    print(json.dumps(row), flush=True)
        return
    rows = []
    codes = ([("base", args.base)] if args.base else []) + [("head", ROOT)]
    for _ in range(args.rounds):
        for code, package in codes:
            for dtype in args.dtype:
                for row in _subprocess(package, code, dtype, args, warmup, iters):
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    # Per (code, dtype, sampler or blocks): the minimum over rounds of every min_ timing.
    best = {}
    for r in rows:
        key = (r["code"], r["dtype"], r.get("sampler", "blocks"))
        for k, v in r.items():
            if k.startswith("min_"):
                best.setdefault(key, {})[k] = min(v, best.get(key, {}).get(k, np.inf))
    summary = []
    for (code, dtype, what), values in sorted(best.items()):
        if code != "head":
            continue
        ref = best.get(("base", "float64", what)) if args.base else None
        out = {"benchmark": "throughput_drbm", "summary": what, "dtype": dtype, "data": args.data, **values}
        if ref:
            out.update({"speedup_vs_base_" + k[4:]: ref[k] / v for k, v in values.items() if k in ref})
        if what == "mccadl" and ("head", dtype, "sghmc") in best:
            out["ratio_mccadl_to_sghmc"] = values["min_ms_per_iter"] / best[("head", dtype, "sghmc")]["min_ms_per_iter"]
        summary.append(out)
        print(json.dumps(out), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "drbm_throughput.json" if args.data == "letter" else f"drbm_throughput_{args.data}.json"
    (RESULTS / name).write_text(json.dumps(rows + summary, indent=1))


if __name__ == "__main__":
    main()
