"""Dask input of the estimators: data that live in the partitions of a ``dask.distributed`` cluster.

``fit`` on dask arrays (or a dask DataFrame and Series) validates them without computing X
(shape, dtype, chunk sizes), checks what needs the values (finite features, the classes,
valid weights) in one pass on the workers, and fits a model over a
:class:`~skbayes_sg.rows.DaskRows` source: every full-data pass runs on the workers, and the
chains, in the client's process, read the rows of their minibatches in bulk gathers.
Predictions on a dask array are dask arrays, computed partition by partition with the
fitted estimator (as dask-ml's ``ParallelPostFit``).

dask and distributed stay optional: they are imported only when dask input arrives.
"""

import numpy as np

from .rows import DaskRows

#: Fix named by the errors about dask input that needs a client.
_CLIENT_FIX = "start one first: `from dask.distributed import Client; client = Client()` (or Client(cluster))"


def is_dask_collection(x):
    """Whether ``x`` is a dask collection (array, DataFrame, Series), without importing dask."""
    return hasattr(x, "__dask_graph__") and type(x).__module__.split(".")[0] in ("dask", "dask_expr")


def _client():
    try:
        from distributed import get_client
    except ImportError as exc:  # pragma: no cover - distributed is in the test extras
        raise ImportError("Fitting on dask arrays needs dask.distributed: pip install 'dask[distributed]'.") from exc
    try:
        return get_client()
    except ValueError:
        raise ValueError(
            f"Fitting on dask arrays needs a dask.distributed client, and none is running: {_CLIENT_FIX}."
        ) from None


def _as_dask_array(a, name, n_rows=None, row_chunks=None, numeric=True):
    """``a`` (a dask array, DataFrame or Series, or an in-memory 1-D array beside dask X) as a
    dask array, or a ValueError naming the problem and its fix."""
    import dask.array as da

    if a is None:
        return None
    if hasattr(a, "dtypes") and hasattr(a, "columns") and getattr(a, "ndim", 2) == 2:  # a dask DataFrame
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        # pandas' own test: its extension dtypes (strings, categoricals, nullable ints) are no numpy dtype.
        bad = [str(c) for c, t in a.dtypes.items() if not (is_numeric_dtype(t) or is_bool_dtype(t))]
        if bad:
            raise ValueError(
                f"{name} has non-numeric columns {bad}: encode them as numbers first (for example "
                "dask_ml.preprocessing.Categorizer and DummyEncoder), or select the numeric columns."
            )
        dtypes = set(a.dtypes)
        if len(dtypes) > 1 or not all(isinstance(t, np.dtype) and t.kind in "iuf" for t in dtypes):
            # Mixed, boolean or pandas extension columns would make an object array: floats instead.
            a = a.astype(np.float64)
        a = a.to_dask_array(lengths=True)
    elif hasattr(a, "dtype") and hasattr(a, "to_dask_array"):  # a dask Series
        a = a.to_dask_array(lengths=True)
    elif not is_dask_collection(a):
        a = np.asarray(a)
        if n_rows is not None and a.shape[0] != n_rows:
            raise ValueError(f"{name} has {a.shape[0]} rows but X has {n_rows}; give one per row of X.")
        return da.from_array(a, chunks=(row_chunks,) + a.shape[1:])
    if not isinstance(a, da.Array):
        raise TypeError(f"{name} is a {type(a).__name__}; give a dask array, DataFrame or Series.")
    if any(np.isnan(c) for c in a.chunks[0]):
        raise ValueError(
            f"{name} has unknown chunk sizes (a dask array made from a DataFrame or by boolean indexing): "
            f"call {name} = {name}.compute_chunk_sizes() first, or convert the DataFrame with "
            "to_dask_array(lengths=True)."
        )
    if numeric and a.dtype.kind not in "biuf":
        raise ValueError(
            f"{name} has dtype {a.dtype}, not numbers: convert it (for example {name}.astype(float)) or "
            "encode its categories first."
        )
    return a


