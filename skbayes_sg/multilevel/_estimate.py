"""Multilevel SGLD's set-up: the levels, step size, horizon and minibatch of an estimate from an
:class:`~skbayes_sg.samplers.MLSGLD`'s hyperparameters, then Giles' allocation on them."""

import math
from numbers import Integral

import numpy as np

from ..models import find_map
from ..samplers._step_size import multilevel_step_and_horizon
from ._allocation import mlmc
from ._coupling import CoupledSGLD


def estimate(
    sampler,
    model,
    g=None,
    *,
    theta0=None,
    rmse_units="posterior_sd",
    batch_size="auto",
    n_jobs=None,
    random_state=None,
    keep_draws=False,
    verbose=0,
):
    """Multilevel SGLD estimate of the posterior expectation ``E[g(theta)]`` to RMSE ``target_rmse``.

    Sets up :class:`~skbayes_sg.multilevel.CoupledSGLD` levels from ``theta0``, at the
    sampler's ``h_0`` and ``m`` (resolved here from the curvature at ``theta0``, as a chain
    sampler resolves its ``h`` in ``init_state``), and runs Giles' driver
    :func:`~skbayes_sg.multilevel.mlmc` on them.

    Parameters
    ----------
    sampler : MLSGLD
        The hyperparameters: ``target_rmse``, the coupling's variants, ``h_0``, ``m``, the
        levels and the budget.
    model : Model
        For instance ``LogisticModel(X, y)`` from :mod:`skbayes_sg.models`.
    g : callable or None, default=None
        Maps states (M, P) to (M,) or (M, q). None estimates the posterior mean.
    theta0 : ndarray of shape (P,), optional
        Start of every path and Taylor expansion point; by default the estimators' MAP
        (:func:`~skbayes_sg.models.find_map`).
    rmse_units : {"posterior_sd", "absolute"}, default="posterior_sd"
        ``target_rmse`` in units of each ``g_j``'s sd at level 0, or as given (then it may
        also be an array of shape (q,)).
    batch_size : int, "auto" or None, default="auto"
        ``n``; ``"auto"``: the paper's ``ceil(N^(1/3))``; None: the full data.
    n_jobs, random_state, keep_draws, verbose
        As in :func:`~skbayes_sg.multilevel.mlmc` (``random_state`` its ``seed``).

    Returns
    -------
    MultilevelResult
        Its ``n_grad_evals_setup`` counts the data items the set-up touched (MAP and
        Hessians); ``settings`` holds ``theta0``, ``step_size``, ``horizon``,
        ``batch_size``, ``taylor``, ``lambda_max`` and ``lambda_min``.

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg.models import LogisticModel
    >>> from skbayes_sg.multilevel import estimate
    >>> from skbayes_sg.samplers import MLSGLD
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((1000, 2))
    >>> y = (rng.random(1000) < 1 / (1 + np.exp(-X @ [1.0, -0.5]))).astype(float)
    >>> res = estimate(MLSGLD(target_rmse=0.2), LogisticModel(X, y), random_state=0)
    >>> res.estimate.shape
    (3,)
    """
    sampler.validate()
    N, setup = model.n_samples, 0
    if theta0 is None:
        theta0, passes = find_map(model)
        setup += passes * N
    theta0 = np.asarray(theta0, dtype=float)
    if theta0.shape != (model.n_params,):
        raise ValueError(f"theta0 must have shape ({model.n_params},), one value per parameter; got {theta0.shape}.")
    if batch_size == "auto":
        batch_size = math.ceil(N ** (1.0 / 3.0) - 1e-9)
    elif batch_size is not None and (not isinstance(batch_size, Integral) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int, 'auto' or None; got {batch_size!r}.")
    taylor = model.n_params <= sampler.TAYLOR_MAX_PARAMS if sampler.taylor == "auto" else sampler.taylor
    H_post = model.posterior_hessian(theta0)
    h0, m, lam_max, lam_min = multilevel_step_and_horizon(H_post, sampler.step_size, sampler.horizon)
    coupled = CoupledSGLD(
        model, theta0, h0, m, batch_size, antithetic=sampler.antithetic, taylor=taylor, averaging=sampler.averaging
    )
    result = mlmc(
        coupled,
        g,
        sampler,
        rmse_units=rmse_units,
        seed=random_state,
        n_jobs=n_jobs,
        keep_draws=keep_draws,
        verbose=verbose,
    )
    # The posterior Hessian, and the Taylor gradient's full-data Hessian and gradient at theta0.
    result.n_grad_evals_setup = int(setup + (3 if coupled.taylor else 1) * N)
    result.settings = {
        "theta0": theta0,
        "step_size": h0,
        "horizon": m,
        "batch_size": coupled.batch_size,
        "taylor": coupled.taylor,
        "lambda_max": lam_max,
        "lambda_min": lam_min,
    }
    return result
