"""Fits on dask arrays whose partitions live on a dask.distributed cluster (on loopback).

The data are generated lazily, each chunk from its own seed on the worker that holds it; the
same rows in memory give the reference fit.
"""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
import dask  # noqa: E402

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression, SGBayesPoissonRegressor  # noqa: E402
from skbayes_sg.rows import DaskRows  # noqa: E402

CHUNK, N_CHUNKS, D = 2500, 4, 4
BETA = np.array([1.0, -0.5, 0.25, 0.0])


def _cluster(n_workers):
    return distributed.LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",
        silence_logs=50,
    )


@pytest.fixture(scope="module")
def client():
    cluster = _cluster(2)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _chunk(seed, kind):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((CHUNK, D)).astype(np.float32)
    z = X.astype(float) @ BETA + 0.3
    if kind == "logistic":
        y = (rng.random(CHUNK) < 1.0 / (1.0 + np.exp(-z))).astype(np.int64)
    elif kind == "poisson":
        y = rng.poisson(np.exp(0.5 * z)).astype(np.float64)
    else:
        y = z + rng.standard_normal(CHUNK)
    return X, y


def lazy_data(kind="logistic"):
    """``(X, y)`` dask arrays, each chunk made on a worker from its own seed, nothing computed."""
    parts = [dask.delayed(_chunk, pure=True)(seed, kind) for seed in range(N_CHUNKS)]
    X = da.concatenate([da.from_delayed(p[0], shape=(CHUNK, D), dtype=np.float32) for p in parts])
    y_dtype = np.int64 if kind == "logistic" else np.float64
    y = da.concatenate([da.from_delayed(p[1], shape=(CHUNK,), dtype=y_dtype) for p in parts])
    return X, y


def in_memory(kind="logistic"):
    parts = [_chunk(seed, kind) for seed in range(N_CHUNKS)]
    return np.concatenate([p[0] for p in parts]).astype(np.float64), np.concatenate([p[1] for p in parts])


KW = dict(random_state=3, n_iter=2000, batch_size=100)


def _assert_same_posterior(a, b):
    """Posterior means within 4.5 combined MCSEs (and sds within 15%)."""
    sa, sb = a.summary(), b.summary()
    mcse = np.hypot(np.asarray(sa["mcse_mean"]), np.asarray(sb["mcse_mean"]))
    gap = np.abs(np.asarray(sa["mean"]) - np.asarray(sb["mean"]))
    assert np.all(gap < 4.5 * mcse), (gap / mcse).round(2)
    np.testing.assert_allclose(np.asarray(sb["sd"]), np.asarray(sa["sd"]), rtol=0.15)


@pytest.mark.statistical
def test_lazy_dask_array_gives_the_in_memory_posterior(client):
    X, y = lazy_data()
    dask_fit = SGBayesLogisticRegression(**KW).fit(X, y)
    memory_fit = SGBayesLogisticRegression(**KW).fit(*in_memory())
    _assert_same_posterior(memory_fit, dask_fit)
    assert dask_fit.n_features_in_ == D and list(dask_fit.classes_) == [0, 1]


@pytest.mark.statistical
def test_linear_regression_on_dask_gives_the_in_memory_posterior(client):
    X, y = lazy_data("linear")
    dask_fit = SGBayesLinearRegression(**KW).fit(X, y)
    memory_fit = SGBayesLinearRegression(**KW).fit(*in_memory("linear"))
    assert dask_fit.y_mean_ == pytest.approx(memory_fit.y_mean_, rel=1e-12)
    assert dask_fit.y_scale_ == pytest.approx(memory_fit.y_scale_, rel=1e-12)
    _assert_same_posterior(memory_fit, dask_fit)
    mean, std = dask_fit.predict(X[:3000], return_std=True)
    assert isinstance(mean, da.Array) and isinstance(std, da.Array)
    X_mem = in_memory("linear")[0][:3000]
    m_ref, s_ref = dask_fit.predict(X_mem, return_std=True)
    np.testing.assert_allclose(mean.compute(), m_ref, rtol=1e-10)
    np.testing.assert_allclose(std.compute(), s_ref, rtol=1e-10)


@pytest.mark.statistical
def test_poisson_regression_on_dask_gives_the_in_memory_posterior(client):
    X, y = lazy_data("poisson")
    exposure = da.full(X.shape[0], 2.0, chunks=X.chunks[0])
    dask_fit = SGBayesPoissonRegressor(**KW).fit(X, y, exposure=exposure)
    Xm, ym = in_memory("poisson")
    memory_fit = SGBayesPoissonRegressor(**KW).fit(Xm, ym, exposure=np.full(ym.size, 2.0))
    _assert_same_posterior(memory_fit, dask_fit)
    np.testing.assert_allclose(dask_fit.predict(X[:100]).compute(), dask_fit.predict(Xm[:100]), rtol=1e-12)


