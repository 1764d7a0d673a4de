"""The multilevel strategy's set-up: the start ``theta_0``, the automatic step and horizon,
the minibatch size, then :class:`CoupledSGLD` levels run by :func:`mlmc`."""

import math
from numbers import Integral

import numpy as np

from ..models import find_map
from ..samplers._step_size import multilevel_step_and_horizon
from ._allocation import mlmc
from ._coupling import CoupledSGLD


def estimate(
    model,
    g=None,
    target_rmse=0.1,
    *,
    theta0=None,
    rmse_units="absolute",
    antithetic=True,
    taylor=True,
    averaging=False,
    step_size="auto",
    horizon="auto",
    batch_size="auto",
    n_initial=100,
    min_levels=2,
    max_levels=10,
    n_jobs=None,
    random_state=None,
    keep_draws=False,
    verbose=0,
    max_grad_evals=None,
):
    """Multilevel SGLD estimate of the posterior expectation ``E[g(theta)]`` to RMSE ``target_rmse``
    (:class:`~skbayes_sg.samplers.MLSGLD`'s strategy): :class:`CoupledSGLD`
    levels from ``theta0`` run by Giles' driver :func:`mlmc`.

    Parameters
    ----------
    model : Model
        For instance ``LogisticModel(X, y)`` from :mod:`skbayes_sg.models`.
    g : callable or None, default=None
        Maps states (M, P) to (M,) or (M, q). None estimates the posterior mean.
    theta0 : ndarray of shape (P,), optional
        Start of every path and Taylor expansion point; by default the estimators' MAP
        (:func:`find_map`).
    antithetic, taylor, averaging, step_size, horizon, n_initial, max_levels, max_grad_evals
        As in :class:`~skbayes_sg.samplers.MLSGLD` (``taylor`` a bool, ``max_grad_evals`` None by default).
    batch_size : int, "auto" or None, default="auto"
        ``n``; ``"auto"``: the paper's ``ceil(N^(1/3))``; None: the full data.
    random_state : int, SeedSequence or None
    keep_draws : bool, default=False
        Keep the states with signed weights (``result.draws``, ``result.weights``).
    target_rmse, rmse_units, min_levels, n_jobs, verbose
        As in :func:`mlmc` (``target_rmse`` absolute by default).

    Returns
    -------
    MultilevelResult
        Its ``n_grad_evals_setup`` counts the data items the set-up touched (MAP and Hessians).

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg.models import LogisticModel
    >>> from skbayes_sg.multilevel import estimate
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((1000, 2))
    >>> y = (rng.random(1000) < 1 / (1 + np.exp(-X @ [1.0, -0.5]))).astype(float)
    >>> res = estimate(LogisticModel(X, y), target_rmse=0.2, rmse_units="posterior_sd", random_state=0)
    >>> res.estimate.shape
    (3,)
    """
    N, setup = model.n_samples, 0
    if theta0 is None:
        theta0, passes = find_map(model)
        setup += passes * N
    theta0 = np.asarray(theta0, dtype=float)
    if batch_size == "auto":
        batch_size = math.ceil(N ** (1.0 / 3.0) - 1e-9)
    elif batch_size is not None and (not isinstance(batch_size, Integral) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int, 'auto' or None; got {batch_size!r}.")
    H_post = model.posterior_hessian(theta0)
    step_size, horizon, lam_max, lam_min = multilevel_step_and_horizon(H_post, step_size, horizon)
    coupled = CoupledSGLD(
        model, theta0, step_size, horizon, batch_size, antithetic=antithetic, taylor=taylor, averaging=averaging
    )
    result = mlmc(
        coupled,
        g,
        target_rmse,
        rmse_units=rmse_units,
        n_initial=n_initial,
        min_levels=min_levels,
        max_levels=max_levels,
        seed=random_state,
        n_jobs=n_jobs,
        keep_draws=keep_draws,
        verbose=verbose,
        max_grad_evals=max_grad_evals,
    )
    # The posterior Hessian, and the Taylor gradient's full-data Hessian and gradient at theta0.
    result.n_grad_evals_setup = int(setup + (3 if coupled.taylor else 1) * N)
    result.extra.update({"lambda_max": lam_max, "lambda_min": lam_min})
    return result
