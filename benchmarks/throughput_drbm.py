"""Cost of one sampler iteration on the letter DRBM (n = 1,000, P = 4,326), SGHMC against mCCAdL.

The performance goal of the DRBM issue: one mCCAdL iteration costs at most 3x one SGHMC
iteration on letter with H = 100 hidden units and minibatches of 1,000 rows drawn with
replacement. Every sampler runs ``--warmup`` iterations from the same random start (so
the covariance seen by mCCAdL's C step is that of a chain under way, not of the start),
then ``--iters`` timed iterations; the time per iteration is the median over the timed
ones. Also timed: one minibatch gradient (the structured per-example operator built and
its mean taken), the full-data gradient and a 20-draw prediction.

The kernel's precision (``--dtype float64 float32``, the model's ``dtype``) is timed, and
``--base PATH`` times the package at ``PATH`` (a checkout of an earlier commit, imported
side by side as ``skbayes_sg_base``) in the same process. The variants are interleaved:
each of ``--rounds`` rounds times every building block and ``--iters`` iterations of every
sampler for every variant in turn, so that a change of load on a shared machine hits all
of them alike; the ``"speedup_vs_base"`` rows are medians over rounds of the per-round
ratios. Rows carry ``"code": "base"`` or ``"head"``. ``--data digits`` times digits (10
classes, batches of 200) instead of letter.

Prints one JSON object per line; saves ``benchmarks/results/drbm_throughput.json``. Usage::

    python benchmarks/throughput_drbm.py [--quick] [--h 0.02] [--A 10] [--base /tmp/base] [--data digits]
"""

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package, not an installed one
DATA = ROOT.parent / "shared" / "data" / "letter.npz"
RESULTS = ROOT / "benchmarks" / "results"
N_TRAIN, H, BATCH = 10_500, 100, 1_000


def _load(data):
    if data == "letter":
        d = np.load(DATA)
        return d["X"][:N_TRAIN].astype(np.float64) / 15.0, d["y"][:N_TRAIN].astype(np.intp), 26, BATCH
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X / 16.0, y.astype(np.intp), 10, 200


