"""The ``step_size="auto"`` rule: a step size from the curvature of the log posterior.

The stable step size of a discretised Langevin dynamics shrinks as the posterior
sharpens: for a Gaussian with largest precision ``lambda_max``, Euler-Maruyama Langevin
(SGLD) is stable for ``h < 2 / lambda_max`` and the second-order (momentum) schemes for
``h < 2 / sqrt(lambda_max)``. Since ``lambda_max`` grows linearly with N, a fixed ``h``
that works at one N diverges at another. ``"auto"`` measures ``lambda_max`` at the
initial point and sets ``h = c / lambda_max`` (first order) or ``h = c / sqrt(lambda_max)``
(second order), with ``c`` a per-sampler constant documented on each sampler.
"""

import numpy as np
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh


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
    op = LinearOperator((P, P), matvec=lambda v: model.hessian_vector_product(theta, np.ravel(v)),
                        dtype=float)
    # A fixed start vector keeps fits reproducible.
    v0 = np.random.default_rng(0).standard_normal(P)
    try:
        lam = eigsh(op, k=1, which="LM", tol=tol, v0=v0, maxiter=maxiter, return_eigenvectors=False)[0]
    except ArpackNoConvergence as err:
        if len(err.eigenvalues) == 0:
            raise
        lam = err.eigenvalues[0]
    if not np.isfinite(lam):
        raise ValueError("step_size='auto': the curvature of the log posterior at the initial point is not "
                         "finite; give an explicit step_size or a different init.")
    return max(abs(float(lam)), 1e-12)
