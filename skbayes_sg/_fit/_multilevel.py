"""The multilevel strategy: an estimator fitted by multilevel SGLD's signed-weight draws of the
posterior mean instead of by Markov chains."""

from ..multilevel import estimate
from ._draws import set_weighted_draws


def fit_multilevel(est, sampler, model, batch_size, streaming):
    """Fit ``est`` by :func:`skbayes_sg.multilevel.estimate` of the posterior mean.

    Starts every path at, and expands the Taylor gradient around, the estimator's start (its
    MAP with ``init="map"``), and stores the coupled states with signed weights
    (:func:`~._draws.set_weighted_draws`).
    """
    if not est._supports_multilevel:
        raise ValueError(
            f"{type(est).__name__} does not support multilevel samplers ({type(sampler).__name__}): their "
            "coupled paths evaluate this model's gradients one path at a time, minutes even on small data. "
            "Use a chain sampler, such as the default sampler='mccadl'."
        )
    if streaming:
        raise ValueError("partial_fit does not support multilevel samplers; use fit.")
    res = estimate(
        sampler,
        model,
        theta0=est._initial_points(model)[0],
        # "auto" goes through unresolved: the paper's n = ceil(N^(1/3)).
        batch_size="auto" if est.batch_size == "auto" else batch_size,
        n_jobs=est.n_jobs,
        random_state=est._seeds(0)[0],
        keep_draws=True,
        verbose=est.verbose,
    )
    keys = ("n_grad_evals", "n_grad_evals_setup", "n_iter", "levels", "rmse", "target_rmse", "converged")
    diag = {k: getattr(res, k) for k in keys + ("weak_rate", "variance_rate")}
    # The start is the estimator's own (its init), so it is not repeated among the settings.
    diag.update({k: v for k, v in res.settings.items() if k != "theta0"}, n_levels=len(res.levels))
    return set_weighted_draws(est, sampler, model, res.draws, res.weights, diag)