def _import_base(path):
    """The package at ``path`` imported as ``skbayes_sg_base`` (its imports are relative), so
    that old and new code run side by side in one process."""
    import importlib.util

    root = Path(path) / "skbayes_sg"
    spec = importlib.util.spec_from_file_location(
        "skbayes_sg_base", root / "__init__.py", submodule_search_locations=[str(root)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["skbayes_sg_base"] = module
    spec.loader.exec_module(module)
    return (
        importlib.import_module("skbayes_sg_base.models.drbm"),
        importlib.import_module("skbayes_sg_base.samplers"),
        importlib.import_module("skbayes_sg_base.minibatch"),
    )


class _Variant:
    """One code version and kernel precision: its model, a chain per sampler, its timings."""

    def __init__(self, code, dtype, drbm, samplers, minibatch, X, y, C, batch, h, A, warmup):
        kw = {"dtype": dtype} if "dtype" in inspect.signature(drbm.DRBMModel).parameters else {}
        self.tags = {"code": code, "dtype": dtype}
        self.model = drbm.DRBMModel(X, y, n_classes=C, n_hidden=H, random_state=0, **kw)
        self.theta0 = self.model.initial_point()
        rng = np.random.default_rng(1)
        self.idx = rng.integers(0, X.shape[0], batch)
        self.Xp = X[:1000]
        self.chains = {}
        for name in ("sghmc", "sgnht", "ccadl", "mccadl"):
            if name in samplers.SAMPLERS:
                sampler = samplers.SAMPLERS[name](step_size=h, friction=A)
                srng = np.random.default_rng(0)
                target = minibatch.MinibatchGradient(self.model, batch, "replacement")
                state = sampler.init_state(self.theta0.copy(), target, srng)
                for _ in range(warmup):
                    state, _ = sampler.step(state, target, srng)
                self.chains[name] = [sampler, state, target, srng]
        self.times = {}

    def _time(self, key, fn, repeat=1):
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            self.times.setdefault(key, []).append(1e3 * (time.perf_counter() - t0))

    def blocks(self):
        m, t = self.model, self.theta0
        self._time("gradient_ms", lambda: m.per_example_gradients(t, self.idx).mean(), 3)
        self._time("full_gradient_ms", lambda: m.log_likelihood_and_grad(t))
        self._time("predict_20_draws_ms", lambda: m.log_proba_draws(np.tile(t, (20, 1)), self.Xp))

    def iterate(self, n):
        for name, chain in self.chains.items():
            sampler, state, target, rng = chain

            def step():
                chain[1] = sampler.step(chain[1], target, rng)[0]

            self._time(f"{name}_ms_per_iter", step, n)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 rounds of 3 iterations")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--iters", type=int, default=5, help="iterations per sampler per round")
    parser.add_argument("--h", type=float, default=2e-2)
    parser.add_argument("--A", type=float, default=10.0)
    parser.add_argument("--dtype", nargs="+", default=["float64", "float32"])
    parser.add_argument(
        "--data",
        choices=["letter", "digits"],
        default="letter",
        help="letter (H = 100, C = 26, batches of 1,000) or digits (C = 10, batches of 200)",
    )
    parser.add_argument("--base", help="package root of an earlier commit, timed alongside")
    args = parser.parse_args()
    rounds, iters = (10, 3) if args.quick else (args.rounds, args.iters)
    # One BLAS thread, as the estimator's chains run: on a shared machine threads only add noise.
    from threadpoolctl import threadpool_limits

    from skbayes_sg import minibatch as head_minibatch
    from skbayes_sg import samplers as head_samplers
    from skbayes_sg.models import drbm as head_drbm

    X, y, C, batch = _load(args.data)
    with threadpool_limits(limits=1, user_api="blas"):
        variants = []
        if args.base:
            b_drbm, b_samplers, b_minibatch = _import_base(args.base)
            variants.append(
                _Variant(
                    "base", "float64", b_drbm, b_samplers, b_minibatch, X, y, C, batch, args.h, args.A, args.warmup
                )
            )
        for dtype in args.dtype:
            variants.append(
                _Variant(
                    "head", dtype, head_drbm, head_samplers, head_minibatch, X, y, C, batch, args.h, args.A, args.warmup
                )
            )
        # Interleaved: every round times every variant, so a change of load on the shared
        # machine hits all of them alike; per-round ratios then cancel it.
        for _ in range(rounds):
            for var in variants:
                var.blocks()
                var.iterate(iters)
    rows = []
    for var in variants:
        row = {
            "benchmark": "throughput_drbm",
            "data": args.data,
            **var.tags,
            "n_batch": batch,
            "n_params": var.model.n_params,
            "rounds": rounds,
        }
        row.update({k: float(np.median(v)) for k, v in var.times.items()})
        if "mccadl_ms_per_iter" in row and "sghmc_ms_per_iter" in row:
            row["ratio_mccadl_to_sghmc"] = row["mccadl_ms_per_iter"] / row["sghmc_ms_per_iter"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.base:
        base = variants[0]
        for var in variants[1:]:
            # Median over rounds of the per-round ratio base / head of each timing.
            speed = {"benchmark": "throughput_drbm", "data": args.data, "speedup_vs_base": var.tags["dtype"]}
            for key, times in var.times.items():
                b = np.asarray(base.times[key]).reshape(rounds, -1).mean(axis=1)
                h = np.asarray(times).reshape(rounds, -1).mean(axis=1)
                speed[key] = float(np.median(b / h))
            rows.append(speed)
            print(json.dumps(speed), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "drbm_throughput.json" if args.data == "letter" else f"drbm_throughput_{args.data}.json"
    (RESULTS / name).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
