"""How long does the warm-up's stiff subspace stay valid? From the warm-up state, run each chain
(a) unwhitened at the library's h and (b) whitened with k = 9 at 0.5 h_9 (config k9_hF2), and at
checkpoints t compute, with the warm-up V_k (k = 9, 20):
  lambda_max(L_k' F(theta_t) L_k)  (F = G'G + alpha I, full data),
  lambda_1 and lambda_{k+1} of F(theta_t) itself,
  overlap = ||V_k(warm)' V_k(t)||_F^2 / k  (1: same subspace, k/P ~ 0: unrelated),
  the training per-draw log loss on the monitored rows.
Writes results/track.json."""

import json
import os
import pickle
from pathlib import Path

import numpy as np
from common import H_LIB, Chain, Whitening, fisher_topk, setup, whitened_lambda_max

OUT = Path(os.environ.get("DRBM_WHITENING_DIR", "/tmp/drbm_lowrank_whitening"))
CHECK = [0, 10, 25, 50, 100, 200, 400, 700, 1000, 1500, 2000, 3000]


def main():
    model, Xtr, ytr, Xte, yte, mon = setup()
    with open(OUT / "warm_state.pkl", "rb") as f:
        warm = pickle.load(f)
    z = np.load(OUT / "prep.npz")
    V, lam = z["V"], z["lam"]
    h9 = 0.3 / np.sqrt(lam[:, 9].max())
    out = {"checkpoints": CHECK, "h9_half": float(h9), "runs": {}}
    for label in ("k0_hlib", "k9_hF2"):
        runs = []
        for c, (theta, p, xi, _) in enumerate(warm):
            rng = np.random.default_rng([3000 + (label == "k9_hF2"), c])
            ch = Chain(model, theta, rng, H_LIB, p=p, xi=xi)
            if label == "k9_hF2":
                ch.set_whitening(Whitening(V[c][:, :9], lam[c][:9]), h9)
            rows, t = [], 0
            for target in CHECK:
                while t < target:
                    ch.step()
                    t += 1
                lam_t, V_t, G = fisher_topk(model, ch.theta, 20)
                row = {"t": t, "F_l1": float(lam_t[0]), "F_l10": float(lam_t[9]), "F_l21": float(lam_t[20])}
                for k in (9, 20):
                    wh = Whitening(V[c][:, :k], lam[c][:k])
                    row[f"LFL_k{k}"] = float(whitened_lambda_max(model, ch.theta, wh, "fisher", G=G, k=1)[0])
                    row[f"overlap_k{k}"] = float(np.sum((V[c][:, :k].T @ V_t[:, :k]) ** 2) / k)
                lp = model.log_proba_draws(ch.theta[None], Xtr[mon])[0]
                row["train_ll"] = float(-lp[np.arange(mon.size), ytr[mon]].mean())
                row["xi"] = float(ch.xi)
                rows.append(row)
            print(label, c, json.dumps(rows[-1]), flush=True)
            runs.append(rows)
        out["runs"][label] = runs
        # medians over chains per checkpoint
        keys = [k for k in runs[0][0] if k != "t"]
        out.setdefault("median", {})[label] = {
            key: [round(float(np.median([r[i][key] for r in runs])), 3) for i in range(len(CHECK))] for key in keys
        }
    print(json.dumps(out["median"], indent=1))
    (OUT / "track.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
