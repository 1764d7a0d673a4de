"""Multilevel SGLD (Nagapetyan, Szpruch, Vollmer, Zygalakis and Giles 2017): the posterior
expectation at the finest step as the telescoping sum of eq. 4 over SGLD at ``h_l = h_0 2^-l``,
each correction from coupled fine and coarse paths; antithetic, RMSE ``eps`` costs
``O(eps^-2)`` without a Metropolis step (:doc:`/maths/mlsgld`). It composes
:class:`CoupledSGLD` (``_coupling.py``, section 3), :func:`mlmc` (``_allocation.py``, Giles'
allocation) and :func:`estimate`, the user-facing call; :class:`~skbayes_sg.samplers.MLSGLD`
is the estimators' strategy built on :func:`estimate`.
"""

import copy
import math
from numbers import Integral

import numpy as np

from ._allocation import MultilevelResult, mlmc
from ._coupling import CoupledSGLD, LevelSample

__all__ = ["CoupledSGLD", "LevelSample", "MultilevelResult", "estimate", "find_map", "mlmc"]

#: Largest ``horizon="auto"`` (steps per level-0 path); beyond it :func:`estimate` raises.
MAX_AUTO_HORIZON = 100_000


def find_map(model):
    """The estimators' MAP (:func:`skbayes_sg._estimator._map_estimate`, their ``init="map"``
    start; the paper's ``theta_0``, section 4) and the full-data passes it took.

    Returns ``(theta_map, n_passes)``, ``n_passes`` counting log posterior and gradient and
    Hessian evaluations, for the set-up cost.
    """
    from .._estimator import _map_estimate  # the estimator layer imports this package

    n_passes = 0

    def counted(method):
        def call(*args, **kwargs):
            nonlocal n_passes
            n_passes += 1
            return method(*args, **kwargs)
        return call

    # A shallow copy (data shared) whose full-data calls count themselves.
    probe = copy.copy(model)
    probe.log_posterior_and_grad = counted(model.log_posterior_and_grad)
    probe.hessian = counted(model.hessian)
    return _map_estimate(probe), n_passes


def estimate(model, g=None, target_rmse=0.1, *, theta0=None, rmse_units="absolute", antithetic=True, taylor=True,
             averaging=False, step_size="auto", horizon="auto", batch_size="auto", n_initial=100, min_levels=2,
             max_levels=10, n_jobs=None, random_state=None, keep_draws=False, verbose=0, max_grad_evals=None):
    """Multilevel SGLD estimate of the posterior expectation ``E[g(theta)]``.

    Builds the levels (:class:`CoupledSGLD`) and runs Giles' driver (:func:`mlmc`) until the
    estimated RMSE is below ``target_rmse``; cost is counted in data items touched.

    Parameters
    ----------
    model : Model
        For instance ``LogisticModel(X, y)`` from :mod:`skbayes_sg.models`.
    g : callable or None, default=None
        Maps states (M, P) to (M,) or (M, q). None estimates the posterior mean.
    target_rmse : float or array of shape (q,), default=0.1
        ``eps``, absolute or (``rmse_units="posterior_sd"``) relative to each coordinate's
        posterior sd, estimated at level 0.
    theta0 : ndarray of shape (P,), optional
        Start of every path and Taylor expansion point; :func:`find_map` by default.
    antithetic, taylor, averaging : bool, default=True, True, False
        Antithetic coupling (section 3.2, ``V_l = O(h_l^2)``; False: plain, 3.1, ``O(h_l)``),
        Taylor gradient around ``theta0`` (3.4, eq. 11), path averaging (3.3).
    step_size : float or "auto", default="auto"
        ``h_0``; ``"auto"``: ``0.25 / lambda_max``, the largest curvature of the negative log
        posterior at ``theta0`` (near the paper's ``1 / N`` for its example).
    horizon : int or "auto", default="auto"
        ``m``; ``"auto"``: ``max(5, ceil(1 / (h_0 lambda_min)))``, a relaxation time of the
        slowest direction per level (the paper's ``m = 5``).
    batch_size : int, "auto" or None, default="auto"
        ``n``; ``"auto"``: the paper's ``ceil(N^(1/3))``; None: the full data.
    random_state : int, SeedSequence or None
    keep_draws : bool, default=False
        Keep the states with signed weights (``result.draws``, ``result.weights``).
    rmse_units, n_initial, min_levels, max_levels, n_jobs, verbose, max_grad_evals
        As in :func:`mlmc`.

    Returns
    -------
    MultilevelResult

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
    H_ll, H_post = model.loglik_hessian(theta0), model.posterior_hessian(theta0)
    setup += 2 * N
    curv = np.linalg.eigvalsh(-0.5 * (H_post + H_post.T))
    lam_max, lam_min = float(max(abs(curv[-1]), 1e-12)), float(curv[0])
    if isinstance(step_size, str):
        if step_size != "auto":
            raise ValueError(f"step_size must be a positive float or 'auto'; got {step_size!r}.")
        step_size = 0.25 / lam_max
    if isinstance(horizon, str):
        if horizon != "auto":
            raise ValueError(f"horizon must be a positive int or 'auto'; got {horizon!r}.")
        if lam_min <= 0:
            raise ValueError("horizon='auto' needs a log posterior that is strictly concave at theta0 "
                             "(start from the MAP), or give horizon explicitly.")
        horizon = max(5, math.ceil(1.0 / (step_size * lam_min)))
        if horizon > MAX_AUTO_HORIZON:
            # m = 4 lam_max / lam_min at the auto step: a near-flat direction (duplicated or
            # constant features, a weak prior) made it 1e8 steps per path, a fit that never returns.
            raise ValueError(
                f"horizon='auto' would run {horizon:.3g} steps per path: the log posterior at theta0 is "
                f"ill-conditioned (curvatures from {lam_min:.3g} to {lam_max:.3g}). Standardise the features and "
                "drop duplicated or constant ones, increase alpha, give horizon explicitly, or use a "
                "single-level sampler.")
    coupled = CoupledSGLD(model, theta0, step_size, horizon, batch_size, antithetic=antithetic, taylor=taylor,
                          averaging=averaging, H_loglik=H_ll)
    setup += N if coupled.taylor else 0
    seed = random_state if isinstance(random_state, np.random.SeedSequence) else np.random.SeedSequence(random_state)
    result = mlmc(coupled, g, target_rmse, rmse_units=rmse_units, n_initial=n_initial, min_levels=min_levels,
                  max_levels=max_levels, seed=seed, n_jobs=n_jobs, keep_draws=keep_draws, verbose=verbose,
                  max_grad_evals=max_grad_evals)
    result.n_grad_evals_setup = int(setup)
    result.extra.update({"lambda_max": lam_max, "lambda_min": lam_min})
    return result
