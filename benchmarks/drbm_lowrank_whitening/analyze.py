"""Diagnostics of the runs: ESS (skbayes_sg.diagnostics.summarize, rank-normalised bulk ESS of the
4 chains pooled), xi, test predictive and the bias comparison against reference_0.75 (the
step-bias script's compare()). Writes results.json and each config's predictive in the
drbm_digits_step_bias.py format (results/<name>_pred.npz)."""

import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import drbm_digits_step_bias as sb  # noqa: E402
from common import setup  # noqa: E402

from skbayes_sg import diagnostics  # noqa: E402

OUT = Path(os.environ.get("DRBM_WHITENING_DIR", "/tmp/drbm_lowrank_whitening"))
REF = Path(os.environ.get("DRBM_BIAS_DIR", "/tmp/drbm_bias"))


def ess(logp):
    """(rows median bulk ESS, log-loss bulk ESS, log-loss R-hat, worst-row R-hat) of (chains, draws, rows)."""
    s_rows = diagnostics.summarize(logp)
    s_ll = diagnostics.summarize(-logp.mean(axis=2))
    return (
        float(np.nanmedian(s_rows["ess_bulk"])),
        float(s_ll["ess_bulk"]),
        float(s_ll["rhat"]),
        float(np.nanmax(s_rows["rhat"])),
    )


def predictive(model, draws, Xte, yte):
    """halves (chains, 2, rows, classes), per_draw (chains, draws) test log loss, test log loss, accuracy."""
    C, S, P = draws.shape
    probs = model.predict_draws(draws.reshape(-1, P), Xte).reshape(C, S, *(Xte.shape[0], 10))
    rows = np.arange(yte.size)
    per_draw = -np.log(np.clip(probs[:, :, rows, yte], 1e-300, None)).mean(axis=2)
    half = S // 2
    halves = np.stack([probs[:, :half].mean(axis=1), probs[:, half : 2 * half].mean(axis=1)], axis=1)
    p = probs.mean(axis=(0, 1))
    return halves, per_draw, float(-np.log(p[rows, yte]).mean()), float((p.argmax(1) == yte).mean())


def load_ref(name):
    z = np.load(REF / f"{name}.npz")
    return z["halves"], z["per_draw"], z["y_test"]


