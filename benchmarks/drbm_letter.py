"""Bayesian DRBM on letter: test error and expected log loss against passes (mCCAdL paper, section 3.3).

The setting of Wei & Shang (2026), section 3.3, Figure 4 and Table 3 (and Shang et al.
2015, section 4.3): letter (the first 10,500 rows train, the last 5,000 test), a
discriminative RBM with H = 100 hidden units (P = 4,326), prior N(0, I), minibatches of
n = 1,000 drawn with replacement, the first 20 % of the passes discarded as burn-in. For
SGHMC, SGNHT and mCCAdL (CCAdL too with ``--ccadl``) at h in {2e-2, 2.5e-2, 3e-2} and A in
{1, 10}, one chain from the same random start (init_scale 0.1, seed 0) records against
passes:

- ``test_error``: error of the posterior predictive (the running average of the draws'
  class probabilities after burn-in; the current draw's during burn-in);
- ``test_error_mean_theta``: error of the posterior mean of the parameters, the papers'
  Figure 4 metric ("test error rates ... using the posterior mean"; a single chain stays in
  one of the posterior's hidden-unit permutation modes, so its parameter mean is a
  meaningful classifier);
- ``expected_log_loss``: the posterior expected log loss of the papers' Table 3 (the log
  loss of each draw, averaged over draws after burn-in); ``draw_log_loss``, the current
  draw's log loss; and ``predictive_log_loss``, the log loss of the posterior predictive.

Features: the papers take letter from the LIBSVM collection, whose ``letter.scale`` is
scaled to [-1, 1]; that is the default here (``--features symmetric``). ``--features
unit`` scales to [0, 1] instead (the issue's wording): the same model family then fits
far worse for every method (``drbm_letter_unit.json`` against ``drbm_letter_symmetric.json``,
100 passes: SGHMC test error 0.21 against 0.16, mCCAdL 0.23 against 0.15, and
``MLPClassifier`` 0.12 against 0.069), because the all-positive inputs couple every hidden
unit's bias to its weights.

Draws are evaluated on the test set every ``--eval-every`` iterations. scikit-learn's
``MLPClassifier`` (100 hidden units) and ``LogisticRegression`` give context. The chains
run through the library's model / minibatch / sampler layers directly (the estimator's
fit keeps draws only at the end; here the curves need them along the way). ``--n-jobs``
runs configurations in parallel processes (one BLAS thread each).

Prints one JSON object per line (one per configuration, one per reference model) and saves
``benchmarks/results/drbm_letter[_tag].png`` and ``.json``. Usage::

    python benchmarks/drbm_letter.py [--passes 100] [--quick] [--samplers sghmc,sgnht,mccadl] [--ccadl] \
        [--resume] [--n-jobs 2]
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models.drbm import DRBMModel
from skbayes_sg.samplers import SAMPLERS

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "letter.npz"
RESULTS = ROOT / "benchmarks" / "results"
N_TRAIN, N_TEST, H, BATCH = 10_500, 5_000, 100, 1_000
STEP_SIZES = (2e-2, 2.5e-2, 3e-2)
FRICTIONS = (1.0, 10.0)
PAPER_TABLE3 = {  # mCCAdL paper Table 3, letter: (h, A) -> {sampler: expected log loss}
    (2e-2, 1.0): {"sghmc": 1.5244, "sgnht": 0.4269, "mccadl": 0.4320},
    (2.5e-2, 1.0): {"sghmc": 2.4337, "sgnht": 0.3908, "mccadl": 0.4692},
    (3e-2, 1.0): {"sghmc": 2.5606, "sgnht": 0.4305, "mccadl": 0.4572},
    (2e-2, 10.0): {"sghmc": 0.3299, "sgnht": 0.3029, "mccadl": 0.2656},
    (2.5e-2, 10.0): {"sghmc": 0.3740, "sgnht": 0.3375, "mccadl": 0.2764},
    (3e-2, 10.0): {"sghmc": 0.3735, "sgnht": 0.3467, "mccadl": 0.2770},
}


def load_letter(features="symmetric"):
    data = np.load(DATA)
    X = data["X"].astype(np.float64) / 15.0  # integer features 0..15 -> [0, 1]
    if features == "symmetric":
        X = 2.0 * X - 1.0  # [-1, 1], as LIBSVM's letter.scale
    y = data["y"].astype(np.intp)
    return X[:N_TRAIN], y[:N_TRAIN], X[-N_TEST:], y[-N_TEST:]


def run_config(model, theta0, name, h, A, n_iter, n_burn, eval_every, X_test, y_test, seed=0):
    """One chain; returns the curves and timings of one (sampler, h, A) configuration."""
    sampler = SAMPLERS[name](step_size=h, friction=A)
    rng = np.random.default_rng(seed)
    target = MinibatchGradient(model, BATCH, "replacement")
    state = sampler.init_state(theta0.copy(), target, rng)
    rows = np.arange(len(y_test))
    proba_sum = np.zeros((len(y_test), model.n_classes))
    theta_sum = np.zeros_like(theta0, dtype=float)
    ll_sum, n_kept = 0.0, 0
    curve = {
        "passes": [],
        "test_error": [],
        "test_error_mean_theta": [],
        "expected_log_loss": [],
        "draw_log_loss": [],
        "predictive_log_loss": [],
    }
    step_seconds, diverged = 0.0, False
    for t in range(1, n_iter + 1):
        t0 = time.perf_counter()
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                state, _ = sampler.step(state, target, rng)
        except (ValueError, FloatingPointError, OverflowError):
            # A diverging chain can fail inside a sampler (for example a NaN norm in the
            # C step) before its state is seen to be non-finite.
            diverged = True
            break
        step_seconds += time.perf_counter() - t0
        if t % eval_every and t != n_iter:
            continue
        if not np.all(np.isfinite(state.theta)):
            diverged = True
            break
        log_p = model.log_proba_draws(state.theta[None], X_test)[0]
        proba = np.exp(log_p)
        draw_log_loss = expected_log_loss = -float(log_p[rows, y_test].mean())
        mean_theta_error = float(np.mean(log_p.argmax(axis=1) != y_test))
        if t > n_burn:
            proba_sum += proba
            theta_sum += state.theta
            ll_sum += draw_log_loss
            n_kept += 1
            proba, expected_log_loss = proba_sum / n_kept, ll_sum / n_kept
            log_p_mean = model.log_proba_draws(theta_sum[None] / n_kept, X_test)[0]
            mean_theta_error = float(np.mean(log_p_mean.argmax(axis=1) != y_test))
        with np.errstate(divide="ignore"):
            pred_log_loss = -float(np.log(np.maximum(proba[rows, y_test], 1e-300)).mean())
        curve["passes"].append(t * BATCH / model.n_samples)
        curve["test_error"].append(float(np.mean(proba.argmax(axis=1) != y_test)))
        curve["test_error_mean_theta"].append(mean_theta_error)
        curve["expected_log_loss"].append(expected_log_loss)
        curve["draw_log_loss"].append(draw_log_loss)
        curve["predictive_log_loss"].append(pred_log_loss)
    summary = state.summary()
    out = {
        "benchmark": "drbm_letter",
        "sampler": name,
        "h": h,
        "A": A,
        "n_iter": n_iter,
        "n_burn": n_burn,
        "diverged": diverged,
        "n_draws_evaluated": n_kept,
        "final_test_error": curve["test_error"][-1] if curve["test_error"] and not diverged else None,
        "final_test_error_mean_theta": curve["test_error_mean_theta"][-1]
        if curve["test_error"] and not diverged
        else None,
        "final_expected_log_loss": curve["expected_log_loss"][-1] if curve["test_error"] and not diverged else None,
        "final_predictive_log_loss": curve["predictive_log_loss"][-1] if curve["test_error"] and not diverged else None,
        "paper_expected_log_loss": PAPER_TABLE3.get((h, A), {}).get(name),
        "ms_per_iter": 1e3 * step_seconds / max(t, 1),
        **{k: v for k, v in summary.items() if isinstance(v, (int, float))},
        "curve": curve,
    }
    if diverged:
        out["diverged_at_pass"] = t * BATCH / model.n_samples
    return out


def estimator_run(X, y, X_test, y_test, passes, n_chains, n_jobs, h=2e-2, A=10.0, max_draws=100):
    """What a user gets: ``SGBayesDRBMClassifier`` with mCCAdL, ``n_chains`` chains.

    The posterior predictive averages the draws of all chains; each chain sits in its own
    hidden-unit permutation mode, so the predictive is a mixture over modes, which the
    single-chain curves cannot show. The expected log loss (per draw) is unaffected by this.
    """
    from sklearn.metrics import log_loss

    from skbayes_sg import SGBayesDRBMClassifier
    from skbayes_sg.samplers import MCCAdL

    n_iter = int(round(passes * N_TRAIN / BATCH))
    est = SGBayesDRBMClassifier(
        n_hidden=H,
        sampler=MCCAdL(step_size=h, friction=A),
        n_iter=n_iter,
        burn_in=0.2,
        batch_size=BATCH,
        n_chains=n_chains,
        n_jobs=n_jobs,
        max_draws=max_draws,
        random_state=0,
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    seconds = time.perf_counter() - t0
    proba_draws = est.predict_proba_samples(X_test)
    rows = np.arange(len(y_test))
    per_draw = -np.log(np.maximum(proba_draws[:, rows, y_test], 1e-300)).mean(axis=1)
    proba = proba_draws.mean(axis=0)
    per_chain = per_draw.reshape(n_chains, -1)
    chain_error = [
        float(
            np.mean(proba_draws.reshape(n_chains, -1, *proba_draws.shape[1:])[c].mean(axis=0).argmax(axis=1) != y_test)
        )
        for c in range(n_chains)
    ]
    return {
        "benchmark": "drbm_letter",
        "estimator": "SGBayesDRBMClassifier",
        "sampler": "mccadl",
        "h": h,
        "A": A,
        "passes": passes,
        "n_chains": n_chains,
        "fit_seconds": seconds,
        "test_error": float(np.mean(est.predict(X_test) != y_test)),
        "predictive_log_loss": float(log_loss(y_test, proba, labels=np.arange(26))),
        "expected_log_loss": float(per_draw.mean()),
        "expected_log_loss_per_chain": per_chain.mean(axis=1).tolist(),
        "test_error_per_chain": chain_error,
        "warnings": sorted({type(w.message).__name__ for w in caught}),
    }


def reference_models(X, y, X_test, y_test, quick):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    from sklearn.neural_network import MLPClassifier

    rows = []
    models = {
        "LogisticRegression": LogisticRegression(C=1.0, max_iter=2000),
        "MLPClassifier(100)": MLPClassifier(hidden_layer_sizes=(H,), max_iter=50 if quick else 500, random_state=0),
    }
    for label, est in models.items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
        proba = est.predict_proba(X_test)
        rows.append(
            {
                "benchmark": "drbm_letter",
                "reference": label,
                "fit_seconds": time.perf_counter() - t0,
                "test_error": float(np.mean(est.predict(X_test) != y_test)),
                "log_loss": float(log_loss(y_test, proba, labels=np.arange(26))),
            }
        )
    return rows


def plot(results, refs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hs = sorted({r["h"] for r in results})
    fig, axes = plt.subplots(3, len(hs), figsize=(5 * len(hs), 12), squeeze=False)
    colors = {"sghmc": "tab:blue", "sgnht": "tab:green", "ccadl": "tab:orange", "mccadl": "tab:red"}
    for j, h in enumerate(hs):
        for r in (r for r in results if r["h"] == h):
            style = "-" if r["A"] > 1 else "--"
            label = f"{r['sampler']}, A={r['A']:g}" + (" (diverged)" if r["diverged"] else "")
            c = r["curve"]
            axes[0, j].plot(c["passes"], c["test_error"], style, color=colors.get(r["sampler"]), label=label)
            if "test_error_mean_theta" in c:
                axes[1, j].plot(
                    c["passes"], c["test_error_mean_theta"], style, color=colors.get(r["sampler"]), label=label
                )
            axes[2, j].plot(c["passes"], c["expected_log_loss"], style, color=colors.get(r["sampler"]), label=label)
        for ref, ls in zip(refs, (":", "-.")):
            axes[0, j].axhline(ref["test_error"], color="gray", ls=ls, lw=1, label=ref["reference"])
            axes[1, j].axhline(ref["test_error"], color="gray", ls=ls, lw=1, label=ref["reference"])
            axes[2, j].axhline(ref["log_loss"], color="gray", ls=ls, lw=1, label=ref["reference"])
        axes[0, j].set_title(f"letter DRBM, h = {h:g}")
        axes[0, j].set_ylabel("test error (posterior predictive)")
        axes[1, j].set_ylabel("test error (posterior mean of the parameters)")
        axes[2, j].set_ylabel("posterior expected log loss")
        axes[0, j].set_ylim(0, 0.6)
        axes[1, j].set_ylim(0, 0.6)
        axes[2, j].set_ylim(0, 2.0)
        for ax in axes[:, j]:
            ax.set_xlabel("passes over the training data")
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=float, default=100.0, help="passes over the training data per chain")
    parser.add_argument("--quick", action="store_true", help="5 passes, h = 2e-2 and 3e-2 only")
    parser.add_argument("--samplers", default="sghmc,sgnht,mccadl", help="comma-separated sampler names")
    parser.add_argument("--ccadl", action="store_true", help="also run CCAdL (diagonal covariance)")
    parser.add_argument("--eval-every", type=int, default=5, help="iterations between test-set evaluations")
    parser.add_argument("--step-sizes", default=None, help="comma-separated h values (default: the paper's three)")
    parser.add_argument("--frictions", default=None, help="comma-separated A values (default: 1,10)")
    parser.add_argument(
        "--features",
        choices=("unit", "symmetric"),
        default="symmetric",
        help="feature scaling: [-1, 1] (LIBSVM's letter.scale, the papers' data) or [0, 1]",
    )
    parser.add_argument("--n-jobs", type=int, default=1, help="configurations run in parallel processes")
    parser.add_argument(
        "--estimator",
        type=int,
        default=0,
        metavar="N_CHAINS",
        help="instead of the grid, fit SGBayesDRBMClassifier (mCCAdL, h=2e-2, A=10) with this many "
        "chains and report its posterior predictive (appended to drbm_letter_estimator.jsonl)",
    )
    parser.add_argument("--tag", default="", help="suffix of the output files")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the configurations already in the output JSON and run only the others",
    )
    args = parser.parse_args()
    passes = 5.0 if args.quick else args.passes
    step_sizes = (2e-2, 3e-2) if args.quick else STEP_SIZES
    if args.step_sizes:
        step_sizes = tuple(float(v) for v in args.step_sizes.split(","))
    frictions = tuple(float(v) for v in args.frictions.split(",")) if args.frictions else FRICTIONS
    names = [s for s in args.samplers.split(",") if s]
    if args.ccadl:
        names.append("ccadl")
    missing = [s for s in names if s not in SAMPLERS]
    for s in missing:
        print(json.dumps({"benchmark": "drbm_letter", "sampler": s, "skipped": "not in skbayes_sg.samplers yet"}))
    names = [s for s in names if s in SAMPLERS]

    X, y, X_test, y_test = load_letter(args.features)
    if args.estimator:
        row = estimator_run(X, y, X_test, y_test, passes, args.estimator, args.n_jobs)
        print(json.dumps(row), flush=True)
        with open(RESULTS / "drbm_letter_estimator.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        return
    model = DRBMModel(X, y, n_classes=26, n_hidden=H, alpha=1.0, init_scale=0.1, random_state=0)
    assert model.n_params == 4326
    theta0 = model.initial_point()
    n_iter = int(round(passes * N_TRAIN / BATCH))
    n_burn = int(round(0.2 * n_iter))

    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = f"_{args.tag}" if args.tag else ("_quick" if args.quick else "")
    out_json = RESULTS / f"drbm_letter{suffix}.json"
    if args.resume and out_json.exists():
        previous = json.loads(out_json.read_text())
        refs = previous["references"]
        results = [r for r in previous["results"] if r["n_iter"] == n_iter]
    else:
        refs = reference_models(X, y, X_test, y_test, args.quick)
        results = []
    for r in refs:
        print(json.dumps(r), flush=True)
    done = {(r["sampler"], r["h"], r["A"]) for r in results}
    todo = [(name, h, A) for A in frictions for h in step_sizes for name in names if (name, h, A) not in done]
    if args.n_jobs == 1:
        runs = (
            run_config(model, theta0, name, h, A, n_iter, n_burn, args.eval_every, X_test, y_test)
            for name, h, A in todo
        )
    else:
        from joblib import Parallel, delayed
        from threadpoolctl import threadpool_limits

        def one(name, h, A):
            # One BLAS thread a process: the configurations, not the products, are parallel.
            with threadpool_limits(1):
                return run_config(model, theta0, name, h, A, n_iter, n_burn, args.eval_every, X_test, y_test)

        runs = Parallel(n_jobs=args.n_jobs, return_as="generator_unordered")(delayed(one)(*cfg) for cfg in todo)
    for r in runs:
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "curve"}), flush=True)
        out_json.write_text(json.dumps({"references": refs, "results": results}, indent=1))
        plot(results, refs, RESULTS / f"drbm_letter{suffix}.png")


if __name__ == "__main__":
    main()
