"""
Credible and predictive bands for regression
============================================

:class:`~skbayes_sg.SGBayesLinearRegression` samples the weights *and* the noise
precision :math:`\\tau`. Two bands answer two questions:

* the **credible band** of the regression function :math:`f(x) = \\phi(x)^\\top w + b`:
  where is the mean curve? From the per-draw curves, it narrows as data accumulate;
* the **predictive band** of a new observation :math:`y = f(x) + \\varepsilon`: where will
  the next point fall? ``predict(X, return_std=True)`` returns its mean and standard
  deviation, :math:`\\operatorname{sd}[y] = \\sqrt{\\operatorname{Var}[f(x)] + \\operatorname{E}[1/\\tau]}`,
  noise included (as scikit-learn's ``BayesianRidge``), and ``sample_y`` draws from it.

A spline basis makes the linear model flexible; the gap in the training data shows the
credible band widening where the data are silent.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import SplineTransformer

from skbayes_sg import SGBayesLinearRegression

QUICK = os.environ.get("SKBAYES_SG_DOCS_QUICK", "0") not in ("", "0")
# The weights of splines over the gap are held by the prior alone (curvature alpha = 1)
# while the others are pinned by the data (curvature ~1400): a condition number of ~1400,
# so a momentum sampler needs ~sqrt(1400) / 0.2 ~ 200 iterations per independent draw.
# Iterations are cheap here (N = 100), so run many; max_draws keeps memory bounded.
N_ITER = 2000 if QUICK else 100_000

rng = np.random.default_rng(0)
x = np.concatenate([rng.uniform(-3, -0.5, 60), rng.uniform(1.5, 3, 40)])
y = np.sin(1.5 * x) + 0.3 * x + rng.normal(scale=0.3, size=x.size)
X = x[:, None]

reg = make_pipeline(
    # include_bias=False: the splines sum to one, which would duplicate the intercept.
    SplineTransformer(n_knots=6, degree=3, include_bias=False),
    SGBayesLinearRegression(n_iter=N_ITER, n_chains=2, alpha=1.0, random_state=0),
)
reg.fit(X, y)
bayes = reg[-1]
print(f"posterior mean noise sd {np.mean(bayes.noise_precision_samples_**-0.5):.3f} (true 0.3)")

# %%
# The two bands
# -------------
# The credible band comes from the per-draw regression functions ``phi(x) @ w_s + b_s``;
# the predictive band from ``return_std``.
x_grid = np.linspace(-3.5, 3.5, 300)
phi = reg[:-1].transform(x_grid[:, None])
f_draws = phi @ bayes.coef_samples_.T + bayes.intercept_samples_  # (n_points, n_draws)
f_lo, f_hi = np.quantile(f_draws, [0.05, 0.95], axis=1)
mean, std = reg.predict(x_grid[:, None], return_std=True)

fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
ax.fill_between(
    x_grid,
    mean - 1.645 * std,
    mean + 1.645 * std,
    color="tab:blue",
    alpha=0.15,
    label="90% predictive band (return_std)",
)
ax.fill_between(x_grid, f_lo, f_hi, color="tab:blue", alpha=0.4, label="90% credible band of f(x)")
ax.plot(x_grid, mean, color="tab:blue", lw=2, label="posterior predictive mean")
ax.plot(x_grid, np.sin(1.5 * x_grid) + 0.3 * x_grid, "k--", lw=1, label="true f(x)")
ax.scatter(x, y, s=12, color="k", alpha=0.6, label="training data")
# sample_y draws new observations (a draw of f plus independent noise) at chosen inputs.
x_few = np.linspace(-3.4, 3.4, 35)
y_few = reg[-1].sample_y(reg[:-1].transform(x_few[:, None]), n_samples=2, random_state=1)
ax.plot(np.repeat(x_few, 2), y_few.ravel(), "o", ms=3, color="tab:orange", label="sample_y draws")
ax.axvspan(-0.5, 1.5, color="0.9", zorder=-1)
ax.set(xlabel="x", ylabel="y", title="Bayesian spline regression: credible vs predictive bands")
ax.legend(loc="upper left", fontsize=8)
plt.show()

# %%
# Coverage check
# --------------
# On fresh data from the same process, about 90% of the points should fall inside the
# 90% predictive band (and far fewer inside the credible band, which ignores the noise).
x_new = np.concatenate([rng.uniform(-3, -0.5, 600), rng.uniform(1.5, 3, 400)])
y_new = np.sin(1.5 * x_new) + 0.3 * x_new + rng.normal(scale=0.3, size=x_new.size)
m, s = reg.predict(x_new[:, None], return_std=True)
print(f"fraction of new points inside the 90% predictive band: {np.mean(np.abs(y_new - m) < 1.645 * s):.3f}")
