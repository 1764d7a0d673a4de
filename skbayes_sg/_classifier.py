"""Shared classifier behaviour: label handling and the posterior predictive."""

import warnings

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from . import _dask
from ._estimator import _PREDICT_CHUNK, BaseSGBayes, _check_target_length, epoch_permutation, predict_threads
from ._validation import validate_data

#: Labels are checked and encoded this many rows at a time. sklearn's
#: ``check_classification_targets`` and ``np.unique(y, return_inverse=True)`` sort whole
#: copies of y (about 40 bytes a row in all), which on memmapped data was the one part of
#: a fit growing with N; by blocks the transient memory is O(block) and what is kept is
#: the codes, one byte a row for fewer than 256 classes.
_LABEL_BLOCK = 2**16


#: The binary predictive's control variate (``n_predict_draws="auto"``, see
#: ``SGBayesLogisticRegression``): the draws it averages over (evenly spaced, the same number
#: per chain), and the largest variance of a row's linear predictor over them for which it
#: is used (rows above get the plain average over the ``n_predict_draws_`` draws). Its
#: Monte Carlo error is about ``|1 - 2p| sqrt(v / 2) / sqrt(K)`` posterior sds of the
#: probability, at most 0.044 sd at ``v = 0.25`` and K = 64. On a9a's 16,281 test rows it was
#: 0.005 sd (median; 0.05 sd at the 99th percentile) off the all-draws average, where the
#: 616 draws of the plain average were 0.08 sd off (0.3 sd), for a tenth of the products.
PREDICT_CV_DRAWS = 64
PREDICT_CV_VARIANCE = 0.25


def _label_blocks(n):
    return (slice(start, min(start + _LABEL_BLOCK, n)) for start in range(0, n, _LABEL_BLOCK))


def _class_code_dtype(n_classes):
    """The smallest unsigned integer dtype holding the codes ``0..n_classes-1``."""
    return np.min_scalar_type(max(int(n_classes) - 1, 0))


def _check_targets_and_find_classes(y):
    """``check_classification_targets(y)`` and ``np.unique(y)`` for a validated 1-D ``y``, by blocks.

    The errors are sklearn's own: its checks run on the first block (sklearn judges the
    label type, such as bytes or objects that are not strings, by y's first value, which is
    the first block's) and on any block holding non-integral floats (a "continuous" target).
    The classes are the sorted union of the blocks' unique values.
    """
    n = y.shape[0]
    if type_of_target(y[:_LABEL_BLOCK], input_name="y") not in ("binary", "multiclass"):
        check_classification_targets(y[:_LABEL_BLOCK])  # raises sklearn's error
    classes = None
    for rows in _label_blocks(n):
        block = y[rows]
        if block.dtype.kind == "f" and np.any(block != block.astype(np.int64)):
            check_classification_targets(block)  # a continuous target: raises sklearn's error
        if classes is not None and _integer_run(block, classes) >= 0:
            continue  # two reductions instead of a hash of the block: the classes are unchanged
        unique = np.unique(block)
        classes = unique if classes is None else np.union1d(classes, unique)
    if classes.size > 2 and n > 20 and classes.size > round(0.5 * n):
        # check_classification_targets' warning for a multiclass y, on the whole of y.
        warnings.warn(
            "The number of unique classes is greater than 50% of the number of samples. `y` could represent a "
            "regression problem, not a classification problem.",
            UserWarning,
            stacklevel=3,
        )
    return classes


def _integer_run(block, classes):
    """The index in ``classes`` of the smallest of the integer labels ``block`` when ``classes``
    hold every integer from the block's smallest label to its largest (so all its labels,
    the code of label ``v`` being ``i + v - classes[i]``), else -1."""
    if block.dtype.kind not in "iu" or classes.dtype.kind not in "iu":
        return -1
    lo, hi = block.min(), block.max()
    i, j = np.searchsorted(classes, [lo, hi])
    covered = j < classes.size and classes[i] == lo and classes[j] == hi and j - i == int(hi) - int(lo)
    return int(i) if covered else -1


