"""Control-variate minibatch forces of a one-output GLM whitened densely, for a stack of chains.

The chains of a group advance together (:mod:`skbayes_sg.samplers._batched`), but each draws
its own minibatch, so each chain's estimator used to compute its force alone: a gather, a
product with the rows, the link, a product back and two products with ``L``, a dozen numpy
calls a chain, and as many again for every product of mCCAdL's C step with the minibatch's
noise covariance. On a9a these calls, not their arithmetic, were most of an iteration.

Here the ``C`` minibatches are one block-diagonal set of rows (:class:`StackedRows`): sparse
rows in padded form (a one-hot X's, or a CSR X's: ``RowSource.padded``) as one CSR matrix whose
chain ``c`` occupies columns ``c (D + 1) ...``, dense rows as a ``(C, n, D)`` stack. One
compiled kernel call, or one stacked ``matmul``, computes every chain's rows against its own
vector. The force is that of
:class:`~skbayes_sg.minibatch.ControlVariateGradient` on the whitened model, term for term::

    theta = m + L z,  d_i = c_i w_i [r_i(theta) - r_i(theta_hat)],
    F(z) = L' [X~' d / n] (N / n) n + g_hat + L' grad log prior(theta)

with ``x~_i`` the row and a 1 for the intercept, ``c_i`` the rows' importance weights and
``w_i`` their sample weights. :class:`StackedGLMGradients` keeps the per-example operators of
all the chains' minibatches for mCCAdL's C step, which then also takes one product for all.

Every operation acts on each chain's own rows and vectors alone: the sparse kernels sum a
row's terms in column order and scatter a chain's rows into its own block, a stacked
``matmul`` runs one BLAS product per chain, and the elementwise maps and reductions along a
row do not see the other rows. A chain's force therefore does not depend on which chains
share its group, so the same ``random_state`` gives the same draws whatever ``n_jobs`` is.
The kernels are those of the chain-by-chain estimator, called in the same order on the same
numbers: its forces and products are these, bit for bit (``tests/test_fused_minibatch.py``).
"""

import numpy as np
import scipy.sparse as sp

from ..rows._array import ArrayRows
from ..rows._padded import EllRows, _csc_matvec, _csr_matvec, padded_pointers
from ._gradients import LinearPerExampleGradients, PerExampleGradients, TransformedPerExampleGradients


def _stacked(V, M):
    """``v @ M`` for each row ``v`` of ``V`` (C, P): one BLAS product per row."""
    return np.matmul(V[:, None, :], M)[:, 0]


class StackedRows:
    """The features of ``C`` minibatches of ``n`` rows, one per chain, for products with all of them.

    Parameters
    ----------
    cols, vals : ndarray of shape (C, n, k), vals None for all ones
        Sparse rows in padded form (:class:`~skbayes_sg.rows.EllRows`), the phantom column ``D``
        for padding.
    X : ndarray of shape (C, n, D)
        Dense rows (instead of ``cols``).
    n_features : int
        ``D``.
    """

    def __init__(self, n_features, cols=None, vals=None, X=None):
        self.n_features, self.cols, self.vals, self.X = n_features, cols, vals, X
        if cols is None:
            self.n_chains, self.n_batch = X.shape[:2]
            return
        C, n, k = cols.shape
        self.n_chains, self.n_batch = C, n
        indptr, ones = padded_pointers(C * n, k, cols.dtype)
        # Chain c's columns in its own block of D + 1 (the phantom column last in each).
        offsets = np.arange(0, C * (n_features + 1), n_features + 1, dtype=cols.dtype)
        self._csr = (indptr, (cols + offsets[:, None, None]).reshape(-1), ones if vals is None else vals.reshape(-1))

    def chain_rows(self, c):
        """Chain ``c``'s rows as a single minibatch's, copied out of the stack (an
        :class:`EllRows` or an array)."""
        if self.cols is None:
            return self.X[c].copy()
        return EllRows(self.cols[c].copy(), None if self.vals is None else self.vals[c].copy(), self.n_features)

    def dot(self, W):
        """``X_c w_c`` for every chain: ``W`` (C, D) to (C, n)."""
        if self.cols is None:
            return np.matmul(self.X, W[:, :, None])[:, :, 0]
        C, D = W.shape
        x = np.zeros((C, D + 1))  # the phantom column's coefficient stays 0
        x[:, :D] = W
        out = np.zeros(C * self.n_batch)
        _csr_matvec(C * self.n_batch, C * (D + 1), *self._csr, x.reshape(-1), out)
        return out.reshape(C, self.n_batch)

    def tdot(self, U):
        """``X_c' u_c`` for every chain: ``U`` (C, n) to (C, D + 1); the last column is scratch
        (the phantom column's sum) for a caller to overwrite."""
        C = U.shape[0]
        D = self.n_features
        if self.cols is None:
            out = np.empty((C, D + 1))
            out[:, :D] = np.matmul(U[:, None, :], self.X)[:, 0]
            return out
        out = np.zeros(C * (D + 1))
        _csc_matvec(C * (D + 1), C * self.n_batch, *self._csr, np.ascontiguousarray(U).reshape(-1), out)
        return out.reshape(C, D + 1)


