"""
From scikit-learn to a Bayesian posterior
=========================================

A scikit-learn user already has a pipeline that ends in ``LogisticRegression``. This example
swaps that last step for :class:`~skbayes_sg.SGBayesLogisticRegression` and then does what a
Bayesian workflow adds on top:

1. **Sample weights**, exactly as in scikit-learn (``fit(X, y, sample_weight=w)``): here a
   made-up annotation-confidence weight per row. The weights multiply each row's
   log-likelihood, in the full-data and the minibatch gradients alike.
2. **Per-feature priors**: ``alpha`` is a prior *precision*; an array gives one per feature
   (``alpha_j = 1 / s_j^2`` for a prior standard deviation ``s_j``).
3. **Model comparison by PSIS-LOO** with ArviZ (``az.loo``, ``az.compare``) from
   :func:`skbayes_sg.to_inference_data`, which carries the pipeline's feature names.
4. **Calibration with credible bands**: a reliability diagram per posterior draw, whose
   spread shows how sure we are about the calibration itself.
"""

import os
import warnings

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import skbayes_sg
from skbayes_sg import SGBayesLogisticRegression

QUICK = os.environ.get("SKBAYES_SG_DOCS_QUICK", "0") not in ("", "0")
if QUICK:
    # Quick builds run short chains, which may not pass the convergence checks.
    warnings.simplefilter("ignore", ConvergenceWarning)
N_ITER = 1000 if QUICK else "auto"

X, y = load_breast_cancer(return_X_y=True, as_frame=True)
# The ten "mean" measurements of each tumour (the data also hold their standard errors and
# worst values, which make the classes nearly separable: then no posterior is well
# approximated by leaving one row out, and PSIS-LOO says so with large Pareto k).
X = X[[c for c in X.columns if c.startswith("mean")]]
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.4, stratify=y, random_state=0)

# %%
# The scikit-learn baseline and its Bayesian twin
# -----------------------------------------------
# Same pipeline, same prior strength (``C = 1 / alpha``); the Bayesian fit's intercept gets
# its own weak prior (``alpha_intercept``, sd 10), as ``LogisticRegression`` does not
# penalise it.
point = make_pipeline(StandardScaler(), LogisticRegression(C=1.0)).fit(X_train, y_train)
bayes = make_pipeline(StandardScaler(), SGBayesLogisticRegression(n_iter=N_ITER, random_state=0))

# %%
# Sample weights
# --------------
# Suppose the labels of some rows were checked twice and others once: a confidence weight
# in (0, 1] per row. Weighted rows count for less in the likelihood; with all weights 1 the
# fit is the unweighted one. The pipeline routes ``sample_weight`` to the final step with
# scikit-learn's ``stepname__param`` syntax.
rng = np.random.default_rng(0)
confidence = np.where(rng.random(len(y_train)) < 0.2, 0.5, 1.0)
bayes.fit(X_train, y_train, sgbayeslogisticregression__sample_weight=confidence)
clf = bayes[-1]
d = clf.diagnostics_
print(
    f"{clf.samples_.shape[0]} chains x {clf.samples_.shape[1]} draws, worst R-hat {d['rhat'].max():.3f}, "
    f"smallest bulk ESS {d['ess'].min():.0f}"
)
print(
    f"test log loss: LogisticRegression {log_loss(y_test, point.predict_proba(X_test)[:, 1]):.4f}, "
    f"posterior predictive {log_loss(y_test, bayes.predict_proba(X_test)[:, 1]):.4f}"
)

# %%
# Per-feature priors, compared by LOO
# -----------------------------------
# Three of the ten measurements, radius, perimeter and area, measure the tumour's size and
# are nearly collinear. A prior belief that size matters little once the other measurements
# are known: a prior sd of 0.3 on the three (standardised) size features, 1 on the others,
# i.e. ``alpha_j = 1 / s_j^2``. Is that belief supported by the data? PSIS-LOO estimates
# each model's expected log predictive density on new data (elpd) from one fit, with a
# standard error.
names = np.asarray(X.columns)
is_size = np.isin(names, ["mean radius", "mean perimeter", "mean area"])
prior_sd = np.where(is_size, 0.3, 1.0)
shrunk = make_pipeline(
    StandardScaler(), SGBayesLogisticRegression(alpha=1.0 / prior_sd**2, n_iter=N_ITER, random_state=0)
)
shrunk.fit(X_train, y_train, sgbayeslogisticregression__sample_weight=confidence)

