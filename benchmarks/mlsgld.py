"""Multilevel SGLD against SGLD and MALA: the experiments of Nagapetyan et al. (2017), section 4.

Bayesian logistic regression, d = 3 (two N(0, 1) covariates and a constant), prior N(0, I),
g(theta) = ||theta - theta_0||^2 with theta_0 the MAP (Newton-Raphson), batch n = ceil(N^(1/3)),
h_0 = 1/N, T_l = 5 (l + 1) h_0. Errors are relative to a reference E[g] computed by
self-normalised importance sampling with a Student-t proposal at the Laplace approximation
(independent of every sampler tested). Cost is in data items touched (per-example
gradient evaluations), the paper's unit; MLSGLD's set-up (MAP, Hessian) is reported apart.

Experiments (JSON lines on stdout; figures and a JSON file in benchmarks/results/):

1. ``level_decay`` (the paper's Figure 2): mean and variance of Delta_l by level for plain,
   antithetic, antithetic + Taylor, antithetic + Taylor + averaging, with fitted slopes.
2. ``cost_vs_N`` (Figure 3b): cost to reach relative RMSE 2^-5 against N for the four
   variants and MALA (10^4 steps after 10^3 burn-in, cost N per step; the cost it would
   need for 2^-5 is extrapolated from its measured RMSE), with log-log slopes.
3. ``rmse_vs_cost``: achieved relative RMSE against cost at N = 1000 for MLSGLD (relative
   targets 2^(-k/2), k = 2..10) and SGLD at three fixed step sizes, with the standard and
   with the Taylor-based stochastic gradient (running averages from the MAP).

Usage: ``python benchmarks/mlsgld.py [--quick]``.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
from scipy.special import expit, log_expit

from skbayes_sg.minibatch import MinibatchGradient, TaylorControlVariateGradient
from skbayes_sg.models import LogisticModel, find_map
from skbayes_sg.multilevel import CoupledSGLD, estimate
from skbayes_sg.samplers import MLSGLD
from skbayes_sg.samplers._substeps import langevin_step

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
VARIANTS = {
    "plain": dict(antithetic=False, taylor=False, averaging=False),
    "antithetic": dict(antithetic=True, taylor=False, averaging=False),
    "antithetic+taylor": dict(antithetic=True, taylor=True, averaging=False),
    "antithetic+taylor+averaging": dict(antithetic=True, taylor=True, averaging=True),
}


def _sampler(prob, target, name):
    """MLSGLD at the paper's h_0 = 1/N and m = 5, variant ``name``, relative RMSE ``target``, no cost budget."""
    return MLSGLD(target * prob.reference, step_size=1.0 / prob.N, horizon=5, max_grad_evals=None, **VARIANTS[name])


def emit(record, sink):
    sink.append(record)
    print(json.dumps(record), flush=True)


# -- problem and reference -----------------------------------------------------------------
class Problem:
    """Data, model, MAP and reference E[g] for one N."""

    def __init__(self, N, n_is, seed=0):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((N, 2))
        self.Xa = np.column_stack([X, np.ones(N)])
        y = (rng.random(N) < expit(self.Xa @ np.array([1.0, -0.5, 0.25]))).astype(float)
        self.N, self.y = N, y
        self.model = LogisticModel(X, y, alpha=1.0)
        self.theta0, passes = find_map(self.model)
        self.setup_cost = passes * N
        self.batch = int(math.ceil(N ** (1 / 3) - 1e-9))
        self.reference, self.reference_se = self._importance_sampling(n_is, rng)

    def g(self, thetas):
        return ((thetas - self.theta0) ** 2).sum(axis=1)

    def log_post(self, thetas):
        Z = self.Xa @ thetas.T
        return (self.y[:, None] * log_expit(Z) + (1 - self.y[:, None]) * log_expit(-Z)).sum(0) - 0.5 * (thetas**2).sum(
            1
        )

    def log_post_grad(self, thetas):
        Z = self.Xa @ thetas.T
        lp = (self.y[:, None] * log_expit(Z) + (1 - self.y[:, None]) * log_expit(-Z)).sum(0) - 0.5 * (thetas**2).sum(1)
        return lp, (self.Xa.T @ (self.y[:, None] - expit(Z))).T - thetas

    def _importance_sampling(self, n, rng, df=7, chunk=1000):
        """Self-normalised IS with a multivariate t proposal at the Laplace approximation."""

        cov = np.linalg.inv(-self.model.posterior_hessian(self.theta0))
        Lc = np.linalg.cholesky(cov)
        logw, gs = [], []
        for start in range(0, n, chunk):
            k = min(chunk, n - start)
            z = rng.standard_normal((k, 3))
            u = rng.chisquare(df, size=k)
            thetas = self.theta0 + (z @ Lc.T) / np.sqrt(u / df)[:, None]
            maha = np.einsum("ij,ij->i", z, z) / (u / df)
            log_q = -0.5 * (df + 3) * np.log1p(maha / df)
            logw.append(self.log_post(thetas) - log_q)
            gs.append(self.g(thetas))
        logw, gs = np.concatenate(logw), np.concatenate(gs)
        w = np.exp(logw - logw.max())
        w /= w.sum()
        est = float(w @ gs)
        se = float(np.sqrt(np.sum(w**2 * (gs - est) ** 2)))
        return est, se