class StackedGLMGradients:
    """The per-example gradient (differences) of ``C`` chains' minibatches in whitened coordinates.

    Chain ``c``'s operator is :class:`~skbayes_sg.models.TransformedPerExampleGradients` of a
    one-output :class:`~skbayes_sg.models.LinearPerExampleGradients`: the rows ``x~_i`` times
    their residuals ``d_i``, then ``L``. Products take a stack ``(C, P)`` or ``(C, n)``, one
    row per chain.

    Parameters
    ----------
    rows : StackedRows
    d : ndarray of shape (C, n)
        The residuals (differences, weighted).
    q : ndarray of shape (C, n)
        ``||L' x~_i||^2`` of the rows.
    L : ndarray of shape (P, P)
    fit_intercept : bool
    mean_theta, mean : ndarray of shape (C, P)
        The mean gradient of each minibatch in ``theta`` and in the whitened coordinates.
    """

    def __init__(self, rows, d, q, L, fit_intercept, mean_theta, mean):
        self.rows, self.d, self.q, self.L, self.fit_intercept = rows, d, q, L, fit_intercept
        self._mean_theta, self._mean = mean_theta, mean
        self.n_chains, self.n_batch = d.shape
        self.n_params = L.shape[0]

    @classmethod
    def of(cls, operators):
        """The stack of the chains' operators (their states' ``grads``), or None when one is not
        of this kind (another model, a diagonal ``L``, extra coordinates, rows of another form)."""
        first = operators[0]
        if isinstance(first, ChainRowsGradients):
            stack = first.stack
            if stack.n_chains == len(operators) and all(
                isinstance(op, ChainRowsGradients) and op.stack is stack and op.c == c for c, op in enumerate(operators)
            ):
                return stack
        parts = [_parts(op) for op in operators]
        if any(p is None for p in parts):
            return None
        X0, L, icpt = parts[0][0], parts[0][3], parts[0][4]
        sparse = isinstance(X0, EllRows)
        # Chains pickled one by one (to a worker, or a saved fit) hold equal copies of L.
        same = all(
            (p[3] is L or np.array_equal(p[3], L))
            and p[4] == icpt
            and isinstance(p[0], EllRows) == sparse
            and p[0].shape == X0.shape
            and (not sparse or (p[0].cols.shape == X0.cols.shape and (p[0].vals is None) == (X0.vals is None)))
            for p in parts
        )
        if not same:
            return None
        D = X0.shape[1]
        if sparse:
            cols = np.stack([p[0].cols for p in parts])
            vals = None if X0.vals is None else np.stack([p[0].vals for p in parts])
            rows = StackedRows(D, cols=cols, vals=vals)
        else:
            rows = StackedRows(D, X=np.stack([np.asarray(p[0], dtype=float) for p in parts]))
        return cls(
            rows,
            np.stack([p[1] for p in parts]),
            np.stack([p[2] for p in parts]),
            L,
            icpt,
            np.stack([p[5].inner.mean() for p in parts]),
            np.stack([p[5].mean() for p in parts]),
        )

    def mean(self):
        """Each minibatch's mean gradient (whitened), shape (C, P)."""
        return self._mean

    def total_sum_of_squares(self):
        """``sum_i ||L' g_i||^2 = sum_i q_i d_i^2`` of each minibatch, shape (C,)."""
        d2 = self.d * self.d
        return np.matmul(self.q[:, None, :], d2[:, :, None]).reshape(self.n_chains)

    def matvec(self, V):
        """``G_c L v_c`` for every chain: ``V`` (C, P) to (C, n)."""
        W = _stacked(V, self.L.T)
        D = self.rows.n_features
        u = self.rows.dot(W[:, :D])
        if self.fit_intercept:
            u += W[:, D][:, None]
        u *= self.d
        return u

    def rmatvec(self, U):
        """``L' G_c' u_c`` for every chain: ``U`` (C, n) to (C, P)."""
        du = self.d * U
        out = self.rows.tdot(du)
        D = self.rows.n_features
        if self.fit_intercept:
            out[:, D] = np.add.reduce(du, axis=1)
        return _stacked(out[:, : self.n_params], self.L)

    def chain(self, c):
        """Chain ``c``'s operator, what its state keeps (:class:`ChainRowsGradients`)."""
        return ChainRowsGradients(self, c)

    def own(self, c):
        """Chain ``c``'s operator standing alone (its arrays copied out of the stack)."""
        inner = LinearPerExampleGradients(self.rows.chain_rows(c), self.d[c][:, None].copy(), self.fit_intercept)
        inner._mean = _read_only(self._mean_theta[c])
        op = TransformedPerExampleGradients(inner, self.L, self.q[c].copy())
        op._mean = _read_only(self._mean[c])
        return op


