"""Runs of the prototype mCCAdL (one python process, chains in turn).

  python run.py validate            k = 0 at the library's h, 4 chains x 4,000 from the library's
                                    starts; saves the state at iteration 1,000 (the warm-up)
  python run.py prep                each chain's top-25 Fisher eigenpairs at its warm-up point,
                                    lambda_max of F and of the finite-difference Hessian, whitened
  python run.py config NAME         a config of CONFIGS from the warm-up state: N_BURN + N_KEEP iterations

Per run: monitor (per-row log p(y_i|x_i) on the 256 monitored rows) every MON_THIN iterations,
xi every iteration, theta every DRAW_THIN iterations after burn-in (for the test predictive).
"""

import json
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np
from common import (
    H_LIB,
    Chain,
    Whitening,
    fisher_topk,
    library_starts,
    setup,
    whitened_lambda_max,
)

OUT = Path(os.environ.get("DRBM_WHITENING_DIR", "/tmp/drbm_lowrank_whitening"))
OUT.mkdir(parents=True, exist_ok=True)
MON_THIN = 2  # validation uses 1 (to subsample at the library's thin of 13)
DRAW_THIN = 30
N_WARM = 1000
N_BURN, N_KEEP = 1000, 12000
KMAX = 25
CONFIGS = {
    # name: (k, step rule)  -- "lib": the library's h; "F": 0.6 / sqrt(lambda_{k+1}(F)) (max over chains);
    # "F/2": half of it
    "k0_hlib": (0, "lib"),
    "k0_hF": (0, "F"),
    "k9_hF": (9, "F"),
    "k9_hF2": (9, "F/2"),
    "k20_hF": (20, "F"),
    "k20_hF2": (20, "F/2"),
    # controls added after the first results: unwhitened at the whitened configs' cautious steps
    "k0_h9F2": (0, "h9F2"),
    "k0_h20F2": (0, "h20F2"),
    # beyond the brief: V_k re-estimated every 10 iterations (3 warm-started subspace iterations
    # on the full-data Fisher at the current theta)
    "k9_hF2_r10": (9, "F/2", 10),
    "k20_hF2_r10": (20, "F/2", 10),
}


