"""Shared classifier behaviour: label handling and the posterior predictive."""

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ._estimator import BaseSGBayes, epoch_permutation


class BaseSGBayesClassifier(ClassifierMixin, BaseSGBayes):
    """Base of the skbayes_sg classifiers.

    Encodes labels of any type as ``0..K-1`` (``classes_``), runs the shared fit loop, and
    predicts by the posterior predictive: the (weighted) average over draws of the model's
    per-draw class probabilities ``model.predict_draws(thetas, X)`` of shape
    (n_draws, n_samples, n_classes). Subclasses give ``_build_model`` and
    ``_set_posterior_attributes``.
    """

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Sample the posterior of the parameters given training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels: any two or more distinct values.

        Returns
        -------
        self : object
        """
        first = not (self.warm_start and hasattr(self, "classes_"))
        X, y = validate_data(self, X, y, dtype=np.float64, accept_sparse="csr", reset=first, y_numeric=False)
        check_classification_targets(y)
        classes, y_enc = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, but the data "
                f"contains only one class: {classes[0]!r}."
            )
        if not first and not np.array_equal(classes, self.classes_):
            raise ValueError(
                f"warm_start: y has classes {classes.tolist()} but the chains were fit on "
                f"{self.classes_.tolist()}; refit with warm_start=False."
            )
        self.classes_ = classes
        self._seen_X = self._seen_y = None
        if self.batch_scheme == "epochs":
            perm = epoch_permutation(self.random_state, X.shape[0])
            X, y_enc = X[perm], y_enc[perm]
        return self._fit(X, y_enc)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, classes=None):
        """Continue the chains on a new chunk of data (online Bayesian learning).

        Each call targets the posterior given *all the data seen so far* (the chunks of
        every call since the first): the chains continue from their states for ``n_iter``
        more iterations (burn-in only on the first call), with minibatches drawn from all
        the data seen, ``N`` growing as chunks arrive, and an ``"auto"`` step size re-set
        for the larger ``N``. ``samples_`` then holds this call's draws. The estimator keeps
        the data seen (the posterior depends on all of it), so memory grows with it; a
        ``fit`` starts over. After a ``fit`` (which keeps no data), ``partial_fit`` continues
        its chains, with the data seen starting at this chunk.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        classes : array-like of shape (n_classes,), default=None
            Every class that can appear; required on the first call (a chunk may not show
            them all), ignored afterwards.

        Returns
        -------
        self : object
        """
        first = not hasattr(self, "classes_")
        X, y = validate_data(self, X, y, dtype=np.float64, accept_sparse="csr", reset=first, y_numeric=False)
        check_classification_targets(y)
        if first:
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit (every label the "
                                 "stream can contain, e.g. classes=np.unique(y_all)).")
            self.classes_ = np.unique(classes)
            if self.classes_.size < 2:
                raise ValueError(f"{type(self).__name__} needs at least 2 classes; got classes={classes!r}.")
        unknown = np.setdiff1d(np.unique(y), self.classes_)
        if unknown.size:
            raise ValueError(f"y contains labels {unknown.tolist()} not in classes_ {self.classes_.tolist()}.")
        X_all, y_all = self._accumulate(X, np.searchsorted(self.classes_, y))
        return self._fit(X_all, y_all, streaming=True)

    def _observed_targets(self):
        return self.classes_[self._observed_y]

    def _check_X(self, X):
        check_is_fitted(self, "samples_")
        return validate_data(self, X, dtype=np.float64, accept_sparse="csr", reset=False)

    def predict_proba_samples(self, X):
        """Class probabilities under each posterior draw.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_draws_total, n_samples, n_classes)
            Columns in the order of ``classes_``. Quantiles over the first axis give
            credible intervals for each probability.
        """
        X = self._check_X(X)
        return self._model.predict_draws(self._flat_samples(), X)

    def predict_proba(self, X):
        """Posterior predictive class probabilities: the mean over draws.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        X = self._check_X(X)
        thetas, weights = self._flat_samples(), self._flat_weights()
        proba = np.zeros((X.shape[0], self.classes_.size))
        for chunk in self._draw_chunks(X.shape[0], self.classes_.size):
            proba += np.tensordot(weights[chunk], self._model.predict_draws(thetas[chunk], X), axes=1)
        if self.sample_weight_ is not None:
            # Signed (multilevel) weights estimate the expectation without bias but can
            # leave [0, 1] by Monte Carlo error: project back onto the simplex.
            np.clip(proba, 0.0, 1.0, out=proba)
            proba /= proba.sum(axis=1, keepdims=True)
        return proba

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X):
        """Most probable class under the posterior predictive.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]
