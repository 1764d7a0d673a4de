"""Memory of a fit on out-of-core data: what it allocates must not grow with the rows.

A fit on a ``numpy.memmap`` X reads only the minibatches' rows, so everything it allocates
besides the encoded labels (one byte a row for fewer than 256 classes) should be
independent of N. ``tracemalloc`` sees every numpy and Python allocation but not the
memmap's pages (the OS's file cache), so the growth of the traced peak between N and 4N
rows is what the fit itself keeps or copies per row.

The fits here start at zeros with a fixed step size: ``init="map"`` and the ``"auto"`` step
size make full-data passes whose N-vectors (the linear predictor and residuals) are
transient per-row memory of their own, and samplers that need tr(Sigma) (mCCAdL) keep the
rows' squared norms; neither is label handling.
"""

import tracemalloc

import numpy as np
import pytest

from skbayes_sg import _classifier

from skbayes_sg import SGBayesDRBMClassifier, SGBayesLogisticRegression
from skbayes_sg.samplers import SGLD

N_FEATURES = 8
# Encoded labels take 1 B/row; the label handling used to take about 41 B/row (sorted copies,
# argsort and inverse of np.unique in int64, then a float64 copy in the model).
MAX_BYTES_PER_ROW = 4.0


def _write_data(tmp_path, n_rows, y_kind, chunk=100_000):
    """X (n_rows, N_FEATURES) float64 as a memmap and labels y, written in chunks."""
    X = np.lib.format.open_memmap(tmp_path / f"X{n_rows}.npy", mode="w+", dtype=np.float64,
                                  shape=(n_rows, N_FEATURES))
    y = np.lib.format.open_memmap(tmp_path / f"y{n_rows}.npy", mode="w+", dtype=np.int64, shape=(n_rows,))
    rng = np.random.default_rng(0)
    w = rng.normal(size=N_FEATURES)
    for start in range(0, n_rows, chunk):
        block = rng.normal(size=(min(chunk, n_rows - start), N_FEATURES))
        X[start:start + len(block)] = block
        y[start:start + len(block)] = 3 * (block @ w + rng.logistic(size=len(block)) > 0) - 1  # labels -1, 2
    X.flush()
    y.flush()
    del X, y
    X = np.load(tmp_path / f"X{n_rows}.npy", mmap_mode="r")
    y = np.load(tmp_path / f"y{n_rows}.npy", mmap_mode="r")
    if y_kind == "float array":
        y = np.asarray(y, dtype=np.float64)  # in memory before tracing starts, as a user's would be
    return X, y


def _peak_bytes(X, y):
    est = SGBayesLogisticRegression(sampler=SGLD(step_size=1e-4), n_iter=40, n_chains=1, init="zeros",
                                    random_state=0)
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
        f"{peaks[1] / 1e6:.2f} MB at {4 * n}); X is {8 * N_FEATURES} B/row on disk")


# -- label handling by blocks gives what sklearn's whole-array checks give ---------------------


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 7 rows, so that tests on small data cross many block boundaries."""
    monkeypatch.setattr(_classifier, "_LABEL_BLOCK", 7)


@pytest.mark.parametrize("labels", [np.array([3, -1, 8]), np.array(["b", "a", "c"]),
                                    np.array([2.0, 0.5e9, -4.0]), np.array(["x", "y", "z"], dtype=object)])
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


@pytest.mark.parametrize("make", [
    lambda: SGBayesLogisticRegression(n_iter=60, n_chains=2, random_state=0),
    lambda: SGBayesDRBMClassifier(n_hidden=3, n_iter=60, n_chains=2, random_state=0),
])
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