def run_chains(chains, n_iter, model, mon_rows, Xtr, ytr, burn=0, label="", mon_thin=None):
    MON_THIN = mon_thin or globals()["MON_THIN"]
    C = len(chains)
    mon_X, mon_y = Xtr[mon_rows], ytr[mon_rows]
    n_mon = n_iter // MON_THIN
    logp = np.empty((C, n_mon, mon_rows.size))
    xi = np.empty((C, n_iter))
    kin = np.empty((C, n_iter))
    draws = [[] for _ in range(C)]
    t0 = time.perf_counter()
    for c, ch in enumerate(chains):
        for it in range(n_iter):
            xi[c, it], kin[c, it] = ch.step()
            if (it + 1) % MON_THIN == 0:
                lp = model.log_proba_draws(ch.theta[None], mon_X)[0]
                logp[c, (it + 1) // MON_THIN - 1] = lp[np.arange(mon_y.size), mon_y]
            if it >= burn and (it + 1 - burn) % DRAW_THIN == 0:
                draws[c].append(ch.theta.copy())
            if not np.isfinite(ch.xi) or not np.all(np.isfinite(ch.theta[:5])):
                raise FloatingPointError(f"{label}: chain {c} diverged at iteration {it}")
        print(
            f"{label} chain {c} done, {time.perf_counter() - t0:.0f} s, mean xi {xi[c, burn:].mean():.4f}", flush=True
        )
    return logp, xi, kin, np.array(draws), time.perf_counter() - t0


def validate():
    model, Xtr, ytr, Xte, yte, mon_rows = setup()
    starts = library_starts(model)
    chains = [Chain(model, starts[c], np.random.default_rng([1000, c]), H_LIB) for c in range(4)]
    # 1,000 warm-up iterations, state saved, then 3,000 more (4,000 in all, as the library's fit)
    lp1, xi1, k1, _, t1 = run_chains(chains, N_WARM, model, mon_rows, Xtr, ytr, burn=10**9, label="warm", mon_thin=1)
    with open(OUT / "warm_state.pkl", "wb") as f:
        pickle.dump([(ch.theta, ch.p, ch.xi, ch.rng.bit_generator.state) for ch in chains], f)
    lp2, xi2, k2, draws, t2 = run_chains(chains, 3000, model, mon_rows, Xtr, ytr, burn=0, label="validate", mon_thin=1)
    np.savez_compressed(
        OUT / "validate.npz",
        logp=np.concatenate([lp1, lp2], axis=1),
        xi=np.concatenate([xi1, xi2], axis=1),
        kin=np.concatenate([k1, k2], axis=1),
        draws=draws,
        seconds=t1 + t2,
        h=H_LIB,
    )


def load_warm(model):
    with open(OUT / "warm_state.pkl", "rb") as f:
        return pickle.load(f)


def prep():
    model, Xtr, ytr, Xte, yte, mon_rows = setup()
    warm = load_warm(model)
    out = {"chains": []}
    Vs, lams = [], []
    for c, (theta, _p, _xi, _) in enumerate(warm):
        t0 = time.perf_counter()
        lam, V, G = fisher_topk(model, theta, KMAX)
        Vs.append(V)
        lams.append(lam[: KMAX + 1])
        row = {"fisher_top": np.round(lam[:30], 2).tolist(), "fisher_lambda_max": float(lam[0])}
        row["fisher_frac_below_7"] = float(np.mean(np.concatenate([lam, np.full(theta.size - lam.size, 1.0)]) < 7.0))
        # Hessian (finite differences of full-data gradients) unwhitened and whitened
        row["hessian_top"] = np.round(whitened_lambda_max(model, theta, Whitening(), "hessian", k=3), 2).tolist()
        for k in (9, 20):
            wh = Whitening(V[:, :k], lam[:k])
            row[f"LFL_top_k{k}"] = np.round(whitened_lambda_max(model, theta, wh, "fisher", G=G, k=3), 2).tolist()
            row[f"LHL_top_k{k}"] = np.round(whitened_lambda_max(model, theta, wh, "hessian", k=3), 2).tolist()
        row["seconds"] = time.perf_counter() - t0
        print(c, json.dumps(row), flush=True)
        out["chains"].append(row)
    np.savez_compressed(OUT / "prep.npz", V=np.array(Vs), lam=np.array(lams))
    (OUT / "prep.json").write_text(json.dumps(out, indent=1))


def config(name):
    k, rule, *refresh = CONFIGS[name]
    refresh = refresh[0] if refresh else 0
    model, Xtr, ytr, Xte, yte, mon_rows = setup()
    warm = load_warm(model)
    z = np.load(OUT / "prep.npz")
    V, lam = z["V"], z["lam"]
    lam_next = lam[:, k].max()  # lambda_{k+1}(F): lambda_max(L'FL) (largest over the chains)
    h = {
        "lib": H_LIB,
        "F": 0.6 / np.sqrt(lam_next),
        "F/2": 0.3 / np.sqrt(lam_next),
        "h9F2": 0.3 / np.sqrt(lam[:, 9].max()),
        "h20F2": 0.3 / np.sqrt(lam[:, 20].max()),
    }[rule]
    chains = []
    for c, (theta, p, xi, _state) in enumerate(warm):
        rng = np.random.default_rng([2000 + list(CONFIGS).index(name), c])
        ch = Chain(model, theta, rng, h, p=p, xi=xi)
        if k:
            ch.set_whitening(Whitening(V[c][:, :k], lam[c][:k]), h)
        ch.refresh = refresh
        chains.append(ch)
    logp, xi, kin, draws, secs = run_chains(chains, N_BURN + N_KEEP, model, mon_rows, Xtr, ytr, burn=N_BURN, label=name)
    # validity of the subspace at the end: lambda_max of L'F(theta_end)L and L'H(theta_end)L
    end = []
    for ch in chains:
        end.append(
            {
                "LFL_top_end": np.round(whitened_lambda_max(model, ch.theta, ch.wh, "fisher", k=3), 2).tolist(),
                "LHL_top_end": np.round(whitened_lambda_max(model, ch.theta, ch.wh, "hessian", k=3), 2).tolist(),
            }
        )
        print(name, end[-1], flush=True)
    refresh_log = [getattr(ch, "refresh_log", []) for ch in chains]
    np.savez_compressed(
        OUT / f"{name}.npz",
        logp=logp,
        xi=xi,
        kin=kin,
        draws=draws,
        seconds=secs,
        h=h,
        k=k,
        refresh=refresh,
        refresh_log=np.array(refresh_log, dtype=float),
    )
    (OUT / f"{name}_end.json").write_text(json.dumps({"h": h, "k": k, "end": end, "seconds": secs}, indent=1))


if __name__ == "__main__":
    {"validate": validate, "prep": prep, "config": config}[sys.argv[1]](*sys.argv[2:])
