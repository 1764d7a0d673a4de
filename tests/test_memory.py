"""Memory of a fit on out-of-core data: what it allocates must not grow with the rows.

A fit on a ``numpy.memmap`` X reads only the minibatches' rows, so everything it allocates
besides the encoded labels (one byte a row for fewer than 256 classes) should be
independent of N. ``tracemalloc`` sees every numpy and Python allocation but not the
memmap's pages (the OS's file cache), so the growth of the traced peak between N and 4N
rows is what the fit itself keeps or copies per row.

Two sources of per-row memory are tested apart: the label handling (fits from zeros with
a fixed step size, which touch only minibatches), and the full-data passes of the default
settings (``init="map"``'s L-BFGS, the ``"auto"`` step size's Lanczos iteration on
Hessian-vector products, mCCAdL's squared row norms), which run over blocks of rows.
"""

import tracemalloc
import warnings

import numpy as np
import pytest

from skbayes_sg import SGBayesDRBMClassifier, SGBayesLinearRegression, SGBayesLogisticRegression, _classifier
from skbayes_sg import rows as row_sources
from skbayes_sg.models import glm
from skbayes_sg.samplers import SGLD

N_FEATURES = 8
# Encoded labels take 1 B/row; the label handling used to take about 41 B/row (sorted copies,
# argsort and inverse of np.unique in int64, then a float64 copy in the model).
MAX_BYTES_PER_ROW = 4.0


def _write_data(tmp_path, n_rows, y_kind, chunk=100_000, n_classes=2):
    """X (n_rows, N_FEATURES) float64 as a memmap and targets y, written in chunks.

    Two classes: labels -1 and 2; more: 0..n_classes-1 by thresholds on a noisy score;
    ``n_classes=None``: the score itself, a float64 memmap (regression targets).
    """
    X = np.lib.format.open_memmap(tmp_path / f"X{n_rows}.npy", mode="w+", dtype=np.float64, shape=(n_rows, N_FEATURES))
    y = np.lib.format.open_memmap(
        tmp_path / f"y{n_rows}.npy", mode="w+", dtype=np.float64 if n_classes is None else np.int64, shape=(n_rows,)
    )
    rng = np.random.default_rng(0)
    w = rng.normal(size=N_FEATURES)
    for start in range(0, n_rows, chunk):
        block = rng.normal(size=(min(chunk, n_rows - start), N_FEATURES))
        X[start : start + len(block)] = block
        score = block @ w + rng.logistic(size=len(block))
        if n_classes is None:
            y[start : start + len(block)] = score
        elif n_classes == 2:
            y[start : start + len(block)] = 3 * (score > 0) - 1  # labels -1, 2
        else:
            y[start : start + len(block)] = np.digitize(score, np.linspace(-2, 2, n_classes - 1))
    X.flush()
    y.flush()
    del X, y
    X = np.load(tmp_path / f"X{n_rows}.npy", mmap_mode="r")
    y = np.load(tmp_path / f"y{n_rows}.npy", mmap_mode="r")
    if y_kind == "float array":
        y = np.asarray(y, dtype=np.float64)  # in memory before tracing starts, as a user's would be
    return X, y


def _peak_bytes(X, y):
    est = SGBayesLogisticRegression(sampler=SGLD(step_size=1e-4), n_iter=40, n_chains=1, init="zeros", random_state=0)
    tracemalloc.start()
    try:
        est.fit(X, y)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(est.classes_, [-1, 2])
    return peak


@pytest.mark.parametrize("y_kind", ["int memmap", "float array"])
def test_fit_on_memmap_allocates_no_per_row_copies(tmp_path, y_kind):
    n = 100_000
    peaks = [_peak_bytes(*_write_data(tmp_path, rows, y_kind)) for rows in (n, 4 * n)]
    growth = (peaks[1] - peaks[0]) / (3 * n)
    assert growth < MAX_BYTES_PER_ROW, (
        f"the fit's peak allocation grows by {growth:.1f} B/row (peaks {peaks[0] / 1e6:.2f} MB at {n} rows, "
        f"{peaks[1] / 1e6:.2f} MB at {4 * n}); X is {8 * N_FEATURES} B/row on disk"
    )


# -- full-data passes by blocks: the default settings ----------------------------------------

# Labels (1 B/row) and nothing else: before the passes ran by blocks, the "auto" step
# size's Hessian-vector products on a whole memmapped X allocated about 48 B/row.
MAX_DEFAULT_BYTES_PER_ROW = 4.0


def _default_fit_peak(make, X, y):
    est = make()
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a few iterations do not converge, by design
            est.fit(X, y)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.isfinite(est.samples_).all()
    return peak


