"""
Quickstart: Bayesian logistic regression on the breast-cancer data
====================================================================

Fit :class:`skbayes_sg.SGBayesLogisticRegression` exactly as you would fit
scikit-learn's ``LogisticRegression``, compare their test accuracy and log loss, then
read what only the Bayesian model gives: the posterior predictive probability of each
test case with a 90% credible interval, from the per-draw probabilities.
"""

import time

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGBayesLogisticRegression

X, y = load_breast_cancer(return_X_y=True)
names = load_breast_cancer().target_names
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)

t0 = time.perf_counter()
# Every default: the chains run in coordinates whitened by the curvature at the MAP, so the
# correlated features of this data (radius, perimeter, area...) cost no extra iterations.
bayes = make_pipeline(StandardScaler(), SGBayesLogisticRegression(n_jobs=-1, random_state=0))
bayes.fit(X_train, y_train)
seconds = time.perf_counter() - t0
# C = 1 / alpha: the same Gaussian prior, as a point estimate.
point = make_pipeline(StandardScaler(), LogisticRegression(C=1.0)).fit(X_train, y_train)

print(f"{'model':<34}{'accuracy':>10}{'log loss':>10}")
for label, model in [("SGBayesLogisticRegression (mCCAdL)", bayes), ("LogisticRegression (MAP)", point)]:
    proba = model.predict_proba(X_test)
    print(f"{label:<34}{accuracy_score(y_test, model.predict(X_test)):>10.3f}{log_loss(y_test, proba):>10.4f}")

est = bayes[-1]
d = est.diagnostics_
print(
    f"\n{est.n_chains} chains x {est.samples_.shape[1]} draws in {seconds:.1f} s; step size {d['step_size']:.3g}; "
    f"worst R-hat {np.nanmax(d['rhat']):.3f}; smallest bulk ESS {np.nanmin(d['ess']):.0f}"
)

# Per-draw probabilities give a credible interval for each prediction.
rows = [0, 1, 2, 3, 4]
p_draws = bayes[-1].predict_proba_samples(bayes[:-1].transform(X_test[rows]))[:, :, 1]
p_mean = bayes.predict_proba(X_test[rows])[:, 1]
lo, hi = np.quantile(p_draws, [0.05, 0.95], axis=0)
print(f"\nP({names[1]}) for five test cases, posterior mean and 90% credible interval:")
for i, r in enumerate(rows):
    print(f"  case {r}: {p_mean[i]:.3f}  [{lo[i]:.3f}, {hi[i]:.3f}]   true: {names[y_test[r]]}")
