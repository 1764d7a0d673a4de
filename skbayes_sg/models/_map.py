"""The maximum a posteriori point of a :class:`~skbayes_sg.models.Model`.

The estimators start their chains there and centre their preconditioner and control variate
on it; multilevel SGLD starts its paths and expands its Taylor gradient there.
"""

import copy
import weakref
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.optimize import minimize

from ._base import Model, largest_abs

#: The MAP is found by Newton's method up to this many parameters (each iteration one dense
#: Hessian, O(N P^2), and one O(P^3) solve), by L-BFGS beyond.
NEWTON_MAX_PARAMS = 250

#: Rows of the sample whose Hessian stands in for the full-data one in Newton's first steps
#: on large data (see :func:`_newton_map`); the sample Hessian's relative error is about
#: ``sqrt(P / SAMPLE_ROWS)``, so each such step still divides the distance to the mode by ~10.
SAMPLE_ROWS = 2**15

#: The sample Hessian is used from this many rows up (four samples' worth): below, a
#: full-data Hessian costs little more than the sample's, and small fits keep their iterates.
SAMPLE_MIN_ROWS = 4 * SAMPLE_ROWS

#: Below ``SAMPLE_MIN_ROWS``, where a full-data Hessian is dear (``N P^2`` at least this many
#: multiply-adds: a9a's 32,561 rows of 124 parameters, 5e8, where each took 27 ms), the first
#: phase alone runs, on a quarter of the rows (at least :data:`MID_ROWS_PER_PARAM` per
#: parameter): its mode lies within about 2 posterior sds of the MAP, and exact Newton takes
#: 4 Hessians from there instead of 8 from the start (a9a: 0.10 s against 0.21 s). The second
#: phase is skipped there: on sparse features, a rare column's few rows in the sample make
#: its curvature too uncertain for the exact gradient's steps to converge fast (a9a took 22
#: sample steps).
MID_MIN_WORK = 2**27
MID_ROWS_PER_PARAM = 16

#: Where a full-data Hessian is dear (``N P^2 >= MID_MIN_WORK``), Newton keeps the Hessian of
#: the first point whose decrement is below this many posterior sds for its remaining steps
#: (:func:`_newton_steps`): on a9a the decrements run 20, 3.3, 0.19, then 8e-4 with the kept
#: Hessian, 3 Hessians instead of 4, and the mode moves by 8e-6 sds. That Hessian, from
#: within this distance of the mode, is the preconditioner's. (Keeping the one at 3.3 sds
#: saves another but takes 4 gradient passes and preconditions with a Hessian 3 sds off.)
CHORD_BELOW = 0.5
#: Newton on the sample's own posterior stops at this decrement (in its posterior sds, about
#: the full data's): its mode is about sqrt(N / SAMPLE_ROWS) sds from the MAP anyway.
SAMPLE_START_TOL = 1.0

#: Newton's sample-Hessian steps stop once their decrement is below this fraction of the
#: exact steps' tolerance: the first exact Hessian then usually finds the test met, and the
#: MAP's Hessian, which the preconditioner needs anyway, is the only full-data one. Each
#: further sample step (one gradient pass) costs a quarter of an exact one.
SAMPLE_TOL = 0.25

