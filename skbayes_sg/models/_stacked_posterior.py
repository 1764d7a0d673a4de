"""The full-data log posterior and its gradient at a stack of points, each as one chain's own pass.

The exact samplers (gadMALA) evaluate the full-data log posterior and its gradient once per
iteration and chain. On data of a few hundred rows that pass costs a few microseconds of
arithmetic and several times more in the interpreter (the row source's block iteration, the
model's unpacking, the prior's call). :class:`StackedLogPosterior` evaluates it at the rows
of a stack ``Thetas`` (C, P) in one call: the same operations as
:meth:`~skbayes_sg.models.glm.GLM.log_posterior_and_grad` on each row (one matrix-vector
product per row and product, one dot product or sum per row and reduction), with the
elementwise work of the logistic family done on the whole stack, where each element's value
does not depend on its neighbours. Each chain's log posterior and gradient are therefore
bit-identical to those of its own pass, and the chains' draws do not depend on how they are
grouped into processes (``n_jobs``) or whether they run batched.
"""

import weakref

import numpy as np

from ..rows._array import ArrayRows
from .glm.logistic import LogisticFamily

_CACHE = weakref.WeakKeyDictionary()


class StackedLogPosterior:
    """``(log pi(theta_c), grad log pi(theta_c))`` for every row of a stack (see the module).

    Parameters
    ----------
    model : GLM
        A one-output GLM without extra parameters whose full-data pass reads one block of
        dense float64 rows (what :func:`stacked_log_posterior` checks).
    block : Block
        That block, as the model's own pass reads it.
    """

    def __init__(self, model, block):
        self.X, self.Xt, self.y, self.w, self.offset = block.X, block.X.T, block.y, block.sample_weight, block.offset
        self.D, self.P, self.N = model.n_features, model.n_params, model.n_samples
        self.fit_intercept = model.fit_intercept
        self.family = model.family
        self.prior_precision = model.prior_precision
        self._neg_prec = model.grad_log_prior(np.ones(self.P)) if np.ndim(self.prior_precision) else None
        self._logistic = type(model.family) is LogisticFamily
        self._Z = self._buffers = None

    def __call__(self, thetas, log_p, grads):
        """Write ``log pi`` of each row of ``thetas`` (C, P) into ``log_p`` (C,) and its
        gradient into ``grads`` (C, P); return both."""
        C, D = thetas.shape[0], self.D
        Z = self._Z
        if Z is None or Z.shape[0] != C:
            Z = self._Z = np.empty((C, self.N))
        X = self.X
        for c in range(C):
            np.matmul(X, thetas[c, :D], out=Z[c])
        if self.fit_intercept:
            Z += thetas[:, D : D + 1]
        if self.offset is not None:
            Z += self.offset
        ll = self._logistic_sums(Z, grads) if self._logistic else self._family_sums(Z, thetas, grads)
        self._add_prior(thetas, ll, log_p, grads)
        return log_p, grads

    def _logistic_sums(self, Z, grads):
        """:meth:`LogisticFamily.loglik_and_gradient_sums` on each row of ``Z``, elementwise on
        the stack; the likelihood's gradient into ``grads``.

        A sum along the rows of a C-ordered stack (``np.add.reduce(., axis=1)``) is each row's
        own pairwise sum, the same as ``row.sum()``; a dot product stays one per row.
        """
        y, w, Xt, D, C = self.y, self.w, self.Xt, self.D, Z.shape[0]
        # The family's expressions, each into a work array of the stack's shape.
        e, r, tmp = self._work(Z.shape)
        np.exp(np.negative(np.abs(Z, out=e), out=e), out=e)
        np.add(e, 1.0, out=tmp)
        np.divide(np.where(Z >= 0, 1.0, e), tmp, out=r)
        np.subtract(y, r, out=r)
        if w is None:
            # (y'z - sum max(z, 0)) - sum log1p(e), in the family's order.
            ll = np.array([float(y @ Z[c]) for c in range(C)])
            ll -= np.add.reduce(np.maximum(Z, 0.0, out=tmp), axis=1)
            ll -= np.add.reduce(np.log1p(e, out=e), axis=1)
        else:
            terms = y * Z - np.maximum(Z, 0.0) - np.log1p(e)
            ll = np.array([float(w @ terms[c]) for c in range(C)])
            r *= w
        for c in range(C):
            np.matmul(Xt, r[c], out=grads[c, :D])
        if self.fit_intercept:
            grads[:, D] = np.add.reduce(r, axis=1)
        return ll

    def _work(self, shape):
        """Three work arrays of ``shape``, kept between calls."""
        work = self._buffers
        if work is None or work[0].shape != shape:
            work = self._buffers = tuple(np.empty(shape) for _ in range(3))
        return work

    def _family_sums(self, Z, thetas, grads):
        """The family's own sums, one row at a time (families without a stacked form)."""
        Xt, D = self.Xt, self.D
        ll = np.empty(Z.shape[0])
        for c in range(Z.shape[0]):
            ll[c], R, R_sum, _ = self.family.loglik_and_gradient_sums(
                Z[c][:, None], self.y, self.w, thetas[c, self.P :]
            )
            grads[c, :D] = np.asarray(Xt @ R).ravel()
            if self.fit_intercept:
                grads[c, D : D + 1] = R_sum
        return ll

    def _add_prior(self, thetas, ll, log_p, grads):
        """Add the Gaussian prior's log density and gradient (:class:`~.glm._prior.GaussianPrior`)."""
        prec = self.prior_precision
        for c in range(thetas.shape[0]):
            t = thetas[c]
            lp = -0.5 * prec * float(t @ t) if self._neg_prec is None else -0.5 * float(t @ (prec * t))
            log_p[c] = ll[c] + lp
        grads += thetas * (-prec if self._neg_prec is None else self._neg_prec)


def stacked_log_posterior(model):
    """The :class:`StackedLogPosterior` of ``model``, or None where it does not apply: a
    model other than a one-output GLM without extra parameters, rows not a dense in-memory
    array of float64, or more rows than one block of a full-data pass. Built once per model object."""
    try:
        hit = _CACHE.get(model)
    except TypeError:
        return _build(model)
    if hit is None:
        hit = _CACHE[model] = (_build(model),)
    return hit[0]


def _build(model):
    rows = getattr(model, "rows", None)
    if getattr(model, "family", None) is None or not isinstance(rows, ArrayRows) or hasattr(model, "to_theta"):
        return None
    if model.n_outputs != 1 or model._n_extra:
        return None
    slices = rows.block_slices(model._block_rows())
    if len(slices) != 1:
        return None
    # The block the model's own pass reads (rows.blocks), so that each row's sums are its own.
    block = rows.block(slices[0])
    X = block.X
    if not isinstance(X, np.ndarray) or X.dtype != np.float64:
        return None
    return StackedLogPosterior(model, block)
