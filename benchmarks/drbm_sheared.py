"""The DRBM's curvature in its chain coordinates: why the default fit runs sheared.

A default fit on digits (the split of ``drbm_digits_defaults.py``, features in [0, 1], 50
hidden units) gives posterior draws; at the last draw of each chain this computes the largest
eigenvalues of the empirical Fisher information plus the prior, ``J' (G' G + alpha I) J``
(``G`` the n x P per-example gradients of all 1,257 training rows, ``J = d theta / d z``),
the curvature that bounds the chains' step, in four coordinate systems:

* ``theta``: the DRBM's own parameters (``J = I``);
* ``inputs``: ``c~ = c + W xbar`` only;
* ``sheared``: the default, ``c~`` and ``d~ = d + s sum_j U_j`` with ``s = 1/2``
  (:class:`skbayes_sg.models.ShearedDRBM`);
* ``own_activation``: ``c~`` and ``d~_y = d_y + sum_j S_jy U_jy`` with ``S`` each unit's
  mean activation over the rows *at that draw*: what a shear refreshed at every point
  would reach (a fixed map cannot follow it; shown for scale).

It also reports the fit's ``lambda_max`` (the auto step's curvature, measured in the chain
coordinates) and step size. Prints JSON; writes ``benchmarks/results/drbm_sheared.json``.
Usage::

    python benchmarks/drbm_sheared.py
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.sparse.linalg import eigsh
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import drbm_digits_defaults as bench  # noqa: E402

RESULTS = bench.ROOT / "benchmarks" / "results" / "drbm_sheared.json"
TOP = 6


def _jacobian(model, xbar, S):
    """``d theta / d z`` (P, P) for ``c = c~ - W xbar`` and ``d_y = d~_y - sum_j S_jy U_jy``."""
    H, D, C, P = model.n_hidden, model.n_features, model.n_classes, model.n_params
    J = np.eye(P)
    c0, d0 = H * D + H * C, H * D + H * C + H
    if xbar is not None:
        for j in range(H):
            J[c0 + j, j * D : (j + 1) * D] = -xbar
    if S is not None:
        for j in range(H):
            J[d0 + np.arange(C), H * D + j * C + np.arange(C)] = -S[j]
    return J


def _top(F):
    return sorted(eigsh(F, k=TOP, which="LA", return_eigenvectors=False).tolist(), reverse=True)


def main():
    from skbayes_sg import SGBayesDRBMClassifier

    Xtr, _, ytr, _ = bench._data()
    t0 = time.perf_counter()
    clf = SGBayesDRBMClassifier(n_jobs=2, random_state=0).fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    from skbayes_sg.models import DRBMModel

    # The fitted estimator keeps no data: the model again, in double precision.
    model = DRBMModel(Xtr, ytr, n_classes=clf.classes_.size, n_hidden=clf.n_hidden, operator_dtype="float64")
    xbar = Xtr.mean(axis=0)
    n = Xtr.shape[0]
    idx = np.arange(n)
    out = {
        "benchmark": "drbm_sheared",
        "data": "digits, 1,257 x 64 in [0, 1], 50 hidden units",
        "fit_s": fit_s,
        "n_iter": int(clf.n_iter_),
        "step_size": clf.diagnostics_["step_size"],
        "lambda_max_chain_coordinates": clf.diagnostics_.get("lambda_max"),
        "points": [],
    }
    H, C = model.n_hidden, model.n_classes
    for chain in range(min(2, clf.samples_.shape[0])):
        theta = clf.samples_[chain, -1]
        op = model.per_example_gradients(theta, idx)
        G = np.stack([op.rmatvec(e) for e in np.eye(n)])  # (n, P), in theta
        F = G.T @ G + model.alpha * np.eye(model.n_params)
        W, U, c, _ = model.unpack(theta)
        S_own = expit((Xtr @ W.T + c)[:, :, None] + U[None]).mean(axis=0)  # (H, C)
        row = {"chain": chain}
        for name, J in [
            ("theta", None),
            ("inputs", _jacobian(model, xbar, None)),
            ("sheared", _jacobian(model, xbar, np.full((H, C), 0.5))),
            ("own_activation", _jacobian(model, xbar, S_own)),
        ]:
            row[name] = [round(v, 1) for v in _top(F if J is None else J.T @ F @ J)]
        print(json.dumps(row), flush=True)
        out["points"].append(row)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "points"}))


if __name__ == "__main__":
    main()
