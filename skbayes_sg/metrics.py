"""Sample-quality metrics: the kernel Stein discrepancy of a fitted estimator's draws.

Held-out scores (log loss, accuracy, MSE) judge predictions, which barely move when a
posterior is too wide or biased, so they cannot tune a sampler. The kernel Stein
discrepancy (KSD, Gorham & Mackey 2017, "Measuring sample quality with kernels") measures
how far the draws are from the posterior itself, from the posterior's score
``grad log p(theta | data)`` at the draws alone, and was built to choose an SG-MCMC step
size. :func:`kernel_stein_discrepancy` reports it for a fitted estimator; :data:`ksd_scorer`
lets ``GridSearchCV`` choose sampler hyperparameters by it.

How it is computed
------------------
``fit`` computes the full-data score at a thinned set of the draws while it still holds
the data (the fitted estimator keeps none):

* **Draws**: ``m`` draws, evenly spaced over every chain (first and last included, the
  same number per chain). ``m`` is at most 1,000 and the stored draws, and the scores may
  touch at most half the rows the fit's gradient estimator touched (``n_grad_evals``),
  but at least 50 full passes: the KSD then costs a bounded share of the fit
  (``benchmarks/ksd_cost.py``).
* **Coordinates**: those the chains ran in when they were whitened at the MAP
  (``theta = theta_map + L z``, score ``L' grad_theta``: the posterior is close to
  ``N(0, I)`` there); otherwise ``theta`` with each coordinate scaled by the root of the
  posterior's curvature at the draws' mean. Either way one unit is about one posterior
  sd, so the KSD does not depend on the units of the features.
* **Kernel**: the inverse multiquadric ``k(x, y) = (c^2 + |x - y|^2)^beta`` with
  ``beta = -1/2`` and ``c = 1`` (one posterior sd in those coordinates), the kernel for
  which Gorham & Mackey prove that the KSD detects non-convergence.
* **Statistic**: the V-statistic ``KSD = sqrt(mean_ij k_p(x_i, x_j))``, the exact
  discrepancy of the ``m`` draws' empirical distribution: never negative, and for exact
  independent draws about ``sqrt(2 P / m)`` with ``c = 1`` near ``N(0, I)``. (The
  U-statistic, without the ``i = j`` terms, is unbiased for the KSD of the sampler's
  limit but can be negative; a sample-quality score wants the discrepancy of the sample
  the estimator actually uses.) Settings compared by it should keep the same ``m``,
  which they do whenever their fits stored and paid for at least 1,000 draws.

The cost is ``m`` full-data gradients and O(m^2 P) for the kernel matrix (three matrix
products, no loop over pairs).
"""

from . import _stein


def _final_step(estimator):
    """The estimator, or a (nested) Pipeline's final step, checked to be a fitted skbayes_sg one."""
    est = estimator
    steps = getattr(est, "steps", None)
    while steps is not None:  # a Pipeline (possibly nested): the final step is the estimator
        est = steps[-1][1]
        steps = getattr(est, "steps", None)
    if not hasattr(est, "samples_"):
        raise ValueError(
            f"{type(est).__name__} is not fitted or is not a skbayes_sg estimator; the kernel Stein discrepancy "
            "needs the draws of a fitted skbayes_sg estimator (fit it first)."
        )
    if "ksd" not in getattr(est, "diagnostics_", {}):
        raise ValueError(
            f"{type(est).__name__}'s fit computed no kernel Stein discrepancy: it is not defined for multilevel "
            "(signed-weight) draws, interrupted fits or multimodal posteriors (the DRBM). Score such fits by a "
            "held-out metric or compare their posterior summaries."
        )
    return est


def kernel_stein_discrepancy(estimator, *, c=1.0, beta=-0.5):
    """Kernel Stein discrepancy of a fitted estimator's draws from its posterior.

    Uses the draws and full-data scores that ``fit`` stored (see the module's notes:
    ``m <= 1000`` draws evenly spaced over every chain, in whitened coordinates); only the
    kernel is computed here, in O(m^2 P). The default kernel's KSD is the fit's
    ``diagnostics_["ksd"]``; a pickled estimator keeps only that (the scores are a
    cache that would double its size).

    Parameters
    ----------
    estimator : fitted skbayes_sg estimator or Pipeline ending in one
    c : float, default=1.0
        Scale of the IMQ kernel, in posterior sds (the whitened coordinates' unit).
    beta : float, default=-0.5
        Exponent of the IMQ kernel ``(c^2 + |x - y|^2)^beta``, in (-1, 0).

    Returns
    -------
    float
        The V-statistic KSD (>= 0; 0 only for draws distributed as the posterior in the
        limit). Lower is better. With the defaults it equals ``diagnostics_["ksd"]``.

    Raises
    ------
    ValueError
        The estimator is not fitted, or its fit computed no KSD (multilevel draws,
        interrupted fits, the DRBM), or it was pickled and another kernel is asked for.

    References
    ----------
    Gorham, J. and Mackey, L. (2017). Measuring sample quality with kernels. ICML.

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg.linear_model import SGBayesLinearRegression
    >>> from skbayes_sg.metrics import kernel_stein_discrepancy
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 3))
    >>> y = X @ [1.0, -2.0, 0.5] + rng.standard_normal(200)
    >>> est = SGBayesLinearRegression(n_iter=2000, random_state=0).fit(X, y)
    >>> float(kernel_stein_discrepancy(est)) < 1.0
    True
    """
    est = _final_step(estimator)
    if c == 1.0 and beta == -0.5:
        return float(est.diagnostics_["ksd"])
    stein = getattr(est, "_stein", None)
    if stein is None:
        raise ValueError(
            f"This {type(est).__name__} was pickled, which keeps the KSD of the default kernel "
            f"(diagnostics_['ksd']) but not the scores that another kernel (c={c!r}, beta={beta!r}) needs; "
            "refit it to compute the KSD with another kernel."
        )
    return _stein.stein_statistics(stein["x"], stein["s"], c=c, beta=beta)[0]


def ksd_scorer(estimator, X=None, y=None):
    """Scorer for model selection: minus the kernel Stein discrepancy of the draws.

    A callable ``(estimator, X, y) -> float``, greater is better, for
    ``GridSearchCV(scoring=ksd_scorer)``, ``cross_val_score`` and multi-metric
    ``scoring={"ksd": ksd_scorer, "log_loss": "neg_log_loss"}``; a Pipeline is scored by its
    final step.

    On a validation fold it measures the sample quality of the fit on the fold's training
    rows: the KSD of the draws from *that* posterior, the one they were drawn for. ``X``
    and ``y`` (the validation rows) are not used. The KSD judges how well the sampler
    represented a posterior, not how well the posterior predicts; the posterior of the
    training rows is the only one the draws should match, and a discrepancy against a
    posterior of other rows would mix the sampler's error with the data's. Across folds
    the mean then estimates how good a setting's draws are on data sets like these, which
    is what choosing a step size, batch size or friction needs. Use a held-out metric
    beside it (multi-metric scoring) to choose the model (``alpha``, features).

    Parameters
    ----------
    estimator : fitted skbayes_sg estimator or Pipeline ending in one
    X, y : ignored
        The validation fold, unused (see above).

    Returns
    -------
    float
        ``-kernel_stein_discrepancy(estimator)``.
    """
    return -kernel_stein_discrepancy(estimator)


__all__ = ["kernel_stein_discrepancy", "ksd_scorer"]
