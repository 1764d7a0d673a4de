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
(:func:`centred_factor`, :mod:`~.models._centred`). On ``benchmarks/wide_sparse_diag.py``'s
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
#: :func:`centred_factor` (``"centred"``), another model by the diagonal.
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
    """``L`` with ``L L' ~ H^-1`` at ``theta_hat``: lower-triangular (P, P), a diagonal (P,), or a
    :class:`~skbayes_sg.models._centred.CentredScaling`.

    ``"dense"``: the Cholesky factor of the inverse Hessian. ``"diag"``: ``1 / sqrt(H_jj)``.
    ``"centred"``: the diagonal whitening after centring the predictors for the intercepts
    (:func:`centred_factor`).
    Where the posterior is not log-concave at ``theta_hat`` (or the MAP is rough), negative
    or tiny curvatures are replaced by their absolute values floored at ``1e-10`` of the
    largest, so the factor stays finite and the sampler, still exact in ``z``, only mixes
    less well along those directions.

    Parameters
    ----------
    model : Model
    theta_hat : ndarray of shape (P,)
    kind : {"dense", "centred", "diag"}
    hessian : callable, optional
        ``hessian(model, theta_hat)``, the dense Hessian (default ``model.hessian``): the
        estimators pass one that reuses the Hessian their MAP search left at ``theta_hat``.

    Returns
    -------
    L : ndarray of shape (P, P) or (P,), or CentredScaling
    """
    if kind == "centred":
        return centred_factor(model, theta_hat)
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
        return 1.0 / np.sqrt(_floored(d))
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


def _floored(d):
    """Curvatures floored at ``1e-10`` of the largest, so ``1 / sqrt(d)`` stays finite."""
    return np.maximum(d, max(float(d.max()), 1e-300) * 1e-10)


def centred_factor(model, theta_hat):
    """The centred diagonal whitening ``L = T diag(s)`` of a GLM with intercepts at ``theta_hat``.

    ``mu_jk = H_{jk,a_k} / H_{a_k a_k}`` (the features' curvature-weighted means, from the
    Hessian's intercept columns: one exact Hessian-vector product per output) removes the
    intercepts' coupling to the coefficients in the Hessian at ``theta_hat``; ``s`` is
    ``diag(T' H T)^-1/2``, whose coefficient entries are ``H_jj - mu_j^2 H_aa`` (see
    :mod:`skbayes_sg.models._centred`). Cost: the diagonal's pass and ``K`` Hessian-vector
    products, O(N D K), and O(P) to apply. Curvatures are floored as in
    :func:`curvature_factor`; where an intercept's curvature is not positive (a posterior
    not log-concave there) its coefficients are not centred.

    Returns
    -------
    CentredScaling
    """
    from .models._centred import CentredScaling

    D, K = intercept_layout(model)
    with np.errstate(over="ignore", invalid="ignore"):
        d = model.hessian_diagonal(theta_hat)
        cols = np.empty((D, K))
        h_a = np.empty(K)
        for k in range(K):
            e = np.zeros(model.n_params)
            e[D * K + k] = 1.0
            col = model.hessian_vector_product(theta_hat, e)
            cols[:, k] = col[: D * K].reshape(D, K)[:, k]
            h_a[k] = col[D * K + k]
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(cols)) and np.all(np.isfinite(h_a))):
        raise ValueError(
            "The curvature of the log posterior at the MAP is not finite; standardise the "
            "features or use preconditioner='none'."
        )
    positive = h_a > 0
    mu = np.where(positive, cols / np.where(positive, h_a, 1.0), 0.0)
    d = d.copy()
    # diag(T' H T): H_jj - 2 mu_j H_ja + mu_j^2 H_aa = H_jj - mu_j H_ja with these mu.
    d[: D * K] -= (mu * cols).ravel()
    centred = CentredScaling(1.0 / np.sqrt(_floored(np.abs(d))), mu)
    V, lam = outlying_curvatures(model, theta_hat, centred)
    if not lam.size:
        return centred
    return CentredScaling(centred.s, mu, V, 1.0 / np.sqrt(lam) - 1.0)


def outlying_curvatures(model, theta_hat, factor):
    """``(V (P, r), lambda (r,))``: the eigenpairs of ``A = L' H L`` (``L`` the ``factor``) whose
    curvature lies outside ``[1 / OUTLIER_RATIO, OUTLIER_RATIO]``, at most ``OUTLIER_RANK`` at
    each end of the spectrum.

    Centring and scaling leave directions that no diagonal sees, such as sums of binary
    features that add up to a constant in every row (one-hot groups; on the wide sparse
    benchmark's rows of 20 features each, curvature 0.016 against a bulk in [0.51, 1.46]).
    Lanczos (ARPACK, from a fixed start, so the same data give the same factor) finds them
    from Hessian-vector products, each one pass over the data: 50-100 of them, a fraction
    of a second on that benchmark.
    """
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

    P = model.n_params
    empty = np.zeros((P, 0)), np.zeros(0)
    k = 2 * OUTLIER_RANK
    if P <= 4 * k:
        lam, V = eigh(factor.congruent(model.hessian(theta_hat)))
    else:
        op = LinearOperator(
            (P, P),
            matvec=lambda v: factor.right(model.hessian_vector_product(theta_hat, factor.left(v.ravel()))),
            dtype=float,
        )
        v0 = np.random.default_rng(0).standard_normal(P)
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                lam, V = eigsh(op, k=k, which="BE", v0=v0, ncv=min(P, 4 * k), tol=1e-3, maxiter=20 * P)
        except ArpackNoConvergence:
            return empty
    if not np.all(np.isfinite(lam)):
        return empty
    order = np.argsort(lam)
    lam, V = lam[order], V[:, order]
    low = np.flatnonzero((lam > 0) & (lam < 1.0 / OUTLIER_RATIO))[:OUTLIER_RANK]
    high = np.flatnonzero(lam > OUTLIER_RATIO)[::-1][:OUTLIER_RANK]
    keep = np.concatenate([low, high])
    return V[:, keep], lam[keep]