def test_poisson_predictions_on_dask_take_each_rows_exposure_and_offset(client):
    X, y = lazy_data("poisson")
    est = SGBayesPoissonRegressor(random_state=0, n_iter=300, batch_size=100, n_chains=1).fit(X, y)
    Xm, _ = in_memory("poisson")
    n = Xm.shape[0]
    exposure = np.linspace(0.5, 3.0, n)
    offset = np.sin(np.arange(n))
    dask_exposure = da.from_array(exposure, chunks=X.chunks[0])
    mean, std = est.predict(X, exposure=dask_exposure, offset=offset, return_std=True)
    assert isinstance(mean, da.Array) and mean.numblocks == X.numblocks[:1]
    m_ref, s_ref = est.predict(Xm, exposure=exposure, offset=offset, return_std=True)
    np.testing.assert_allclose(mean.compute(), m_ref, rtol=1e-12)
    np.testing.assert_allclose(std.compute(), s_ref, rtol=1e-12)
    np.testing.assert_allclose(est.predict(X, offset=offset).compute(), est.predict(Xm, offset=offset), rtol=1e-12)
    with pytest.raises(ValueError, match="chunked differently"):
        est.predict(X, exposure=da.from_array(exposure, chunks=1000))
    with pytest.raises(ValueError, match="rows but X has"):
        est.predict(X, offset=offset[:10])


def test_draws_do_not_depend_on_the_number_of_workers(client):
    kw = dict(random_state=5, n_iter=400, batch_size=100, n_chains=2)
    two = SGBayesLogisticRegression(**kw).fit(*lazy_data())
    cluster = _cluster(1)
    try:
        with distributed.Client(cluster):
            one = SGBayesLogisticRegression(**kw).fit(*lazy_data())
    finally:
        cluster.close()
    np.testing.assert_array_equal(one.samples_, two.samples_)


def _recording_sources(monkeypatch):
    sources = []
    init = DaskRows.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        sources.append(self)

    monkeypatch.setattr(DaskRows, "__init__", recording)
    return sources


def test_the_fit_reads_the_rows_in_few_passes_and_bulk_gathers(client, monkeypatch):
    sources = _recording_sources(monkeypatch)
    est = SGBayesLogisticRegression(random_state=0, n_iter=600, batch_size=100, n_chains=2).fit(*lazy_data())
    (rows,) = sources
    # Newton from a sample's MAP, one pass a step; the Hessian at the MAP (preconditioner) and
    # the control variate's gradient there are the last step's sums.
    assert rows.n_passes <= 3
    # One bulk gather per chain per queue of 256 minibatches (one more per chain: the queue
    # drawn ahead after the last), plus the MAP's start, the noise probe's rows and the
    # stand-in row.
    queues = 2 * int(np.ceil(600 / 256))
    assert rows.n_gathers <= queues + 2 + 4
    assert est.diagnostics_["gradient"] == "control_variate"


@pytest.mark.parametrize("sampler", ["sgld", "sghmc"])
def test_rows_gathered_ahead_are_the_next_queues_and_leave_the_draws_unchanged(client, monkeypatch, sampler):
    # Each refill of a chain's queue starts the gather of the next queue's rows (drawn ahead on
    # a copy of the chain's generator): from the third refill on, every queue's rows must be
    # the ones gathered ahead (a lookahead of the wrong queue is never used), and the draws must
    # be those of the fit that gathers each queue when it is refilled.
    sources = _recording_sources(monkeypatch)
    n_iter, n_chains = 1500, 2
    kw = dict(random_state=7, n_iter=n_iter, batch_size=100, n_chains=n_chains, sampler=sampler)
    ahead = SGBayesLogisticRegression(**kw).fit(*lazy_data())
    monkeypatch.setattr(DaskRows, "overlap", False)
    plain = SGBayesLogisticRegression(**kw).fit(*lazy_data())
    rows, plain_rows = sources
    np.testing.assert_array_equal(ahead.samples_, plain.samples_)
    refills = int(np.ceil(n_iter / 256))
    assert rows.n_ahead_missed == 0
    assert rows.n_ahead_used == n_chains * (refills - 2)
    assert plain_rows.n_ahead_used == 0