def _encode_labels(y, classes, check_known=False):
    """Codes of ``y`` in the sorted ``classes``, in the smallest unsigned dtype that holds them.

    With ``check_known``, labels not in ``classes`` raise a ValueError naming them.
    """
    codes = np.empty(y.shape[0], dtype=_class_code_dtype(classes.size))
    unknown = []
    for rows in _label_blocks(y.shape[0]):
        block = y[rows]
        first = -1 if check_known else _integer_run(block, classes)
        if first >= 0:
            # Integer labels in a run of consecutive classes (0..K-1, say): a label's code is its
            # offset from the run's first class plus that class's code, what the search finds.
            out = codes[rows]
            np.subtract(block, classes[first], out=out, casting="unsafe")
            out += first
            continue
        where = np.searchsorted(classes, block)
        if check_known:
            np.minimum(where, classes.size - 1, out=where)
            missing = classes[where] != block
            if missing.any():
                unknown.append(np.unique(block[missing]))
        codes[rows] = where
    if unknown:
        raise ValueError(
            f"y contains labels {np.unique(np.concatenate(unknown)).tolist()} not in classes_ "
            f"{classes.tolist()}; pass every label the stream can contain as classes on the first "
            "call to partial_fit."
        )
    return codes


class BaseSGBayesClassifier(ClassifierMixin, BaseSGBayes):
    """Base of the skbayes_sg classifiers.

    Encodes labels of any type as ``0..K-1`` (``classes_``) in the smallest unsigned integer
    dtype that holds them (one byte a row below 256 classes; the models convert each
    minibatch's codes to what their kernels need), runs the shared fit loop, and
    predicts by the posterior predictive: the (weighted) average over draws of the model's
    per-draw class probabilities ``model.predict_draws(thetas, X)`` of shape
    (n_draws, n_samples, n_classes). Subclasses give ``_build_model`` and
    ``_set_posterior_attributes``.
    """

    _parameter_constraints = {
        **BaseSGBayes._parameter_constraints,
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Sample the posterior of the parameters given training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels: any two or more distinct values.
        sample_weight : array-like of shape (n_samples,), default=None
            Likelihood weights: the posterior is
            ``p(theta) prod_i p(y_i | x_i, theta)^{w_i}``, so an integer weight counts a
            row that many times and a weight of 0 drops it; multiplied by the
            ``class_weight`` of the row's class. None means all ones. Must be
            non-negative, and not all zero. See :ref:`sample-weights`.

        Returns
        -------
        self : object
        """
        if _dask.is_dask_collection(X):
            return _dask.fit_classifier(self, X, y, sample_weight)
        first = not (self.warm_start and hasattr(self, "classes_"))
        X, y = validate_data(self, X, y, dtype=np.float64, accept_sparse="csr", reset=first, y_numeric=False)
        classes = _check_targets_and_find_classes(y)
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
        y_enc = _encode_labels(y, classes)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        sample_weight = self._with_class_weight(y_enc, sample_weight)
        self._seen_X = self._seen_y = None
        if self.batch_scheme == "epochs":
            perm = epoch_permutation(self.random_state, X.shape[0])
            X, y_enc = X[perm], y_enc[perm]
            sample_weight = None if sample_weight is None else sample_weight[perm]
        return self._fit(X, y_enc, sample_weight=sample_weight)

    def _with_class_weight(self, codes, sample_weight):
        """Per-row likelihood weights: ``sample_weight`` (None: ones) times the
        ``class_weight`` of each row's class (code), or None when both are absent.

        ``"balanced"`` is scikit-learn's (``compute_class_weight`` with the sample weights)
        over the classes present in ``codes``: in ``fit`` all of ``classes_``, in
        ``partial_fit`` those of the data seen so far.
        """
        class_weight = getattr(self, "class_weight", None)
        if class_weight is None:
            return sample_weight
        if isinstance(class_weight, str):
            present = np.unique(codes)
            per_class = np.zeros(self.classes_.size)
            per_class[present] = compute_class_weight(
                class_weight, classes=present, y=codes, sample_weight=sample_weight
            )
        else:
            per_class = compute_class_weight(class_weight, classes=self.classes_, y=self.classes_)
        weights = per_class[codes]
        return weights if sample_weight is None else weights * sample_weight

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """Continue the chains on a new chunk of data (online Bayesian learning).

        Each call targets the posterior given *all the data seen so far* (the chunks of
        every call since the first): the chains continue from their states for ``n_iter``
        more iterations (with ``"auto"``, until this call's draws meet its targets; burn-in
        only on the first call), with minibatches drawn from all
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
        sample_weight : array-like of shape (n_samples,), default=None
            Likelihood weights of this chunk's rows, as in :meth:`fit` (kept with the data
            seen; chunks without weights count their rows once). See :ref:`sample-weights`.

        Returns
        -------
        self : object
        """
        first = not hasattr(self, "classes_")
        X, y = validate_data(self, X, y, dtype=np.float64, accept_sparse="csr", reset=first, y_numeric=False)
        _check_targets_and_find_classes(y)
        if first:
            if classes is None:
                raise ValueError(
                    "classes must be passed on the first call to partial_fit (every label the "
                    "stream can contain, e.g. classes=np.unique(y_all))."
                )
            self.classes_ = np.unique(classes)
            if self.classes_.size < 2:
                raise ValueError(f"{type(self).__name__} needs at least 2 classes; got classes={classes!r}.")
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float64, ensure_non_negative=True, allow_all_zero_weights=True
            )
        X_all, y_all, w_all = self._accumulate(X, _encode_labels(y, self.classes_, check_known=True), sample_weight)
        return self._fit(X_all, y_all, streaming=True, sample_weight=self._with_class_weight(y_all, w_all))

    def _observed_targets(self):
        return self.classes_[self._observed_y]

    def _check_targets(self, y, n_samples):
        y = _check_target_length(y, n_samples)
        where = np.minimum(np.searchsorted(self.classes_, y), self.classes_.size - 1)
        unknown = self.classes_[where] != y
        if unknown.any():
            raise ValueError(
                f"y contains labels {np.unique(y[unknown]).tolist()} not in classes_ "
                f"{self.classes_.tolist()}: the model gives them no likelihood. Pass labels of "
                "the classes the estimator was fit on."
            )
        return where, self.classes_[where]

    def _sample_targets(self, X, rng):
        """One label per stored draw and row, drawn from that draw's class probabilities by
        inversion of their cumulative sums, shape (n_draws_total, n)."""
        thetas = self._flat_samples()
        out = np.empty((thetas.shape[0], X.shape[0]), dtype=self.classes_.dtype)
        for draws in self._draw_blocks(X.shape[0]):
            cdf = np.cumsum(self._model.predict_draws(thetas[draws], X), axis=-1)
            u = rng.random_sample(cdf.shape[:2])
            out[draws] = self.classes_[(cdf[..., :-1] < u[..., None]).sum(axis=-1)]
        return out

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

        The average runs over the ``n_predict_draws_`` draws chosen by ``n_predict_draws``
        (all of them with ``n_predict_draws=None``), in blocks of rows and draws with one
        matrix product per block and temporaries of at most 2^18 floats (2 MiB, in cache) each,
        whatever the sizes; many blocks run on one BLAS thread. A binary logistic regression
        at ``n_predict_draws="auto"`` uses the control variate described in the class
        docstring on the rows where it is accurate.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        if _dask.is_dask_collection(X):
            return _dask.predict_blocks(self, "predict_proba", X)
        X = self._check_X(X)
        control = self._predict_control_variate()
        if control is not None:
            return self._predict_proba_control_variate(X, *control)
        return self._predict_proba_draws(X)

    def _predict_proba_draws(self, X):
        """The posterior predictive as the weighted average over the prediction draws."""
        thetas, weights = self._predict_draws()
        proba = np.zeros((X.shape[0], self.classes_.size))
        blocks = self._predict_blocks(X.shape[0], thetas.shape[0], self.classes_.size)
        with predict_threads(len(blocks)):
            for rows, draws in blocks:
                proba[rows] += self._model.predict_mean(thetas[draws], weights[draws], X[rows])
        # Rounding in the weighted sum can leave [0, 1] by an ulp (1 + 1.3e-15 seen), which
        # sklearn.metrics.log_loss refuses.
        np.clip(proba, 0.0, 1.0, out=proba)
        if self.sample_weight_ is not None:
            # Signed (multilevel) weights estimate the expectation without bias but can
            # leave [0, 1] by Monte Carlo error: project back onto the simplex.
            proba /= proba.sum(axis=1, keepdims=True)
        return proba

    def _predict_control_variate(self):
        """``(thetas, mean)`` of the binary predictive's control variate, or None where the
        plain average applies: ``n_predict_draws`` other than ``"auto"``, signed (multilevel)
        weights, a model without one, or when the ``"auto"`` rule keeps every draw (a bulk ESS
        of 400 or less: its draws would not be nearly independent) or no more than its own.
        Its draws, 16 per chain among more than 100 effective ones, are spaced at least six
        autocorrelation times apart."""
        model = getattr(self, "_model", None)
        if getattr(self, "n_predict_draws", None) != "auto" or self.sample_weight_ is not None:
            return None
        if not getattr(model, "has_predictive_control_variate", False):
            return None
        n_auto = self._predict_index().size
        if not PREDICT_CV_DRAWS < n_auto < self.samples_.shape[0] * self.samples_.shape[1]:
            return None
        cached = getattr(self, "_predictive_draws", None)
        if cached is None or cached[0] is not self.samples_:
            C, S = self.samples_.shape[:2]
            flat = self._flat_samples()
            keep = np.linspace(0, S - 1, max(1, PREDICT_CV_DRAWS // C)).round().astype(np.intp)
            self._predictive_draws = cached = (
                self.samples_,
                flat[(np.arange(C)[:, None] * S + keep).ravel()],
                flat.mean(axis=0),
            )
        return cached[1:]

    def _predict_proba_control_variate(self, X, thetas, mean):
        """The posterior predictive by the control variate (``PREDICT_CV_DRAWS``), in blocks of
        rows; rows whose linear predictor varies more than ``PREDICT_CV_VARIANCE`` get the
        plain average over the prediction draws."""
        n = X.shape[0]
        proba = np.empty((n, 2))
        step = max(1, _PREDICT_CHUNK // (2 * thetas.shape[0]))
        wide = []
        with predict_threads(-(-n // step)):
            for start in range(0, n, step):
                rows = slice(start, min(start + step, n))
                proba[rows, 1], v = self._model.predict_mean_control_variate(thetas, mean, X[rows])
                wide.append(start + np.flatnonzero(v > PREDICT_CV_VARIANCE))
        # The remainder's Monte Carlo error can leave [0, 1] by a hair for extreme rows.
        np.clip(proba[:, 1], 0.0, 1.0, out=proba[:, 1])
        np.subtract(1.0, proba[:, 1], out=proba[:, 0])
        wide = np.concatenate(wide)
        if wide.size:
            proba[wide] = self._predict_proba_draws(X[wide])
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
        if _dask.is_dask_collection(X):
            return _dask.predict_blocks(self, "predict_log_proba", X)
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
        if _dask.is_dask_collection(X):
            return _dask.predict_blocks(self, "predict", X)
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]