def check_dask_input(X, y, sample_weight=None, numeric_y=True):
    """``(X, y, sample_weight, feature_names)``: validated dask arrays chunked alike by rows.

    Nothing is computed: shapes, dtypes and chunk sizes only. ``numeric_y`` False lets class
    labels of any dtype through.
    """
    feature_names = None
    if hasattr(X, "columns"):
        columns = np.asarray(X.columns, dtype=object)
        if all(isinstance(c, str) for c in columns):
            feature_names = columns
    X = _as_dask_array(X, "X")
    if X.ndim != 2:
        raise ValueError(f"X has {X.ndim} dimension(s); expected a 2-D array of shape (n_samples, n_features).")
    if len(X.chunks[1]) > 1:
        # Partitions are rows: one chunk across the columns (a cheap, per-row-block rechunk).
        X = X.rechunk({1: -1})
    y = _as_dask_array(y, "y", X.shape[0], X.chunks[0], numeric=numeric_y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"y has shape {y.shape}; expected ({X.shape[0]},), one target per row.")
    sample_weight = _as_dask_array(sample_weight, "sample_weight", X.shape[0], X.chunks[0])
    for name, a in (("y", y), ("sample_weight", sample_weight)):
        if a is None:
            continue
        if a.shape[0] != X.shape[0]:
            raise ValueError(f"{name} has {a.shape[0]} rows but X has {X.shape[0]}; give one per row of X.")
        if a.chunks[0] != X.chunks[0]:
            raise ValueError(
                f"X and {name} are chunked differently by rows ({X.chunks[0][:3]}... against "
                f"{a.chunks[0][:3]}...): each partition must hold the same rows of both. Rechunk one like the "
                f"other: {name} = {name}.rechunk(X.chunks[0])."
            )
    return X, y, sample_weight, feature_names


def _prior_pass_checks_X(est):
    """Whether this fit resolves ``alpha="auto"`` from X (a fresh fit, not one continuing its
    chains): that pass over X's blocks also checks its values, so the values check need not."""
    if not getattr(est, "_auto_alpha", False) or not (isinstance(est.alpha, str) and est.alpha == "auto"):
        return False
    return not (getattr(est, "warm_start", False) and hasattr(est, "samples_"))


def _values_check(X, y, sample_weight, classifier, check_X=True):
    """The checks that need the values, in one computation on the workers: X finite (a pass
    over X, unless ``check_X`` is False because the prior's pass checks it), integral class
    labels (classifiers) or finite targets, valid weights."""
    import dask
    import dask.array as da

    checks = {"finite_X": da.isfinite(X).all()} if check_X else {}
    if classifier and y.dtype.kind == "f":
        checks["integral_y"] = (y == da.floor(y)).all()
    if not classifier:
        checks["finite_y"] = da.isfinite(y).all()
    if sample_weight is not None:
        checks["w_ok"] = (da.isfinite(sample_weight) & (sample_weight >= 0)).all()
        checks["w_sum"] = sample_weight.sum()
    (found,) = dask.compute(checks)
    if not found.get("finite_X", True):
        raise ValueError("X contains NaN or infinity; impute or drop those rows first.")
    if not found.get("integral_y", True):
        raise ValueError(
            "Unknown label type: y holds continuous values; a classifier needs class labels "
            "(use a regressor for continuous targets)."
        )
    if not found.get("finite_y", True):
        raise ValueError("y contains NaN or infinity; give finite targets.")
    if sample_weight is not None and (not found["w_ok"] or not found["w_sum"] > 0):
        raise ValueError("sample_weight must be finite and non-negative, and not zero for every row; fix the weights.")


def _check_fit_options(est):
    """Options that dask input does not support, with the alternative."""
    if not getattr(est, "_supports_multilevel", True) or not getattr(est, "_auto_control_variate", True):
        # The DRBM: a model over in-memory rows only (not a GLM over a row source).
        raise ValueError(
            f"{type(est).__name__} does not fit on dask arrays; compute them first (X.compute(), y.compute()) "
            "or use SGBayesLogisticRegression."
        )
    if est.batch_scheme != "replacement":
        raise ValueError(
            "batch_scheme='epochs' reorders the rows in memory; on dask input minibatches are drawn with "
            "replacement: use batch_scheme='replacement'."
        )
    if est.n_jobs not in (None, 1):
        raise ValueError(
            f"n_jobs={est.n_jobs!r}: on dask input the chains run in the client's process, which gathers their "
            "minibatch rows from the cluster's partitions (the passes over the data run on the workers); use "
            "n_jobs=None."
        )
    if est.warm_start and hasattr(est, "samples_"):
        raise ValueError("warm_start continues chains on in-memory data only; fit on dask input with warm_start=False.")


