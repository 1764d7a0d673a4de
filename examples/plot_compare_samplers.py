"""
Comparing samplers on one posterior
===================================

Bayesian linear regression with a known noise precision has a Gaussian posterior known in
closed form, :math:`N(m, S)` with :math:`S = (\\tau X^\\top X + \\alpha I)^{-1}` and
:math:`m = \\tau S X^\\top y`, so every sampler's output can be checked against the truth.
This example runs each sampler of :mod:`skbayes_sg.samplers` on the same posterior and
compares

* trace plots of one coordinate (how fast the chains move);
* bulk ESS per 1000 per-example gradient evaluations (the papers' cost unit);
* the error of the sampled posterior standard deviations (how *accurate* the fixed-step
  stochastic-gradient samplers are);

and then sweeps the step size to show how far each Langevin scheme can be pushed: mCCAdL's
symmetric splitting stays accurate and stable at steps where SGHMC and CCAdL degrade.
"""

import os
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from skbayes_sg import DivergenceError, GradientNoiseWarning, SGBayesLinearRegression
from skbayes_sg.diagnostics import ess_bulk
from skbayes_sg.samplers import SGHMC, SGLD, SGNHT, CCAdL, GadMALA, MCCAdL

QUICK = os.environ.get("SKBAYES_SG_DOCS_QUICK", "0") not in ("", "0")
N_ITER = 1500 if QUICK else 10000
warnings.simplefilter("ignore", ConvergenceWarning)
warnings.simplefilter("ignore", GradientNoiseWarning)

# %%
# The posterior
# -------------
rng = np.random.default_rng(0)
N, P, tau, alpha = 2000, 5, 4.0, 1.0
cov = 0.5 ** np.abs(np.subtract.outer(np.arange(P), np.arange(P)))  # correlated features
X = rng.multivariate_normal(np.zeros(P), cov, size=N)
w_true = rng.normal(size=P)
y = X @ w_true + rng.normal(scale=tau**-0.5, size=N)

S = np.linalg.inv(tau * X.T @ X + alpha * np.eye(P))
m = tau * S @ X.T @ y
sd_exact = np.sqrt(np.diag(S))

# normalize_y=False: the prior N(0, 1/alpha) in y's units, the one the exact posterior above uses.
common = dict(
    noise_precision=tau,
    alpha=alpha,
    fit_intercept=False,
    normalize_y=False,
    n_iter=N_ITER,
    n_chains=2,
    init="map",
    random_state=0,
)
samplers = {
    "SGLD": (SGLD(), 200),
    "SGHMC": (SGHMC(), 200),
    "SGNHT": (SGNHT(), 200),
    "CCAdL": (CCAdL(), 200),
    "mCCAdL": (MCCAdL(), 200),
    "gadMALA (full data)": (GadMALA(init_scale="auto"), None),
}

fits = {}
for name, (sampler, batch_size) in samplers.items():
    t0 = time.perf_counter()
    reg = SGBayesLinearRegression(sampler=sampler, batch_size=batch_size, **common).fit(X, y)
    fits[name] = (reg, time.perf_counter() - t0)

print(f"{'sampler':<22}{'step h':>9}{'ESS/1000 grads':>16}{'max |sd err|':>14}{'max |mean err|/sd':>19}")
for name, (reg, _seconds) in fits.items():
    draws = reg.samples_
    ess = ess_bulk(draws)
    per_k = 1000 * ess.min() / reg.diagnostics_["n_grad_evals"]
    sd = draws.reshape(-1, P).std(axis=0)
    mean_err = np.abs(draws.reshape(-1, P).mean(axis=0) - m) / sd_exact
    h = reg.diagnostics_.get("step_size", float("nan"))
    h = "adaptive" if np.isnan(h) else f"{h:.3g}"  # gadMALA adapts a whole matrix L instead
    print(f"{name:<22}{h:>9}{per_k:>16.3f}{np.max(np.abs(sd / sd_exact - 1)):>14.1%}{mean_err.max():>19.2f}")