def test_the_map_starts_from_a_sample_smaller_than_the_in_memory_newtons_sample(client, monkeypatch):
    # At large N the dask MAP starts from the in-memory MAP of a sample of START_ROWS rows,
    # and that in-memory Newton draws its own sample of SAMPLE_ROWS rows: of the sample's
    # rows, not of the full data's (which it does not hold).
    import skbayes_sg._dask as dask_fit
    import skbayes_sg.models._map as map_module

    monkeypatch.setattr(dask_fit, "START_ROWS", 5000)
    monkeypatch.setattr(map_module, "SAMPLE_ROWS", 1000)
    monkeypatch.setattr(map_module, "SAMPLE_MIN_ROWS", 2000)
    from skbayes_sg.models import LogisticModel

    X, y = lazy_data()
    Xm, ym = in_memory()
    theta = dask_fit.map_on_workers(LogisticModel(DaskRows(X, y, y_dtype=np.float64), None))
    ref = map_module._map_estimate(LogisticModel(Xm, ym.astype(np.float64)))
    np.testing.assert_allclose(theta, ref, atol=1e-3)


def test_gather_returns_rows_in_the_order_asked_one_task_per_partition(client):
    X, y = lazy_data()
    Xm, ym = in_memory()
    rows = DaskRows(X, y)
    idx = np.array([9999, 0, 2500, 2499, 7777, 0, 5001])
    block = rows.gather(idx)
    np.testing.assert_array_equal(block.X, Xm[idx])
    np.testing.assert_array_equal(block.y, ym[idx])
    stack = rows.gather(idx.reshape(1, -1))
    assert stack.X.shape == (1, idx.size, D)
    total = rows.reduce_blocks(lambda b: (b.X.sum(axis=0), b.y.sum()), 1000)
    np.testing.assert_allclose(total[0], Xm.sum(axis=0), rtol=1e-10)
    assert total[1] == ym.sum()


def test_classifier_predictions_are_dask_arrays_computed_by_blocks(client, capsys):
    X, y = lazy_data()
    est = SGBayesLogisticRegression(random_state=0, n_iter=300, batch_size=100, n_chains=2, verbose=1).fit(X, y)
    assert "pass 1 over the data" in capsys.readouterr().err  # the passes show progress
    labels = np.array(["no", "yes"])
    named = SGBayesLogisticRegression(random_state=0, n_iter=300, batch_size=100, n_chains=2).fit(
        X, y.map_blocks(lambda c: labels[c], dtype=labels.dtype)
    )
    np.testing.assert_array_equal(named.classes_, labels)
    np.testing.assert_array_equal(named.samples_, est.samples_)  # the same codes, the same draws
    assert set(np.unique(named.predict(X[:500]).compute())) <= set(labels)
    proba = est.predict_proba(X)
    assert isinstance(proba, da.Array) and proba.chunks[0] == X.chunks[0]
    Xm = in_memory()[0]
    np.testing.assert_allclose(proba.compute(), est.predict_proba(Xm), rtol=1e-12)
    np.testing.assert_array_equal(est.predict(X).compute(), est.predict(Xm))
    np.testing.assert_allclose(est.predict_log_proba(X[:10]).compute(), est.predict_log_proba(Xm[:10]))


def test_unknown_chunk_sizes_name_the_fix(client):
    X, y = lazy_data()
    keep = X[:, 0] > -10
    with pytest.raises(ValueError, match=r"unknown chunk sizes.*compute_chunk_sizes"):
        SGBayesLogisticRegression().fit(X[keep], y[keep])


def test_x_and_y_chunked_differently_name_the_fix(client):
    X, y = lazy_data()
    with pytest.raises(ValueError, match=r"chunked differently.*y\.rechunk\(X\.chunks\[0\]\)"):
        SGBayesLogisticRegression().fit(X, y.rechunk(3000))


def test_non_numeric_features_and_bad_values_are_refused(client):
    X, y = lazy_data()
    with pytest.raises(ValueError, match="not numbers"):
        SGBayesLogisticRegression().fit(X.astype(str), y)
    bad = da.where(da.arange(X.shape[0], chunks=X.chunks[0])[:, None] == 7, np.nan, X)
    # Found by the default prior's pass over X, and by the values check under an explicit alpha.
    for alpha in ("auto", 1.0):
        with pytest.raises(ValueError, match="NaN or infinity"):
            SGBayesLogisticRegression(alpha=alpha).fit(bad, y)
    with pytest.raises(ValueError, match="NaN or infinity"):
        SGBayesLinearRegression().fit(da.where(da.arange(X.shape[0], chunks=X.chunks[0])[:, None] == 3, np.inf, X), y)
    with pytest.raises(ValueError, match="continuous"):
        SGBayesLogisticRegression().fit(X, y + 0.5)
    with pytest.raises(ValueError, match="batch_scheme='replacement'"):
        SGBayesLogisticRegression(batch_scheme="epochs").fit(X, y)
    with pytest.raises(ValueError, match="n_jobs=None"):
        SGBayesLogisticRegression(n_jobs=2).fit(X, y)
    from skbayes_sg import SGBayesDRBMClassifier

    with pytest.raises(ValueError, match=r"does not fit on dask arrays.*compute\(\)"):
        SGBayesDRBMClassifier().fit(X, y)


