"""The ``step_size="auto"`` rule: a step size from the curvature of the log posterior.

The stable step size of a discretised Langevin dynamics shrinks as the posterior
sharpens: for a Gaussian with largest precision ``lambda_max``, Euler-Maruyama Langevin
(SGLD) is stable for ``h < 2 / lambda_max`` and the second-order (momentum) schemes for
``h < 2 / sqrt(lambda_max)``. Since ``lambda_max`` grows linearly with N, a fixed ``h``
that works at one N diverges at another. ``"auto"`` measures ``lambda_max`` at the
initial point and sets ``h = c / lambda_max`` (first order) or ``h = c / sqrt(lambda_max)``
(second order), with ``c`` a per-sampler constant documented on each sampler.

Curvature is half the story. A minibatch force ``F~ = F + eps`` with noise covariance
``Sigma`` heats the chain: one step adds ``h^2 Sigma`` to the momentum's covariance (``h^2
Sigma`` to the position's for SGLD) against the ``2 h A T`` (``2 h T``) the sampler injects
on purpose, so the stationary variance along the noisiest direction is too large by the
fraction

``delta = h sigma_max / (2 A T)`` (momentum samplers), ``delta = h sigma_max / (2 T)`` (SGLD),

with ``sigma_max`` the largest eigenvalue of ``Sigma`` (for a Gaussian target and constant
noise this is exact to first order in ``h``; SGHMC paper section 3.2, CCAdL paper
Proposition 1). ``Sigma`` grows like ``N^2 / n`` for plain minibatches, so a step set by
curvature alone is accurate at one N and several posterior sds too wide at another.
``"auto"`` therefore also caps ``h`` so that ``delta`` stays at each sampler's
``_noise_tolerance`` (:func:`largest_noise_eigenvalue` measures ``sigma_max`` at the start,
for the control-variate estimator at a draw of the Laplace approximation, where its noise
is typical rather than zero). The noise-controlling samplers (CCAdL, mCCAdL) cancel most of
``Sigma`` with their C step and take a larger tolerance.
"""

import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh


@dataclass
class FitContext:
    """What a fit measured once for all its chains, for the samplers' :meth:`init_state`.

    The estimator builds one per fit; each chain's ``init_state(theta0, grad_estimator,
    rng, context)`` passes it to :meth:`~._base.BaseSampler.step_size_for`, which resolves
    the sampler's step size from it (the explicit ``step_size``, or the ``"auto"`` rule of
    :meth:`~._base.BaseSampler.resolve_step_size`) the first time and keeps the result in
    :attr:`step`, so every chain of the fit gets the same ``h``.

    Attributes
    ----------
    model : Model or None
        The posterior the chains sample (in their coordinates): its curvature sets the
        ``"auto"`` step (and the adaptive samplers' initial proposal).
    curvature_at : ndarray of shape (P,) or None
        Where the curvature is measured when ``lambda_max`` is not given (None: the first
        chain's start).
    lambda_max : float or None
        The curvature when already known (1 in coordinates whitened at the MAP).
    sigma_max : float or None
        Largest eigenvalue of the chains' gradient-noise covariance (None: full data).
    scale : float, default=1.0
        Multiplier of the curvature step's constant (an estimator's ``_auto_step_scale``).
    initial_factor : tuple (L0, m0) or None
        The adaptive samplers' initial proposal factor when the fit fixes one for every
        chain (:meth:`~._gad_common.GadSampler.fix_initial_factor`, at the MAP); None: each
        chain takes the curvature at its own start.
    step : tuple (float, dict) or None
        ``(h, info)`` once resolved, ``info`` as :meth:`~._base.BaseSampler.resolve_step_size`
        returns it (the estimators report both in ``diagnostics_``).
    """

    model: object = None
    curvature_at: np.ndarray = None
    lambda_max: float = None
    sigma_max: float = None
    scale: float = 1.0
    initial_factor: tuple = None
    step: tuple = None


