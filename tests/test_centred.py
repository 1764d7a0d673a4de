"""The centred diagonal whitening (``preconditioner="centred"``, the ``"auto"`` choice for GLMs
with intercepts past 1,000 parameters): its factor's algebra against the explicit matrix, its
model's gradients against finite differences, its conditioning, and a default-style fit against
an importance-sampled posterior."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import eigvalsh

from skbayes_sg import SGBayesLogisticRegression
from skbayes_sg.diagnostics import mcse_mean
from skbayes_sg.models import LinearRegressionModel, LogisticModel, SoftmaxModel
from skbayes_sg.models._centred import CentredScaling, CentredWhitenedModel, centred_factor
from skbayes_sg.preconditioning import curvature_factor, resolve_preconditioner
from skbayes_sg.samplers import MCCAdL

from ._exact import Z_MAX, importance_summary, mcse_sd, t_proposal


def _binary_rows(N, D, k, seed):
    """Sparse binary rows with ``k`` ones each (duplicates merged): every coefficient is coupled
    to the intercept through its feature's mean, and the rows' near-constant sums make one
    direction of the coefficients nearly collinear with the intercept."""
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, D, size=(N, k))
    X = sp.csr_matrix((np.ones(N * k), cols.ravel(), np.arange(0, N * k + 1, k)), shape=(N, D))
    X.sum_duplicates()
    X.data[:] = 1.0
    return X, rng


def _logistic(N=600, D=40, k=4, seed=0):
    X, rng = _binary_rows(N, D, k, seed)
    z = X @ (0.5 * rng.standard_normal(D)) - 0.5
    return X, (rng.random(N) < 1.0 / (1.0 + np.exp(-z))).astype(float)


def _models():
    X, y = _logistic()
    rng = np.random.default_rng(1)
    Xd = X.toarray()
    return {
        "logistic": LogisticModel(X, y, alpha=1.0, alpha_intercept=0.01),
        "softmax": SoftmaxModel(Xd[:, :12], rng.integers(0, 3, X.shape[0]), n_classes=3, alpha=0.5),
        # An extra coordinate (the log noise precision) after the intercept, left as it is.
        "linreg": LinearRegressionModel(Xd[:, :12], Xd[:, :12] @ rng.normal(size=12) + rng.normal(size=X.shape[0])),
    }


MODELS = _models()


def _factor(model, seed=2):
    """A factor with every part in use: centring, scales and a rank-2 correction."""
    rng = np.random.default_rng(seed)
    P = model.n_params
    D, K = model.n_features, model.n_outputs
    V = np.linalg.qr(rng.normal(size=(P, 2)))[0]
    return CentredScaling(0.5 + rng.random(P), rng.normal(size=(D, K)), V, np.array([1.5, -0.4]))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_factor_products_are_those_of_its_matrix(name):
    model = MODELS[name]
    F = _factor(model)
    P = model.n_params
    D, K = model.n_features, model.n_outputs
    # The matrix from its definition L = T diag(s) E, T unit lower triangular.
    T = np.eye(P)
    for k in range(K):
        T[D * K + k, np.arange(D) * K + k] = -F.mu[:, k]
    L = T @ np.diag(F.s) @ (np.eye(P) + F.V @ np.diag(F.c) @ F.V.T)
    np.testing.assert_allclose(F.dense(), L, rtol=1e-12, atol=1e-12)
    rng = np.random.default_rng(3)
    v, V = rng.normal(size=P), rng.normal(size=(5, P))
    np.testing.assert_allclose(F.left(v), L @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(F.left(V), V @ L.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(F.right(v), L.T @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(F.right(V), V @ L, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(F.solve(v), np.linalg.solve(L, v), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(F.solve(V), np.linalg.solve(L, V.T).T, rtol=1e-10, atol=1e-10)
    H = rng.normal(size=(P, P))
    H = H + H.T
    np.testing.assert_allclose(F.congruent(H), L.T @ H @ L, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_centred_model_gradients_match_finite_differences(name):
    model = MODELS[name]
    F = _factor(model)
    rng = np.random.default_rng(4)
    m = 0.1 * rng.normal(size=model.n_params)
    wm = CentredWhitenedModel(model, m, F)
    z = 0.3 * rng.normal(size=model.n_params)
    np.testing.assert_allclose(wm.from_theta(wm.to_theta(z)), z, rtol=1e-10, atol=1e-12)
    _, g = wm.log_posterior_and_grad(z)
    eps = 1e-6
    fd = np.array(
        [
            (wm.log_posterior_and_grad(z + eps * e)[0] - wm.log_posterior_and_grad(z - eps * e)[0]) / (2 * eps)
            for e in np.eye(model.n_params)
        ]
    )
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-5)
    # The prior's and the likelihood's parts, as the minibatch estimators take them.
    np.testing.assert_allclose(wm.log_likelihood_and_grad(z)[1] + wm.grad_log_prior(z), g, rtol=1e-10, atol=1e-8)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("differences", [False, True])
def test_centred_per_example_operator_matches_its_dense_rows(name, differences):
    model = MODELS[name]
    F = _factor(model)
    rng = np.random.default_rng(5)
    P = model.n_params
    wm = CentredWhitenedModel(model, 0.1 * rng.normal(size=P), F)
    z, z_hat = 0.3 * rng.normal(size=P), 0.3 * rng.normal(size=P)
    idx = rng.integers(0, model.n_samples, size=23)
    if differences:
        ops = wm.per_example_gradient_differences(z, z_hat, idx)
        G = model.per_example_gradient_differences(wm.to_theta(z), wm.to_theta(z_hat), idx).to_dense()
    else:
        ops = wm.per_example_gradients(z, idx)
        G = model.per_example_gradients(wm.to_theta(z), idx).to_dense()
    GL = G @ F.dense()  # the chain rule, row by row: L' g_i
    np.testing.assert_allclose(ops.to_dense(), GL, rtol=1e-10, atol=1e-10)
    v, u = rng.normal(size=P), rng.normal(size=23)
    np.testing.assert_allclose(ops.mean(), GL.mean(axis=0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ops.matvec(v), GL @ v, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ops.rmatvec(u), GL.T @ u, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ops.sum_of_squares(), (GL**2).sum(axis=0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ops.total_sum_of_squares(), (GL**2).sum(), rtol=1e-9)
    np.testing.assert_allclose(ops.covariance_diag(), GL.var(axis=0, ddof=1), rtol=1e-8, atol=1e-10)
    c = rng.random(23)
    np.testing.assert_allclose(ops.scale_rows(c).to_dense(), c[:, None] * GL, rtol=1e-10, atol=1e-10)


def test_leverages_and_row_weights_are_those_of_the_dense_factor():
    model = MODELS["logistic"]
    F = _factor(model)
    theta = 0.1 * np.random.default_rng(6).normal(size=model.n_params)
    Xt = np.column_stack([model.rows.X.toarray(), np.ones(model.n_samples)])
    q = np.einsum("np,np->n", Xt @ F.dense(), Xt @ F.dense())
    np.testing.assert_allclose(model.whitened_row_weights(F, None), q, rtol=1e-10)
    s = 1.0 / (1.0 + np.exp(-(Xt @ theta)))
    np.testing.assert_allclose(model.leverage_scores(theta, F), s * (1 - s) * q, rtol=1e-10)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_centring_removes_the_intercept_coupling_at_the_mode(name):
    # T' H T has no intercept-coefficient block, and s its diagonal's inverse square root.
    model = MODELS[name]
    theta = 0.1 * np.random.default_rng(7).normal(size=model.n_params)
    F = centred_factor(model, theta)
    H = model.hessian(theta)
    D, K = model.n_features, model.n_outputs
    T = CentredScaling(np.ones(model.n_params), F.mu).dense()
    C = T.T @ H @ T
    for k in range(K):
        np.testing.assert_allclose(C[np.arange(D) * K + k, D * K + k], 0.0, atol=1e-9 * np.abs(H).max())
    np.testing.assert_allclose(F.s, 1.0 / np.sqrt(np.diag(C)), rtol=1e-8)


def test_centred_whitening_conditions_what_the_diagonal_does_not():
    # Wide sparse binary rows of 20 ones (the benchmark's design, scaled down): the diagonal
    # whitening leaves an eigenvalue near 20 (the intercept with the coefficients' sum) and
    # one near 0 (the rows' constant sum); centring removes the first, the Lanczos correction
    # the second.
    X, rng = _binary_rows(4000, 300, 20, 8)
    y = (rng.random(4000) < 1.0 / (1.0 + np.exp(-(X @ (0.3 * rng.standard_normal(300)) - 0.5)))).astype(float)
    model = LogisticModel(X, y, alpha=1.0, alpha_intercept=0.01)
    theta = np.zeros(model.n_params)
    H = model.hessian(theta)
    d = curvature_factor(model, theta, "diag")
    lam_diag = eigvalsh(d[:, None] * H * d)
    F = centred_factor(model, theta)
    lam = eigvalsh(F.congruent(H))
    assert lam_diag[-1] > 15 and lam_diag[-1] / lam_diag[0] > 1000
    assert F.c.size >= 1 and lam[-1] / lam[0] < 4.0, (lam[:3], lam[-3:])


def test_auto_resolves_to_centred_for_glms_with_intercepts_past_the_dense_bound():
    assert resolve_preconditioner("auto", 1000, centrable=True) == "dense"
    assert resolve_preconditioner("auto", 1001, centrable=True) == "centred"
    assert resolve_preconditioner("auto", 1001) == "diag"
    assert resolve_preconditioner("centred", 10) == "diag"
    assert resolve_preconditioner("diag", 5000, centrable=True) == "diag"


def _logistic_reference(X, y, alpha, alpha_intercept, n_draws=20_000, df=7, seed=0):
    """Means and sds of the logistic posterior (intercept last) with their MCSEs, by importance
    sampling from a multivariate t at the MAP, in numpy (as ``_exact.poisson_reference``)."""
    Xa = np.column_stack([X, np.ones(len(y))])
    P = Xa.shape[1]
    prec = np.append(np.full(P - 1, alpha), alpha_intercept)
    theta = np.zeros(P)
    for _ in range(50):  # Newton: the log posterior is concave
        s = 1.0 / (1.0 + np.exp(-(Xa @ theta)))
        H = Xa.T @ (Xa * (s * (1 - s))[:, None]) + np.diag(prec)
        theta = theta + np.linalg.solve(H, Xa.T @ (y - s) - prec * theta)
    draws, log_q = t_proposal(theta, H, n_draws, df, seed)
    Z = draws @ Xa.T
    log_p = Z @ y - np.logaddexp(0.0, Z).sum(axis=1) - 0.5 * np.einsum("sp,p,sp->s", draws, prec, draws)
    return importance_summary(draws, log_p - log_q)


@pytest.mark.statistical
def test_centred_mccadl_fit_is_exact_on_sparse_binary_rows():
    # mCCAdL at its auto step and batch in the centred coordinates (minibatches with control
    # variates), against the importance-sampled posterior: each mean and sd within Z_MAX of
    # the fit's and the reference's Monte Carlo errors combined.
    X, y = _logistic(N=600, D=40, k=4, seed=0)
    clf = SGBayesLogisticRegression(
        sampler=MCCAdL(preconditioner="centred"), alpha=1.0, batch_size=100, n_iter=3000, random_state=0
    ).fit(X, y)
    assert clf.diagnostics_["preconditioner"] == "centred"
    assert clf.diagnostics_["gradient"] == "control_variate"
    ref = _logistic_reference(X.toarray(), y, 1.0, clf.alpha_intercept)
    assert ref.ess > 5000
    draws = clf.samples_
    flat = draws.reshape(-1, draws.shape[-1])
    z_mean = (flat.mean(axis=0) - ref.mean) / np.hypot(mcse_mean(draws), ref.mcse_mean)
    z_sd = (flat.std(axis=0, ddof=1) - ref.sd) / np.hypot(mcse_sd(draws), ref.mcse_sd)
    report = f"in MCSE: means {np.round(z_mean, 1)}, sds {np.round(z_sd, 1)}"
    assert np.all(np.abs(z_mean) < Z_MAX) and np.all(np.abs(z_sd) < Z_MAX), report


def test_large_data_step_scale_applies_to_the_centred_whitening():
    # mCCAdL past the exact sampler's bound doubles its curvature constant in the dense and
    # the centred coordinates (both near N(0, I) there), not in the diagonal ones.
    from types import SimpleNamespace

    from skbayes_sg._estimator import LARGE_DATA_STEP_SCALE

    large, small = SimpleNamespace(n_samples=50_000, n_params=2001), SimpleNamespace(n_samples=600, n_params=41)
    est = SGBayesLogisticRegression()
    base = est._fresh_step_scale(MCCAdL(), large, "diag")
    assert est._fresh_step_scale(MCCAdL(), large, "centred") == LARGE_DATA_STEP_SCALE * base
    assert est._fresh_step_scale(MCCAdL(), small, "centred") == base