# %%
# Trace plots
# -----------
# The first weight, first chain, in posterior standard deviations from the exact mean (the
# green band is the exact posterior's central 95%; note each panel's own vertical scale).
# With minibatches of 200 of 2000 rows the gradient noise is strong: SGHMC and SGNHT at
# friction 1 run far too hot (the accuracy condition ``h Sigma_max / (2 A T)`` small is
# badly violated, see :ref:`user_guide_step_size`), while CCAdL and mCCAdL cancel the noise.
# SGLD moves by diffusion and explores slowly; the momentum methods travel further per
# step; gadMALA, after adapting its proposal during burn-in, proposes whole-posterior moves
# and accepts about half of them.
fig, axes = plt.subplots(len(fits), 1, figsize=(8, 1.4 * len(fits)), sharex=True, layout="constrained")
for ax, (name, (reg, _)) in zip(axes, fits.items()):
    trace = (reg.samples_[0, :, 0] - m[0]) / sd_exact[0]
    ax.plot(trace, lw=0.5)
    ax.axhline(0, color="k", lw=0.5)
    ax.axhspan(-2, 2, color="tab:green", alpha=0.15)  # the exact posterior's 95% range
    ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
axes[-1].set_xlabel("stored draw")
fig.suptitle("trace of $w_1$ (in exact posterior sd from the exact mean)")
plt.show()

# %%
# ESS and accuracy
# ----------------
names = list(fits)
ess_per_k = [1000 * ess_bulk(r.samples_).min() / r.diagnostics_["n_grad_evals"] for r, _ in fits.values()]
sd_err = [np.max(np.abs(r.samples_.reshape(-1, P).std(axis=0) / sd_exact - 1)) for r, _ in fits.values()]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
ax1.barh(names, ess_per_k, color="tab:blue")
ax1.set(xlabel="smallest bulk ESS per 1000 gradient evaluations")
ax1.invert_yaxis()
ax2.barh(names, sd_err, color="tab:orange")
for i, e in enumerate(sd_err):
    ax2.text(e, i, f" {e:.0%}", va="center", fontsize=8)
ax2.set(xlabel="largest relative error of posterior sd", xscale="log")
ax2.invert_yaxis()
ax2.set_yticklabels([])
plt.show()

# %%
# Step-size stability
# -------------------
# Run the three thermostat-free / thermostatted Langevin schemes at the same step sizes,
# multiples of mCCAdL's automatic one, with the same minibatches, and measure the error of
# the sampled variances. Euler-type schemes (SGHMC, CCAdL) lose accuracy quickly and then
# diverge (a :class:`~skbayes_sg.DivergenceError`, drawn as a cross); mCCAdL's
# second-order splitting with exact O and C steps stays closer to the exact posterior over
# a wider range (Wei & Shang 2026, section 3). Errors below ~10% are Monte Carlo noise of
# these short runs (and everything is noise at the reduced size of the documentation build).
factors = [0.5, 1, 2, 4, 6] if QUICK else [0.5, 1, 1.5, 2, 3, 4, 6]
h_ref = fits["mCCAdL"][0].diagnostics_["step_size"]
schemes = {"SGHMC": SGHMC, "CCAdL": CCAdL, "mCCAdL": MCCAdL}
n_sweep = N_ITER // 2
results = {}
for name, cls in schemes.items():
    errors = []
    for f in factors:
        try:
            reg = SGBayesLinearRegression(
                sampler=cls(step_size=f * h_ref), batch_size=200, **{**common, "n_iter": n_sweep}
            ).fit(X, y)
            var = reg.samples_.reshape(-1, P).var(axis=0)
            errors.append(np.max(np.abs(var / sd_exact**2 - 1)))
        except DivergenceError:
            errors.append(np.inf)
    results[name] = np.array(errors)
    print(name, " ".join("diverged" if not np.isfinite(e) else f"{e:.0%}" for e in errors))

finite = np.concatenate([e[np.isfinite(e)] for e in results.values()])
top = 2 * finite.max() if finite.size else 10.0
fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
h = np.array(factors) * h_ref
for name, errors in results.items():
    ok = np.isfinite(errors)
    (line,) = ax.plot(h[ok], errors[ok], "o-", label=name)
    ax.plot(h[~ok], np.full((~ok).sum(), top), "x", color=line.get_color(), ms=10, mew=2)
ax.set(
    xscale="log",
    yscale="log",
    xlabel="step size h",
    ylabel="largest relative error of posterior variance",
    title="accuracy against step size (x: diverged)",
)
ax.legend()
plt.show()
