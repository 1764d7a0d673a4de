"""mCCAdL's C step in the minibatch's row space (``samplers/_row_space.py``) against
``scipy.linalg.expm`` of the ``P x P`` covariance, and the route ``c_step`` takes to it."""

import numpy as np
import pytest
import scipy.linalg

from skbayes_sg.models._gradients import DensePerExampleGradients
from skbayes_sg.samplers._expmv import NoiseCovariance, c_step


class _WithGram(DensePerExampleGradients):
    """Dense per-example gradients that also form their Gram matrix, as the DRBM's do."""

    def gram(self):
        return self.G @ self.G.T


def _problem(seed, n, P):
    rng = np.random.default_rng(seed)
    G = rng.normal(size=(n, P)) * rng.gamma(1.0, size=P) + rng.normal(size=P)  # rows with a common mean
    return _WithGram(G), rng.normal(size=P)


@pytest.mark.parametrize("tol", [2.0**-6, 2.0**-24, 2.0**-53])
@pytest.mark.parametrize("seed,n,P,scale", [(0, 5, 40, 0.01), (1, 20, 60, 0.3), (2, 30, 200, 0.05), (3, 12, 25, 4.0)])
def test_row_space_c_step_matches_dense_expm(tol, seed, n, P, scale):
    grads, p = _problem(seed, n, P)
    noise_scale = 3.0
    Sigma = noise_scale * np.cov(grads.G.T)
    exact = scipy.linalg.expm(-scale * 0.7 * Sigma) @ p
    f, n_prod = c_step(p, grads, noise_scale, 0.7, scale, tol=tol)
    assert n_prod == 1  # one product with Sigma's rows: the route taken was the row space
    # Backward error tol on ||t A||: a forward error of about tol ||t A|| (as test_expmv's bound).
    bound = max(tol * max(1.0, np.linalg.norm(scale * 0.7 * Sigma, 2)) * 10, 1e-13)
    assert np.linalg.norm(f - exact) <= bound * np.linalg.norm(p), np.linalg.norm(f - exact)


def test_row_space_is_taken_only_with_fewer_rows_than_parameters_and_a_gram():
    grads, p = _problem(4, 50, 20)  # n > P: the Taylor / Lanczos route in P dimensions
    _, n_prod = c_step(p, grads, 3.0, 0.7, 0.05, tol=2.0**-24)
    assert n_prod > 1
    plain, p = _problem(5, 10, 30)
    plain = DensePerExampleGradients(plain.G)  # no gram
    _, n_prod = c_step(p, plain, 3.0, 0.7, 0.05, tol=2.0**-24)
    assert n_prod > 1
    # method="taylor" or "lanczos" keep their own route.
    grads, p = _problem(6, 10, 30)
    _, n_prod = c_step(p, grads, 3.0, 0.7, 0.05, tol=2.0**-24, method="taylor")
    assert n_prod > 1


def test_row_space_c_step_of_a_diverged_chain_is_not_finite():
    grads, p = _problem(7, 10, 30)
    grads.G[0, 0] = np.inf
    f, _ = c_step(p, grads, 3.0, 0.7, 0.05)
    assert not np.isfinite(f).all()


def test_a_reused_covariance_forms_its_gram_once_and_stays_exact():
    """mCCAdL's ``sigma_refresh`` reuses one minibatch's ``Sigma``: the Gram matrix is formed
    once (a rescaled copy shares it, the scale is applied per step), and every C step from
    it, at either scale, still matches the dense exponential."""
    grads, p = _problem(8, 15, 80)
    calls = []
    gram = grads.gram
    grads.gram = lambda: calls.append(1) or gram()
    noise_scale = 3.0
    Sigma = noise_scale * np.cov(grads.G.T)
    cov = NoiseCovariance(grads, noise_scale, -0.05)
    for scale in (0.05, 0.05, 0.2):
        exact = scipy.linalg.expm(-scale * 0.7 * Sigma) @ p
        f, _ = c_step(p, cov, noise_scale, 0.7, scale, tol=2.0**-53)
        assert np.linalg.norm(f - exact) <= 1e-12 * np.linalg.norm(p)
    assert len(calls) == 1
