"""
Posterior predictive uncertainty for classification
===================================================

A point estimate gives one decision boundary; the posterior gives a distribution over
boundaries. Averaging the class probabilities over the posterior draws gives the
*posterior predictive* probability (what ``predict_proba`` returns), and its entropy says
how uncertain a prediction is. Part of that entropy is noise in the labels that more data
would not remove (*aleatoric*), part is uncertainty about the weights (*epistemic*): the
latter is the mutual information between the label and the weights,

.. math::

    \\mathrm{MI}(x) = H\\big[\\bar p(y \\mid x)\\big]
        - \\frac{1}{S} \\sum_{s=1}^{S} H\\big[p(y \\mid x, \\theta_s)\\big],

computed from the per-draw probabilities of :meth:`~skbayes_sg.SGBayesLogisticRegression.predict_proba_samples`.
It is large where the data say little: away from the training points and along the boundary.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_moons
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler

from skbayes_sg import SGBayesLogisticRegression

QUICK = os.environ.get("SKBAYES_SG_DOCS_QUICK", "0") not in ("", "0")
# Cubic features are strongly correlated, so the chains move slowly: run them long.
N_ITER = 1000 if QUICK else 20000

# %%
# Data and model
# --------------
# Two interleaved half-moons, with a cubic feature expansion so that a linear model in the
# features can bend. A small training set keeps the posterior wide enough to see.
X, y = make_moons(n_samples=120, noise=0.25, random_state=0)

clf = make_pipeline(
    PolynomialFeatures(degree=3, include_bias=False),
    StandardScaler(),
    SGBayesLogisticRegression(n_iter=N_ITER, n_chains=2, random_state=0),
)
clf.fit(X, y)
bayes = clf[-1]
print(
    f"sampler {type(bayes._sampler).__name__}, step size {bayes.diagnostics_['step_size']:.3g}, "
    f"{bayes.samples_.shape[0]} chains x {bayes.samples_.shape[1]} draws"
)
print(bayes.summary())

# %%
# Predictive probability, entropy and mutual information on a grid
# -----------------------------------------------------------------
xx, yy = np.meshgrid(np.linspace(-2.0, 3.0, 120), np.linspace(-1.6, 2.1, 100))
grid = np.c_[xx.ravel(), yy.ravel()]
features = clf[:-1].transform(grid)
p_draws = bayes.predict_proba_samples(features)  # (n_draws, n_points, 2)
p_mean = p_draws.mean(axis=0)  # the same as clf.predict_proba(grid)


def entropy(p):
    return -(p * np.log(np.clip(p, 1e-12, 1.0))).sum(axis=-1)


total = entropy(p_mean)
mutual_information = total - entropy(p_draws).mean(axis=0)

fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True, layout="constrained")
panels = [
    (p_mean[:, 1], "RdBu_r", "posterior predictive P(y = 1)", (0, 1)),
    (total, "viridis", "predictive entropy (nats)", (0, np.log(2))),
    (mutual_information, "magma", "mutual information (epistemic)", (0, None)),
]
for ax, (values, cmap, title, (vmin, vmax)) in zip(axes, panels):
    im = ax.contourf(xx, yy, values.reshape(xx.shape), levels=20, cmap=cmap, vmin=vmin, vmax=vmax)
    ax.scatter(X[:, 0], X[:, 1], c=y, cmap="RdBu_r", edgecolors="k", s=18)
    ax.set_title(title)
    ax.set_xlabel("$x_1$")
    fig.colorbar(im, ax=ax, shrink=0.85)
axes[0].set_ylabel("$x_2$")
plt.show()

# %%
# A credible interval for one prediction
# --------------------------------------
# The per-draw probabilities also give an interval for a single prediction: narrow in the
# middle of a class, wide on the boundary and where the model extrapolates (the last two
# points, far from the data, where the mutual information is high).
points = np.array([[0.0, 1.0], [0.5, 0.25], [-1.0, -1.3], [2.5, 1.9]])
p = bayes.predict_proba_samples(clf[:-1].transform(points))[:, :, 1]
lo, hi = np.quantile(p, [0.05, 0.95], axis=0)
for x, m, a, b in zip(points, p.mean(axis=0), lo, hi):
    print(f"x = {x}: P(y = 1) = {m:.2f}, 90% credible interval [{a:.2f}, {b:.2f}]")