def largest_curvature(model, theta, tol=1e-3, maxiter=None):
    """Largest eigenvalue of the Hessian of the negative log posterior at ``theta``.

    Lanczos iteration (``scipy.sparse.linalg.eigsh``) on Hessian-vector products
    (``model.hessian_vector_product``: exact where the model has one, a finite
    difference of the gradient otherwise), so the Hessian is never formed; each product
    costs one or two full-data gradients, and a few dozen suffice. Lanczos rather than
    power iteration because close top eigenvalues stall the latter well short of the
    answer, and an underestimate gives a step size above the stable one.

    Parameters
    ----------
    model : Model
    theta : ndarray of shape (P,)
    tol : float, default=1e-3
        Relative accuracy asked of the eigenvalue.
    maxiter : int, optional
        Cap on Lanczos restarts (default ``max(100, 10 P)``, scipy's own).

    Returns
    -------
    lambda_max : float
        The dominant eigenvalue's absolute value (a non-convex region can make it
        negative), floored at a tiny positive number so that a flat posterior does not
        give an infinite step.
    """
    theta = np.asarray(theta, dtype=float)
    P = theta.size
    if P == 1:
        lam = float(model.hessian_vector_product(theta, np.ones(1))[0])
        return max(abs(lam), 1e-12)
    if P <= 3:
        H = np.column_stack([model.hessian_vector_product(theta, e) for e in np.eye(P)])
        lam = np.linalg.eigvalsh(0.5 * (H + H.T))
        return max(float(np.abs(lam).max()), 1e-12)
    op = LinearOperator((P, P), matvec=lambda v: model.hessian_vector_product(theta, np.ravel(v)), dtype=float)
    # A fixed start vector keeps fits reproducible.
    v0 = np.random.default_rng(0).standard_normal(P)
    try:
        lam = eigsh(op, k=1, which="LM", tol=tol, v0=v0, maxiter=maxiter, return_eigenvectors=False)[0]
    except ArpackNoConvergence as err:
        if len(err.eigenvalues) == 0:
            raise
        lam = err.eigenvalues[0]
    if not np.isfinite(lam):
        raise ValueError(
            "step_size='auto': the curvature of the log posterior at the initial point is not "
            "finite; give an explicit step_size or a different init."
        )
    return max(abs(float(lam)), 1e-12)


def largest_noise_eigenvalue(grads, noise_scale, n_iter=50):
    """Largest eigenvalue ``sigma_max`` of ``Sigma = noise_scale * V``, ``V`` the covariance of ``grads``.

    ``grads`` are per-example gradients (or control-variate differences, importance
    weighted where the chains' are) of a probe sample of rows, whose covariance is an
    unbiased estimate of the population's; ``noise_scale`` is the chains' (``N^2 / n`` for
    their batch size ``n``). Power iteration on the matrix-free products (``O(m P)``
    each), started from a fixed vector so that fits are reproducible.

    Returns
    -------
    sigma_max : float
    """
    from ._expmv import NoiseCovariance

    cov = NoiseCovariance(grads, noise_scale)
    v = np.random.default_rng(1).standard_normal(grads.n_params)
    v /= np.linalg.norm(v)
    # Gradients of features of size 1e100 overflow the products: the ValueError below
    # names the fix, so numpy's overflow warnings would only be noise.
    with np.errstate(over="ignore", invalid="ignore"):
        lam, _ = cov.largest_eigenvalue(v, n_iter=n_iter, rtol=1e-3)
    if not np.isfinite(lam):
        raise ValueError(
            "step_size='auto': the minibatch gradients at the initial point are not finite; "
            "standardise the features or give an explicit step_size."
        )
    return float(lam)


#: Largest ``horizon="auto"`` of multilevel SGLD (steps per level-0 path); beyond it
#: :func:`multilevel_step_and_horizon` raises.
MAX_AUTO_HORIZON = 100_000


def multilevel_step_and_horizon(H_post, step_size="auto", horizon="auto"):
    """Multilevel SGLD's ``h_0`` and ``m`` (:class:`~.mlsgld.MLSGLD`) from the log posterior's Hessian at ``theta_0``.

    With ``lambda_max`` and ``lambda_min`` the largest and smallest curvature of the negative
    log posterior (a dense eigen-decomposition: the levels' Taylor gradient forms the ``P x P``
    Hessian anyway), ``step_size="auto"`` is ``0.25 / lambda_max`` (near the paper's ``1 / N``
    for its example) and ``horizon="auto"`` is ``max(5, ceil(1 / (h_0 lambda_min)))``: the
    level-0 horizon ``T_0 = m h_0`` at least one relaxation time of the slowest direction, and
    ``m`` at least the paper's 5. Returns ``(h_0, m, lambda_max, lambda_min)``.
    """
    curv = np.linalg.eigvalsh(-0.5 * (H_post + H_post.T))
    lam_max, lam_min = float(max(abs(curv[-1]), 1e-12)), float(curv[0])
    if step_size == "auto":  # MLSGLD's constraints validated both
        step_size = 0.25 / lam_max
    if horizon == "auto":
        if lam_min <= 0:
            raise ValueError(
                "horizon='auto' needs a log posterior that is strictly concave at theta0 "
                "(start from the MAP), or give horizon explicitly."
            )
        horizon = max(5, math.ceil(1.0 / (step_size * lam_min)))
        if horizon > MAX_AUTO_HORIZON:
            # m = 4 lam_max / lam_min at the auto step: a near-flat direction (duplicated or
            # constant features, a weak prior) made it 1e8 steps per path, a fit that never returns.
            raise ValueError(
                f"horizon='auto' would run {horizon:.3g} steps per path: the log posterior at theta0 is "
                f"ill-conditioned (curvatures from {lam_min:.3g} to {lam_max:.3g}). Standardise the features and "
                "drop duplicated or constant ones, increase alpha, give horizon explicitly, or use a "
                "single-level sampler."
            )
    return step_size, horizon, lam_max, lam_min
