"""
Counts: rate ratios and predictive checks for doctor visits
===========================================================

:class:`~skbayes_sg.SGBayesPoissonRegressor` is Bayesian Poisson regression with a log link,
:math:`y_i \\sim \\operatorname{Poisson}(\\mu_i)`, :math:`\\log \\mu_i = x_i^\\top w + b`.
Here it models the number of doctor visits in a year (``mdvis``) of the 20,190 people of the
RAND Health Insurance Experiment (statsmodels' ``randhie`` data set) from their insurance
plan and health, and is set next to statsmodels' maximum-likelihood ``GLM``:

* each coefficient is a log **rate ratio**: :math:`e^{w_j}` multiplies the expected number of
  visits per unit of covariate :math:`j`. The posterior gives each a 90% credible interval;
* ``sample_y`` draws counts from the **posterior predictive**, which checks the model
  against the observed distribution of counts.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import statsmodels.api as sm

from skbayes_sg import SGBayesPoissonRegressor

QUICK = os.environ.get("SKBAYES_SG_DOCS_QUICK", "0") not in ("", "0")

data = sm.datasets.randhie.load_pandas()
X, y = data.exog, data.endog.to_numpy(float)
print(f"{len(y)} people, mean {y.mean():.2f} visits, {np.mean(y == 0):.0%} with none")

# %%
# The posterior and the maximum-likelihood fit
# --------------------------------------------
# The defaults: four chains of mCCAdL on minibatches of 200 rows with control variates,
# run until every parameter's bulk ESS reaches 1,000. The prior ``N(0, 1)`` on each
# coefficient is weak against 20,190 rows, so the posterior sits on the likelihood.
reg = SGBayesPoissonRegressor(random_state=0).fit(X, y)
glm = sm.GLM(y, sm.add_constant(X, prepend=False), family=sm.families.Poisson()).fit()

summary = reg.summary(ci=0.9)
lo, hi = np.exp(summary["ci_lower"]), np.exp(summary["ci_upper"])
glm_ci = np.exp(glm.conf_int(alpha=0.1).to_numpy())
print(f"{'':10s} {'rate ratio':>10s} {'90% credible':>16s}   {'GLM':>6s} {'90% confidence':>16s}")
for j, name in enumerate(summary["parameter"]):
    rr = np.exp(reg.samples_[..., j]).mean()
    print(
        f"{name[5:-1] if name.startswith('coef') else name:10s} {rr:10.3f} [{lo[j]:6.3f}, {hi[j]:6.3f}]"
        f"   {np.exp(glm.params.iloc[j]):6.3f} [{glm_ci[j, 0]:6.3f}, {glm_ci[j, 1]:6.3f}]"
    )
print(f"D^2 (deviance explained): {reg.score(X, y):.3f}; GLM: {1 - glm.deviance / glm.null_deviance:.3f}")

# %%
# With this much data the credible intervals and the Wald confidence intervals agree
# closely, as the Bernstein-von Mises theorem says they should; the Bayesian fit also gives
# the posterior of any function of the parameters, such as a rate ratio, by its draws.
names = [n[5:-1] for n in summary["parameter"][:-1]]
rr_draws = np.exp(reg.coef_samples_)
fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
pos = np.arange(len(names))
ax.errorbar(
    rr_draws.mean(axis=0),
    pos + 0.12,
    xerr=np.abs(np.quantile(rr_draws, [0.05, 0.95], axis=0) - rr_draws.mean(axis=0)),
    fmt="o",
    label="posterior mean, 90% credible",
)
ax.errorbar(
    np.exp(glm.params.iloc[:-1]),
    pos - 0.12,
    xerr=np.abs(glm_ci[:-1].T - np.exp(glm.params.iloc[:-1].to_numpy())),
    fmt="s",
    color="grey",
    label="statsmodels GLM, 90% confidence",
)
ax.axvline(1.0, color="k", lw=0.8)
ax.set_yticks(pos, names)
ax.set_xlabel("rate ratio of doctor visits per unit of the covariate")
ax.legend(loc="lower right")

# %%
# Predictive check: the distribution of counts
# --------------------------------------------
# Each replicate draws one count per person from the posterior predictive; the number of
# people with ``k`` visits in each replicate gives a 90% predictive interval for the
# observed number. The Poisson model predicts the mean well but too few people with no
# visits and too few with many: the counts are overdispersed (their variance is several
# times their mean), which a negative binomial or a hurdle model would capture.
n_rep = 100 if QUICK else 400
reps = reg.sample_y(X, n_rep, random_state=0)
ks = np.arange(16)
freq = np.array([(reps == k).sum(axis=0) for k in ks])  # (k, replicate)
obs = np.array([(y == k).sum() for k in ks])
f_lo, f_hi = np.quantile(freq, [0.05, 0.95], axis=1)
fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
ax.bar(ks, obs, color="lightgrey", label="observed")
ax.vlines(ks, f_lo, f_hi, color="C0", lw=4, label="90% posterior predictive")
ax.set_xlabel("doctor visits in the year")
ax.set_ylabel("people")
ax.legend()
print(f"variance / mean of the counts: {y.var() / y.mean():.1f} (Poisson: 1)")

# %%
# Per person, the 90% predictive interval of the count covers the observed count less often
# than 90% of the time for the same reason: the model is honest about its parameters, not
# about a likelihood that is too narrow for these data.
lo_i, hi_i = np.quantile(reps, [0.05, 0.95], axis=1)
print(f"observed counts inside their 90% predictive interval: {np.mean((y >= lo_i) & (y <= hi_i)):.1%}")
plt.show()
