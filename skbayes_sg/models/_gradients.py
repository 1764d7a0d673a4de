"""Per-example gradient operators.

A minibatch of ``n`` rows gives ``n`` per-example gradients ``g_i`` of the log likelihood,
the rows of an ``n x P`` matrix ``G``. Samplers that control gradient noise need the
noise covariance ``Sigma = N^2 / n * Cov_i[g_i]`` (CCAdL paper eq. 17, mCCAdL paper
eq. 15) only through products and its diagonal, so a model exposes ``G`` as an operator
and never has to form it, nor the ``P x P`` covariance.
"""

import numpy as np

from ..rows import EllRows


def row_sq_norms(X):
    """``||x_i||^2`` of each row of ``X`` (dense, or sparse), shape (n,).

    The one formula for these norms, whether a model caches them, computes them per
    minibatch, or an operator falls back on them (as after unpickling): a chain continued
    in another process must draw, to the last bit, what it would have drawn in this one.
    """
    if hasattr(X, "multiply"):
        return np.asarray(X.multiply(X).sum(axis=1)).ravel()
    return np.einsum("nd,nd->n", X, X)


def whitened_row_weights(L, X, fit_intercept):
    """``q_i = ||L' x~_i||^2`` of the rows of ``X`` (dense or sparse) for a one-output GLM with
    dense lower-triangular ``L`` (P, P): ``x~_i`` is the row, then 1 for the intercept.

    The one formula for these weights, whether a model caches them for all rows or an
    operator recomputes them from its own minibatch (as after unpickling, for rows on disk or
    on a cluster): a chain continued in another process draws what it would have here.
    """
    D = X.shape[1]
    XL = np.asarray(X @ L[:D])
    if fit_intercept:
        XL += L[D]
    return np.einsum("np,np->n", XL, XL)


def row_cache_closure(f, local):
    """``f``, a closure over a model returning per-row values of a minibatch (its rows'
    squared norms or whitened row weights), marked for pickling: ``local`` (the model keeps
    its rows in memory, so calling ``f`` is a look-up in its per-row cache) makes a pickled
    operator carry ``f()``'s n values, so that its arithmetic after unpickling (in a worker,
    or a saved chain continued) is this one's to the last bit; otherwise (rows on disk or on
    a cluster, where a call would read them, maybe from inside a serialisation) the closure
    is dropped and the operator recomputes the values from its own rows."""
    f.evaluate_on_pickle = bool(local)
    return f


def _pickled_closure(f):
    """What a pickled operator keeps of a closure (see :func:`row_cache_closure`)."""
    if not callable(f):
        return f
    return f() if getattr(f, "evaluate_on_pickle", False) else None


