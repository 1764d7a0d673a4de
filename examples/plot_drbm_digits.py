"""
A Bayesian non-linear classifier: the DRBM on handwritten digits
================================================================

:class:`~skbayes_sg.drbm.SGBayesDRBMClassifier` is the discriminative restricted
Boltzmann machine of the CCAdL and mCCAdL papers' largest experiments (the letter data set,
see :ref:`benchmark_drbm_letter` for the reproduction of the mCCAdL paper's Figure 4). Here
it runs on scikit-learn's small digits data so that the example takes seconds: a
non-linear classifier whose predictive probabilities average over the posterior of its
weights.

What the posterior adds: the predictive entropy separates the test digits the model gets
right from those it gets wrong, so it can flag its own likely mistakes.
"""

import os
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split

from skbayes_sg.drbm import SGBayesDRBMClassifier

QUICK = os.environ.get("SKBAYES_SG_DOCS_QUICK", "0") not in ("", "0")
N_ITER = 300 if QUICK else 3000

X, y = load_digits(return_X_y=True)
X = X / 8.0 - 1.0  # pixels 0..16 to [-1, 1]: the DRBM fits all-positive inputs far worse
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.4, random_state=0, stratify=y)

# The hidden units can be permuted without changing the likelihood, so R-hat of the
# weights across chains is large by construction (see the class's Notes); the estimator
# judges convergence on the per-draw training log loss instead (diagnostics_
# "predictive_rhat" and "predictive_ess", printed below).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    drbm = SGBayesDRBMClassifier(
        n_hidden=32, sampler="mccadl", batch_size=100, n_iter=N_ITER, n_chains=2, random_state=0
    ).fit(X_train, y_train)
point = LogisticRegression(max_iter=2000).fit(X_train, y_train)

for name, model in [("SGBayesDRBMClassifier (mCCAdL)", drbm), ("LogisticRegression", point)]:
    proba = model.predict_proba(X_test)
    print(f"{name:<32} accuracy {accuracy_score(y_test, proba.argmax(1)):.3f}   log loss {log_loss(y_test, proba):.3f}")
print(
    f"{drbm.samples_.shape[2]} parameters, step size {drbm.diagnostics_['step_size']:.3g}, "
    f"mean kinetic temperature {drbm.diagnostics_['mean_kinetic_temperature']:.3f}, "
    f"predictive R-hat {drbm.diagnostics_['predictive_rhat']:.3f}, ESS {drbm.diagnostics_['predictive_ess']:.0f}"
)

# %%
# Uncertainty flags mistakes
# --------------------------
proba = drbm.predict_proba(X_test)
entropy = -(proba * np.log(np.clip(proba, 1e-12, 1))).sum(axis=1)
wrong = proba.argmax(axis=1) != y_test

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained", gridspec_kw={"width_ratios": [1.2, 1]})
bins = np.linspace(0, entropy.max() + 1e-9, 30)
ax1.hist(entropy[~wrong], bins=bins, alpha=0.7, label=f"correct ({(~wrong).sum()})", density=True)
ax1.hist(entropy[wrong], bins=bins, alpha=0.7, label=f"misclassified ({wrong.sum()})", density=True)
ax1.set(xlabel="predictive entropy (nats)", ylabel="density", title="test digits")
ax1.legend()

# Accuracy on the test digits the model is most sure of, as the uncertain ones are set aside.
order = np.argsort(entropy)
kept = np.arange(1, len(order) + 1)
acc = np.cumsum(~wrong[order]) / kept
ax2.plot(100 * kept / len(order), acc)
ax2.set(
    xlabel="% of test digits kept (most certain first)",
    ylabel="accuracy on those kept",
    title="abstaining on uncertain digits",
)
plt.show()

# %%
# The most uncertain test digits
# ------------------------------
fig, axes = plt.subplots(1, 8, figsize=(11, 1.9), layout="constrained")
for ax, i in zip(axes, order[::-1][:8]):
    ax.imshow(X_test[i].reshape(8, 8), cmap="gray_r")
    top = np.argsort(proba[i])[::-1][:2]
    ax.set_title(f"true {y_test[i]}\n{top[0]}: {proba[i, top[0]]:.2f}, {top[1]}: {proba[i, top[1]]:.2f}", fontsize=8)
    ax.axis("off")
plt.show()
