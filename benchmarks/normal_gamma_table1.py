"""CCAdL paper (Shang et al. 2015) Table 1 / Figure 1: the Normal-Gamma example.

N = 100 draws from N(0, 1), prior mu, gamma ~ N(mu | 0, 1/gamma) Gam(gamma | 1, 1),
minibatches of n = 10 drawn with replacement (section 4.1); the gradient noise depends on
(mu, gamma). For SGHMC, SGNHT, CCAdL and mCCAdL at h in {0.001, 0.01} and A in {1, 10}:
the RMSE between the histogram density of each marginal and the exact marginal (Student t
for mu, Gamma for gamma; 50 bins over the central 99.8%), and the autocorrelation time
(draws / bulk ESS). The paper used 10^6 samples; the default here is 2 x 10^5 per run
(``--n-iter``), ``--quick`` uses 3 x 10^4.

Prints one JSON object per line and saves ``results/normal_gamma_table1[_quick].png``
(marginal densities at h = 0.01, A = 1, as the paper's Figure 1c) and ``.jsonl``.

Usage::

    python benchmarks/normal_gamma_table1.py [--quick] [--n-iter 200000]
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from skbayes_sg._chains import ChainSpec, run_chain
from skbayes_sg.diagnostics import ess_bulk
from skbayes_sg.minibatch import GradientSpec
from skbayes_sg.models import NormalGammaModel
from skbayes_sg.samplers import SGHMC, SGNHT, CCAdL, MCCAdL

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLERS = {"SGHMC": SGHMC, "SGNHT": SGNHT, "CCAdL": CCAdL, "mCCAdL": MCCAdL}
# The paper's Table 1, (RMSE mu-and-gamma, autocorrelation time) for reference.
PAPER = {
    (0.001, 1): {"SGHMC": 0.0148, "SGNHT": 0.0037, "CCAdL": 0.0034},
    (0.001, 10): {"SGHMC": 0.0029, "SGNHT": 0.0035, "CCAdL": 0.0031},
    (0.01, 1): {"SGHMC": 0.0531, "SGNHT": 0.0044, "CCAdL": 0.0021},
    (0.01, 10): {"SGHMC": 0.0132, "SGNHT": 0.0043, "CCAdL": 0.0035},
}


def density_rmse(draws, dist, n_bins=50):
    """RMSE between the histogram density of ``draws`` and ``dist.pdf`` at the bin centres."""
    lo, hi = dist.ppf([0.001, 0.999])
    edges = np.linspace(lo, hi, n_bins + 1)
    counts, _ = np.histogram(draws, edges)
    density = counts / (draws.size * (edges[1] - edges[0]))
    return float(np.sqrt(np.mean((density - dist.pdf(0.5 * (edges[1:] + edges[:-1]))) ** 2)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n-iter", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n_iter = 30_000 if args.quick else args.n_iter
    x = np.random.default_rng(2015).normal(size=100)
    model = NormalGammaModel(x)
    post = model.posterior()
    rows, keep = [], {}
    for h in (0.001, 0.01):
        for A in (1.0, 10.0):
            for name, cls in SAMPLERS.items():
                t0 = time.perf_counter()
                spec = ChainSpec(cls(step_size=h, friction=A), model, n_iter, n_iter // 5, 1, n_iter, GradientSpec(10))
                res = run_chain(spec, np.array([0.0, 1.0]), np.random.SeedSequence(args.seed))
                d = res.draws
                ess = ess_bulk(d[None])
                row = {
                    "h": h,
                    "A": A,
                    "sampler": name,
                    "n_iter": n_iter,
                    "rmse_mu": round(density_rmse(d[:, 0], post[0]), 4),
                    "rmse_gamma": round(density_rmse(d[:, 1], post[1]), 4),
                    "act_mu": round(float(d.shape[0] / ess[0]), 1),
                    "act_gamma": round(float(d.shape[0] / ess[1]), 1),
                    "xi_mean": round(float(res.stats["xi"].mean()), 3) if "xi" in res.stats else None,
                    "paper_rmse": PAPER[(h, int(A))].get(name),
                    "seconds": round(time.perf_counter() - t0, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
                if h == 0.01 and A == 1.0:
                    keep[name] = d
    # ranking summary, as the paper's claim: CCAdL / mCCAdL below SGNHT below SGHMC
    for h in (0.001, 0.01):
        for A in (1.0, 10.0):
            sel = {r["sampler"]: r["rmse_mu"] + r["rmse_gamma"] for r in rows if r["h"] == h and r["A"] == A}
            print(json.dumps({"h": h, "A": A, "ranking_by_rmse_sum": sorted(sel, key=sel.get)}), flush=True)
    suffix = "_quick" if args.quick else ""
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"normal_gamma_table1{suffix}.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    _plot(keep, post, RESULTS / f"normal_gamma_table1{suffix}.png")


def _plot(keep, post, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for j, (ax, label) in enumerate(zip(axes, ("mu", "gamma"))):
        lo, hi = post[j].ppf([0.0005, 0.9995])
        grid = np.linspace(lo, hi, 300)
        ax.plot(grid, post[j].pdf(grid), "k-", lw=2, label="True")
        for name, d in keep.items():
            ax.hist(d[:, j], bins=80, range=(lo, hi), density=True, histtype="step", label=name)
        ax.set_xlabel(label)
        ax.set_ylabel("Density")
    axes[0].legend()
    fig.suptitle("Normal-Gamma marginals, h = 0.01, A = 1 (CCAdL paper Fig. 1c)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
