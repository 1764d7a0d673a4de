"""The set-up a fit pays before its chains: the MAP by Newton's method on large data (sample
Hessians first, then the exact one), the MAP's Hessian handed to the preconditioner."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve

from skbayes_sg.models import LinearRegressionModel, LogisticModel, PoissonModel, SoftmaxModel, _map
from skbayes_sg.preconditioning import curvature_factor


def _data(N, D=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    eta = X @ (0.5 * rng.standard_normal(D)) + 0.3
    return X, eta, rng


def _models(N):
    X, eta, rng = _data(N)
    yield LogisticModel(X, (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(float))
    yield LogisticModel(sp.csr_matrix(X * (rng.random(X.shape) < 0.5)), (rng.random(N) < 0.5).astype(float))
    yield PoissonModel(X, rng.poisson(np.exp(0.3 * eta)))
    yield SoftmaxModel(X, rng.integers(0, 3, N), n_classes=3)
    yield LinearRegressionModel(X, eta + rng.standard_normal(N))  # an extra parameter: exact Hessians only


def _tight_mode(model, theta):
    """Three more exact Newton steps from ``theta``, and the posterior sds there."""
    for _ in range(3):
        H = model.hessian(theta)
        theta = theta + cho_solve(cho_factor(H), model.log_posterior_and_grad(theta)[1])
    return theta, np.sqrt(np.diag(np.linalg.inv(model.hessian(theta))))


@pytest.fixture
def small_sample(monkeypatch):
    # The sample-Hessian path at test sizes: a sample of 512 rows from 2,048 rows up.
    monkeypatch.setattr(_map, "SAMPLE_ROWS", 512)
    monkeypatch.setattr(_map, "SAMPLE_MIN_ROWS", 2048)


@pytest.mark.parametrize("index", range(5))
def test_newton_with_sample_hessians_reaches_the_mode(small_sample, index):
    model = list(_models(6000))[index]
    calls = []
    exact = model.hessian
    model.hessian = lambda theta: calls.append(1) or exact(theta)
    theta = _map._map_estimate(model)
    del model.hessian
    ref, sd = _tight_mode(model, theta)
    if index == 4:
        # No sample Hessian (the noise precision): exact Newton, to its test of 1e-3 sd.
        assert np.max(np.abs(theta - ref) / sd) < 1e-3
        return
    # Far below the 1e-3 sd the Newton test asks: the last exact step is taken.
    assert np.max(np.abs(theta - ref) / sd) < 1e-7
    np.testing.assert_allclose(theta, ref, rtol=1e-9, atol=1e-10 * np.abs(ref).max())
    assert len(calls) <= 2  # the sample steps leave one (rarely two) exact Hessians


@pytest.mark.parametrize("index", range(4))
def test_mid_size_newton_starts_at_the_mode_of_a_quarter_of_the_rows(monkeypatch, index):
    # Below SAMPLE_MIN_ROWS, where Hessians are dear: Newton on a quarter of the rows' posterior,
    # then exact Newton, with no exact-gradient steps on the sample's Hessian in between.
    monkeypatch.setattr(_map, "MID_MIN_WORK", 0)
    model = list(_models(6000))[index]
    rows = _map._sample_rows(model)
    assert rows is not None and 1000 < rows.size <= 1500
    exact, sampled, passes = [], [], []
    H, Hs, lpg = model.hessian, model.hessian_of_rows, model.log_posterior_and_grad
    model.hessian = lambda theta: exact.append(1) or H(theta)
    model.hessian_of_rows = lambda theta, idx: sampled.append(len(passes)) or Hs(theta, idx)
    model.log_posterior_and_grad = lambda theta: passes.append(1) or lpg(theta)
    theta = _map._map_estimate(model)
    del model.hessian, model.hessian_of_rows, model.log_posterior_and_grad
    ref, sd = _tight_mode(model, theta)
    # Newton's test stops below 1e-3 sd; its last steps reuse the Hessian kept within
    # CHORD_BELOW sds of the mode, which converge linearly at a rate of a few hundredths.
    assert np.max(np.abs(theta - ref) / sd) < 1e-5
    assert sampled and max(sampled) == 0  # every sample Hessian before the first full-data pass
    # From the sample's mode the exact steps converge at once (from the start: 3-5 here, 8 on a9a).
    assert len(exact) <= 3
    # Cheap data keep exact Newton from the start.
    monkeypatch.setattr(_map, "MID_MIN_WORK", 2**27)
    assert _map._sample_rows(model) is None


def test_sample_hessian_of_all_rows_is_the_hessian():
    for model in list(_models(700))[:4]:
        theta = 0.1 * np.random.default_rng(1).standard_normal(model.n_params)
        rows = np.arange(model.n_samples)
        np.testing.assert_allclose(model.hessian_of_rows(theta, rows), model.hessian(theta), rtol=1e-12, atol=1e-9)
        # Every row twice, scaled by N / 2N: the same likelihood part, the prior's once.
        twice = model.hessian_of_rows(theta, np.repeat(rows, 2))
        np.testing.assert_allclose(twice, model.hessian(theta), rtol=1e-12, atol=1e-9)


def test_map_hessian_is_handed_to_the_preconditioner_once(small_sample):
    model = next(_models(6000))
    theta = _map._map_estimate(model)
    calls = []
    exact = model.hessian
    model.hessian = lambda t: calls.append(1) or exact(t)
    L = curvature_factor(model, theta, "dense", _map.hessian_at)
    assert calls == []  # Newton's last Hessian, no second pass
    L_exact = curvature_factor(model, theta, "dense", _map.hessian_at)
    assert calls == [1]  # handed over once: a second call computes it
    # The handed-over Hessian is at the last Newton iterate, within 1e-3 sd of the MAP.
    np.testing.assert_allclose(L, L_exact, rtol=1e-4, atol=1e-6 * np.abs(L_exact).max())


def test_small_data_keep_exact_newton():
    # Below SAMPLE_MIN_ROWS the iterates are the exact Newton's (the draws of small fits stay put).
    model = next(_models(3000))
    calls = []
    model.hessian_of_rows = lambda *a: calls.append(1)
    _map._map_estimate(model)
    assert calls == []


def test_threaded_passes_are_bit_identical_in_row_order():
    """Blocks computed on threads (block_threads) give the one-thread pass bit for bit: every
    block alone, summed and placed in row order; a pass inside a block's function runs in that
    thread (no wait on the pool), and each block sees the caller's errstate."""
    from skbayes_sg.rows import as_row_source, block_threads

    X, eta, rng = _data(5_000)
    rows = as_row_source(X, (eta > 0).astype(float))
    order = []

    def f(block):
        order.append(block.X.shape[0])
        inner = rows.reduce_blocks(lambda b: b.X.sum(axis=0), 1_000)  # a nested pass
        assert np.geterr()["divide"] == "raise"
        return np.exp(np.sin(block.X @ np.arange(6.0))).sum() * inner, np.cumsum(block.y).sum()

    with np.errstate(divide="raise"):
        one = rows.reduce_blocks(f, 300), rows.map_rows(lambda b: np.tanh(b.X @ np.ones(6)), 300)
        with block_threads(3):
            three = rows.reduce_blocks(f, 300), rows.map_rows(lambda b: np.tanh(b.X @ np.ones(6)), 300)
    assert len(order) == 2 * 17
    np.testing.assert_array_equal(one[0][0], three[0][0])
    np.testing.assert_array_equal(one[0][1], three[0][1])
    np.testing.assert_array_equal(one[1], three[1])


