"""mCCAdL's C step in the minibatch's row space, for models with more parameters than rows.

``coef * Sigma = f Bc' Bc`` with ``Bc = G - 1 g_bar'`` the minibatch's centred per-example
gradients (n x P) and ``f = coef * noise_scale / (n - 1)``. For any scalar ``t``,

``exp(t f Bc' Bc) = I + Bc' phi1(K) (t f Bc)``,  ``K = t f Bc Bc'`` (n x n),
``phi1(z) = (exp(z) - 1) / z``,

(expand both sides in powers of ``Bc' Bc``), so ``exp(t coef Sigma) p`` needs one product
``Bc p``, one ``Bc' y`` and ``phi1`` of an ``n x n`` matrix applied to a vector: when
``n`` is far below ``P`` (the DRBM: n = 100 rows, P = 3,760 parameters on digits) the
small products replace the 5-7 products with ``Sigma`` of a Krylov or Taylor C step in
``P`` dimensions. ``Bc Bc'`` is the centred Gram matrix of the rows, which a structured
operator forms without the ``n x P`` matrix (its ``gram``).
"""

import math

import numpy as np


def row_space_applies(cov, p):
    """Whether :func:`row_space_c_step` serves ``cov``: its rows are fewer than the parameters
    and its operator forms their Gram matrix."""
    grads = getattr(cov, "grads", None)
    return grads is not None and 1 < cov.n < p.size and callable(getattr(grads, "gram", None))


def centred_gram(cov):
    """``Bc Bc'`` (n x n) of ``cov``'s minibatch, computed once per covariance: mCCAdL's ``sigma_refresh``
    reuses one minibatch's ``Sigma`` over several C steps, and the Gram matrix, not the
    ``n x n`` series, is the costly part of each (kept on ``cov``; :meth:`rescaled
    <._expmv.NoiseCovariance.rescaled>` copies share it, as it does not depend on the scale)."""
    kept = cov._row_gram
    if kept is not None:
        return kept
    gram = np.asarray(cov.grads.gram(), dtype=float)
    # Centred: (I - J/n) G G' (I - J/n).
    row = gram.mean(axis=1)
    gram -= row[:, None]
    gram -= row[None, :]
    gram += row.mean()
    cov._row_gram = gram
    return gram


def row_space_c_step(cov, t, p, tol, select_degree):
    """``exp(t cov) p`` for a :class:`~._expmv.NoiseCovariance` ``cov`` (see the module).

    ``phi1(K) w`` comes from the Taylor series of the augmented matrix ``[[K, w], [0, 0]]``,
    whose exponential's last column is ``[phi1(K) w, 1]``, with degree ``m`` and ``s``
    scaling steps from ``select_degree(norm, tol)`` (:func:`~._expmv.select_degree`, passed
    in by its module) for a true bound on its norm
    (``||K||`` by the smaller of its trace and Frobenius norm, plus ``||w||``, which is
    scaled to ``||K||``), so that the backward error is at most ``tol``. Each term costs an
    ``n x n`` matrix-vector product.

    Returns
    -------
    p : ndarray of shape (P,)
        A new array.
    """
    grads = cov.grads
    c = t * cov.factor
    K = centred_gram(cov) * c
    u = grads.matvec(p)
    u -= u.mean()
    w = u * c
    k_norm = min(abs(float(np.trace(K))), float(np.sqrt(np.einsum("ij,ij->", K, K))))
    w_norm = float(np.linalg.norm(w))
    if not (math.isfinite(k_norm) and math.isfinite(w_norm)):
        return np.full_like(p, np.nan)
    if w_norm == 0.0:
        return p.copy()
    # phi1(K) w = beta phi1(K) (w / beta): with ||w / beta|| = max(||K||, 1) the augmented
    # matrix's norm stays within twice the larger of the two.
    beta = w_norm / max(k_norm, 1.0)
    w = w / beta
    m, s = select_degree(k_norm + w_norm / beta, tol)
    y = np.zeros_like(w)
    for _ in range(s):
        # One step of exp([[K, w], [0, 0]] / s) on [y, 1]: the last component stays 1.
        term = (K @ y + w) * (1.0 / s)
        y = y + term
        for k in range(2, m + 1):
            term = K @ term
            term *= 1.0 / (s * k)
            y += term
    y *= beta
    y -= y.mean()
    out = grads.rmatvec(y)
    out += p
    return out
