"""
Tuning sampler hyperparameters with GridSearchCV
================================================

A sampler is a small scikit-learn estimator holding its hyperparameters, and an
estimator's ``sampler`` parameter can be an instance, so ``GridSearchCV`` reaches the
sampler's hyperparameters through the usual double underscore:
``sgbayeslogisticregression__sampler__friction``. Here SGHMC's step size ``h`` and
friction ``A`` are chosen by the cross-validated log loss of the posterior predictive.

Cross-validation picks what *predicts* best; it does not check that the chains sampled the
posterior. Check the winner's diagnostics too (see :ref:`user_guide_diagnostics`), and
remember the accuracy condition of SGHMC: ``h Sigma_max / (2 A T)`` small
(:ref:`user_guide_step_size`).
"""

import os
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbayes_sg import GradientNoiseWarning, SGBayesLogisticRegression
from skbayes_sg.samplers import SGHMC, MCCAdL

QUICK = os.environ.get("SKBAYES_SG_DOCS_QUICK", "0") not in ("", "0")
N_ITER = 300 if QUICK else 3000

X, y = load_breast_cancer(return_X_y=True)
pipe = make_pipeline(
    StandardScaler(),
    SGBayesLogisticRegression(sampler=SGHMC(), n_iter=N_ITER, n_chains=2, batch_size=50, random_state=0),
)
param_grid = {
    "sgbayeslogisticregression__sampler__step_size": [0.003, 0.01, 0.03],
    "sgbayeslogisticregression__sampler__friction": [1.0, 3.0, 10.0],
}
search = GridSearchCV(pipe, param_grid, scoring="neg_log_loss", cv=3)
with warnings.catch_warnings():
    # Short fits in a search rarely pass the R-hat / ESS checks, and many candidates run hot;
    # the winner is checked below.
    warnings.simplefilter("ignore", ConvergenceWarning)
    warnings.simplefilter("ignore", GradientNoiseWarning)
    search.fit(X, y)
print("best:", search.best_params_, f"log loss {-search.best_score_:.4f}")

# %%
# The cross-validated log loss over the grid
# ------------------------------------------
steps = param_grid["sgbayeslogisticregression__sampler__step_size"]
frictions = param_grid["sgbayeslogisticregression__sampler__friction"]
scores = -search.cv_results_["mean_test_score"].reshape(len(steps), len(frictions))

fig, ax = plt.subplots(figsize=(5.5, 4), layout="constrained")
im = ax.imshow(scores, cmap="viridis_r", origin="lower")
ax.set_xticks(range(len(frictions)), [f"{a:g}" for a in frictions])
ax.set_yticks(range(len(steps)), [f"{h:g}" for h in steps])
ax.set(xlabel="friction A", ylabel="step size h", title="SGHMC: cross-validated log loss")
for i in range(len(steps)):
    for j in range(len(frictions)):
        light = scores[i, j] < scores.min() + 0.5 * np.ptp(scores)  # yellow end of viridis_r
        ax.text(j, i, f"{scores[i, j]:.3f}", ha="center", va="center", color="k" if light else "w", fontsize=9)
fig.colorbar(im, ax=ax)
plt.show()

# %%
# Diagnostics of the refitted winner
# ----------------------------------
# ``best_estimator_`` was refitted on all the data. Its kinetic temperature (the mean of
# ``p'p / P``, which must be ``T = 1`` at stationarity) tells whether the friction
# dissipated the minibatch gradient noise; too far from 1 and the fit warns with a
# :class:`~skbayes_sg.GradientNoiseWarning`.
best = search.best_estimator_[-1]
d = best.diagnostics_
print(
    f"step size {d['step_size']:g}, mean kinetic temperature {d['mean_kinetic_temperature']:.3f} (target 1), "
    f"worst R-hat {np.nanmax(d['rhat']):.3f}, smallest bulk ESS {np.nanmin(d['ess']):.0f}"
)

# %%
# With batches of 50 rows out of 569 the gradient noise is strong: the winner usually runs
# hot (kinetic temperature well above 1), so its posterior is too wide, even though its
# predictions score well. Cross-validated log loss is a fine way to choose among samplers
# that are *accurate*; it cannot tell an accurate one from a hot one. Either raise the
# friction or the batch size, or use a sampler that removes the noise it injects. mCCAdL
# (the default) estimates the noise covariance from the minibatch and cancels it:
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    fixed = search.best_estimator_.set_params(sgbayeslogisticregression__sampler=MCCAdL(step_size=d["step_size"]))
    fixed.fit(X, y)
print(
    f"mCCAdL at the same h: mean kinetic temperature "
    f"{fixed[-1].diagnostics_['mean_kinetic_temperature']:.3f} (target 1)"
)
