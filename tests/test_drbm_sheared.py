"""The DRBM's sheared chain coordinates (ShearedDRBM): the same posterior, exact gradients."""

import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg import SGBayesDRBMClassifier
from skbayes_sg.models import DRBMShear, ShearedDRBM
from skbayes_sg.models.drbm import DRBMModel

from .test_drbm import _reference


def _model(N=200, D=3, C=4, H=40, seed=0, dtype="float64", sparse=False, weights=None):
    # H C = 160: _block_rows() is 409, so 200 rows are one block; N=500 runs the blocked path.
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, size=(N, D))  # non-zero means: the inputs' shear moves c
    X[X < 0.3] = 0.0
    y = rng.integers(0, C, size=N)
    model = DRBMModel(sp.csr_matrix(X) if sparse else X, y, n_classes=C, n_hidden=H, operator_dtype=dtype, dtype=dtype)
    if weights is not None:
        model.set_sample_weight(weights)
    theta = 0.3 * rng.standard_normal(model.n_params)
    return model, DRBMShear.of(model).chain_model(model), theta, X, y


def _jacobian(sheared):
    """``d theta / d z`` (P, P), column by column (the map is linear)."""
    P = sheared.n_params
    return np.column_stack([sheared.to_theta(e) for e in np.eye(P)])


def test_coordinates_are_a_unit_jacobian_linear_map_and_its_inverse():
    model, sheared, theta, X, _ = _model()
    np.testing.assert_allclose(sheared.x_shift, X.mean(axis=0))
    assert sheared.u_shift == 0.5
    J = _jacobian(sheared)
    assert np.linalg.slogdet(J) == pytest.approx((1.0, 0.0), abs=1e-12)
    z = sheared.from_theta(theta)
    np.testing.assert_allclose(sheared.to_theta(z), theta, atol=1e-14)
    np.testing.assert_allclose(J @ z, theta, atol=1e-13)
    # Stacks of points (the chains' draws) map row by row.
    Z = np.stack([z, 2 * z])[:, None, :]
    np.testing.assert_allclose(sheared.to_theta(Z)[1, 0], sheared.to_theta(2 * z), atol=1e-14)
    # c~ = c + W xbar and d~ = d + sum_j U_j / 2.
    W, U, c, d = model.unpack(theta)
    _, _, ct, dt = model.unpack(z)
    np.testing.assert_allclose(ct, c + W @ X.mean(axis=0), atol=1e-14)
    np.testing.assert_allclose(dt, d + 0.5 * U.sum(axis=0), atol=1e-14)


@pytest.mark.parametrize("N", [200, 500])  # one block of rows, and the blocked path
@pytest.mark.parametrize("weighted", [False, True])
def test_density_and_every_gradient_are_the_models_at_theta_of_z(N, weighted):
    rng = np.random.default_rng(1)
    weights = rng.uniform(0.0, 2.0, size=N) if weighted else None
    model, sheared, theta, X, y = _model(N=N, weights=weights)
    z = sheared.from_theta(theta)
    ll, g = sheared.log_likelihood_and_grad(z)
    lp, gp = sheared.log_prior_and_grad(z)
    assert ll == pytest.approx(model.log_likelihood_and_grad(theta)[0], rel=1e-12)
    assert lp == pytest.approx(model.log_prior_and_grad(theta)[0], rel=1e-12)
    # By the chain rule every gradient in z is J' times theta's; the per-example ones row by
    # row, from the reference loops.
    J = _jacobian(sheared)
    np.testing.assert_allclose(g, model.log_likelihood_and_grad(theta)[1] @ J, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gp, model.log_prior_and_grad(theta)[1] @ J, rtol=1e-10, atol=1e-12)
    idx = np.arange(N)  # 500 rows: more than a block, the operator's blocked path
    op = sheared.per_example_gradients(z, idx)
    _, G = _reference(model, theta, X[idx], y[idx])
    if weighted:
        G *= weights[idx, None]
    Gz = G @ J
    dense = np.column_stack([op.matvec(e) for e in np.eye(model.n_params)])
    np.testing.assert_allclose(dense, Gz, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(op.mean(), Gz.mean(axis=0), rtol=1e-10, atol=1e-12)
    u = rng.standard_normal(idx.size)
    np.testing.assert_allclose(op.rmatvec(u), u @ Gz, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(op.gram(), Gz @ Gz.T, rtol=1e-10, atol=1e-10)
    assert op.total_sum_of_squares() == pytest.approx(float(np.sum(Gz * Gz)), rel=1e-10)


def test_gradients_match_finite_differences_of_the_log_posterior_in_z():
    model, sheared, theta, _, _ = _model(N=60, H=5)
    z = sheared.from_theta(theta)
    f = sheared.log_posterior
    eps = 1e-6
    fd = np.array([(f(z + eps * e) - f(z - eps * e)) / (2 * eps) for e in np.eye(model.n_params)])
    np.testing.assert_allclose(sheared.grad_log_posterior(z), fd, rtol=1e-6, atol=1e-6)


def test_sparse_inputs_keep_the_inputs_unsheared_and_the_class_shear():
    model, sheared, theta, X, y = _model(sparse=True)
    assert sheared.x_shift is None and sheared.u_shift == 0.5
    z = sheared.from_theta(theta)
    op = sheared.per_example_gradients(z, np.arange(10))
    assert sp.issparse(op.X)  # never densified
    J = _jacobian(sheared)
    _, G = _reference(model, theta, X[:10], y[:10])
    np.testing.assert_allclose(op.mean(), (G @ J).mean(axis=0), rtol=1e-10, atol=1e-12)


def test_features_far_outside_the_drbms_scale_are_not_centred():
    rng = np.random.default_rng(0)
    X = 1e6 + rng.standard_normal((30, 2))
    model = DRBMModel(X, rng.integers(0, 2, 30), n_classes=2, n_hidden=3)
    assert DRBMShear.of(model).x_shift is None
    no_intercept = DRBMModel(X / 1e6, rng.integers(0, 2, 30), n_classes=2, n_hidden=3, fit_intercept=False)
    assert DRBMShear.of(no_intercept) is None


def test_the_fit_runs_sheared_and_stores_its_draws_in_theta():
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 1.0, size=(120, 4))
    y = (X[:, 0] + X[:, 1] > 1.0).astype(int)
    clf = SGBayesDRBMClassifier(
        n_hidden=4, n_iter=60, burn_in=0, max_draws=None, n_chains=2, random_state=0, dtype="float64"
    ).fit(X, y)
    chain_model = clf._geometry.chain_model(clf._model)
    assert isinstance(chain_model, ShearedDRBM)
    np.testing.assert_allclose(chain_model.x_shift, X.mean(axis=0))
    # The last draw is the chains' final state mapped to theta: c = c~ - W xbar, d = d~ - sum_j U_j / 2.
    for k, state in enumerate(clf._chain_states):
        np.testing.assert_allclose(clf.samples_[k, -1], chain_model.to_theta(state.theta), atol=1e-12)
        assert not np.allclose(clf.samples_[k, -1], state.theta)