def fit_classifier(est, X, y, sample_weight=None):
    """``est.fit(X, y)`` for a classifier on dask input: classes found on the workers, labels
    encoded partition by partition, the model read through :class:`~skbayes_sg.rows.DaskRows`."""
    client = _client()
    _check_fit_options(est)
    X, y, sample_weight, names = check_dask_input(X, y, sample_weight, numeric_y=False)
    X, y, sample_weight = _persist(client, X, y, sample_weight)
    _values_check(X, y, sample_weight, classifier=True, check_X=not _prior_pass_checks_X(est))
    classes = np.unique(y.map_blocks(np.unique, dtype=y.dtype, chunks=((np.nan,) * y.numblocks[0],)).compute())
    if classes.size < 2:
        raise ValueError(
            f"{type(est).__name__} needs samples of at least 2 classes in the data, but the data "
            f"contains only one class: {classes[0]!r}."
        )
    _set_input_attributes(est, X, names)
    est.classes_ = classes
    code = np.min_scalar_type(classes.size - 1)  # the in-memory fit's one-byte codes
    codes = y.map_blocks(lambda b: np.searchsorted(classes, b).astype(code), dtype=code)
    weights = sample_weight
    class_weight = getattr(est, "class_weight", None)
    if class_weight is not None:
        from sklearn.utils.class_weight import compute_class_weight

        if isinstance(class_weight, str):
            counts = _class_totals(codes, sample_weight, classes.size)
            # compute_class_weight's "balanced": n_samples / (n_classes * count) per class.
            per_class = counts.sum() / (classes.size * counts)
        else:
            per_class = compute_class_weight(class_weight, classes=classes, y=classes)
        cw = codes.map_blocks(lambda c: per_class[c], dtype=np.float64)
        weights = cw if weights is None else cw * weights
    rows = DaskRows(X, codes, sample_weight=weights, client=client, persist=True)
    rows.verbose = est.verbose
    est._seen_X = est._seen_y = None
    return est._fit(rows, None)


def _class_totals(codes, sample_weight, n_classes):
    """Per-class counts (weighted by ``sample_weight``) of the codes, computed on the workers."""
    import dask.array as da

    w = da.ones_like(codes, dtype=np.float64) if sample_weight is None else sample_weight
    return da.bincount(codes.astype(np.intp), weights=w, minlength=n_classes).compute()


def fit_regressor(est, X, y, sample_weight=None):
    """``est.fit(X, y)`` for :class:`~skbayes_sg.SGBayesLinearRegression` on dask input: the
    targets' centre and scale computed on the workers, the standardised targets a dask array."""
    import dask

    client = _client()
    _check_fit_options(est)
    X, y, sample_weight, names = check_dask_input(X, y, sample_weight)
    X, y, sample_weight = _persist(client, X, y, sample_weight)
    _values_check(X, y, sample_weight, classifier=False, check_X=not _prior_pass_checks_X(est))
    _set_input_attributes(est, X, names)
    est.y_mean_, est.y_scale_ = 0.0, 1.0
    if est.normalize_y:
        y = y.astype(np.float64)
        w = 1.0 if sample_weight is None else sample_weight
        total = y.shape[0] if sample_weight is None else sample_weight.sum()
        mean = (w * y).sum() / total if est.fit_intercept else 0.0
        mean = float(dask.compute(mean)[0])
        scale = float(np.sqrt(dask.compute((w * (y - mean) ** 2).sum() / total)[0]))
        est.y_mean_ = mean
        if np.isfinite(scale) and scale > 10 * np.finfo(float).eps * max(1.0, abs(mean)):
            est.y_scale_ = scale
        if est.y_mean_ != 0.0 or est.y_scale_ != 1.0:
            y = (y - est.y_mean_) / est.y_scale_
    rows = DaskRows(X, y, sample_weight=sample_weight, client=client, persist=True)
    rows.verbose = est.verbose
    est._seen_X = est._seen_y = None
    return est._fit(rows, None)


