"""Draws check: fit a fixed set of cases and fingerprint their draws, to show that a change
which should not touch the maths leaves every draw bit-identical.

Run once on the tree before the change with ``--save before.json`` and once after with
``--compare before.json``; the comparison prints one JSON line per case and exits 1 if any
case's draws, sample statistics, gradient count or predictions differ in a single bit.

The cases cover every sampler through the estimators (with plain and control-variate
gradients, whitened and not), the model families (logistic, softmax, linear regression
with its noise precision, Poisson with an exposure), the DRBM, every way rows are held (dense, sparse one-hot rows,
one-byte integer copies, memory-mapped), sample weights, multilevel SGLD (antithetic
and plain), and a warm-started continuation.
"""

import argparse
import hashlib
import json
import sys
import tempfile
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer, load_iris, make_regression

from skbayes_sg import (
    SGBayesDRBMClassifier,
    SGBayesLinearRegression,
    SGBayesLogisticRegression,
    SGBayesPoissonRegressor,
)
from skbayes_sg.samplers import MLSGLD, SGLD


def _digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            continue
        a = np.ascontiguousarray(np.asarray(a, dtype=float))
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _data():
    Xc, yc = load_breast_cancer(return_X_y=True)
    Xi, yi = load_iris(return_X_y=True)
    Xr, yr = make_regression(n_samples=400, n_features=6, noise=5.0, random_state=0)
    rng = np.random.default_rng(0)
    Xb = (rng.random((600, 30)) < 0.2).astype(float)  # one-hot-like: sparse rows
    yb = (Xb[:, :5].sum(1) + rng.standard_normal(600) > 1.0).astype(int)
    Xn = rng.integers(0, 5, (500, 8)).astype(float)  # small integers: one-byte copies
    yn = (Xn @ rng.standard_normal(8) + rng.standard_normal(500) > 0).astype(int)
    # Counts with an exposure, from a stream of their own (the other cases' data stay as they were).
    rng = np.random.default_rng(28)
    Xp = rng.standard_normal((400, 4))
    exposure = rng.uniform(0.5, 2.0, 400)
    yp = rng.poisson(exposure * np.exp(0.3 + Xp @ [0.4, -0.3, 0.2, 0.0]))
    return dict(cancer=(Xc, yc), iris=(Xi, yi), reg=(Xr, yr), onehot=(Xb, yb), ints=(Xn, yn), counts=(Xp, yp, exposure))


def _cases(data):
    Xc, yc = data["cancer"]
    Xs = (Xc - Xc.mean(0)) / Xc.std(0)
    kw = dict(n_chains=2, random_state=0)
    log = SGBayesLogisticRegression
    cases = {}
    for name in ("sgld", "sghmc", "sgnht", "ccadl", "mccadl"):
        cases[f"logistic-{name}-cv"] = (log(sampler=name, n_iter=300, batch_size=50, **kw), Xc, yc, {})
        cases[f"logistic-{name}-plain"] = (
            log(sampler=name, n_iter=300, batch_size=50, gradient="minibatch", **kw),
            Xs,
            yc,
            {},
        )
    cases["logistic-default"] = (log(random_state=0), Xc, yc, {})
    cases["logistic-gadmala"] = (log(sampler="gadmala", n_iter=400, **kw), Xs, yc, {})
    cases["logistic-gadrwm"] = (log(sampler="gadrwm", n_iter=400, **kw), Xs, yc, {})
    cases["logistic-epochs"] = (
        log(sampler="mccadl", n_iter=300, batch_size=40, batch_scheme="epochs", **kw),
        Xc,
        yc,
        {},
    )
    weights = np.random.default_rng(1).random(len(yc)) + 0.5
    cases["logistic-weights"] = (log(n_iter=300, batch_size=50, **kw), Xc, yc, {"sample_weight": weights})
    Xi, yi = data["iris"]
    cases["softmax-default"] = (log(random_state=0), Xi, yi, {})
    cases["softmax-sghmc"] = (log(sampler="sghmc", n_iter=300, batch_size=30, **kw), Xi, yi, {})
    Xb, yb = data["onehot"]
    cases["sparse-csr"] = (log(n_iter=300, batch_size=50, **kw), sp.csr_matrix(Xb), yb, {})
    cases["sparse-dense01"] = (log(sampler="sghmc", n_iter=300, batch_size=50, **kw), Xb, yb, {})
    Xn, yn = data["ints"]
    cases["small-ints"] = (log(sampler="sgnht", n_iter=300, batch_size=50, **kw), Xn, yn, {})
    Xr, yr = data["reg"]
    lin = SGBayesLinearRegression
    cases["linreg-default"] = (lin(random_state=0), Xr, yr, {})
    cases["linreg-sghmc-fixed"] = (
        lin(sampler="sghmc", n_iter=300, batch_size=50, noise_precision=0.04, **kw),
        Xr,
        yr,
        {},
    )
    cases["linreg-sgld-plain"] = (
        lin(sampler=SGLD(preconditioner="none"), n_iter=300, batch_size=50, gradient="minibatch", **kw),
        Xr,
        yr,
        {},
    )
    cases["linreg-gadmala"] = (lin(sampler="gadmala", n_iter=400, **kw), Xr, yr, {})
    cases["drbm"] = (SGBayesDRBMClassifier(n_hidden=4, n_iter=200, batch_size=30, **kw), Xi / 8.0, yi, {})
    cases["mlsgld"] = (
        log(sampler=MLSGLD(step_size=1e-3, horizon=50, max_levels=3, n_initial=20), random_state=0),
        Xs,
        yc,
        {},
    )
    cases["mlsgld-plain"] = (
        log(sampler=MLSGLD(step_size=1e-3, horizon=50, max_levels=3, n_initial=20, antithetic=False), random_state=0),
        Xs,
        yc,
        {},
    )
    Xp, yp, exposure = data["counts"]
    cases["poisson-exposure"] = (
        SGBayesPoissonRegressor(n_iter=300, batch_size=50, **kw),
        Xp,
        yp,
        {"exposure": exposure},
    )
    return cases


