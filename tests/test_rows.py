"""The row sources (skbayes_sg.rows): every implementation gathers the rows asked for, in
order, with their targets, weights and offsets; its blocks cover every row once; its
reductions give the whole-data values; its memory size counts what it holds."""

import sys

import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg.models import LogisticModel
from skbayes_sg.rows import (
    ArrayRows,
    ByteRows,
    EllRows,
    MemmapRows,
    PaddedRows,
    as_row_source,
)

RNG = np.random.default_rng(0)
N, D = 50, 40
X01 = (RNG.random((N, D)) < 0.08).astype(float)  # one-hot-like: byte-exact and sparse
Y = RNG.integers(0, 3, N).astype(np.uint8)
W = RNG.random(N)
OFF = RNG.normal(size=N)


def _sources(tmp_path):
    mapped = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=float, shape=X01.shape)
    mapped[:] = X01
    kw = dict(sample_weight=W, offset=OFF, y_dtype=np.intp)
    return {
        "array": as_row_source(sp.csr_matrix(X01), Y, **kw),
        "byte": as_row_source(X01, Y, **kw),
        "padded": as_row_source(X01, Y, padded=True, **kw),
        "memmap": as_row_source(mapped, Y, **kw),
        "dense-not-compact": as_row_source(X01, Y, compact=False, **kw),
    }


def _dense(X):
    return X.toarray() if hasattr(X, "toarray") else np.asarray(X)


def test_as_row_source_picks_the_implementation(tmp_path):
    s = _sources(tmp_path)
    assert [type(s[k]) for k in ("array", "byte", "padded", "memmap", "dense-not-compact")] == [
        ArrayRows,
        ByteRows,
        PaddedRows,
        MemmapRows,
        ArrayRows,
    ]
    assert not s["memmap"].keeps_row_state and s["byte"].keeps_row_state


@pytest.mark.parametrize("name", ["array", "byte", "padded", "memmap", "dense-not-compact"])
def test_gather_blocks_and_reductions(name, tmp_path):
    source = _sources(tmp_path)[name]
    assert (source.n_rows, source.n_features) == (N, D)
    idx = np.array([7, 3, 3, 49, 0])
    for products_only in (False, True):
        X, y, w, off = source.gather(idx, products_only=products_only)
        np.testing.assert_array_equal(_dense(X), X01[idx])
        assert y.dtype == np.intp
        np.testing.assert_array_equal(y, Y[idx])
        np.testing.assert_array_equal(w, W[idx])
        np.testing.assert_array_equal(off, OFF[idx])
    X, y, w, off = source.gather(slice(10, 20))
    np.testing.assert_array_equal(_dense(X), X01[10:20])
    np.testing.assert_array_equal(off, OFF[10:20])
    paths = np.array([[1, 2], [4, 4], [49, 0]])
    X, y, w, off = source.gather(paths)
    assert X.shape == (3, 2, D)
    np.testing.assert_array_equal(X, X01[paths])
    np.testing.assert_array_equal(w, W[paths])
    for m in (N, 7):
        slices = source.block_slices(m)
        covered = np.concatenate([np.arange(N)[s if s is not None else slice(None)] for s in slices])
        np.testing.assert_array_equal(covered, np.arange(N))
        total = source.reduce_blocks(lambda b: (float(b.sample_weight @ b.y), _dense(b.X).sum(axis=0)), m)
        assert total[0] == pytest.approx(float(W @ Y), rel=1e-12)
        np.testing.assert_allclose(total[1], X01.sum(axis=0))
        rows = source.map_rows(lambda b: (b.offset, np.column_stack([b.y, b.y])), m, (None, 2))
        np.testing.assert_array_equal(rows[0], OFF)
        np.testing.assert_array_equal(rows[1][:, 1], Y)


def test_byte_and_padded_copies_are_exact_and_counted(tmp_path):
    s = _sources(tmp_path)
    padded, byte, plain = s["padded"], s["byte"], s["dense-not-compact"]
    before = padded.nbytes
    idx = np.arange(0, N, 3)
    block = padded.gather(idx, products_only=True)
    assert isinstance(block.X, EllRows)
    v, u = RNG.normal(size=D), RNG.normal(size=idx.size)
    np.testing.assert_allclose(block.X @ v, X01[idx] @ v, rtol=1e-14)
    np.testing.assert_allclose(block.X.T @ u, X01[idx].T @ u, rtol=1e-14)
    assert padded.narrow.dtype == np.uint8 and padded.nbytes > before + N * D - 1
    byte.gather(idx)
    assert byte.narrow.dtype == np.uint8 and byte.nbytes == plain.nbytes + N * D
    # A model reports its source's bytes (dask's sizeof sees the data it would ship).
    model = LogisticModel(X01, (Y > 0).astype(float))
    assert sys.getsizeof(model) >= X01.nbytes
    assert sys.getsizeof(model.without_data()) < 1000
    # The pages of a memory map belong to the file: its source counts only its own arrays.
    assert s["memmap"].nbytes == W.nbytes + OFF.nbytes + Y.nbytes


def test_non_integer_features_keep_no_copy():
    X = RNG.normal(size=(20, 3))
    source = as_row_source(X, np.zeros(20), padded=True)
    assert source.gather_source() is None and source.padded() is None
    assert isinstance(source.gather(np.arange(4), products_only=True).X, np.ndarray)


def test_unpickled_sources_and_models_hold_aligned_arrays():
    # Issue 30 item 4: an array unpickled at a misaligned address (as dask places buffers in
    # its frames) is multiplied on other code paths, whose sums round differently from the
    # caller's. A source unpickled with one realigns it and computes the caller's gradient
    # bit for bit; aligned arrays are kept, not copied.
    import copy

    from skbayes_sg.models import LogisticModel
    from skbayes_sg.rows import aligned

    rng = np.random.default_rng(0)
    X = rng.standard_normal((569, 30)) * rng.uniform(0.1, 1000, 30)
    y = (X[:, 0] + rng.standard_normal(569) > 0).astype(np.uint8)
    Xm = np.empty(X.nbytes + 1, dtype=np.uint8)[1:].view(np.float64).reshape(X.shape)  # one byte off
    Xm[...] = X
    assert not Xm.flags.aligned and aligned(Xm).flags.aligned and aligned(X) is X
    model = LogisticModel(X, y, alpha=1.0)
    theta = rng.standard_normal(model.n_params) * 1e-3
    misaligned = copy.copy(model)
    misaligned.rows = copy.copy(model.rows)
    misaligned.rows.X = Xm
    g = model.log_likelihood_and_grad(theta)[1]
    assert not np.array_equal(misaligned.log_likelihood_and_grad(theta)[1], g)  # what a worker computed
    # What unpickling does with that state:
    misaligned.rows.__setstate__(dict(misaligned.rows.__dict__))
    misaligned.__setstate__(dict(misaligned.__dict__))
    assert misaligned.rows.X.flags.aligned
    np.testing.assert_array_equal(misaligned.log_likelihood_and_grad(theta)[1], g)


def test_a_full_data_gather_of_sparse_rows_is_the_matrix_itself():
    # A full-data gradient gathers slice(None): sparse X[:] would copy every entry per force.
    X = sp.random(60, 7, density=0.3, format="csr", random_state=0)
    y = np.arange(60) % 2
    rows = as_row_source(X, y, sample_weight=np.linspace(0.5, 1.5, 60))
    block = rows.gather(slice(None))
    assert block.X is rows.X
    np.testing.assert_array_equal(block.y, rows.gather(np.arange(60)).y)
    np.testing.assert_array_equal(block.sample_weight, rows.gather(np.arange(60)).sample_weight)