# -- 1: decay by level ---------------------------------------------------------------------
def level_decay(prob, n_levels, n_paths, sink):
    for name, kw in VARIANTS.items():
        c = CoupledSGLD(prob.model, prob.theta0, 1.0 / prob.N, 5, prob.batch, **kw)
        means, vars_ = [], []
        t = time.time()
        for level in range(n_levels):
            s = c.sample(level, n_paths, np.random.default_rng([level, 17]), prob.g)
            means.append(float(s.delta.mean()) / prob.reference)
            vars_.append(float(s.delta.var(ddof=1)) / prob.reference**2)
        ls = np.arange(1, n_levels)
        emit(
            {
                "experiment": "level_decay",
                "variant": name,
                "N": prob.N,
                "n_paths": n_paths,
                "rel_mean": means,
                "rel_var": vars_,
                "var_slope": float(np.polyfit(ls, np.log2(vars_[1:]), 1)[0]),
                "mean_slope": float(np.polyfit(ls, np.log2(np.abs(means[1:])), 1)[0]),
                "seconds": round(time.time() - t, 1),
            },
            sink,
        )


# -- MALA -----------------------------------------------------------------------------------
def mala(prob, n_steps, n_burn, n_chains, rng):
    """MALA chains (vectorised), step size adapted to acceptance 0.574 during burn-in."""
    theta = np.tile(prob.theta0, (n_chains, 1))
    lp, gr = prob.log_post_grad(theta)
    log_h = np.log(1.0 / prob.N)
    acc_sum, total = np.zeros(n_chains), np.zeros(n_chains)
    for t in range(n_burn + n_steps):
        h = np.exp(log_h)
        prop = theta + h * gr + np.sqrt(2 * h) * rng.standard_normal(theta.shape)
        lp_p, gr_p = prob.log_post_grad(prop)
        fwd = -((prop - theta - h * gr) ** 2).sum(1) / (4 * h)
        bwd = -((theta - prop - h * gr_p) ** 2).sum(1) / (4 * h)
        a = np.minimum(0.0, lp_p - lp + bwd - fwd)
        accept = np.log(rng.random(n_chains)) < a
        theta[accept], lp[accept], gr[accept] = prop[accept], lp_p[accept], gr_p[accept]
        if t < n_burn:
            log_h += (np.exp(a).mean() - 0.574) / np.sqrt(t + 1.0)
        else:
            total += prob.g(theta)
            acc_sum += accept
    return total / n_steps, float(acc_sum.mean() / n_steps)