def _memmap_case(Xc, yc, tmp):
    X = np.lib.format.open_memmap(f"{tmp}/X.npy", mode="w+", dtype=np.float64, shape=Xc.shape)
    X[:] = Xc
    X.flush()
    X = np.load(f"{tmp}/X.npy", mmap_mode="r")
    return SGBayesLogisticRegression(n_iter=300, batch_size=50, n_chains=2, random_state=0), X, yc, {}


def _fingerprint(est, X):
    stats = getattr(est, "sample_stats_", None) or {}
    Xp = X[:50]
    pred = est.predict_proba(Xp) if hasattr(est, "predict_proba") else est.predict(Xp)
    return {
        "samples": _digest(est.samples_, getattr(est, "sample_weight_", None)),
        "stats": _digest(*[np.asarray(stats[k]) for k in sorted(stats)]),
        "n_grad_evals": int(est.diagnostics_.get("n_grad_evals", -1)),
        "n_iter": int(getattr(est, "n_iter_", -1)),
        "predict": _digest(pred),
    }


def run_all():
    data = _data()
    cases = _cases(data)
    out = {}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases["memmap"] = _memmap_case(*data["cancer"], tmp)
        for name, (est, X, y, fit_kw) in cases.items():
            try:
                est.fit(X, y, **fit_kw)
                out[name] = _fingerprint(est, X)
            except Exception as exc:  # an error is part of the fingerprint too
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        est = SGBayesLogisticRegression(n_iter=150, batch_size=50, n_chains=2, random_state=0, warm_start=True)
        Xc, yc = data["cancer"]
        est.fit(Xc, yc)
        est.set_params(n_iter=300).fit(Xc, yc)
        out["warm-start"] = _fingerprint(est, Xc)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", help="write the fingerprints to this JSON file")
    g.add_argument("--compare", help="compare with fingerprints saved earlier")
    args = p.parse_args(argv)
    now = run_all()
    if args.save:
        with open(args.save, "w") as f:
            json.dump(now, f, indent=1, sort_keys=True)
        print(json.dumps({"saved": args.save, "cases": len(now)}))
        return 0
    with open(args.compare) as f:
        before = json.load(f)
    bad = 0
    for name in sorted(set(before) | set(now)):
        same = before.get(name) == now.get(name)
        bad += not same
        row = {"case": name, "identical": same}
        if not same:
            row.update(before=before.get(name), after=now.get(name))
        print(json.dumps(row))
    print(json.dumps({"cases": len(now), "differ": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
