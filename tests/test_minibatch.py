"""Minibatch targets: unbiased forces, and noise covariances that match their stated scale."""

import numpy as np
import pytest

from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models import LogisticModel

RNG = np.random.default_rng(0)
X = RNG.normal(size=(103, 3))
MODEL = LogisticModel(X, (RNG.random(103) < 0.5).astype(float), alpha=0.5)
THETA = np.array([0.3, -0.2, 0.5, 0.1])
FULL = MODEL.grad_log_posterior(THETA)


def _forces(target, n_draws, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([target.gradient(THETA, rng)[0] for _ in range(n_draws)])


def test_replacement_force_is_unbiased_with_covariance_noise_scale_times_V():
    target = MinibatchGradient(MODEL, 10, "replacement")
    F = _forces(target, 20_000)
    se = F.std(axis=0) / np.sqrt(len(F))
    assert np.all(np.abs(F.mean(axis=0) - FULL) < 5 * se)
    # Sigma = N^2 / n * V with V the population covariance of the per-example gradients.
    G = MODEL.per_example_gradients(THETA, slice(None)).to_dense()
    expected = target.noise_scale * np.var(G, axis=0)
    np.testing.assert_allclose(np.var(F, axis=0), expected, rtol=0.05)


def test_epoch_force_covariance_over_shuffles_is_noise_scale_times_V():
    """Over the once-per-fit shuffle, block forces have covariance N^2/n (1 - n/N) S^2."""
    N, n = 100, 10
    X100, y100 = X[:N], MODEL.y[:N]
    G = LogisticModel(X100, y100, alpha=0.5).per_example_gradients(THETA, slice(None)).to_dense()
    rng = np.random.default_rng(3)
    q = N // n
    variances = []
    for _ in range(2000):
        blocks = G[rng.permutation(N)].reshape(q, n, -1)
        F = q * blocks.sum(axis=1)  # the likelihood part of each block's force
        variances.append(F.var(axis=0))
    target = MinibatchGradient(LogisticModel(X100, y100, alpha=0.5), n, "epochs")
    expected = target.noise_scale * np.var(G, axis=0, ddof=1)
    # The mean of the q block forces is the exact full sum, so F.var (ddof=0) is unbiased.
    np.testing.assert_allclose(np.mean(variances, axis=0), expected, rtol=0.05)


def test_epoch_scheme_visits_every_row_once_per_epoch():
    target = MinibatchGradient(MODEL, 10, "epochs")
    rng = np.random.default_rng(1)
    q = 103 // 10
    seen = np.zeros(103, int)
    for _ in range(q):
        rows, scale = target._next_rows(rng)
        assert isinstance(rows, slice) and scale == q
        seen[rows] += 1
    np.testing.assert_array_equal(seen, 1)
    # The exact full gradient is the average of the q block forces of one epoch.
    F = _forces(MinibatchGradient(MODEL, 10, "epochs"), q, seed=2)
    np.testing.assert_allclose(F.mean(axis=0), FULL, rtol=1e-12, atol=1e-12)


def test_full_data_has_no_noise_and_counts_evaluations():
    target = MinibatchGradient(MODEL, None)
    force, grads = target.gradient(THETA, np.random.default_rng(0))
    np.testing.assert_allclose(force, FULL, rtol=1e-12)
    assert target.noise_scale == 0.0 and grads.n_batch == 103
    assert target.n_grad_evals == 103
    target.log_posterior_and_grad(THETA)
    assert target.n_grad_evals == 206
    assert MinibatchGradient(MODEL, 500).full


def test_bad_scheme():
    with pytest.raises(ValueError, match="batch scheme must be one of"):
        MinibatchGradient(MODEL, 10, "stratified")


def test_path_forces_at_drawn_rows_have_the_law_of_single_forces():
    """``gradient_paths`` at rows from ``draw_rows``: unbiased, with covariance ``noise_scale * V``."""
    target = MinibatchGradient(MODEL, 10, "replacement")
    rng = np.random.default_rng(4)
    M = 20_000
    rows = target.draw_rows(rng, M)
    assert rows.shape == (M, 10) and rows.min() >= 0 and rows.max() < 103
    F = target.gradient_paths(np.tile(THETA, (M, 1)), rows)
    assert target.n_grad_evals == M * 10
    se = F.std(axis=0) / np.sqrt(M)
    assert np.all(np.abs(F.mean(axis=0) - FULL) < 5 * se)
    G = MODEL.per_example_gradients(THETA, slice(None)).to_dense()
    np.testing.assert_allclose(np.var(F, axis=0), target.noise_scale * np.var(G, axis=0), rtol=0.05)


def test_draw_rows_full_data_and_epochs():
    rng = np.random.default_rng(5)
    assert MinibatchGradient(MODEL, None).draw_rows(rng, 3) is None
    with pytest.raises(ValueError, match="with replacement"):
        MinibatchGradient(MODEL, 10, "epochs").draw_rows(rng, 3)
