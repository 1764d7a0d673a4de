"""Preconditioning from the curvature at the mode: the geometry the SG samplers run in.

A stochastic-gradient sampler with one step size ``h`` mixes at the pace of the posterior's
widest direction and is stable only for its narrowest, so an ill-conditioned posterior
(unscaled features, correlated designs) costs iterations in proportion to its condition
number. Running the sampler on ``z`` with ``theta = theta_hat + L z`` and ``L L' = H^-1``
(``H`` the Hessian of the negative log posterior at the MAP ``theta_hat``) turns a
near-Gaussian posterior into a near-standard one: every direction has curvature close to
1 and one ``h`` serves all. For Langevin dynamics this change of variables is the same
thing as a constant mass matrix / preconditioner ``H`` in ``theta``, so each sampler is
still its paper's scheme, in these coordinates (see :class:`~.models._whitened.WhitenedModel`).

Past :data:`MAX_DENSE_PARAMS` a dense ``L`` costs too much and ``"auto"`` whitens a GLM with
intercepts by ``"centred"``: the diagonal of the Hessian after centring the predictors for
the intercepts (as brms does), whose coupling to every coefficient a plain diagonal leaves,
with a Lanczos correction of the few directions still far from unit curvature
(:func:`~.models._centred.centred_factor`). On ``benchmarks/wide_sparse_diag.py``'s
MAP (50,000 rows, 2,000 binary features, 20 per row) the whitened Hessian's eigenvalues span
0.00078-20.7 with the diagonal (mCCAdL ran to its 100,000-iteration ceiling), 0.016-1.46
centred and 0.51-1.46 corrected (the default fit converged in 8,000 iterations).
"""

import numpy as np
from scipy.linalg import LinAlgError, cholesky, eigh

#: Accepted values of a sampler's ``preconditioner`` hyperparameter.
PRECONDITIONERS = ("auto", "dense", "centred", "diag", "none")

#: ``preconditioner="auto"`` uses the dense factor up to this many parameters. The diagonal
#: leaves the correlations: digits' softmax (650 parameters) keeps a condition number in the
#: hundreds and its chains do not mix at the default budget, while its dense factor costs
#: a few ``O(P^2)`` products per iteration (a millisecond at P = 1,000) and one ``O(P^3)``
#: factorisation. Beyond, both grow too fast: a GLM with intercepts is whitened by
#: :func:`~.models._centred.centred_factor` (``"centred"``), another model by the diagonal.
MAX_DENSE_PARAMS = 1000

#: The centred whitening corrects the directions whose curvature after it lies outside
#: ``[1 / OUTLIER_RATIO, OUTLIER_RATIO]`` (the dense whitening's is 1): a ratio of 2 keeps
#: the condition number below 4 where no more than :data:`OUTLIER_RANK` lie at either end.
OUTLIER_RATIO = 2.0
OUTLIER_RANK = 4


def resolve_preconditioner(kind, n_params, centrable=False):
    """The concrete preconditioner for ``kind`` and ``P = n_params``: "dense", "centred", "diag" or "none".

    ``centrable``: the model is a GLM with intercepts (:func:`intercept_layout`), whose
    intercepts a diagonal whitening would leave coupled to every coefficient. ``"auto"``
    beyond :data:`MAX_DENSE_PARAMS` is then ``"centred"`` (``"diag"`` otherwise), and so is
    ``"centred"``; without intercepts ``"centred"`` is ``"diag"``.
    """
    if kind is None or kind == "none":
        return "none"
    if kind == "auto":
        if n_params <= MAX_DENSE_PARAMS:
            return "dense"
        kind = "centred"
    if kind == "centred" and not centrable:
        return "diag"
    return kind


def intercept_layout(model):
    """``(D, K)`` of a GLM with ``K`` intercepts after its ``D x K`` weights, or None.

    The layout that :class:`~skbayes_sg.models._centred.CentredScaling` centres for; other
    models (the DRBM's hidden and visible biases, say) have no single intercept per output.
    """
    if getattr(model, "family", None) is None or not getattr(model, "fit_intercept", False):
        return None
    return model.n_features, model.n_outputs


def curvature_factor(model, theta_hat, kind, hessian=None):
    """``L`` with ``L L' ~ H^-1`` at ``theta_hat``: lower-triangular (P, P) or a diagonal (P,).

    ``"dense"``: the Cholesky factor of the inverse Hessian. ``"diag"``: ``1 / sqrt(H_jj)``.
    (``"centred"``, a :class:`~skbayes_sg.models._centred.CentredScaling`, is
    :func:`~skbayes_sg.models._centred.centred_factor`'s, built where the model layer is known.)
    Where the posterior is not log-concave at ``theta_hat`` (or the MAP is rough), negative
    or tiny curvatures are replaced by their absolute values floored at ``1e-10`` of the
    largest, so the factor stays finite and the sampler, still exact in ``z``, only mixes
    less well along those directions.

    Parameters
    ----------
    model : Model
    theta_hat : ndarray of shape (P,)
    kind : {"dense", "diag"}
    hessian : callable, optional
        ``hessian(model, theta_hat)``, the dense Hessian (default ``model.hessian``): the
        estimators pass one that reuses the Hessian their MAP search left at ``theta_hat``.

    Returns
    -------
    L : ndarray of shape (P, P) or (P,)
    """
    if kind not in ("dense", "diag"):
        raise ValueError(f"curvature_factor builds the 'dense' and 'diag' factors, not {kind!r}.")
    # Features near 1e300 overflow the curvature's products: the non-finite result is
    # reported below as a ValueError naming the fix, without numpy's overflow warnings.
    with np.errstate(over="ignore", invalid="ignore"):
        if kind == "diag":
            d = np.abs(model.hessian_diagonal(theta_hat))
        else:
            H = model.hessian(theta_hat) if hessian is None else hessian(model, theta_hat)
    if kind == "diag":
        if not np.all(np.isfinite(d)):
            raise ValueError(
                "The curvature of the log posterior at the MAP is not finite; standardise the "
                "features or use preconditioner='none'."
            )
        return 1.0 / np.sqrt(floored_curvatures(d))
    if not np.all(np.isfinite(H)):
        raise ValueError(
            "The Hessian of the log posterior at the MAP is not finite; standardise the features "
            "or use preconditioner='none'."
        )
    try:
        C = cholesky(H, lower=True)
        # L = C^-T is upper triangular; the lower Cholesky factor of H^-1 has the same
        # product L L' and keeps the triangular solves of WhitenedModel one-sided.
        H_inv = np.linalg.inv(C)
        H_inv = H_inv.T @ H_inv
    except LinAlgError:
        lam, V = eigh(H)
        lam = np.abs(lam)
        lam = np.maximum(lam, max(float(lam.max()), 1e-300) * 1e-10)
        H_inv = (V / lam) @ V.T
    return cholesky(0.5 * (H_inv + H_inv.T), lower=True)


def floored_curvatures(d):
    """Curvatures floored at ``1e-10`` of the largest, so ``1 / sqrt(d)`` stays finite."""
    return np.maximum(d, max(float(d.max()), 1e-300) * 1e-10)
