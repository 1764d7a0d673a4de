"""The C step of mCCAdL: our Taylor ``exp(t Sigma~) p`` against
``scipy.sparse.linalg.expm_multiply`` on a ``LinearOperator``, at equal accuracy.

On minibatch per-example gradients of a9a logistic regression (P = 124, n = 500, at the
MAP point) and of the mCCAdL paper's linear regression (P = 100, n = 500), for a range of
step sizes h (the exponent is ``-(h^2 / 2) Sigma``): products with Sigma, wall time, and
relative error against ``scipy.linalg.expm`` of the dense matrix (formed here only as the
reference). scipy works to double precision and estimates 1-norms of powers of the
operator with ``onenormest``; ours is run at double precision (``tol = 2^-53``, equal
accuracy) and at the samplers' default ``2^-10``.

Prints one JSON object per line and saves ``results/mccadl_expmv_vs_scipy[_quick].png``
and ``.jsonl``.

Usage::

    python benchmarks/mccadl_expmv_vs_scipy.py [--quick]
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.linalg
from scipy.sparse.linalg import LinearOperator, expm_multiply

from skbayes_sg.models import LinearRegressionModel, LogisticModel
from skbayes_sg.models._map import _map_estimate
from skbayes_sg.samplers._expmv import DEFAULT_TOL, NoiseCovariance, c_step

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"


def problems():
    data = np.load(ROOT.parent / "shared" / "data" / "a9a.npz")
    X, y = data["X_train"].astype(float), data["y_train"].astype(float)
    logistic = LogisticModel(X, y, alpha=1.0)
    rng = np.random.default_rng(0)
    Xl = rng.normal(size=(10_000, 100))
    yl = Xl @ rng.normal(size=100) + rng.normal(size=10_000)
    linreg = LinearRegressionModel(Xl, yl, alpha=0.1, fit_intercept=False, noise_precision=1.0)
    for name, model in (("a9a_logistic", logistic), ("linreg_d100", linreg)):
        theta = _map_estimate(model)
        idx = np.random.default_rng(1).integers(0, model.n_samples, 500)
        yield name, model, model.per_example_gradients(theta, idx), model.n_samples**2 / 500


def best_time(fn, repeat):
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeat = 3 if args.quick else 10
    steps = (1e-4, 1e-3, 5e-3) if args.quick else (1e-4, 3e-4, 1e-3, 2e-3, 5e-3, 1e-2)
    rows = []
    for name, model, grads, noise_scale in problems():
        P = model.n_params
        G = grads.to_dense()
        Sigma = noise_scale * np.cov(G.T)  # reference only
        p = np.random.default_rng(2).normal(size=P)
        for h in steps:
            scale = 0.5 * h * h  # t = 1, exponent -(h/2) h Sigma
            exact = scipy.linalg.expm(-scale * Sigma) @ p
            cov = NoiseCovariance(grads, noise_scale, -scale)
            count = [0]

            def mv(v, cov=cov, count=count):
                count[0] += 1
                return cov.matvec(np.ravel(v))

            def mm(V, cov=cov, count=count):
                count[0] += V.shape[1]
                return np.column_stack([cov.matvec(V[:, j]) for j in range(V.shape[1])])

            op = LinearOperator((P, P), matvec=mv, rmatvec=mv, matmat=mm, dtype=float)
            tr = cov.trace()

            def run_scipy(op=op, tr=tr):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return expm_multiply(op, p, traceA=tr)

            count[0] = 0
            t_scipy, f_scipy = best_time(run_scipy, repeat)
            products_scipy = count[0] // repeat
            row = {
                "problem": name,
                "P": P,
                "h": h,
                "norm_h2_Sigma_over_2": round(float(np.linalg.norm(scale * Sigma, 2)), 4),
                "scipy": {
                    "products": products_scipy,
                    "ms": round(1e3 * t_scipy, 3),
                    "rel_err": float(np.linalg.norm(f_scipy - exact) / np.linalg.norm(exact)),
                },
            }
            for label, tol in (("ours_double", 2.0**-53), ("ours_default", DEFAULT_TOL)):
                t_ours, (f_ours, k) = best_time(
                    lambda tol=tol: c_step(p, grads, noise_scale, 1.0, scale, tol=tol, eigvec=np.zeros(P)), repeat
                )
                row[label] = {
                    "products": k,
                    "ms": round(1e3 * t_ours, 3),
                    "rel_err": float(np.linalg.norm(f_ours - exact) / np.linalg.norm(exact)),
                }
            row["speedup_double_vs_scipy"] = round(t_scipy / row["ours_double"]["ms"] * 1e3, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    suffix = "_quick" if args.quick else ""
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"mccadl_expmv_vs_scipy{suffix}.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    _plot(rows, RESULTS / f"mccadl_expmv_vs_scipy{suffix}.png")


def _plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for problem, marker in (("a9a_logistic", "o"), ("linreg_d100", "s")):
        sel = [r for r in rows if r["problem"] == problem]
        x = [r["norm_h2_Sigma_over_2"] for r in sel]
        for key, color in (("scipy", "tab:blue"), ("ours_double", "tab:red"), ("ours_default", "tab:green")):
            ax.plot(x, [r[key]["ms"] for r in sel], marker + "-", color=color, label=f"{key} ({problem})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("||(h^2/2) Sigma||_2")
    ax.set_ylabel("ms per C step")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