# -- 2: cost against N ------------------------------------------------------------------------
def cost_vs_N(probs, n_reps, variants_by_N, mala_steps, mala_burn, sink, target=2.0**-5):
    for prob in probs:
        for name in variants_by_N(prob.N):
            errs, costs, setups, t = [], [], [], time.time()
            for rep in range(n_reps):
                res = estimate(
                    _sampler(prob, target, name),
                    prob.model,
                    prob.g,
                    theta0=prob.theta0,
                    rmse_units="absolute",
                    batch_size=prob.batch,
                    random_state=rep,
                )
                errs.append(float(res.estimate[0]) / prob.reference - 1)
                costs.append(res.n_grad_evals)
                setups.append(res.n_grad_evals_setup + prob.setup_cost)
            emit(
                {
                    "experiment": "cost_vs_N",
                    "method": name,
                    "N": prob.N,
                    "target_rel_rmse": target,
                    "rel_rmse": float(np.sqrt(np.mean(np.square(errs)))),
                    "cost": float(np.mean(costs)),
                    "setup_cost": float(np.mean(setups)),
                    "n_reps": n_reps,
                    "n_levels": len(res.levels),
                    "seconds": round(time.time() - t, 1),
                },
                sink,
            )
        t = time.time()
        ests, acc = mala(prob, mala_steps, mala_burn, n_reps * 2, np.random.default_rng(prob.N))
        rel_rmse = float(np.sqrt(np.mean((ests / prob.reference - 1) ** 2)))
        cost = prob.N * (mala_burn + mala_steps)
        needed = prob.N * (mala_burn + mala_steps * (rel_rmse / target) ** 2)
        emit(
            {
                "experiment": "cost_vs_N",
                "method": "mala",
                "N": prob.N,
                "target_rel_rmse": target,
                "rel_rmse": rel_rmse,
                "cost_run": float(cost),
                "cost": float(needed),
                "acceptance": acc,
                "n_steps": mala_steps,
                "n_burn": mala_burn,
                "n_chains": n_reps * 2,
                "seconds": round(time.time() - t, 1),
            },
            sink,
        )


# -- 3: RMSE against cost ----------------------------------------------------------------------
def sgld_curves(prob, step_sizes, n_steps, n_chains, sink, taylor=False):
    """SGLD from the MAP at fixed h: relative RMSE of the running average of g against cost."""
    checkpoints = np.unique(np.geomspace(10, n_steps, 25).astype(int))
    for h in step_sizes:
        target = (
            TaylorControlVariateGradient(prob.model, prob.batch, theta_hat=prob.theta0)
            if taylor
            else MinibatchGradient(prob.model, prob.batch)
        )
        rng = np.random.default_rng(3)
        theta = np.tile(prob.theta0, (n_chains, 1))
        total = np.zeros(n_chains)
        rmse, cost = [], []
        t = time.time()
        for k in range(1, n_steps + 1):
            rows = target.draw_rows(rng, n_chains)
            langevin_step(theta, target.gradient_paths(theta, rows), h, rng.standard_normal(theta.shape))
            total += prob.g(theta)
            if k in checkpoints:
                rmse.append(float(np.sqrt(np.mean((total / k / prob.reference - 1) ** 2))))
                cost.append(float(k * prob.batch))
        emit(
            {
                "experiment": "rmse_vs_cost",
                "method": "sgld+taylor" if taylor else "sgld",
                "step_size_times_N": h * prob.N,
                "N": prob.N,
                "cost": cost,
                "rel_rmse": rmse,
                "n_chains": n_chains,
                "seconds": round(time.time() - t, 1),
            },
            sink,
        )


def mlsgld_curve(prob, ks, n_reps, sink, name="antithetic+taylor"):
    cost, rmse = [], []
    t = time.time()
    for k in ks:
        target = 2.0 ** (-k / 2)
        errs, costs = [], []
        for rep in range(n_reps):
            res = estimate(
                _sampler(prob, target, name),
                prob.model,
                prob.g,
                theta0=prob.theta0,
                rmse_units="absolute",
                batch_size=prob.batch,
                random_state=100 + rep,
            )
            errs.append(float(res.estimate[0]) / prob.reference - 1)
            costs.append(res.n_grad_evals)
        cost.append(float(np.mean(costs)))
        rmse.append(float(np.sqrt(np.mean(np.square(errs)))))
    emit(
        {
            "experiment": "rmse_vs_cost",
            "method": name,
            "N": prob.N,
            "target_rel_rmse": [2.0 ** (-k / 2) for k in ks],
            "cost": cost,
            "rel_rmse": rmse,
            "n_reps": n_reps,
            "cost_slope": float(np.polyfit(np.log(rmse), np.log(cost), 1)[0]),
            "seconds": round(time.time() - t, 1),
        },
        sink,
    )


