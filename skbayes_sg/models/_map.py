"""The maximum a posteriori point of a :class:`~skbayes_sg.models.Model`.

The estimators start their chains there and centre their preconditioner and control variate
on it; multilevel SGLD starts its paths and expands its Taylor gradient there.
"""

import copy

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.optimize import minimize

from ._base import Model, largest_abs

#: The MAP is found by Newton's method up to this many parameters (each iteration one dense
#: Hessian, O(N P^2), and one O(P^3) solve), by L-BFGS beyond.
NEWTON_MAX_PARAMS = 250


def _map_estimate(model, gtol=1e-2):
    """Maximum a posteriori point, from the model's default start.

    Models with a closed-form Hessian and at most ``NEWTON_MAX_PARAMS`` (250) parameters
    (the GLMs of moderate width) use Newton's method (:func:`_newton_map`): a handful of iterations, each one
    Hessian, where L-BFGS needs hundreds of gradients (311 on a9a). Others use full-data
    L-BFGS (scipy).

    A chain's start needs the mode only to a small fraction of a posterior standard
    deviation: a residual gradient ``g`` along a direction of curvature ``lambda``
    misplaces it by ``g / lambda``, that is ``g / sqrt(lambda)`` standard deviations, and
    ``lambda >= alpha`` (the prior's precision; a weak intercept prior's is smaller, but an
    intercept's curvature is the data's, summed over all rows). So L-BFGS's gradient tolerance is
    absolute and loose (scipy's default 1e-5 on a gradient of size O(N) costs several
    times more iterations for no visible gain); the objective's relative tolerance is left
    tight so that it is the gradient that decides. The control variate and the
    preconditioner are exact for any centre; they are only most effective at the mode.
    """
    if model.n_params <= NEWTON_MAX_PARAMS and type(model).hessian is not Model.hessian:
        with np.errstate(over="ignore", invalid="ignore"):
            theta = _newton_map(model)
        if theta is not None and np.all(np.isfinite(theta)):
            return theta

    def objective(theta):
        lp, grad = model.log_posterior_and_grad(theta)
        if not np.isfinite(lp):
            return np.inf, np.zeros_like(theta)
        return -lp, -grad

    # Features whose products overflow make the objective infinite; the ValueError below
    # names the fix, so numpy's overflow warnings would only be noise.
    with np.errstate(over="ignore", invalid="ignore"):
        res = minimize(
            objective,
            model.initial_point(),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 1000, "gtol": gtol, "ftol": 1e-14},
        )
        lp_map = model.log_posterior_and_grad(res.x)[0] if np.all(np.isfinite(res.x)) else np.nan
    if not np.isfinite(lp_map):
        targets = _target_scale(model)
        if targets > _feature_scale(model):
            # A regression target of size 1e150 squares to the edge of float64 while the
            # features may be tame: name what the user has to rescale.
            raise ValueError(
                "The maximum a posteriori point, which the fit needs for its starting point, preconditioner and "
                f"control variate, is not finite: the targets' squares overflow (targets of size {targets:.3g}). "
                "Standardise the targets (SGBayesLinearRegression does with normalize_y=True, its default)."
            )
        raise ValueError(
            "The maximum a posteriori point, which the fit needs for its starting point, preconditioner and "
            "control variate, is not finite: the features' products overflow (features of size "
            f"{_feature_scale(model):.3g}). Standardise the features (for example with StandardScaler in a "
            "Pipeline)."
        )
    return res.x


def _feature_scale(model):
    """``max |X|`` of a model's features (NaN for a model without ``X``)."""
    X = getattr(model, "X", None)
    return float("nan") if X is None else largest_abs(X)


def _target_scale(model):
    """``max |y|`` of a regression model's targets (0 for class codes or a model without ``y``)."""
    y = getattr(model, "y", None)
    if y is None or np.asarray(y[:1]).dtype.kind != "f":
        return 0.0
    return largest_abs(np.asarray(y).reshape(-1, 1))


def _newton_map(model, tol=1e-3, max_iter=50):
    """Damped Newton ascent of the log posterior; None if the Hessian is not positive definite.

    Stops when the Newton decrement ``sqrt(g' H^-1 g)``, the step's length in posterior
    standard deviations, is below ``tol``. Each step backtracks (halving) until the log
    posterior increases, so a far start (large N, unscaled features) cannot overshoot.
    """
    theta = model.initial_point()
    lp, g = model.log_posterior_and_grad(theta)
    for _ in range(max_iter):
        try:
            C = cho_factor(model.hessian(theta))
        except (LinAlgError, ValueError):
            return None
        step = cho_solve(C, g)
        decrement = float(np.sqrt(max(g @ step, 0.0)))
        if not np.isfinite(decrement):
            return None
        if decrement < tol:
            return theta
        t = 1.0
        for _ in range(60):
            cand = theta + t * step
            lp_new, g_new = model.log_posterior_and_grad(cand)
            if np.isfinite(lp_new) and lp_new >= lp:
                break
            t *= 0.5
        else:
            return theta
        theta, lp, g = cand, lp_new, g_new
    # Not converged: unscaled targets put the log noise precision's mode far from its start
    # (at -225 for targets of size 1e50), which Newton approaches by about 1 a step (the
    # likelihood is exponential in it), so max_iter steps stop short and the chains would
    # start far from the mode with a step size set there. L-BFGS (the caller's fallback)
    # gets there.
    return None


def find_map(model):
    """The maximum a posteriori point the estimators start from, and what it cost.

    Parameters
    ----------
    model : Model
        Any model; GLMs of moderate width take Newton's method, others L-BFGS.

    Returns
    -------
    theta_map : ndarray of shape (n_params,)
        The estimators' ``init="map"`` start (a Newton decrement below 1e-3 posterior sd).
    n_passes : int
        The full-data passes it took (log posterior with gradient, and Hessian evaluations):
        multilevel SGLD's set-up cost, in units of ``N`` data items.
    """
    calls = []

    def counted(method):
        def call(*args, **kwargs):
            calls.append(method)
            return method(*args, **kwargs)

        return call

    probe = copy.copy(model)  # a shallow copy (data shared) whose full-data calls count themselves
    probe.log_posterior_and_grad = counted(model.log_posterior_and_grad)
    probe.hessian = counted(model.hessian)
    return _map_estimate(probe), len(calls)