def test_fit_with_threaded_passes_gives_the_same_fit(monkeypatch):
    """n_jobs=2 runs the set-up's and the KSD's full-data passes on two threads: the prior, the
    draws and the KSD are those of n_jobs=None bit for bit (blocks of 512 rows: many blocks)."""
    import skbayes_sg.rows as rows
    from skbayes_sg import SGBayesLogisticRegression

    monkeypatch.setattr(rows, "BLOCK_ELEMENTS", 512)
    X, eta, rng = _data(6_000)
    y = (rng.random(6_000) < 1 / (1 + np.exp(-eta))).astype(int)
    kw = dict(n_iter=400, n_chains=2, random_state=0, batch_size=200)
    a = SGBayesLogisticRegression(**kw).fit(X, y)
    b = SGBayesLogisticRegression(n_jobs=2, **kw).fit(X, y)
    np.testing.assert_array_equal(a.alpha_, b.alpha_)
    np.testing.assert_array_equal(a.samples_, b.samples_)
    assert a.diagnostics_["ksd"] == b.diagnostics_["ksd"]


def test_the_noise_probe_draws_the_one_minibatch_it_reads(monkeypatch):
    # The probe of the gradient noise reads one minibatch: it draws one from the rows'
    # distribution, not a chain's queue of 256 (a million draws on a9a's probe).
    from skbayes_sg import SGBayesLogisticRegression
    from skbayes_sg.minibatch import RowDistribution

    sizes = []
    draw = RowDistribution.draw
    monkeypatch.setattr(RowDistribution, "draw", lambda self, rng, size: sizes.append(size) or draw(self, rng, size))
    X, eta, rng = _data(60_000, D=10)
    y = (rng.random(eta.size) < 1.0 / (1.0 + np.exp(-eta))).astype(int)
    est = SGBayesLogisticRegression(n_iter=20, n_chains=1, random_state=0).fit(X, y)
    assert est.diagnostics_["gradient"] == "control_variate"
    probe = [s for s in sizes if s[1] != est.diagnostics_["batch_size"]]
    assert probe and all(s[0] == 1 for s in probe)


def test_newton_keeps_the_hessian_near_the_mode_where_hessians_are_dear(monkeypatch):
    # Where a Hessian is dear, once a decrement is below CHORD_BELOW sds the steps reuse that
    # point's Hessian (one gradient pass a step): fewer Hessians, the same mode to 1e-5 sd, and
    # the kept Hessian is the one the preconditioner gets. Cheap Hessians keep plain Newton.
    model = list(_models(6000))[0]
    chord_below = _map.CHORD_BELOW

    def run(chord_below, min_work):
        monkeypatch.setattr(_map, "CHORD_BELOW", chord_below)
        monkeypatch.setattr(_map, "MID_MIN_WORK", min_work)
        hessians, H = [], model.hessian
        model.hessian = lambda theta: hessians.append(H(theta)) or hessians[-1]
        try:
            theta = _map._newton_map(model)
        finally:
            del model.hessian
        return theta, hessians

    plain, plain_h = run(0.0, 0)
    kept, kept_h = run(chord_below, 0)
    assert len(kept_h) < len(plain_h)
    ref, sd = _tight_mode(model, plain)
    assert np.max(np.abs(kept - ref) / sd) < 1e-5
    assert _map.hessian_at(model, kept) is kept_h[-1]
    cheap, cheap_h = run(chord_below, 2**62)
    assert len(cheap_h) > len(kept_h)