def test_non_numeric_dataframe_columns_name_them(client):
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    frame = dd.from_pandas(pd.DataFrame({"a": [1.0, 2.0] * 50, "colour": ["red", "blue"] * 50}), npartitions=2)
    with pytest.raises(ValueError, match=r"non-numeric columns \['colour'\]"):
        SGBayesLogisticRegression().fit(frame, dd.from_pandas(pd.Series([0, 1] * 50), npartitions=2))


def test_a_dataframe_fits_as_the_dask_array_of_its_values(client):
    """A dask DataFrame and Series (numeric and boolean columns) give the draws of the dask
    array of the same values and partitions, and name the features."""
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    X, y = in_memory()
    X = X[:, :3]
    columns = [f"x{j}" for j in range(X.shape[1])]
    frame = pd.DataFrame(X, columns=columns).assign(flag=X[:, 0] > 0)
    X_frame = dd.from_pandas(frame, npartitions=4)
    y_series = dd.from_pandas(pd.Series(y), npartitions=4)
    kw = dict(random_state=2, n_iter=300, batch_size=100, n_chains=2)
    from_frame = SGBayesLogisticRegression(**kw).fit(X_frame, y_series)
    rows = X_frame.to_dask_array(lengths=True).astype(np.float64)
    from_array = SGBayesLogisticRegression(**kw).fit(rows, y_series.to_dask_array(lengths=True))
    np.testing.assert_array_equal(from_frame.samples_, from_array.samples_)
    assert list(from_frame.feature_names_in_) == columns + ["flag"]


def test_dask_input_without_a_client_says_how_to_start_one():
    from skbayes_sg import _dask

    # No client in this test (it does not take the fixture): unless another test module left
    # one running, the error names the fix.
    try:
        distributed.get_client()
    except ValueError:
        with pytest.raises(ValueError, match="Client"):
            _dask._client()


def test_a_worker_lost_during_a_fit_costs_a_recomputation_not_the_posterior(client):
    import os
    import threading
    import time

    kw = dict(random_state=11, n_iter=1500, batch_size=100, n_chains=2)
    reference = SGBayesLogisticRegression(**kw).fit(*lazy_data())
    victim, pid = next(iter(client.run(os.getpid).items()))

    def kill():
        time.sleep(0.5)
        os.kill(pid, 9)  # the nanny starts a new worker; the lost partitions are recomputed

    killer = threading.Thread(target=kill)
    killer.start()
    again = SGBayesLogisticRegression(**kw).fit(*lazy_data())
    killer.join()
    np.testing.assert_array_equal(again.samples_, reference.samples_)
    client.wait_for_workers(2, timeout=60)


def test_softmax_on_targets_computed_from_x(client):
    # y computed from a column of X shares X's graph: persisting the two together broke later
    # computations of X's slices (a dask issue the fit avoids by persisting them one by one).
    X, y = lazy_data()
    y3 = y + (X[:, 1] > 0.5).astype(np.int64)
    est = SGBayesLogisticRegression(random_state=0, n_iter=300, batch_size=100, n_chains=2).fit(X, y3)
    assert list(est.classes_) == [0, 1, 2] and est.coef_.shape == (3, D)
    proba = est.predict_proba(X[:5]).compute()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


def test_auto_alpha_counts_distinct_values_on_the_workers(client):
    # The default prior's rule (sd, range of a binary column, |c| of a constant one) from the
    # partitions' sums and extremes where they live: the in-memory precisions.
    from skbayes_sg.models.glm import auto_alpha

    rng = np.random.default_rng(0)
    n = 4000
    rare = np.zeros(n)
    rare[3100] = 1.0  # one partition only sees ones; the others only zeros
    Xm = np.c_[rng.normal(size=n) * 5, rare, 1000.0 * (rng.random(n) < 0.3), np.full(n, 2.0), rng.integers(0, 3, n)]
    ym = (rng.random(n) < 0.5).astype(np.int64)
    rows = DaskRows(da.from_array(Xm, chunks=(1000, 5)), da.from_array(ym, chunks=1000))
    local = auto_alpha(Xm)
    np.testing.assert_allclose(local[1:4], [1.0, 1e6, 4.0])
    np.testing.assert_allclose(auto_alpha(rows), local, rtol=1e-12)