@pytest.mark.parametrize(
    "name, make, n_classes",
    [
        # Defaults everywhere but the chain length: mCCAdL, init="map", step_size="auto".
        ("binary logistic", lambda: SGBayesLogisticRegression(n_iter=20, n_chains=1, random_state=0), 2),
        ("softmax", lambda: SGBayesLogisticRegression(n_iter=20, n_chains=1, random_state=0), 3),
        # Regression targets as a float64 memmap: the model keeps them as given (an integer
        # y would be converted to float64, 8 B/row).
        ("linear regression", lambda: SGBayesLinearRegression(n_iter=20, n_chains=1, random_state=0), None),
    ],
)
def test_default_fit_on_memmap_allocates_no_per_row_arrays(tmp_path, monkeypatch, name, make, n_classes):
    # Blocks of 8192 rows for the passes and 4096 for the labels (65536 each by default):
    # N and 4N rows both span several blocks, so the peak is that of a block at both sizes
    # (with the default blocks, N rows would be one partial block and the peak would still
    # move between N and 4N).
    monkeypatch.setattr(row_sources, "BLOCK_ELEMENTS", 2**13)
    monkeypatch.setattr(_classifier, "_LABEL_BLOCK", 2**12)
    n = 50_000
    peaks = []
    # A first small fit takes the one-time allocations (lazy imports, caches) out of the peaks.
    for rows in (1000, n, 4 * n):
        X, y = _write_data(tmp_path, rows, "int memmap", n_classes=n_classes)
        peaks.append(_default_fit_peak(make, X, y))
    peaks = peaks[1:]
    growth = (peaks[1] - peaks[0]) / (3 * n)
    assert growth < MAX_DEFAULT_BYTES_PER_ROW, (
        f"{name}: a default fit's peak allocation grows by {growth:.1f} B/row (peaks {peaks[0] / 1e6:.2f} MB at "
        f"{n} rows, {peaks[1] / 1e6:.2f} MB at {4 * n}); X is {8 * N_FEATURES} B/row on disk"
    )


def _glm_models(X, rng):
    y2 = (rng.random(X.shape[0]) < 0.4).astype(np.uint8)
    y3 = rng.integers(0, 3, X.shape[0]).astype(np.uint8)
    yr = rng.normal(size=X.shape[0])
    return [
        glm.LogisticModel(X, y2),
        glm.SoftmaxModel(X, y3, n_classes=3),
        glm.LinearRegressionModel(X, yr),
        glm.LinearRegressionModel(X, yr, noise_precision=2.0, fit_intercept=False),
        glm.PoissonModel(X, rng.poisson(1.5, X.shape[0]), offset=0.2 * yr),
    ]


