"""The model interface every sampler works through.

A model is a prior and a likelihood over a flat parameter vector ``theta`` (P,). It knows
nothing of samplers: it gives minibatch per-example gradients (as an operator), the
full-data log posterior and its gradient, curvature products, and the predictive for a
stack of draws.
"""

import copy

import numpy as np
import scipy.sparse as sp

from ..rows import aligned_state


def largest_abs(X):
    """``max |X|`` of a dense, memory-mapped (one pass in row blocks) or sparse matrix."""
    if sp.issparse(X):
        return float(np.abs(X.data).max()) if X.nnz else 0.0
    out = 0.0
    for start in range(0, X.shape[0], 65536):
        block = np.asarray(X[start : start + 65536])
        if block.size:
            out = max(out, float(np.abs(block).max()))
    return out


def check_row_weights(sample_weight, n_samples):
    """Validated per-row likelihood weights as float64 (n_samples,), or None for all ones.

    Raises ``ValueError`` for a wrong shape, non-finite or negative weights, or weights that
    are all zero (the posterior would be the prior, which needs no data).
    """
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (n_samples,):
        raise ValueError(f"sample_weight has shape {w.shape}; expected ({n_samples},), one weight per row.")
    if not np.all(np.isfinite(w)):
        raise ValueError("sample_weight contains NaN or infinity; give finite weights.")
    if np.any(w < 0):
        raise ValueError(
            f"sample_weight has negative values (smallest {w.min():.3g}); likelihood weights must "
            "be non-negative (use 0 to ignore a row)."
        )
    if not np.any(w > 0):
        raise ValueError(
            "sample_weight is zero for every row, which leaves no data to fit; give at least one row a positive weight."
        )
    if np.all(w == 1.0):
        return None
    return w


def as_paths(thetas, idx):
    """``thetas`` as a float stack (M, P) and ``idx`` as int rows (M, n), one per path."""
    thetas = np.atleast_2d(np.asarray(thetas, dtype=float))
    idx = np.atleast_2d(np.asarray(idx, dtype=np.intp))
    if idx.shape[0] != thetas.shape[0]:
        raise ValueError(f"thetas has {thetas.shape[0]} paths but idx has {idx.shape[0]} rows.")
    return thetas, idx