def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def _parts(op):
    """``(X, d, q, L, fit_intercept, operator)`` of a chain's operator that a stack can hold
    (the operator standing alone), or None."""
    if isinstance(op, ChainRowsGradients):
        op = op.own_operator()
    if type(op) is not TransformedPerExampleGradients or op.L.ndim != 2:
        return None
    inner = op.inner
    if type(inner) is not LinearPerExampleGradients or inner._r is None or inner.extra is not None:
        return None
    X = inner.X
    if not (isinstance(X, EllRows) or (isinstance(X, np.ndarray) and X.ndim == 2)):
        return None
    q = op._row_weights
    if callable(q) and not isinstance(q, str):
        q = q()
    if not isinstance(q, np.ndarray):
        return None
    return X, inner._r, q, op.L, inner.fit_intercept, op


def _standalone(op):
    """What a pickled :class:`ChainRowsGradients` becomes: its standalone operator."""
    return op


class ChainRowsGradients(PerExampleGradients):
    """Chain ``c``'s per-example gradients within a :class:`StackedGLMGradients`.

    What a chain's state keeps (``state.grads``) after a stacked force: the C step of the next
    iteration finds the whole stack through it. Alone (a chain whose C step takes the
    chain-by-chain path, or pickled to another process), it is the standalone operator of
    :meth:`StackedGLMGradients.own`, which a pickle carries instead.
    """

    def __init__(self, stack, c):
        self.stack, self.c = stack, c
        self.n_batch, self.n_params = stack.n_batch, stack.n_params
        self._own = None

    def own_operator(self):
        """The standalone operator (built once)."""
        if self._own is None:
            self._own = self.stack.own(self.c)
        return self._own

    def __reduce__(self):
        # Unpickled (and deep-copied) as the standalone operator: one chain's rows, not the stack's.
        return _standalone, (self.own_operator(),)


def _delegated(name):
    """A :class:`ChainRowsGradients` method that is its standalone operator's ``name``."""

    def method(self, *args):
        return getattr(self.own_operator(), name)(*args)

    method.__name__ = name
    method.__doc__ = f"The standalone operator's ``{name}`` (:meth:`ChainRowsGradients.own_operator`)."
    return method


# Every product of a chain's operator outside the stack (a C step taken alone, CCAdL's, a test's).
for _name in (
    "mean",
    "matvec",
    "rmatvec",
    "sum_of_squares",
    "total_sum_of_squares",
    "scale_rows",
    "gram_dims",
    "centred_gram",
    "to_dense",
):
    setattr(ChainRowsGradients, _name, _delegated(_name))
del _name