def fit_poisson(est, X, y, sample_weight=None, exposure=None, offset=None):
    """``est.fit(X, y)`` for :class:`~skbayes_sg.SGBayesPoissonRegressor` on dask input: counts
    checked on the workers, ``offset + log(exposure)`` a dask array in the partitions."""
    import dask
    import dask.array as da

    client = _client()
    _check_fit_options(est)
    X, y, sample_weight, names = check_dask_input(X, y, sample_weight)
    total = None
    for name, a in (("offset", offset), ("exposure", exposure)):
        a = _as_dask_array(a, name, X.shape[0], X.chunks[0])
        if a is not None and a.chunks[0] != X.chunks[0]:
            raise ValueError(f"X and {name} are chunked differently by rows: {name} = {name}.rechunk(X.chunks[0]).")
        if a is not None:
            a = da.log(a.astype(np.float64)) if name == "exposure" else a.astype(np.float64)
            total = a if total is None else total + a
    X, y, sample_weight, total = _persist(client, X, y, sample_weight, total)
    _values_check(X, y, sample_weight, classifier=False, check_X=not _prior_pass_checks_X(est))
    (negative, bad_offset) = dask.compute((y < 0).any(), False if total is None else ~da.isfinite(total).all())
    if negative:
        raise ValueError(
            "SGBayesPoissonRegressor needs non-negative targets (counts), but y has negative values; drop or "
            "correct these rows, or use SGBayesLinearRegression for a target that can be negative."
        )
    if bad_offset:
        raise ValueError("offset + log(exposure) is not finite for every row: exposure must be positive and finite.")
    _set_input_attributes(est, X, names)
    rows = DaskRows(X, y.astype(np.float64), sample_weight=sample_weight, offset=total, client=client, persist=True)
    rows.verbose = est.verbose
    est._seen_X = est._seen_y = est._seen_offset = None
    return est._fit_with_offset(rows, None, None, None)


def _persist(client, *arrays):
    """The arrays kept in the workers' memory (lazily defined ones are computed once)."""
    # One persist per array: persisting arrays that share parts of their graphs together
    # (y computed from a column of X) broke later computations of X's slices in dask 2026.8.
    return tuple(None if a is None else client.persist(a) for a in arrays)


def _set_input_attributes(est, X, names):
    est.n_features_in_ = int(X.shape[1])
    if names is not None:
        est.feature_names_in_ = names
    elif hasattr(est, "feature_names_in_"):
        del est.feature_names_in_


def predict_blocks(est, method, X, return_std=False, **row_arrays):
    """``getattr(est, method)(X)`` of a dask array ``X``, as a dask array computed partition by
    partition on the workers (a tuple of them for ``return_std=True``).

    ``row_arrays`` (the Poisson regressor's ``exposure`` and ``offset``; None: not given) are
    one value per row of X, dask arrays chunked as X's rows or in-memory arrays (split into
    X's row chunks); each block's rows reach ``method`` with theirs.
    """
    import dask.array as da

    X = _predict_input(X)
    if X.shape[1] != est.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(est).__name__} is expecting {est.n_features_in_} features "
            "as input."
        )
    names = [name for name, a in row_arrays.items() if a is not None]
    arrays = [_as_dask_array(row_arrays[name], name, X.shape[0], X.chunks[0]) for name in names]
    for name, a in zip(names, arrays):
        if a.ndim != 1 or a.shape[0] != X.shape[0]:
            raise ValueError(f"{name} has shape {a.shape}; expected ({X.shape[0]},), one value per row of X.")
        if a.chunks[0] != X.chunks[0]:
            raise ValueError(f"X and {name} are chunked differently by rows: {name} = {name}.rechunk(X.chunks[0]).")

    def block(part, *rows, **kw):
        return getattr(est, method)(part, **dict(zip(names, rows)), **kw)

    def blocks(f, **kw):
        # One task per row partition: X's block (all its columns) with its rows of the arrays.
        return da.map_blocks(f, X, *[a[:, None] for a in arrays], **kw)

    classes = getattr(est, "classes_", None)
    if method in ("predict_proba", "predict_log_proba"):
        return blocks(block, dtype=np.float64, chunks=(X.chunks[0], (classes.size,)))
    if return_std:
        both = blocks(
            lambda p, *r: np.column_stack(block(p, *[c[:, 0] for c in r], return_std=True)),
            dtype=np.float64,
            chunks=(X.chunks[0], (2,)),
        )
        return both[:, 0], both[:, 1]
    dtype = classes.dtype if (method == "predict" and classes is not None) else np.float64
    return blocks(lambda p, *r: block(p, *[c[:, 0] for c in r]), dtype=dtype, drop_axis=1)


