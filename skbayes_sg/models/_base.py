"""The model interface every sampler works through.

A model is a prior and a likelihood over a flat parameter vector ``theta`` (P,). It knows
nothing of samplers: it gives minibatch per-example gradients (as an operator), the
full-data log posterior and its gradient, curvature products, and the predictive for a
stack of draws.
"""

import copy

import numpy as np
import scipy.sparse as sp


def largest_abs(X):
    """``max |X|`` of a dense, memory-mapped (one pass in row blocks) or sparse matrix."""
    if sp.issparse(X):
        return float(np.abs(X.data).max()) if X.nnz else 0.0
    out = 0.0
    for start in range(0, X.shape[0], 65536):
        block = np.asarray(X[start:start + 65536])
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
        raise ValueError(f"sample_weight has negative values (smallest {w.min():.3g}); likelihood weights must "
                         "be non-negative (use 0 to ignore a row).")
    if not np.any(w > 0):
        raise ValueError("sample_weight is zero for every row, which leaves no data to fit; give at least one "
                         "row a positive weight.")
    if np.all(w == 1.0):
        return None
    return w


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

        return DifferencePerExampleGradients(self.per_example_gradients(theta, idx),
                                             self.per_example_gradients(theta_hat, idx))

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

    def loglik_hvp(self, theta, v, idx=None):
        """``sum_{i in idx} (Hess log p(x_i | theta)) v`` over rows ``idx`` (all if None).

        The log likelihood's (not negated) Hessian applied to ``v``, for the Taylor-based
        gradient of multilevel SGLD (Nagapetyan et al. 2017, section 3.4). The default is a
        central finite difference of the minibatch gradient; models with a cheap exact
        product override it.
        """
        norm = np.linalg.norm(v)
        if norm == 0:
            return np.zeros_like(v)
        eps = 1e-5 * max(1.0, np.linalg.norm(theta)) / norm
        gp = self.log_likelihood_and_grad(theta + eps * v, idx)[1]
        gm = self.log_likelihood_and_grad(theta - eps * v, idx)[1]
        return (gp - gm) / (2 * eps)

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
            else:
                size += getattr(value, "nbytes", 0)
        return size

    def without_data(self):
        """A shallow copy holding no training data, for prediction after fit."""
        clone = copy.copy(self)
        for name in getattr(self, "_data_attributes", ()):
            setattr(clone, name, None)
        return clone