class Model:
    """Base class of the models: prior and likelihood for a flat parameter vector.

    Subclasses set ``n_samples`` (N), ``n_params`` (P) and implement
    :meth:`per_example_gradients`, :meth:`log_likelihood_and_grad`, :meth:`log_prior_and_grad`
    and :meth:`predict_draws`.

    Attributes
    ----------
    n_samples : int
        Number of data items ``N``.
    n_params : int
        Length ``P`` of the parameter vector.
    """

    n_samples: int
    n_params: int
    #: Per-row likelihood weights ``w`` (N,), or None for all ones: the log likelihood is
    #: ``sum_i w_i log p(y_i | x_i, theta)`` in every full-data, minibatch, per-example and
    #: curvature evaluation (see :meth:`set_sample_weight`).
    sample_weight = None
    #: Whether the likelihood evaluations of this model apply ``sample_weight``.
    _supports_sample_weight = False

    def __setstate__(self, state):
        # A model unpickled in a worker (dask packs buffers at any byte) computes with aligned
        # arrays, as in the caller: the same products, so the same draws wherever chains run.
        aligned_state(self, state)

    def set_sample_weight(self, sample_weight):
        """Weight each row's log likelihood: ``sum_i w_i log p(y_i | x_i, theta)``.

        Every evaluation of the likelihood then carries the weights: the full-data log
        likelihood and gradient, the per-example gradients (row ``i`` is
        ``w_i grad log p(y_i | x_i, theta)``, so a minibatch estimate built from them stays
        unbiased for the weighted gradient), Hessians and their products, and leverages.

        Parameters
        ----------
        sample_weight : array-like of shape (N,) or None
            Finite, non-negative weights; zero drops a row. None, or all ones, leaves the
            model unweighted (the same floating-point operations as before, hence the same
            draws).

        Returns
        -------
        self : Model

        Raises
        ------
        NotImplementedError
            For a model whose likelihood does not apply weights (weights other than all
            ones would be silently ignored).
        """
        w = check_row_weights(sample_weight, self.n_samples)
        if w is not None and not self._supports_sample_weight:
            raise NotImplementedError(f"{type(self).__name__} does not support sample weights.")
        self.sample_weight = w
        return self

    def _weights_of(self, idx):
        """The weights of the rows ``idx`` (all rows if None), or None when unweighted."""
        w = self.sample_weight
        if w is None or idx is None:
            return w
        if isinstance(idx, np.ndarray):
            return np.take(w, idx)
        return w[idx]

    # -- likelihood and prior ------------------------------------------------------
    def per_example_gradients(self, theta, idx):
        """Per-example gradients of the log likelihood for the rows ``idx``.

        Parameters
        ----------
        theta : ndarray of shape (P,)
        idx : ndarray of int or slice
            Minibatch rows.

        Returns
        -------
        PerExampleGradients
        """
        raise NotImplementedError

    def per_example_gradient_differences(self, theta, theta_hat, idx):
        """``g_i(theta) - g_i(theta_hat)`` for the rows ``idx``, as an operator.

        What a control-variate gradient estimator (Baker et al. 2019) needs from a
        minibatch. The default subtracts two operators product by product
        (:class:`~._gradients.DifferencePerExampleGradients`); models whose two evaluations
        share work (the GLMs share the rows' features) override it.
        """
        from ._gradients import DifferencePerExampleGradients

        return DifferencePerExampleGradients(
            self.per_example_gradients(theta, idx), self.per_example_gradients(theta_hat, idx)
        )

    def log_likelihood_and_grad(self, theta, idx=None):
        """Sum of the log likelihood over rows ``idx`` (all rows if None) and its gradient."""
        raise NotImplementedError

    def log_prior_and_grad(self, theta):
        """Log prior density (up to a constant) and its gradient."""
        raise NotImplementedError

    def grad_log_prior(self, theta):
        """Gradient of the log prior, shape (P,) (the per-iteration part of the force)."""
        return self.log_prior_and_grad(theta)[1]

    def log_posterior_and_grad(self, theta):
        """Full-data log posterior (up to a constant) and its gradient, shape (P,)."""
        ll, gl = self.log_likelihood_and_grad(theta)
        lp, gp = self.log_prior_and_grad(theta)
        return ll + lp, gl + gp

    def log_posterior(self, theta):
        """Full-data log posterior (up to a constant)."""
        return self.log_posterior_and_grad(theta)[0]

    def grad_log_posterior(self, theta):
        """Gradient of the full-data log posterior, shape (P,)."""
        return self.log_posterior_and_grad(theta)[1]

    def grad_log_posterior_draws(self, thetas):
        """Full-data gradients of the log posterior at a stack of points ``thetas`` (M, P),
        shape (M, P): the scores of a set of draws (the kernel Stein discrepancy's). This
        default makes one full-data pass per point; a model that can form the products of
        all points with each block of rows at once (the GLMs) reads the rows once."""
        return np.stack([self.grad_log_posterior(t) for t in np.atleast_2d(thetas)])

    def loglik_hvp(self, theta, v, idx=None):
        """``sum_{i in idx} (Hess log p(x_i | theta)) v`` over rows ``idx`` (all if None).

        The log likelihood's (not negated) Hessian applied to ``v``, for the Taylor-based
        gradient of multilevel SGLD (Nagapetyan et al. 2017, section 3.4). The default is a
        central finite difference of the minibatch gradient (the sum of the rows'
        :meth:`per_example_gradients`; :meth:`log_likelihood_and_grad` for all rows);
        models with a cheap exact product override it.
        """
        v = np.asarray(v, dtype=float)
        norm = np.linalg.norm(v)
        if norm == 0:
            return np.zeros_like(v)
        eps = 1e-5 * max(1.0, np.linalg.norm(theta)) / norm
        if idx is None:
            gp = self.log_likelihood_and_grad(theta + eps * v)[1]
            gm = self.log_likelihood_and_grad(theta - eps * v)[1]
            return (gp - gm) / (2 * eps)
        gp = self.per_example_gradients(theta + eps * v, idx)
        gm = self.per_example_gradients(theta - eps * v, idx)
        return (gp.mean() - gm.mean()) * gp.n_batch / (2 * eps)

    # -- many parameter vectors ("paths") at once ------------------------------------
    # Multilevel SGLD steps thousands of short paths together: ``thetas`` is a stack (M, P)
    # and ``idx`` an (M, n) array of each path's minibatch rows. The defaults loop over the
    # paths with the single-theta methods above, so a model that implements only those gets
    # them all; the GLMs override them with vectorised forms.
    def grad_log_prior_paths(self, thetas):
        """:meth:`grad_log_prior` of each row of ``thetas`` (M, P), shape (M, P)."""
        thetas = np.atleast_2d(np.asarray(thetas, dtype=float))
        return np.stack([self.grad_log_prior(t) for t in thetas])

    def loglik_grad_paths(self, thetas, idx):
        """Minibatch sums of per-example log-likelihood gradients, one minibatch per path.

        Parameters
        ----------
        thetas : ndarray of shape (M, P)
        idx : ndarray of int of shape (M, n)
            Rows of path ``m``'s minibatch.

        Returns
        -------
        ndarray of shape (M, P)
            ``sum_{i in idx[m]} grad log p(x_i | thetas[m])`` (row weights applied).
        """
        thetas, idx = as_paths(thetas, idx)
        return np.stack([self.per_example_gradients(t, i).mean() * i.size for t, i in zip(thetas, idx)])

    def loglik_hvp_paths(self, thetas, V, idx):
        """Minibatch sums of per-example log-likelihood Hessian-vector products, per path.

        Parameters
        ----------
        thetas : ndarray of shape (M, P) or (P,)
            Points (one shared point is broadcast over the paths).
        V : ndarray of shape (M, P)
            One direction per path.
        idx : ndarray of int of shape (M, n)

        Returns
        -------
        ndarray of shape (M, P)
            ``sum_{i in idx[m]} Hess log p(x_i | thetas[m]) V[m]``: :meth:`loglik_hvp` per path.
        """
        V = np.atleast_2d(np.asarray(V, dtype=float))
        thetas = np.broadcast_to(np.asarray(thetas, dtype=float), V.shape)
        thetas, idx = as_paths(thetas, idx)
        return np.stack([self.loglik_hvp(t, v, i) for t, v, i in zip(thetas, V, idx)])

    def taylor_cache(self, theta0):
        """Per-row quantities at the expansion point ``theta0`` that
        :meth:`taylor_remainder_paths` reuses across calls, or None (the default)."""
        return None  # noqa: RET501 - the documented default

    def taylor_remainder_paths(self, thetas, theta0, idx, cache=None):
        """Subsampled Taylor remainder of Nagapetyan et al. (2017), eq. 11, per path.

        ``sum_{i in idx[m]} [g_i(theta_m) - g_i(theta_0) - H_i(theta_0) (theta_m - theta_0)]``
        with ``g_i``, ``H_i`` the gradient and Hessian of ``log p(x_i | .)``: small when
        ``theta_m`` is near ``theta_0`` (zero for a Gaussian likelihood with fixed noise),
        which is what makes the Taylor-based stochastic gradient's variance small.

        Parameters
        ----------
        thetas : ndarray of shape (M, P)
        theta0 : ndarray of shape (P,)
            The expansion point (the MAP in the paper).
        idx : ndarray of int of shape (M, n)
        cache : object, optional
            :meth:`taylor_cache` of ``theta0``, to reuse across calls.

        Returns
        -------
        ndarray of shape (M, P)
        """
        thetas, idx = as_paths(thetas, idx)
        theta0 = np.asarray(theta0, dtype=float)
        t0 = np.broadcast_to(theta0, thetas.shape)
        return (
            self.loglik_grad_paths(thetas, idx)
            - self.loglik_grad_paths(t0, idx)
            - self.loglik_hvp_paths(theta0, thetas - theta0, idx)
        )

    # -- dense curvature (formed once, at an expansion point) ----------------------------
    def loglik_hessian(self, theta, chunk=None):
        """Full-data Hessian of the log likelihood at ``theta``, (P, P).

        Column block by column block from :meth:`loglik_hvp_paths` with all rows as each
        column's minibatch, symmetrised. Memory O(P^2 + chunk N D); for the once-per-fit
        expansion point of the Taylor-based gradient, not for a hot path.
        """
        theta = np.asarray(theta, dtype=float)
        P, N = theta.size, self.n_samples
        chunk = chunk or max(1, min(P, 2**22 // max(1, N * max(1, getattr(self, "n_features", P)))))
        rows = np.arange(N)
        H = np.empty((P, P))
        eye = np.eye(P)
        for start in range(0, P, chunk):
            stop = min(P, start + chunk)
            V = eye[start:stop]
            H[:, start:stop] = self.loglik_hvp_paths(theta, V, np.broadcast_to(rows, (V.shape[0], N))).T
        return 0.5 * (H + H.T)

    def log_prior_hessian(self, theta):
        """Hessian of the log prior at ``theta``, (P, P): by default a central difference of
        :meth:`grad_log_prior`, symmetrised."""
        theta = np.asarray(theta, dtype=float)
        P = theta.size
        eps = 1e-5 * max(1.0, np.linalg.norm(theta))
        H = np.empty((P, P))
        for j in range(P):
            e = np.zeros(P)
            e[j] = eps
            H[:, j] = (self.grad_log_prior(theta + e) - self.grad_log_prior(theta - e)) / (2 * eps)
        return 0.5 * (H + H.T)

    def posterior_hessian(self, theta):
        """Hessian of the full-data log posterior at ``theta``, (P, P) (negative definite at a
        mode): :meth:`loglik_hessian` plus :meth:`log_prior_hessian`."""
        return self.loglik_hessian(theta) + self.log_prior_hessian(theta)

    def hessian_vector_product(self, theta, v, eps=None):
        """Product of the Hessian of the negative log posterior with ``v``.

        The default is a central finite difference of the gradient, accurate to
        O(eps^2); models with a cheap exact product override it.
        """
        norm = np.linalg.norm(v)
        if norm == 0:
            return np.zeros_like(v)
        if eps is None:
            eps = 1e-4 * max(1.0, np.linalg.norm(theta)) / norm
        gp = self.grad_log_posterior(theta + eps * v)
        gm = self.grad_log_posterior(theta - eps * v)
        return -(gp - gm) / (2 * eps)

    def hessian(self, theta):
        """Dense Hessian of the negative log posterior at ``theta``, shape (P, P).

        The default stacks ``P`` Hessian-vector products (P full-data passes) and
        symmetrises; models with a closed form override it. For preconditioning from the
        curvature at the MAP, where P is at most a few hundred.
        """
        P = self.n_params
        H = np.empty((P, P))
        e = np.zeros(P)
        for j in range(P):
            e[j] = 1.0
            H[:, j] = self.hessian_vector_product(theta, e)
            e[j] = 0.0
        return 0.5 * (H + H.T)

    def hessian_diagonal(self, theta):
        """Diagonal of the Hessian of the negative log posterior, shape (P,).

        The default takes it from :meth:`hessian`; models with many parameters override it.
        """
        return np.diag(self.hessian(theta)).copy()

    def param_names(self, feature_names=None, class_names=None):
        """A readable name for each of the P coordinates of ``theta`` (``theta[j]`` by default)."""
        return [f"theta[{j}]" for j in range(self.n_params)]

    # -- start and predictive -------------------------------------------------------
    def initial_point(self):
        """A default starting point, shape (P,): zeros unless a model needs otherwise."""
        return np.zeros(self.n_params)

    def predict_draws(self, thetas, X):
        """Predictive quantities for each draw in ``thetas`` (S, P) at rows ``X``."""
        raise NotImplementedError

    def predict_mean(self, thetas, weights, X):
        """``sum_s weights[s] * predict_draws(thetas)[s]``: the weighted average of the
        per-draw predictive over a block of draws, shape ``predict_draws(...).shape[1:]``.

        Models override it to avoid the (S, n, ...) stack where they can.
        """
        return np.tensordot(weights, self.predict_draws(thetas, X), axes=1)

    def log_likelihood_draws(self, thetas, X, y):
        """Per-observation log likelihood ``log p(y_i | x_i, theta_s)``, shape (S, n)."""
        raise NotImplementedError

    def __sizeof__(self):
        # Count the data a model holds: sys.getsizeof (and so dask's sizeof, which joblib's
        # dask backend uses to decide what to scatter once to the workers) would otherwise
        # see a few dozen bytes and send the data again with every task.
        size = object.__sizeof__(self)
        for name in getattr(self, "_data_attributes", ()):
            value = getattr(self, name, None)
            if value is None:
                continue
            if hasattr(value, "data") and hasattr(value, "indices"):  # scipy.sparse
                size += value.data.nbytes + value.indices.nbytes + value.indptr.nbytes
            elif isinstance(value, tuple):  # a GLM's padded sparse copy (cols, vals)
                size += sum(getattr(part, "nbytes", 0) for part in value)
            else:
                size += getattr(value, "nbytes", 0)
        return size

    def without_data(self):
        """A shallow copy holding no training data, for prediction after fit."""
        clone = copy.copy(self)
        for name in getattr(self, "_data_attributes", ()):
            setattr(clone, name, None)
        return clone

    def prefetch_rows(self, idx, owner=None):
        """The rows ``idx`` (minibatches drawn ahead by ``owner``, a gradient estimator) will be
        read soon: a model whose rows live elsewhere fetches them now, in one bulk request
        (see :meth:`RowSource.prefetch <skbayes_sg.rows.RowSource.prefetch>`). Nothing to do
        for data in memory."""


class RowData:
    """The data of a model that reads its rows through a row source ``self.rows``
    (:class:`skbayes_sg.rows.RowSource`): ``X``, ``y``, ``offset`` and ``sample_weight`` are
    the source's, and ``without_data`` drops the source."""

    _data_attributes = ("rows",)
    rows = None

    def prefetch_rows(self, idx, owner=None):
        if self.rows is not None:
            self.rows.prefetch(idx, owner)

    @property
    def X(self):
        """The features the row source holds (None without data)."""
        return getattr(self.rows, "X", None)

    @property
    def y(self):
        """The targets the row source holds (None without data)."""
        return None if self.rows is None else self.rows.y

    @property
    def offset(self):
        """Per-row offsets of the linear predictor (None: zero)."""
        return None if self.rows is None else self.rows.offset

    @property
    def sample_weight(self):
        """Per-row likelihood weights (None: all ones), held by the row source."""
        return None if self.rows is None else self.rows.sample_weight

    @sample_weight.setter
    def sample_weight(self, value):
        if self.rows is not None:
            self.rows.sample_weight = value