def _predict_input(X):
    X = _as_dask_array(X, "X")
    if X.ndim != 2:
        raise ValueError(f"X has {X.ndim} dimension(s); expected a 2-D array of shape (n_samples, n_features).")
    return X.rechunk({1: -1}) if len(X.chunks[1]) > 1 else X


#: Rows of the sample whose MAP starts Newton's method on the workers.
START_ROWS = 20_000


def map_on_workers(model, tol=1e-3, max_iter=50):
    """The MAP of a model over :class:`~skbayes_sg.rows.DaskRows`, in few passes over the data.

    Newton's method as the in-memory fit's (the same stopping rule: a Newton decrement below
    ``tol`` posterior sds), with two changes that save passes: it starts from the MAP of
    :data:`START_ROWS` rows drawn at random (each weighted ``N / m``, found in memory), within
    a few posterior sds of the full data's; and each pass computes the log posterior, its
    gradient and the Hessian together (:meth:`~skbayes_sg.rows.DaskRows.together`, as dask-glm
    does), so that a step costs one pass. Models without a closed-form Hessian, or too many
    parameters for Newton, take the in-memory fit's route (:func:`~skbayes_sg.models._map._map_estimate`).
    """
    import copy

    from scipy.linalg import LinAlgError, cho_factor, cho_solve

    from .models._base import Model
    from .models._map import NEWTON_MAX_PARAMS, _map_estimate
    from .rows import ArrayRows

    rows = model.rows
    if model.n_params > NEWTON_MAX_PARAMS or type(model).hessian is Model.hessian:
        return _map_estimate(model)
    N = rows.n_rows
    m = min(N, START_ROWS)
    idx = np.sort(np.random.default_rng(0).choice(N, size=m, replace=False))
    block = rows.gather(idx)
    w = np.full(m, N / m) if block.sample_weight is None else block.sample_weight * (N / m)
    sample = copy.copy(model)
    sample.rows = ArrayRows(block.X, block.y, sample_weight=w, offset=block.offset, y_dtype=rows.y_dtype)
    # The sample is a data set of m rows (weighted to N): what the in-memory Newton reads as
    # its size, and draws its own sample of rows from (rows of the full data would not exist).
    sample.n_samples = m
    theta = _map_estimate(sample)

    def terms(theta):
        (lp, g), H = rows.together(lambda: model.log_posterior_and_grad(theta), lambda: model.hessian(theta))
        return lp, g, H

    with np.errstate(over="ignore", invalid="ignore"):
        lp, g, H = terms(theta)
        for _ in range(max_iter):
            try:
                step = cho_solve(cho_factor(H), g)
            except (LinAlgError, ValueError):
                break
            decrement = float(np.sqrt(max(g @ step, 0.0)))
            if not np.isfinite(decrement):
                break
            if decrement < tol:
                return theta
            t = 1.0
            for _ in range(60):
                cand = theta + t * step
                lp_new, g_new, H_new = terms(cand)
                if np.isfinite(lp_new) and lp_new >= lp:
                    break
                t *= 0.5
            else:
                return theta
            theta, lp, g, H = cand, lp_new, g_new, H_new
    return _map_estimate(model)