#: The full-data Hessian at each model's MAP, as Newton's last iteration computed it: the
#: preconditioner needs that same matrix (:func:`hessian_at`), another O(N P^2) pass otherwise.
_HESSIANS = weakref.WeakKeyDictionary()


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

    On large data (at least ``SAMPLE_MIN_ROWS`` rows, for models with ``hessian_of_rows``)
    two cheap phases come first, on a fixed random sample of ``SAMPLE_ROWS`` rows (on
    mid-size data whose Hessian is dear, the first alone, on a quarter of the rows; see
    :data:`MID_MIN_WORK`):

    1. Newton on the sample's own posterior (its likelihood scaled to N): the damped steps
       from the start cost no full-data pass, and its mode lies within about
       ``sqrt(N / SAMPLE_ROWS)`` posterior sds of the MAP;
    2. the exact full-data gradient with the sample's Hessian: a step costs one gradient
       pass (``O(N P)`` against a Hessian's ``O(N P^2)``) and still converges, linearly
       at a rate about ``sqrt(P / SAMPLE_ROWS)``, until the decrement is below
       ``SAMPLE_TOL * tol``.

    The exact Hessian then usually finds the test met at once; its step, already solved,
    takes the MAP to about the square of that decrement. At N = 1e6, D = 28: 1 full-data
    Hessian (which the preconditioner reuses, :func:`hessian_at`) and 5 gradient passes,
    instead of 7 Hessians and 8 gradient passes.
    """
    theta = model.initial_point()
    rows = _sample_rows(model)
    lp_g = None
    if rows is not None:
        sample_hessian = lambda t: model.hessian_of_rows(t, rows)  # noqa: E731
        start = _newton_steps(theta, _sample_objective(model, rows), sample_hessian, SAMPLE_START_TOL, max_iter)
        if start.status in ("converged", "stalled"):
            theta = start.theta
        if model.n_samples >= SAMPLE_MIN_ROWS:
            near = _newton_steps(theta, model.log_posterior_and_grad, sample_hessian, SAMPLE_TOL * tol, max_iter)
            if near.status != "failed":
                theta, lp_g = near.theta, (near.lp, near.g)
    # Where a Hessian is dear, Newton's last steps reuse the one it computed near the mode.
    keep = CHORD_BELOW if float(model.n_samples) * model.n_params**2 >= MID_MIN_WORK else None
    exact = _newton_steps(theta, model.log_posterior_and_grad, model.hessian, tol, max_iter, lp_g, keep)
    if exact.status in ("failed", "max_iter"):
        # Not converged: unscaled targets put the log noise precision's mode far from its start
        # (at -225 for targets of size 1e50), which Newton approaches by about 1 a step (the
        # likelihood is exponential in it), so max_iter steps stop short and the chains would
        # start far from the mode with a step size set there. L-BFGS (the caller's fallback)
        # gets there.
        return None
    theta = exact.theta
    if rows is not None and exact.status == "converged":
        # The sample steps stopped at a decrement of about SAMPLE_TOL * tol, not below it as a
        # quadratically converging step leaves it: the exact step, whose Hessian is computed
        # anyway, takes the MAP to ~decrement^2. Its Hessian, at most tol posterior sds from
        # there, serves as the MAP's.
        theta = theta + exact.step
    _HESSIANS[model] = (theta.tobytes(), exact.H)
    return theta


@dataclass
class _NewtonResult:
    status: str  # "converged", "stalled" (no ascent along the step), "failed" or "max_iter"
    theta: np.ndarray
    lp: float = None
    g: np.ndarray = None
    H: np.ndarray = None
    step: np.ndarray = None


def _newton_steps(theta, objective, hessian, tol, max_iter, lp_g=None, keep_below=None):
    """Damped Newton steps on ``objective`` (``theta -> (log density, gradient)``) with the
    curvature ``hessian`` (``theta -> H`` or None) until the decrement is below ``tol``.

    ``keep_below``: once a decrement is below it, the Hessian of that point serves the later
    steps (the chord method: a gradient pass a step instead of a Hessian's ``O(N P^2)``,
    converging linearly at a rate of about the relative change of the Hessian over that
    distance, a few hundredths on a9a) and is the one returned.

    ``theta`` of the result is the last accepted point, with its ``lp``, ``g`` and, when
    ``converged`` or ``stalled``, the ``H`` and Newton ``step`` computed there.
    """
    lp, g = objective(theta) if lp_g is None else lp_g
    H = C = None
    for _ in range(max_iter):
        if C is None:
            H = hessian(theta)
            if H is None:
                return _NewtonResult("failed", theta, lp, g)
            try:
                factor = cho_factor(H)
            except (LinAlgError, ValueError):
                return _NewtonResult("failed", theta, lp, g)
        else:
            factor = C
        step = cho_solve(factor, g)
        decrement = float(np.sqrt(max(g @ step, 0.0)))
        if not np.isfinite(decrement):
            return _NewtonResult("failed", theta, lp, g)
        if decrement < tol:
            return _NewtonResult("converged", theta, lp, g, H, step)
        if keep_below is not None and C is None and decrement < keep_below:
            C = factor
        t = 1.0
        for _ in range(60):
            cand = theta + t * step
            lp_new, g_new = objective(cand)
            if np.isfinite(lp_new) and lp_new >= lp:
                break
            t *= 0.5
        else:
            return _NewtonResult("stalled", theta, lp, g, H, step)
        theta, lp, g = cand, lp_new, g_new
    return _NewtonResult("max_iter", theta, lp, g)


def _sample_rows(model):
    """The fixed random sample of rows (sorted) for Newton's first phases: ``SAMPLE_ROWS`` draws
    from ``SAMPLE_MIN_ROWS`` rows up; below, where a Hessian costs ``N P^2 >= MID_MIN_WORK``,
    ``N // 4`` draws if that is at least ``MID_ROWS_PER_PARAM`` per parameter; else None (small
    or cheap data, or a model without ``hessian_of_rows``)."""
    N = model.n_samples
    if getattr(model, "hessian_of_rows", None) is None:
        return None
    size = SAMPLE_ROWS
    if N < SAMPLE_MIN_ROWS:
        P = model.n_params
        size = N // 4
        if float(N) * P * P < MID_MIN_WORK or size < MID_ROWS_PER_PARAM * P:
            return None
    # A fixed generator: the same data give the same MAP. Drawn with replacement and
    # deduplicated (np.unique sorts them, so X is read in order): a draw without replacement
    # would permute all N rows, an allocation that grows with N (none may, on memmapped X).
    return np.unique(np.random.default_rng(0).integers(0, N, size))


def _sample_objective(model, rows):
    """The log posterior with the likelihood estimated from ``rows`` (scaled to N), and its gradient."""
    scale = model.n_samples / rows.size
    step = model._block_rows() if hasattr(model, "_block_rows") else rows.size
    chunks = [rows[i : i + step] for i in range(0, rows.size, step)]  # a full-data pass's blocks

    def objective(theta):
        ll, gl = 0.0, 0.0
        for chunk in chunks:
            ll_c, gl_c = model.log_likelihood_and_grad(theta, chunk)
            ll, gl = ll + ll_c, gl + gl_c
        lp, gp = model.log_prior_and_grad(theta)
        return scale * ll + lp, scale * gl + gp

    return objective


def hessian_at(model, theta):
    """The dense Hessian of ``model``'s negative log posterior at ``theta``: the one Newton's
    method left at the MAP when ``theta`` is that MAP (no second pass over the data), else
    ``model.hessian(theta)``."""
    theta = np.asarray(theta, dtype=float)
    cached = _HESSIANS.pop(model, None)  # handed over once: later calls see the model as it is then
    if cached is not None and cached[0] == theta.tobytes():
        return cached[1]
    return model.hessian(theta)


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