idata = {
    "isotropic prior": skbayes_sg.to_inference_data(bayes, X_train, y_train),
    "shrunk size features": skbayes_sg.to_inference_data(shrunk, X_train, y_train),
}
print(idata["isotropic prior"].posterior["coef"].coords["feature"].values[:3])  # the pipeline's names
# ArviZ's Pareto fits overflow harmlessly on heavy importance-weight tails, and it warns
# once per model when some rows have k > 0.7; the counts are printed below instead.
with np.errstate(over="ignore"), warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto")
    loo = {name: az.loo(data, pointwise=True) for name, data in idata.items()}
    comparison = az.compare(idata)
for name, result in loo.items():
    print(
        f"{name}: elpd_loo {result.elpd_loo:.2f} (se {result.se:.2f}), "
        f"{int((result.pareto_k > 0.7).sum())} of {result.n_data_points} rows with Pareto k > 0.7"
    )
print(comparison[["elpd_loo", "se", "elpd_diff", "dse", "weight"]].round(2))

# %%
# Read the difference in elpd against its standard error (``dse``): here it is about twice
# ``dse``, moderate evidence that the data contradict the belief, and the isotropic prior
# predicts better. Rows with Pareto k
# above 0.7 are those whose LOO estimate is unreliable (influential, nearly separated
# cases); with many of them, refit without those rows (exact LOO) or use K-fold
# cross-validation.

# %%
# The coefficients under the two priors: the tighter prior pulls the size coefficients
# towards zero, and the other measurements cannot take over what size explained.
fig, ax = plt.subplots(figsize=(7, 3.5))
for k, (label, data) in enumerate(idata.items()):
    coef = data.posterior["coef"].stack(s=("chain", "draw")).values.reshape(len(names), -1)
    lo, mid, hi = np.percentile(coef, [5, 50, 95], axis=1)
    pos = np.arange(len(names)) + 0.2 * (k - 0.5)
    ax.errorbar(pos, mid, yerr=[mid - lo, hi - mid], fmt="o", ms=3, capsize=2, label=label)
ax.axhline(0, color="0.6", lw=0.8)
ax.set_xticks(np.arange(len(names)), [c.replace("mean ", "") for c in names], rotation=45, ha="right")
ax.set_ylabel("coefficient (90% interval)")
ax.set_title("Coefficients under the two priors")
ax.legend()
fig.tight_layout()

# %%
# Calibration with credible bands
# -------------------------------
# A reliability diagram bins the test cases by predicted probability and plots the observed
# frequency of the positive class against the mean prediction in each bin. Recomputed for
# every posterior draw (each draw is a plausible model), a bin's mean prediction varies: its
# 90% credible interval (horizontal bars) is the uncertainty of the calibration due to the
# weights, next to the binomial noise of the bin's observed frequency (vertical bars, its
# approximate 90% interval given the bin's size).
p_draws = clf.predict_proba_samples(bayes[:-1].transform(X_test))[:, :, 1]  # (draws, rows)
p_mean = p_draws.mean(axis=0)
edges = np.quantile(p_mean, np.linspace(0, 1, 9))
edges[0], edges[-1] = 0.0, 1.0
which = np.clip(np.searchsorted(edges, p_mean, side="right") - 1, 0, len(edges) - 2)
bins = range(len(edges) - 1)
observed = np.array([y_test.to_numpy()[which == b].mean() for b in bins])
counts = np.bincount(which, minlength=len(edges) - 1)
predicted = np.array([p_mean[which == b].mean() for b in bins])
per_draw = np.stack([[p[which == b].mean() for b in bins] for p in p_draws])  # (draws, bins)
lo, hi = np.percentile(per_draw, [5, 95], axis=0)
binom_sd = np.sqrt(np.clip(observed * (1 - observed), 0.01, None) / counts)

fig, ax = plt.subplots(figsize=(5, 5))
ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--", label="perfect calibration")
ax.errorbar(
    predicted,
    observed,
    xerr=[predicted - lo, hi - predicted],
    yerr=1.645 * binom_sd,
    fmt="o",
    color="C0",
    ecolor="C0",
    elinewidth=1,
    capsize=2,
    label="bins: 90% credible (x) and binomial (y) intervals",
)
ax.set_xlabel("predicted P(benign)")
ax.set_ylabel("observed frequency of benign")
ax.set_xlim(-0.02, 1.02)
ax.set_ylim(-0.02, 1.02)
ax.legend(loc="upper left", fontsize=8)
ax.set_title("Reliability diagram, test set")
fig.tight_layout()
plt.show()