def main():
    model, Xtr, ytr, Xte, yte, _ = setup()
    ref = load_ref("reference_0.75_seed11")
    ref05 = load_ref("reference_0.5_seed10")
    assert np.array_equal(ref[2], yte)
    results = {"ess_unit": "bulk ESS of the 4 chains pooled, per 1,000 kept iterations per chain"}
    # -- library and k = 0 validation -------------------------------------------------
    lib = json.loads((OUT / "lib_fit.json").read_text())
    libz = np.load(OUT / "lib_fit.npz")
    lib_kept = lib["samples_shape"][1] * int(lib["thin"])
    results["library"] = {
        "h": lib["step_size"],
        "n_iter": lib["n_iter"],
        "kept_iter": lib_kept,
        "thin": lib["thin"],
        "rows_ess": lib["predictive_rows_ess_median"],
        "ll_ess": lib["predictive_ess"],
        "rows_ess_per_1k": 1000 * lib["predictive_rows_ess_median"] / lib_kept,
        "ll_ess_per_1k": 1000 * lib["predictive_ess"] / lib_kept,
        "xi": lib["mean_xi"],
        "per_draw_train_ll_mean": float(libz["monitor"].mean()),
        "test_log_loss": lib["test_log_loss"],
        "test_accuracy": lib["test_accuracy"],
    }
    v = np.load(OUT / "validate.npz")
    logp = v["logp"]  # (4, 4000, 256), every iteration
    thin = int(lib["thin"])
    burn = 4000 - lib_kept
    sub = logp[:, burn + thin - 1 :: thin]
    r_rows, r_ll, rhat, rhat_rows = ess(sub)
    a_rows, a_ll, _, _ = ess(logp[:, burn:])
    halves, per_draw, tll, acc = predictive(model, v["draws"], Xte, yte)
    results["validate_k0"] = {
        "h": float(v["h"]),
        "kept_iter": lib_kept,
        "draws_per_chain_at_thin13": sub.shape[1],
        "rows_ess": r_rows,
        "ll_ess": r_ll,
        "ll_rhat": rhat,
        "rows_rhat_max": rhat_rows,
        "rows_ess_per_1k": 1000 * r_rows / lib_kept,
        "ll_ess_per_1k": 1000 * r_ll / lib_kept,
        "rows_ess_per_1k_thin1": 1000 * a_rows / lib_kept,
        "ll_ess_per_1k_thin1": 1000 * a_ll / lib_kept,
        "xi": float(v["xi"][:, burn:].mean()),
        "per_draw_train_ll_mean": float(-sub.mean(axis=2).mean()),
        "test_log_loss_draws_from_1000": tll,
        "test_accuracy": acc,
    }
    # -- configs ---------------------------------------------------------------------------
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import CONFIGS, MON_THIN, N_BURN  # noqa: E402

    results["configs"] = {}
    for name in ["library_defaults_seed0", "library_defaults_seed1"]:
        z = np.load(REF / f"{name.replace('library_', '')}.npz")
        results["configs"][name] = {"bias_vs_ref_0.75": sb.compare((z["halves"], z["per_draw"]), ref[:2], yte)}
    results["configs"]["ref_0.75_vs_ref_0.5"] = {"bias_vs_ref_0.5": sb.compare(ref[:2], ref05[:2], yte)}
    for name in CONFIGS:
        path = OUT / f"{name}.npz"
        if not path.exists():
            continue
        z = np.load(path)
        end = json.loads((OUT / f"{name}_end.json").read_text())
        logp = z["logp"][:, N_BURN // MON_THIN :]
        kept = logp.shape[1] * MON_THIN
        rows, ll, rhat, rhat_rows = ess(logp)
        halves, per_draw, tll, acc = predictive(model, z["draws"], Xte, yte)
        np.savez_compressed(OUT / f"{name}_pred.npz", halves=halves, per_draw=per_draw, y_test=yte)
        n_iter = z["xi"].shape[1]
        results["configs"][name] = {
            "k": int(z["k"]),
            "h": float(z["h"]),
            "h_over_lib": float(z["h"]) / results["library"]["h"],
            "iterations": n_iter,
            "burn_in": N_BURN,
            "kept_iter": kept,
            "rows_ess_per_1k": 1000 * rows / kept,
            "ll_ess_per_1k": 1000 * ll / kept,
            "ll_rhat": rhat,
            "rows_rhat_max": rhat_rows,
            "xi": float(z["xi"][:, N_BURN:].mean()),
            "xi_per_chain": z["xi"][:, N_BURN:].mean(axis=1).round(4).tolist(),
            "kinetic_T": float(z["kin"][:, N_BURN:].mean()),
            "per_draw_train_ll_mean": float(-logp.mean()),
            "test_log_loss": tll,
            "test_accuracy": acc,
            "seconds": float(z["seconds"]),
            "bias_vs_ref_0.75": sb.compare((halves, per_draw), ref[:2], yte),
            "bias_vs_ref_0.5": sb.compare((halves, per_draw), ref05[:2], yte),
            "end_of_run": end["end"],
        }
    prep = OUT / "prep.json"
    if prep.exists():
        results["prep"] = json.loads(prep.read_text())
    track = OUT / "track.json"
    if track.exists():
        t = json.loads(track.read_text())
        results["track_median_over_chains"] = {"t": t["checkpoints"], **t["median"]}
    cost = OUT / "cost.json"
    if cost.exists():
        results["cost"] = json.loads(cost.read_text())
    (Path(__file__).resolve().parents[1] / "results" / "drbm_lowrank_whitening.json").write_text(
        json.dumps(results, indent=1)
    )
    print(json.dumps({k: v for k, v in results.items() if k != "prep"}, indent=1))


if __name__ == "__main__":
    main()
