"""Library reference: SGBayesDRBMClassifier(random_state=0) at n_iter=4000 (k=0 validation target).

n_jobs=1 (not 2): the brief allows one python process at a time; the chains are seeded per chain.
Writes DRBM_WHITENING_DIR/lib_fit.json and lib_fit.npz (halves, per_draw, y_test, monitor log loss).
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from drbm_digits_defaults import _data  # noqa: E402

from skbayes_sg import SGBayesDRBMClassifier, diagnostics  # noqa: E402

OUT = Path(os.environ.get("DRBM_WHITENING_DIR", "/tmp/drbm_lowrank_whitening"))
OUT.mkdir(parents=True, exist_ok=True)


def main(n_iter=4000):
    Xtr, Xte, ytr, yte = _data()
    clf = SGBayesDRBMClassifier(random_state=0, n_jobs=1, n_iter=n_iter)
    t0 = time.perf_counter()
    clf.fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    d = clf.diagnostics_
    S = clf.samples_
    draws = clf.predict_proba_samples(Xte)
    codes = np.searchsorted(clf.classes_, yte)
    per_draw = -np.log(np.clip(draws[:, np.arange(codes.size), codes], 1e-300, None)).mean(axis=1)
    per_draw = per_draw.reshape(S.shape[:2])
    chains = draws.reshape(*S.shape[:2], *draws.shape[1:])
    half = chains.shape[1] // 2
    halves = np.stack([chains[:, :half].mean(axis=1), chains[:, half : 2 * half].mean(axis=1)], axis=1)
    proba = chains.mean(axis=(0, 1))
    ll = float(-np.log(proba[np.arange(codes.size), codes]).mean())
    acc = float((proba.argmax(axis=1) == codes).mean())
    mon = clf.sample_stats_["log_loss"]
    xi = clf.sample_stats_.get("xi")
    keys = [k for k in d if np.ndim(d[k]) == 0]
    row = {k: (float(d[k]) if isinstance(d[k], (float, np.floating, int, np.integer)) else d[k]) for k in keys}
    row.update(
        fit_s=fit_s,
        n_iter=int(clf.n_iter_),
        samples_shape=list(S.shape),
        test_log_loss=ll,
        test_accuracy=acc,
        xi_mean=None if xi is None else float(np.mean(xi)),
        sample_stats_keys=list(clf.sample_stats_.keys()),
        test_per_draw_ess=float(diagnostics.summarize(per_draw)["ess_bulk"]),
    )
    row = {k: v for k, v in row.items() if isinstance(v, (str, int, float, list, type(None)))}
    np.savez_compressed(OUT / "lib_fit.npz", halves=halves, per_draw=per_draw, y_test=codes, monitor=mon, samples=S)
    (OUT / "lib_fit.json").write_text(json.dumps(row, indent=1))
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
