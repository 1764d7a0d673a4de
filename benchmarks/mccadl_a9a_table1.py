"""mCCAdL paper (Wei & Shang 2026) Table 1 on a9a: posterior expected test log loss
against the step size.

The paper's Table 1 is Bayesian logistic regression on MNIST 7-vs-9 and CIFAR-10 pairs;
a9a (32,561 x 123 binary features, LIBSVM's UCI Adult) is our stand-in: prior N(0, I) on
all weights and the intercept, minibatches of n = 500 drawn with replacement (section 3.2).
For SGHMC, SGNHT, CCAdL (full covariance, P = 124) and mCCAdL, at A in {1, 10} and
step sizes up to where all but mCCAdL fail, each chain starts at the MAP point, runs
``--passes`` passes over the data, drops the first 20% (as the paper), and reports the
posterior expected log loss: the mean over kept draws of each draw's test log loss
(eq. 31, as the paper defines it, following Nemeth & Fearnhead 2021). A chain whose state
becomes non-finite or whose expected log loss exceeds 10 (the prior predictive's is
log 2 = 0.69) is reported as failed (the paper's NaN / Inf).

Also reported, per A: each sampler's largest finite h and largest "accurate" h (expected
log loss within 5% of its own at the smallest h), for the issue's goal: mCCAdL accurate
at a step size at least 10x the largest at which CCAdL runs at all.

Prints one JSON object per line; saves ``results/mccadl_a9a_table1[_quick].png`` and
``.jsonl``.

Usage::

    python benchmarks/mccadl_a9a_table1.py [--quick] [--passes 20]
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.special import log_expit

from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models import LogisticModel
from skbayes_sg.models._map import _map_estimate
from skbayes_sg.samplers import SGHMC, SGNHT, CCAdL, MCCAdL

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
DATA = ROOT.parent / "shared" / "data" / "a9a.npz"
SAMPLERS = {"SGHMC": SGHMC, "SGNHT": SGNHT, "CCAdL": CCAdL, "mCCAdL": MCCAdL}
STEPS = (1e-4, 3e-4, 1e-3, 2e-3, 4e-3, 6e-3, 1e-2, 1.5e-2)
BATCH = 500
FAIL_LOSS = 10.0


def expected_log_loss(thetas, X, y):
    """Mean over draws of each draw's test log loss (mCCAdL paper eq. 31)."""
    z = X @ thetas[:, :-1].T + thetas[:, -1]  # (n_test, S)
    sign = np.where(y[:, None] > 0.5, 1.0, -1.0)
    return float(np.mean(-log_expit(sign * z)))


def run(sampler, model, theta0, h, n_iter, thin, seed):
    rng = np.random.default_rng(seed)
    target = MinibatchGradient(model, BATCH)
    state = sampler.init_state(theta0.copy(), target, rng)
    n_burn = n_iter // 5
    kept = []
    for t in range(n_iter):
        state, _ = sampler.step(state, target, rng)
        if t % 16 == 0 and not np.isfinite(state.theta).all():
            return None
        if t >= n_burn and (t - n_burn) % thin == 0:
            kept.append(state.theta.copy())
    kept = np.array(kept)
    return kept if np.isfinite(kept).all() else None


def summarize(rows, A):
    """Largest finite h per sampler, largest "accurate" h (expected log loss within 5% of the
    sampler's own loss at the smallest h), and the issue's goals for mCCAdL."""
    finite, accurate = {}, {}
    for name in SAMPLERS:
        mine = sorted(
            (r["h"], r["expected_log_loss"]) for r in rows if r["A"] == A and r["sampler"] == name and not r["failed"]
        )
        finite[name] = mine[-1][0] if mine else None
        ok = [h for h, loss in mine if mine and loss <= 1.05 * mine[0][1]]
        accurate[name] = max(ok) if ok else None
    m_rows = {r["h"]: r["expected_log_loss"] for r in rows if r["A"] == A and r["sampler"] == "mCCAdL"}
    return {
        "A": A,
        "largest_finite_h": finite,
        "largest_accurate_h": accurate,
        "mccadl_loss_smallest_h": m_rows.get(min(STEPS)),
        "mccadl_loss_largest_accurate_h": m_rows.get(accurate["mCCAdL"]),
        "ratio_mccadl_accurate_h_over_ccadl_finite_h": (
            None if not finite["CCAdL"] or not accurate["mCCAdL"] else round(accurate["mCCAdL"] / finite["CCAdL"], 2)
        ),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 passes, A = 1 only")
    parser.add_argument("--passes", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    passes = 4.0 if args.quick else args.passes
    frictions = (1.0,) if args.quick else (1.0, 10.0)
    data = np.load(DATA)
    X, y = data["X_train"].astype(float), data["y_train"].astype(float)
    Xt, yt = data["X_test"].astype(float), data["y_test"].astype(float)
    model = LogisticModel(X, y, alpha=1.0)
    theta_map = _map_estimate(model)
    map_loss = expected_log_loss(theta_map[None], Xt, yt)
    print(json.dumps({"what": "MAP test log loss", "log_loss": round(map_loss, 4)}), flush=True)
    n_iter = int(passes * X.shape[0] / BATCH)
    rows = []
    for A in frictions:
        for h in STEPS:
            for name, cls in SAMPLERS.items():
                t0 = time.perf_counter()
                with np.errstate(all="ignore"):
                    draws = run(
                        cls(step_size=h, friction=A), model, theta_map, h, n_iter, 5, np.random.SeedSequence(args.seed)
                    )
                    loss = expected_log_loss(draws, Xt, yt) if draws is not None else float("nan")
                failed = not np.isfinite(loss) or loss > FAIL_LOSS
                row = {
                    "A": A,
                    "h": h,
                    "sampler": name,
                    "passes": passes,
                    "expected_log_loss": None if failed else round(loss, 4),
                    "failed": failed,
                    "seconds": round(time.perf_counter() - t0, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    for A in frictions:
        print(json.dumps(summarize(rows, A)), flush=True)
    suffix = "_quick" if args.quick else ""
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"mccadl_a9a_table1{suffix}.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    _plot(rows, frictions, map_loss, RESULTS / f"mccadl_a9a_table1{suffix}.png")


def _plot(rows, frictions, map_loss, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(frictions), figsize=(6 * len(frictions), 4), squeeze=False)
    for ax, A in zip(axes[0], frictions):
        for name in SAMPLERS:
            pts = [
                (r["h"], r["expected_log_loss"])
                for r in rows
                if r["A"] == A and r["sampler"] == name and not r["failed"]
            ]
            if pts:
                ax.plot(*zip(*pts), "o-", label=name)
        ax.axhline(map_loss, color="k", ls=":", label="MAP")
        ax.set_xscale("log")
        ax.set_xlabel("step size h")
        ax.set_ylabel("posterior expected test log loss")
        ax.set_title(f"a9a, A = {A:g} (missing points: failed)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