# -- figures -------------------------------------------------------------------------------------
def figures(sink, out, suffix=""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dec = [r for r in sink if r["experiment"] == "level_decay"]
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for r in dec:
        ls = np.arange(len(r["rel_var"]))
        ax[0].semilogy(ls, r["rel_var"], "o-", label=f"{r['variant']} ({r['var_slope']:.2f})", base=2)
        ax[1].semilogy(ls, np.abs(r["rel_mean"]), "o-", label=f"{r['variant']} ({r['mean_slope']:.2f})", base=2)
    ax[0].set(xlabel="level l", ylabel="Var[Delta_l] / E[g]^2", title=f"Variance decay (N={dec[0]['N']})")
    ax[1].set(xlabel="level l", ylabel="|E Delta_l| / E[g]", title="Mean decay")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"mlsgld_level_decay{suffix}.png"), dpi=120)

    cvn = [r for r in sink if r["experiment"] == "cost_vs_N"]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for method in dict.fromkeys(r["method"] for r in cvn):
        rows = [r for r in cvn if r["method"] == method]
        Ns, costs = [r["N"] for r in rows], [r["cost"] for r in rows]
        slope = np.polyfit(np.log(Ns), np.log(costs), 1)[0] if len(rows) > 1 else float("nan")
        ax.loglog(Ns, costs, "o-", label=f"{method} (slope {slope:.2f})")
    ax.set(xlabel="N", ylabel="cost (data items) for relative RMSE 2^-5", title="Cost against N")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"mlsgld_cost_vs_N{suffix}.png"), dpi=120)

    rvc = [r for r in sink if r["experiment"] == "rmse_vs_cost"]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in rvc:
        sgld = r["method"].startswith("sgld")
        label = f"{r['method']} h = {r['step_size_times_N']:.3g}/N" if sgld else f"MLSGLD {r['method']}"
        ax.loglog(r["cost"], r["rel_rmse"], "-" if sgld else "o-", label=label)
    c = np.geomspace(1e3, 1e8, 10)
    ax.loglog(c, 30 * c**-0.5, "k:", label="c^-1/2")
    ax.set(xlabel="cost (data items)", ylabel="relative RMSE of E[g]", title=f"RMSE against cost (N={rvc[0]['N']})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"mlsgld_rmse_vs_cost{suffix}.png"), dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced run (minutes)")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    q = args.quick
    sink = []
    Ns = [100, 316, 1000, 3162, 10000]
    probs = {N: Problem(N, n_is=50_000 if q else 200_000) for N in Ns}
    for N, p in probs.items():
        emit(
            {"experiment": "reference", "N": N, "E_g": p.reference, "se": p.reference_se, "theta0": p.theta0.tolist()},
            sink,
        )
    level_decay(probs[1000], n_levels=6 if q else 7, n_paths=500 if q else 2000, sink=sink)

    def variants_by_N(N):
        cheap = ["antithetic+taylor", "antithetic+taylor+averaging"]
        return (["plain", "antithetic"] if N <= (100 if q else 316) else []) + cheap

    cost_vs_N(
        list(probs.values()),
        n_reps=4 if q else 8,
        variants_by_N=variants_by_N,
        mala_steps=10_000,
        mala_burn=1_000,
        sink=sink,
    )
    mlsgld_curve(probs[1000], ks=range(2, 11, 2) if q else range(2, 11), n_reps=4 if q else 8, sink=sink)
    for taylor in (False, True):
        sgld_curves(
            probs[1000],
            [1.0 / 1000, 0.25 / 1000, 0.0625 / 1000],
            n_steps=20_000 if q else 100_000,
            n_chains=8 if q else 16,
            sink=sink,
            taylor=taylor,
        )
    suffix = "_quick" if q else ""
    with open(os.path.join(args.out, f"mlsgld{suffix}.json"), "w") as fh:
        json.dump(sink, fh, indent=1)
    figures(sink, args.out, suffix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
