"""SGBayesDRBMClassifier's defaults on digits: fit time, accuracy and predictive convergence.

Digits (scikit-learn's ``load_digits``, 1,797 x 64, features scaled by 1/16 to [0, 1], or
with ``--scale symmetric`` to [-1, 1] as the DRBM's docs recommend),
split 70/30 stratified with ``random_state=0``: 1,257 training rows, the size of the
issue's report. Each configuration is fitted in a fresh subprocess (so that none inherits
another's warm caches) and reports:

* ``fit_s``: wall time of the whole ``fit``, the cost the docs quote, with ``machine`` (the
  processor, its core count and the load average before the fit); ``fit_cpu_all_s``: the
  CPU time of every process of the fit (this one and its joblib workers). Older rows'
  ``fit_cpu_s`` is this process's CPU time alone, which leaves out the workers' share;
  ``predict_s``: of ``predict_proba`` on the 540 test rows;
* ``accuracy`` and ``log_loss`` of the posterior predictive on the test rows;
* the predictive's convergence: the estimator's own monitor (``predictive_rhat``,
  ``predictive_ess``, ``predictive_ess_tail`` of the per-draw log loss on up to 256
  training rows) and the same diagnostics of the per-draw *test* log loss
  (``test_rhat``, ``test_ess``, ``test_ess_tail``), computed here from the draws;
* the largest parameter R-hat, for contrast (large under hidden-unit permutation);
* the ConvergenceWarning, if any.

``MLPClassifier`` (scikit-learn's defaults, 100 hidden units) is the point-estimate
baseline. ``--base PATH`` also runs the old defaults (``n_iter=5000``, double precision)
with the package found at ``PATH`` (a checkout of the commit before this change).

Prints one JSON object per line; writes ``benchmarks/results/drbm_digits_defaults.jsonl``.
Usage::

    python benchmarks/drbm_digits_defaults.py [--base /tmp/base] [--config '{"n_iter": 3000}']
"""

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "drbm_digits_defaults.jsonl"


def _data(scale="unit"):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = X / 16.0 if scale == "unit" else X / 8.0 - 1.0
    return train_test_split(X, y, train_size=0.7, random_state=0, stratify=y)


def _machine():
    """The processor, its core count and the load average: what a wall time depends on."""
    import platform

    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": name, "cores": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2)}


def _cpu_all():
    """CPU seconds of this process and its live children (joblib's workers persist between
    fits, so their times are read while they run)."""
    import psutil

    procs = [psutil.Process()]
    procs += procs[0].children(recursive=True)
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def _fit_and_predict(clf, Xtr, ytr, Xte, row):
    """Fit and predict, recording wall and CPU seconds in ``row``; return the warnings
    caught during the fit and the test probabilities."""
    from sklearn.exceptions import ConvergenceWarning

    row["machine"] = _machine()
    t0, c0 = time.perf_counter(), _cpu_all()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf.fit(Xtr, ytr)
    row["fit_s"] = time.perf_counter() - t0
    row["fit_cpu_all_s"] = _cpu_all() - c0
    t0 = time.perf_counter()
    proba = clf.predict_proba(Xte)
    row["predict_s"] = time.perf_counter() - t0
    return caught, proba