class FusedMinibatchForce:
    """The control-variate forces of a stack of chains, each from its own minibatch (see the module).

    Built by :func:`fused_minibatch`; called with the chains' positions ``Z`` (C, P) and their
    minibatches' rows ``idx`` (C, n).
    """

    def __init__(self, model, base, features, y, r_hat, q, row_scale, g_hat, batch_size):
        self.base = base
        self.L, self.LT, self.m = model.L, model.L.T, model.m
        self.features, self.y, self.r_hat, self.q, self.row_scale = features, y, r_hat, q, row_scale
        rows = base.rows
        self.sample_weight, self.offset = rows.sample_weight, rows.offset
        self.family, self.fit_intercept, self.D = base.family, base.fit_intercept, base.n_features
        self.n, self.scale = batch_size, base.n_samples / batch_size
        self.g_hat = g_hat
        self._no_extra = base._extra(np.zeros(base.n_params))

    def __call__(self, Z, idx, out, per_example=False):
        """The forces at the rows of ``Z`` (C, P) from the rows ``idx`` (C, n), into ``out``;
        with ``per_example``, each chain's per-example operator (a list), else None."""
        n, D = self.n, self.D
        theta = _stacked(Z, self.LT)
        theta += self.m
        if isinstance(self.features, tuple):
            cols, vals = self.features
            rows = StackedRows(D, cols=cols.take(idx, axis=0), vals=None if vals is None else vals.take(idx, axis=0))
        else:
            rows = StackedRows(D, X=self.features(idx.reshape(-1)).reshape(idx.shape[0], n, D))
        eta = rows.dot(theta[:, :D])
        if self.fit_intercept:
            eta += theta[:, D][:, None]
        if self.offset is not None:
            eta += self.offset.take(idx)
        # The rows of all the chains as one minibatch: the link is elementwise, and there are
        # no extra coordinates (the family's view of them is the same empty vector for all).
        C = idx.shape[0]
        d = self.family.gradient_terms(eta.reshape(-1, 1), self.y.take(idx).reshape(-1), self._no_extra)[0]
        d = d.reshape(C, n)
        d -= self.r_hat.take(idx)
        if self.sample_weight is not None:
            d *= self.sample_weight.take(idx)
        if self.row_scale is not None:
            d *= self.row_scale.take(idx)
        d = np.ascontiguousarray(d)
        mean_theta = rows.tdot(d)
        if self.fit_intercept:
            mean_theta[:, D] = np.add.reduce(d, axis=1)
        mean_theta = mean_theta[:, : Z.shape[1]]
        mean_theta /= n
        mean = _stacked(mean_theta, self.L)
        np.multiply(mean, self.scale * n, out=out)
        out += self.g_hat
        out += _stacked(self.base.grad_log_prior(theta), self.L)
        if not per_example:
            return None
        stack = StackedGLMGradients(rows, d, self.q.take(idx), self.L, self.fit_intercept, mean_theta, mean)
        return [stack.chain(c) for c in range(idx.shape[0])]


def fused_minibatch(model, theta_hat, g_hat, batch_size, row_scale=None):
    """The :class:`FusedMinibatchForce` of a group of chains on ``model``, or None where it does not apply.

    It applies to a GLM with one output and no extra coordinates whitened by a dense ``L``
    (:class:`~skbayes_sg.models.WhitenedModel`), its rows held in this process (sparse one-hot
    rows in padded form, or dense ones): the estimators' default. ``theta_hat`` (P,) is the
    control variate's centre in the whitened coordinates, ``g_hat`` (C, P) each chain's
    full-data gradient there, ``row_scale`` (N,) the rows' importance weights, if any.
    """
    base, L = getattr(model, "model", None), getattr(model, "L", None)
    if base is None or np.ndim(L) != 2 or not hasattr(model, "to_theta"):
        return None
    rows = getattr(base, "rows", None)
    if (
        getattr(base, "family", None) is None
        or not isinstance(rows, ArrayRows)
        or base.n_outputs != 1
        or base._n_extra
        or not base._cache_row_norms
        or _csr_matvec is None
    ):
        return None
    # Sparse one-hot rows (a one-byte dense X's, or a sparse X's: a LIBSVM file's, say) in
    # padded form; otherwise dense rows.
    features = rows.padded()
    if features is None and sp.issparse(rows.X):
        return None
    if features is None:
        if not isinstance(rows.X, np.ndarray) or rows.X.ndim != 2:
            return None
        gather = rows._gather_features
        features = lambda idx: np.asarray(gather(idx), dtype=float)  # noqa: E731
    R_hat, _ = base.centre_rows(model._theta(theta_hat, "centre"))
    y = rows._targets(rows.y)
    q = base.whitened_row_weights(L, None)
    return FusedMinibatchForce(model, base, features, y, R_hat[:, 0], q, row_scale, g_hat, batch_size)