class PerExampleGradients:
    """Operator view of the ``n x P`` per-example gradient matrix ``G`` of a minibatch.

    Subclasses implement :meth:`mean`, :meth:`matvec`, :meth:`rmatvec` and
    :meth:`sum_of_squares`; the covariance products are derived here once for all models.

    Attributes
    ----------
    n_batch : int
        Number of rows ``n`` in the minibatch.
    n_params : int
        Number of parameters ``P``.
    """

    n_batch: int
    n_params: int

    def mean(self):
        """Mean gradient ``(1/n) sum_i g_i``, shape (P,)."""
        raise NotImplementedError

    def matvec(self, v):
        """``G @ v``: the projection of each example's gradient on ``v``, shape (n,)."""
        raise NotImplementedError

    def rmatvec(self, u):
        """``G.T @ u``: a weighted sum of the per-example gradients, shape (P,)."""
        raise NotImplementedError

    def sum_of_squares(self):
        """Per-coordinate ``sum_i g_i**2``, shape (P,)."""
        raise NotImplementedError

    def covariance_diag(self):
        """Diagonal of the empirical covariance ``V`` (CCAdL paper eq. 19), shape (P,).

        Uses the unbiased ``1 / (n - 1)`` normalisation; zero for a single example.
        """
        n = self.n_batch
        if n < 2:
            return np.zeros(self.n_params)
        g_bar = self.mean()
        var = (self.sum_of_squares() - n * g_bar * g_bar) / (n - 1)
        # Cancellation can leave tiny negative values where the variance is ~0.
        return np.maximum(var, 0.0, out=var)

    def scale_rows(self, c):
        """The operator of the rows ``c_i g_i`` (importance weights of a minibatch), shape (n,) ``c``.

        Models whose operators support it override this; the default says it is not.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support importance-sampled minibatches.")

    def to_dense(self):
        """The ``n x P`` matrix ``G``; for tests and debugging only (memory O(n P))."""
        eye = np.eye(self.n_batch)
        return np.stack([self.rmatvec(eye[i]) for i in range(self.n_batch)])

    def gram_dims(self):
        """Shape of the dense Gram matrix behind :meth:`centred_gram`, or None when there is none.

        Returns
        -------
        dims : tuple ``(n, P_in, dense_L)`` or None
            ``n x P_in`` is the dense matrix whose Gram matrix is formed (BLAS-3, once) and
            ``dense_L`` whether a dense change of coordinates follows (O(P^3)); mCCAdL's
            compact covariance weighs this against products through the rows. None: the
            operator has no cheap dense form (the default, and a large sparse minibatch).
        """
        return None

    def centred_gram(self):
        """``(G - 1 g_bar')' (G - 1 g_bar')``, shape (P, P), for operators with :meth:`gram_dims`."""
        G = np.array(self.to_dense(), dtype=float)
        G -= self.mean()
        return G.T @ G


class LinearPerExampleGradients(PerExampleGradients):
    """Per-example gradients of a generalised linear model.

    Example ``i`` has gradient ``g_i = [vec(x_i R_i'), R_i (intercept), e_i]``: the outer
    product of its features ``x_i`` (D,) with its residual row ``R_i`` (K,), the residual
    itself for the intercepts, and ``k`` extra per-example coordinates ``e_i`` (for
    instance the log noise precision of linear regression). This covers binary logistic
    (K = 1), softmax (K classes) and Gaussian linear regression; every product is two
    dense (or sparse) matrix products with the minibatch, O(n D K).

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n, D)
        Minibatch features.
    R : ndarray of shape (n, K)
        Residuals, ``d log p(y_i | z_i) / d z_i`` for the linear predictor ``z_i``.
    fit_intercept : bool
        Whether the parameter vector has K intercepts after the ``D x K`` weights.
    extra : ndarray of shape (n, k), optional
        Gradients of the extra per-example coordinates.
    row_sq_norms : ndarray of shape (n,) or callable, optional
        ``||x_i||^2`` of the minibatch rows, or a function returning them (typically a
        gather from norms the model computes once, on first need); makes
        :meth:`total_sum_of_squares` O(n K) instead of O(n D K). A callable is only called
        by that method, so samplers that never need the trace never pay for the norms, and
        it is evaluated when the operator is pickled if marked so (:func:`row_cache_closure`).
    """

    def __init__(self, X, R, fit_intercept, extra=None, row_sq_norms=None):
        self.X = X
        self.R = R
        self.fit_intercept = fit_intercept
        self.extra = extra
        self._row_sq_norms = row_sq_norms
        n, D = X.shape
        K = R.shape[1]
        self.n_batch = n
        self._shape = (D, K)
        self.n_params = D * K + (K if fit_intercept else 0) + (0 if extra is None else extra.shape[1])
        self._r = R[:, 0] if K == 1 else None
        self._mean = None

    def _parts(self, v):
        D, K = self._shape
        W = v[: D * K].reshape(D, K)
        pos = D * K
        b = e = None
        if self.fit_intercept:
            b = v[pos : pos + K]
            pos += K
        if self.extra is not None:
            e = v[pos:]
        return W, b, e

    def _join(self, w, b, e):
        parts = [np.asarray(w).ravel()]
        if self.fit_intercept:
            parts.append(b)
        if self.extra is not None:
            parts.append(e)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def mean(self):
        """Mean gradient (P,), computed once and returned read-only (the force and the
        noise covariance of the same minibatch both need it)."""
        if self._mean is None:
            self._mean = self._compute_mean()
            self._mean.flags.writeable = False
        return self._mean

    def _compute_mean(self):
        # Written into one preallocated vector: this runs once per sampler iteration, and
        # concatenation and np.mean's overhead were a visible share of a small model's step.
        n = self.n_batch
        D, K = self._shape
        X = self.X
        if K == 1 and self.fit_intercept and self.extra is None and type(X) is EllRows:
            # The hot path of a sparse one-output GLM step: X.T @ r accumulates straight into
            # the mean's zeroed vector, whose last slot (the phantom column's) then takes the
            # intercept's sum; no X.T operator, copy or slice per step.
            out = X.rmatvec_into(self._r, np.zeros(D + 1))
            out[D] = np.add.reduce(self._r)
            out /= n
            return out
        out = np.empty(self.n_params)
        if K == 1:
            # A matrix-vector product (gemv) rather than a one-column gemm.
            out[: D * K] = self.X.T @ self.R[:, 0]
        else:
            out[: D * K] = np.asarray(self.X.T @ self.R).ravel()
        pos = D * K
        if self.fit_intercept:
            # One output: the 1-D reduction, the same sum without the 2-D reduction's setup.
            out[pos : pos + K] = np.add.reduce(self.R, axis=0) if K > 1 else np.add.reduce(self._r)
            pos += K
        if self.extra is not None:
            out[pos:] = np.add.reduce(self.extra, axis=0)
        out /= n
        return out

    def matvec(self, v):
        D = self._shape[0]
        if self._r is not None:
            # One output (logistic, linear regression): the hot path of mCCAdL's C step, in
            # place on the product's own result.
            out = np.asarray(self.X @ v[:D]).ravel()
            pos = D
            if self.fit_intercept:
                out += v[D]
                pos += 1
            out *= self._r
            if self.extra is not None:
                out += self.extra @ v[pos:]
            return out
        W, b, e = self._parts(v)
        XW = self.X @ W
        out = np.einsum("nk,nk->n", XW, self.R) if W.shape[1] > 1 else XW[:, 0] * self.R[:, 0]
        if b is not None:
            out = out + self.R @ b
        if e is not None:
            out = out + self.extra @ e
        return np.asarray(out).ravel()

    def rmatvec(self, u):
        if self._r is not None:
            ru = self._r * u
            out = np.empty(self.n_params)
            D = self._shape[0]
            out[:D] = self.X.T @ ru
            pos = D
            if self.fit_intercept:
                out[D] = ru.sum()
                pos += 1
            if self.extra is not None:
                out[pos:] = self.extra.T @ u
            return out
        w = self.X.T @ (self.R * u[:, None])
        b = self.R.T @ u if self.fit_intercept else None
        e = self.extra.T @ u if self.extra is not None else None
        return self._join(w, b, e)

    def total_sum_of_squares(self):
        """``sum_i ||g_i||^2`` (a scalar), the trace of ``G'G``.

        ``||g_i||^2 = ||x_i||^2 ||R_i||^2 (+ ||R_i||^2 with intercepts) + ||e_i||^2``: with
        the rows' squared norms from the model it costs O(n K), not a pass over X.
        """
        R2 = np.einsum("nk,nk->n", self.R, self.R)
        x2 = self._row_sq_norms() if callable(self._row_sq_norms) else self._row_sq_norms
        if x2 is None:
            x2 = row_sq_norms(self.X)
        total = float(x2 @ R2)
        if self.fit_intercept:
            total += float(R2.sum())
        if self.extra is not None:
            total += float(np.einsum("nk,nk->", self.extra, self.extra))
        return total

    def scale_rows(self, c):
        """``c_i g_i``: the residuals (and extra coordinates) scaled row by row, in place."""
        c = np.asarray(c)[:, None]
        self.R *= c
        if self.extra is not None:
            self.extra *= c
        self._mean = None
        return self

    def gram_dims(self):
        # A sparse minibatch densified would cost what its rows save, but for small P.
        if hasattr(self.X, "toarray") and self.n_params > 200:
            return None
        return self.n_batch, self.n_params, False

    def to_dense(self):
        """The ``n x P`` matrix ``[X * R_k ..., R, extra]`` built directly (tests, CCAdL's full
        covariance and small models only: memory O(n P))."""
        X = self.X.toarray() if hasattr(self.X, "toarray") else np.asarray(self.X, dtype=float)
        n = X.shape[0]
        parts = [(X[:, :, None] * self.R[:, None, :]).reshape(n, -1)]
        if self.fit_intercept:
            parts.append(self.R)
        if self.extra is not None:
            parts.append(self.extra)
        return np.hstack(parts) if len(parts) > 1 else parts[0]

    def __getstate__(self):
        state = self.__dict__.copy()
        # A closure over the model (and all of X): not what a chain state should carry; its
        # values travel instead where they are a look-up (see row_cache_closure).
        state["_row_sq_norms"] = _pickled_closure(state["_row_sq_norms"])
        return state

    def sum_of_squares(self):
        X2 = self.X.multiply(self.X) if hasattr(self.X, "multiply") else self.X * self.X
        R2 = self.R * self.R
        w = X2.T @ R2
        b = R2.sum(axis=0) if self.fit_intercept else None
        e = (self.extra * self.extra).sum(axis=0) if self.extra is not None else None
        return self._join(w, b, e)


class DensePerExampleGradients(PerExampleGradients):
    """Per-example gradients held as an explicit ``n x P`` matrix.

    For models with few parameters (the Normal-Gamma example, tests), where the matrix
    is as cheap as any structured form.

    Parameters
    ----------
    G : ndarray of shape (n, P)
    """

    def __init__(self, G):
        self.G = G
        self.n_batch, self.n_params = G.shape

    def mean(self):
        return self.G.mean(axis=0)

    def matvec(self, v):
        return self.G @ v

    def rmatvec(self, u):
        return self.G.T @ u

    def sum_of_squares(self):
        return np.einsum("np,np->p", self.G, self.G)

    def scale_rows(self, c):
        return DensePerExampleGradients(self.G * np.asarray(c)[:, None])

    def gram_dims(self):
        return self.n_batch, self.n_params, False

    def to_dense(self):
        return self.G


class DifferencePerExampleGradients(PerExampleGradients):
    """``G_a - G_b``: the per-example gradient differences of one minibatch at two points.

    The control-variate estimator's noise is that of ``g_i(theta) - g_i(theta_hat)``; this
    operator gives its products from the two operators' without forming either matrix.

    Parameters
    ----------
    a, b : PerExampleGradients
        Operators over the same rows, at ``theta`` and ``theta_hat``.
    """

    def __init__(self, a, b):
        self.a, self.b = a, b
        self.n_batch, self.n_params = a.n_batch, a.n_params

    def mean(self):
        return self.a.mean() - self.b.mean()

    def matvec(self, v):
        return self.a.matvec(v) - self.b.matvec(v)

    def rmatvec(self, u):
        return self.a.rmatvec(u) - self.b.rmatvec(u)

    def sum_of_squares(self):
        # sum_i (a_i - b_i)^2 needs the cross terms: one pass over the explicit rows.
        D = self.a.to_dense() - self.b.to_dense()
        return np.einsum("np,np->p", D, D)

    def scale_rows(self, c):
        return DifferencePerExampleGradients(self.a.scale_rows(c), self.b.scale_rows(c))

    def to_dense(self):
        return self.a.to_dense() - self.b.to_dense()


class TransformedPerExampleGradients(PerExampleGradients):
    """Per-example gradients in the coordinates ``z`` of ``theta = m + L z``.

    By the chain rule ``d/dz log p_i = L' g_i``: the matrix is ``G L``. Products cost one
    product with ``L`` (O(P^2) dense, O(P) diagonal) besides the inner operator's.

    Parameters
    ----------
    inner : PerExampleGradients
        The gradients in ``theta``.
    L : ndarray of shape (P, P) (lower triangular) or (P,) (a diagonal)
    row_weights : ndarray of shape (n,) or callable, optional
        ``q_i = ||L' x_i||^2``-type weights (or a function returning them, see
        :func:`row_cache_closure`) such that the total sum of squares is ``sum_i q_i r_i^2``
        for a one-output GLM (see :meth:`total_sum_of_squares`); without them that total
        costs an explicit ``n x P`` product.
    """

    def __init__(self, inner, L, row_weights=None):
        self.inner, self.L = inner, L
        self.n_batch, self.n_params = inner.n_batch, inner.n_params
        self._row_weights = row_weights
        self._mean = None

    def _left(self, v):
        """``L v``."""
        return self.L * v if self.L.ndim == 1 else self.L @ v

    def _right(self, w):
        """``L' w``."""
        return self.L * w if self.L.ndim == 1 else w @ self.L

    def mean(self):
        if self._mean is None:
            self._mean = self._right(self.inner.mean())
            self._mean.flags.writeable = False
        return self._mean

    def matvec(self, v):
        return self.inner.matvec(self._left(v))

    def rmatvec(self, u):
        return self._right(self.inner.rmatvec(u))

    def sum_of_squares(self):
        if self.L.ndim == 1:
            return self.inner.sum_of_squares() * (self.L * self.L)
        GL = self.to_dense()
        return np.einsum("np,np->p", GL, GL)

    def total_sum_of_squares(self):
        """``sum_i ||L' g_i||^2``: the trace of ``G L L' G'`` that mCCAdL's C step shifts by.

        Diagonal ``L``: from the inner per-coordinate sums of squares, O(n P). Dense ``L``
        and a one-output GLM with cached row weights ``q_i = x~_i' L L' x~_i``:
        ``sum_i q_i r_i^2``, O(n). Otherwise the explicit ``G L``, O(n P^2).
        """
        if np.ndim(self.L) == 1:
            return float(self.inner.sum_of_squares() @ (self.L * self.L))
        inner = self.inner
        q = self._row_weights
        if q is not None and getattr(inner, "_r", None) is not None and inner.extra is None:
            if isinstance(q, str):  # "rows": the closure's formula, on this minibatch's rows
                q = self._minibatch_row_weights(inner)
            elif callable(q):
                q = q()
            r = inner._r
            return float(q @ (r * r))
        return float(self.sum_of_squares().sum())

    def _minibatch_row_weights(self, inner):
        """The row weights ``||L' x~_i||^2`` of the rows of ``inner`` (a one-output GLM's)."""
        return whitened_row_weights(self.L, inner.X, inner.fit_intercept)

    def scale_rows(self, c):
        return type(self)(self.inner.scale_rows(c), self.L, self._row_weights)

    def __getstate__(self):
        state = self.__dict__.copy()
        # A closure over the model: not for a chain state. Its values (n floats) travel
        # instead where they are a look-up (see row_cache_closure): without them the trace
        # falls back on another summation order (the explicit G L), and a chain continued
        # in a worker process drew other last bits than in this one (mCCAdL's C step
        # shifts by this trace).
        f = state["_row_weights"]
        state["_row_weights"] = _pickled_closure(f)
        if callable(f) and state["_row_weights"] is None:
            # Rows not cached (on disk, on a cluster): the closure computed the weights from
            # these very rows, and so will the unpickled operator.
            state["_row_weights"] = "rows"
        return state

    def gram_dims(self):
        dims = self.inner.gram_dims()
        if dims is None:
            return None
        return dims[0], dims[1], self.L.ndim == 2

    def centred_gram(self):
        """``L' V_inner L`` of the inner operator's centred Gram matrix (``L`` dense or diagonal)."""
        inner = self.inner.centred_gram()
        L = self.L
        return inner * np.outer(L, L) if L.ndim == 1 else L.T @ (inner @ L)

    def to_dense(self):
        G = self.inner.to_dense()
        return G * self.L if self.L.ndim == 1 else G @ self.L