def _one(label, params, seed, scale="unit", save=None):
    """Fit one configuration (in this process) and return its row.

    ``params`` are the estimator's, but for ``"step_scale"``, which replaces the DRBM's
    :data:`~skbayes_sg.drbm.AUTO_STEP_SCALE` (the multiplier of mCCAdL's auto step), and a
    ``"sampler"`` given as a dict, the parameters of an ``MCCAdL``. With
    ``save`` (a ``.npz`` path) the posterior predictive on the test rows is kept for
    ``drbm_digits_step_bias.py``: each chain's mean over the first and second half of its
    draws (``halves``, shape (chains, 2, rows, classes)) and the per-draw test log loss."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics import accuracy_score, log_loss

    Xtr, Xte, ytr, yte = _data(scale)
    row = {
        "benchmark": "drbm_digits_defaults",
        "label": label,
        "params": params,
        "random_state": seed,
        "scale": scale,
        "n_train": int(Xtr.shape[0]),
        "n_test": int(Xte.shape[0]),
    }
    if label == "mlp":
        from sklearn.neural_network import MLPClassifier

        clf = MLPClassifier(random_state=seed, **params)
        caught, proba = _fit_and_predict(clf, Xtr, ytr, Xte, row)
    else:
        import skbayes_sg
        from skbayes_sg import SGBayesDRBMClassifier, diagnostics

        row["package"] = str(Path(skbayes_sg.__file__).parent)
        params = dict(params)
        if "step_scale" in params:
            from skbayes_sg import drbm

            drbm.AUTO_STEP_SCALE = params.pop("step_scale")
        if isinstance(params.get("sampler"), dict):
            # mCCAdL's own parameters, e.g. {"sampler": {"friction": 0.1}} (JSON has no objects).
            from skbayes_sg.samplers import MCCAdL

            params["sampler"] = MCCAdL(**params["sampler"])
        clf = SGBayesDRBMClassifier(random_state=seed, **params)
        caught, proba = _fit_and_predict(clf, Xtr, ytr, Xte, row)
        d = clf.diagnostics_
        row.update(
            step_size=d["step_size"],
            lambda_max=d.get("lambda_max"),
            batch_size=d["batch_size"],
            thin=d["thin"],
            draws_per_chain=int(clf.samples_.shape[1]),
            n_iter=int(clf.n_iter_),
            n_iter_blocks=d.get("n_iter_blocks"),
            max_param_rhat=float(np.nanmax(d["rhat"])),
        )
        for key in ("predictive_rhat", "predictive_ess", "predictive_ess_tail"):
            if key in d:
                row[key] = float(d[key])
        # The per-draw log loss on the test rows, with the same diagnostics.
        draws = clf.predict_proba_samples(Xte)  # (S, n, C)
        codes = np.searchsorted(clf.classes_, yte)
        per_draw = -np.log(np.clip(draws[:, np.arange(codes.size), codes], 1e-300, None)).mean(axis=1)
        per_draw = per_draw.reshape(clf.samples_.shape[:2])
        s = diagnostics.summarize(per_draw)
        row.update(
            test_rhat=s["rhat"],
            test_ess=s["ess_bulk"],
            test_ess_tail=s["ess_tail"],
            test_log_loss_chain_means=per_draw.mean(axis=1).round(4).tolist(),
        )
        if save:
            chains = draws.reshape(*clf.samples_.shape[:2], *draws.shape[1:])
            half = chains.shape[1] // 2
            halves = np.stack([chains[:, :half].mean(axis=1), chains[:, half : 2 * half].mean(axis=1)], axis=1)
            np.savez_compressed(save, halves=halves, per_draw=per_draw, y_test=codes)
            row["predictive_file"] = str(Path(save).name)
    row["accuracy"] = float(accuracy_score(yte, clf.classes_[proba.argmax(axis=1)]))
    row["log_loss"] = float(log_loss(yte, proba, labels=clf.classes_))
    row["warnings"] = [str(w.message)[:300] for w in caught if issubclass(w.category, ConvergenceWarning)]
    return row


def _run(label, params, seed, package=None, scale="unit", save=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(package or ROOT)
    out = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps([label, params, seed, scale, save])],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        return {"benchmark": "drbm_digits_defaults", "label": label, "params": params, "error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--base", help="package root of the old defaults' commit (runs them too)")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        help="extra estimator parameters as JSON (repeatable); default: the defaults only",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--scale",
        choices=["unit", "symmetric"],
        default="unit",
        help="features X / 16 in [0, 1] (the issue's setting) or X / 8 - 1 in [-1, 1]",
    )
    parser.add_argument("--no-mlp", action="store_true")
    parser.add_argument("--no-defaults", action="store_true", help="only the --config runs (and --base, mlp)")
    parser.add_argument("--out", default=str(RESULTS), help="results file (JSON lines)")
    parser.add_argument("--append", action="store_true", help="append to the results file")
    parser.add_argument(
        "--save-predictive",
        metavar="DIR",
        help="keep each DRBM fit's test predictive in DIR (for drbm_digits_step_bias.py)",
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(*json.loads(args.one))))
        return
    runs = ([] if args.no_defaults else [("defaults", {}, None)]) + [
        ("config", json.loads(c), None) for c in args.config
    ]
    if args.base:
        runs.append(("old_defaults", {}, args.base))
    if not args.no_mlp:
        runs.append(("mlp", {}, None))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a" if args.append else "w") as f:
        for seed in args.seeds:
            for label, params, package in runs:
                save = None
                if args.save_predictive and label != "mlp":
                    Path(args.save_predictive).mkdir(parents=True, exist_ok=True)
                    tag = label if label != "config" else "config_" + "_".join(f"{k}{v}" for k, v in params.items())
                    save = str(Path(args.save_predictive) / f"{tag}_seed{seed}_{args.scale}.npz")
                row = _run(label, params, seed, package, args.scale, save)
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
                f.flush()


if __name__ == "__main__":
    main()