@pytest.mark.parametrize("sparse", [False, True])
def test_full_data_passes_by_blocks_sum_to_the_whole_data_values(monkeypatch, sparse):
    """Blocks of 7 rows (the last one partial) give the one-block sums: log likelihood,
    gradient, Hessian-vector products and the rows' squared norms."""
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    X = rng.normal(size=(100, 4)) * (rng.random((100, 4)) < 0.6)
    X = sp.csr_matrix(X) if sparse else X
    results = {}
    for elements in (2**16, 7):
        monkeypatch.setattr(row_sources, "BLOCK_ELEMENTS", elements)
        out = []
        for model in _glm_models(X, np.random.default_rng(4)):
            m = model._block_rows()
            assert len(model.rows.block_slices(m)) == (1 if elements > 100 else -(-100 // m))
            theta = np.random.default_rng(5).normal(size=model.n_params) * 0.3
            v = np.random.default_rng(6).normal(size=model.n_params)
            ll, grad = model.log_likelihood_and_grad(theta)
            out.append(
                (
                    ll,
                    grad,
                    model.loglik_hvp(theta, v),
                    model.hessian_vector_product(theta, v),
                    model._row_sq_norms(None, None),
                )
            )
        results[elements] = out
    for whole, blocks in zip(results[2**16], results[7]):
        for a, b in zip(whole, blocks):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    # The one-block values are the minibatch formulas on all rows.
    for model, (ll, grad, hv, _, norms) in zip(_glm_models(X, np.random.default_rng(4)), results[7]):
        theta = np.random.default_rng(5).normal(size=model.n_params) * 0.3
        v = np.random.default_rng(6).normal(size=model.n_params)
        rows = np.arange(100)
        ll_rows, grad_rows = model.log_likelihood_and_grad(theta, rows)
        np.testing.assert_allclose([ll, *grad], [ll_rows, *grad_rows], rtol=1e-12)
        np.testing.assert_allclose(hv, model.loglik_hvp(theta, v, rows), rtol=1e-12, atol=1e-12)
        dense = X.toarray() if sparse else X
        np.testing.assert_allclose(norms, (dense**2).sum(axis=1), rtol=1e-12)


def test_memmapped_features_get_row_norms_per_minibatch(tmp_path):
    """mCCAdL's tr(Sigma) on memmapped X: the minibatch's norms, no cache of all N, and the
    same total as the cached norms of the same data in memory."""
    X, y = _write_data(tmp_path, 500, "int memmap")
    y = (np.asarray(y) > 0).astype(np.uint8)
    on_disk, in_memory = glm.LogisticModel(X, y), glm.LogisticModel(np.array(X), y)
    theta = np.random.default_rng(7).normal(size=on_disk.n_params)
    rows = np.random.default_rng(8).integers(0, 500, 50)
    totals = [m.per_example_gradients(theta, rows).total_sum_of_squares() for m in (on_disk, in_memory)]
    assert on_disk._row_sq_cache is None and in_memory._row_sq_cache is not None
    assert totals[0] == totals[1]
    G = on_disk.per_example_gradients(theta, rows).to_dense()
    assert totals[0] == pytest.approx(float((G**2).sum()), rel=1e-12)


# -- label handling by blocks gives what sklearn's whole-array checks give ---------------------


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 7 rows, so that tests on small data cross many block boundaries."""
    monkeypatch.setattr(_classifier, "_LABEL_BLOCK", 7)


@pytest.mark.parametrize(
    "labels",
    [
        np.array([3, -1, 8]),
        np.array(["b", "a", "c"]),
        np.array([2.0, 0.5e9, -4.0]),
        np.array(["x", "y", "z"], dtype=object),
    ],
)
def test_blockwise_classes_and_codes_match_np_unique(small_blocks, labels):
    rng = np.random.default_rng(0)
    y = labels[rng.integers(0, 3, size=100)]
    y[-1] = labels[2]  # a class seen only in the last, partial block
    y[:-1][y[:-1] == labels[2]] = labels[0]
    classes, inverse = np.unique(y, return_inverse=True)
    found = _classifier._check_targets_and_find_classes(y)
    np.testing.assert_array_equal(found, classes)
    codes = _classifier._encode_labels(y, found)
    assert codes.dtype == np.uint8
    np.testing.assert_array_equal(codes, inverse)
    assert _classifier._class_code_dtype(256) == np.uint8 and _classifier._class_code_dtype(257) == np.uint16


@pytest.mark.parametrize(
    "y",
    [
        np.array([0, 1] * 40),  # blocks within the classes seen: their two-reduction check
        np.r_[np.zeros(40, int), np.ones(40, int), 2],  # a new class after a run of the first two
        np.r_[np.zeros(40, int), 2 * np.ones(40, int), 1],  # a gap the later block fills
        np.r_[np.full(20, 5, np.uint16), np.arange(3, 9, dtype=np.uint16)],
        np.arange(-128, 128, dtype=np.int8)[::-1],  # codes 0..255 from int8 labels (wrapping arithmetic)
        np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max] * 10),
    ],
)
# Labels as many as the rows (the int8 case) are what scikit-learn warns may be a regression target.
@pytest.mark.filterwarnings("ignore:The number of unique classes:UserWarning")
def test_blockwise_integer_labels_match_np_unique(small_blocks, y):
    classes, inverse = np.unique(y, return_inverse=True)
    found = _classifier._check_targets_and_find_classes(y)
    np.testing.assert_array_equal(found, classes)
    assert found.dtype == classes.dtype
    codes = _classifier._encode_labels(y, found)
    assert codes.dtype == _classifier._class_code_dtype(classes.size)
    np.testing.assert_array_equal(codes, inverse)


def test_blockwise_checks_raise_sklearns_errors(small_blocks):
    y = np.zeros(50)
    y[::2] = 1.0
    y[40] = 0.5  # a non-integral float in a later block: a continuous target
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        _classifier._check_targets_and_find_classes(y)
    with pytest.raises(ValueError, match="Unknown label type: unknown"):
        _classifier._check_targets_and_find_classes(np.array([object()] * 20))
    with pytest.warns(UserWarning, match="number of unique classes is greater than 50%"):
        _classifier._check_targets_and_find_classes(np.arange(30) % 20)
    X = np.random.default_rng(0).normal(size=(50, 2))
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        SGBayesLogisticRegression(n_iter=10).fit(X, y)


def test_partial_fit_finds_unknown_labels_in_any_block(small_blocks):
    X = np.random.default_rng(0).normal(size=(40, 2))
    y = np.arange(40) % 2
    clf = SGBayesLogisticRegression(sampler=SGLD(step_size=1e-3), n_iter=20, n_chains=1, random_state=0)
    clf.partial_fit(X, y, classes=[0, 1])
    y_bad = y.copy()
    y_bad[[3, 33]] = [5, -2]
    with pytest.raises(ValueError, match=r"labels \[-2, 5\] not in classes_"):
        clf.partial_fit(X, y_bad)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SGBayesLogisticRegression(n_iter=60, n_chains=2, random_state=0),
        lambda: SGBayesDRBMClassifier(n_hidden=3, n_iter=60, n_chains=2, random_state=0),
    ],
)
def test_compact_codes_give_the_draws_of_wide_codes(make, monkeypatch):
    """The models compute with the codes' values, not their dtype: uint8 codes and the old int64
    ones give the same draws (three classes, so SoftmaxModel for the linear classifier)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 3))
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, size=120)]
    compact = make().fit(X, y)
    assert compact._observed_y.dtype == np.uint8
    monkeypatch.setattr(_classifier, "_class_code_dtype", lambda n_classes: np.dtype(np.int64))
    wide = make().fit(X, y)
    assert wide._observed_y.dtype == np.int64
    np.testing.assert_array_equal(compact.samples_, wide.samples_)
