"""Cost of whitening per mCCAdL step, with the library's own operator (float32 kernel, the DRBM default,
and float64), against the pieces of a library step.

Per step, whitening adds: L' to the force (1), L to the two drifts (2; or theta = theta0 + L z at the C
position and at the end), L and L' around the C step's products with the rows (2): 5 applications of
L = I + V (d - 1) V', 4 P k flops each; and Bc V (n x k), k products with the minibatch's rows (or one
dense n x P x k product), plus the n x n x k Gram correction (Bc V)(D^2 - 1)(Bc V)'.
Timed with one BLAS thread (someone else times on this machine: numbers are indicative)."""

import json
import time

import numpy as np
from common import OUT, Whitening, dense_grads, setup
from threadpoolctl import threadpool_limits

from skbayes_sg.models.drbm import DRBMModel


def timeit(f, reps=200):
    f()
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            f()
        best.append((time.perf_counter() - t) / reps)
    return 1e6 * float(np.median(best))  # microseconds


def main():
    model64, Xtr, ytr, *_ = setup()
    z = np.load(OUT / "prep.npz")
    import pickle

    with open(OUT / "warm_state.pkl", "rb") as f:
        theta = pickle.load(f)[0][0]
    P = theta.size
    out = {"P": P, "n": 100, "unit": "microseconds, 1 BLAS thread, median of 5 x 200"}
    rng = np.random.default_rng(0)
    idx = rng.integers(0, Xtr.shape[0], 100)
    for dtype in ("float32", "float64"):
        model = DRBMModel(Xtr, ytr, n_classes=10, n_hidden=50, dtype=dtype, operator_dtype=dtype)
        r = {}
        with threadpool_limits(1):
            op = model.per_example_gradients(theta, idx)
            r["minibatch_kernel (per_example_gradients + mean)"] = timeit(
                lambda: model.per_example_gradients(theta, idx).mean()
            )
            r["gram (n x n)"] = timeit(lambda: op.gram())
            v = rng.standard_normal(P)
            u = rng.standard_normal(100)
            r["matvec"] = timeit(lambda: op.matvec(v))
            r["rmatvec"] = timeit(lambda: op.rmatvec(u))
            K = op.gram()
            r["eigh n x n"] = timeit(lambda: np.linalg.eigh(K), reps=50)
            # library's row-space C step, one call (Taylor, default tol)
            from skbayes_sg.samplers._expmv import NoiseCovariance, c_step

            ns = Xtr.shape[0] ** 2 / 100.0
            h = 0.0176
            r["library c_step (row space, incl. mean/gram)"] = timeit(
                lambda: c_step(v, NoiseCovariance(model.per_example_gradients(theta, idx), ns, -h / 2), ns, h, h / 2),
                reps=50,
            )
            for k in (9, 20):
                V = z["V"][0][:, :k]
                wh = Whitening(V, z["lam"][0][:k])
                r[f"k{k}: L apply (x5 per step)"] = timeit(lambda: wh.apply(v))
                r[f"k{k}: Bc V via k matvecs"] = timeit(lambda: [op.matvec(V[:, j]) for j in range(k)], reps=50)
                G = dense_grads(model64, theta, idx) if dtype == "float64" else None
                if G is not None:
                    r[f"k{k}: Bc V dense (n x P x k, G formed)"] = timeit(lambda: G @ V)
                BV = rng.standard_normal((100, k))
                d2 = wh.d2m1
                r[f"k{k}: Gram correction (BV D BV')"] = timeit(lambda: (BV * d2) @ BV.T)
        out[dtype] = {key: round(val, 1) for key, val in r.items()}
        print(dtype, json.dumps(out[dtype], indent=1), flush=True)
    # flop counts (per step, per chain)
    H, D, C, n = 50, 64, 10, 100
    kernel = 2 * n * D * H + 12 * n * H * C  # X W' plus ~12 flops per (n, H, C) element (tanh, log1p, ...)
    out["flops"] = {
        "matvec (~2 n (HD + HC + H + C))": 2 * n * (H * D + H * C + H + C),
        "gram (2 n^2 (HC + D + H + C))": 2 * n * n * (H * C + D + H + C),
        "minibatch kernel (approx)": kernel,
        "library step approx (2 kernels + gram + matvec + rmatvec + n^3 Taylor terms)": 2 * kernel
        + 2 * n * n * (H * C + D + H + C)
        + 4 * n * (H * D + H * C)
        + 10 * 2 * n * n,
        "whitening k=9 (5 L apps + 9 matvecs + gram corr)": 5 * 4 * P * 9
        + 9 * 2 * n * (H * D + H * C + H + C)
        + 2 * n * n * 9,
        "whitening k=20": 5 * 4 * P * 20 + 20 * 2 * n * (H * D + H * C + H + C) + 2 * n * n * 20,
    }
    print(json.dumps(out["flops"], indent=1))
    (OUT / "cost.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
