"""Likelihood weights: ``sample_weight`` in fit / partial_fit and the classifiers' ``class_weight``.

The weighted posterior is ``p(theta) prod_i p(y_i | x_i, theta)^{w_i}``. Exact references:
integer weights are duplicated rows, zero weights are dropped rows, a constant weight ``c``
tempers the likelihood (for Gaussian noise: multiplies its precision by ``c``), and the
weighted conjugate posterior of linear regression with known noise is Gaussian in closed
form. Sampler checks are within ``Z_MAX`` Monte Carlo standard errors of the exact means
and sds.
"""

import numpy as np
import pytest
import sklearn
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.class_weight import compute_sample_weight

from skbayes_sg import SGBayesDRBMClassifier, SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg._estimator import BaseSGBayes
from skbayes_sg._geometry import leverage_probabilities, weight_probabilities
from skbayes_sg.minibatch import ControlVariateGradient, MinibatchGradient
from skbayes_sg.models import LinearRegressionModel, LogisticModel, SoftmaxModel
from skbayes_sg.models._map import _map_estimate
from skbayes_sg.models.drbm import DRBMModel

from ._exact import assert_matches_gaussian

N, D = 60, 3


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    w = rng.integers(0, 4, N).astype(float)
    return rng, X, w


def _model_cases(rng):
    return [
        (LogisticModel, (rng.random(N) < 0.5).astype(float), {}),
        (SoftmaxModel, rng.integers(0, 3, N), {"n_classes": 3}),
        (LinearRegressionModel, rng.standard_normal(N), {}),
        (LinearRegressionModel, rng.standard_normal(N), {"noise_precision": 2.0}),
        (
            DRBMModel,
            rng.integers(0, 3, N),
            {"n_classes": 3, "n_hidden": 4, "operator_dtype": "float64", "random_state": 0},
        ),
    ]


@pytest.mark.parametrize("case", range(5), ids=["logistic", "softmax", "linreg", "linreg_fixed_noise", "drbm"])
def test_integer_weights_are_duplicated_rows_in_every_likelihood_evaluation(case):
    """Log likelihood, gradient, per-example sums (plain and control-variate differences),
    Hessian, its diagonal and products, leverages, and the multilevel path kernels."""
    rng, X, w = _data()
    cls, y, kw = _model_cases(rng)[case]
    rep = np.repeat(np.arange(N), w.astype(int))
    a = cls(X, y, **kw).set_sample_weight(w)
    b = cls(X[rep], y[rep], **kw)
    theta = 0.3 * rng.standard_normal(a.n_params)
    centre = 0.5 * theta
    v = rng.standard_normal(a.n_params)
    close = dict(rtol=1e-10, atol=1e-10)
    la, ga = a.log_likelihood_and_grad(theta)
    lb, gb = b.log_likelihood_and_grad(theta)
    np.testing.assert_allclose(la, lb, **close)
    np.testing.assert_allclose(ga, gb, **close)
    ops_a, ops_b = a.per_example_gradients(theta, np.arange(N)), b.per_example_gradients(theta, np.arange(rep.size))
    np.testing.assert_allclose(ops_a.mean() * N, ops_b.mean() * rep.size, **close)
    # Row i of the operator is w_i g_i (what the noise covariance of the minibatch force needs).
    unweighted = cls(X, y, **kw).per_example_gradients(theta, np.arange(N)).to_dense()
    np.testing.assert_allclose(ops_a.to_dense(), w[:, None] * unweighted, **close)
    np.testing.assert_allclose(ops_a.sum_of_squares(), ((w[:, None] * unweighted) ** 2).sum(axis=0), **close)
    if cls is DRBMModel:
        return
    diff_a = a.per_example_gradient_differences(theta, centre, np.arange(N))
    diff_b = b.per_example_gradient_differences(theta, centre, np.arange(rep.size))
    np.testing.assert_allclose(diff_a.mean() * N, diff_b.mean() * rep.size, **close)
    np.testing.assert_allclose(a.hessian_vector_product(theta, v), b.hessian_vector_product(theta, v), **close)
    np.testing.assert_allclose(a.hessian(theta), b.hessian(theta), **close)
    np.testing.assert_allclose(a.hessian_diagonal(theta), b.hessian_diagonal(theta), **close)
    hv = a.per_example_hvp(theta, v, np.arange(N))
    np.testing.assert_allclose(hv.mean() * N, b.loglik_hvp(theta, v), **close)
    np.testing.assert_allclose(a.loglik_grad_paths(theta[None], np.arange(N)[None])[0], gb, **close)
    np.testing.assert_allclose(a.loglik_hessian(theta), b.loglik_hessian(theta), **close)
    np.testing.assert_allclose(
        a.taylor_remainder_paths(theta[None], centre, np.arange(N)[None]),
        b.taylor_remainder_paths(theta[None], centre, np.arange(rep.size)[None]),
        **close,
    )
    L = np.linalg.cholesky(np.linalg.inv(a.hessian(theta)))
    h_a, h_b = a.leverage_scores(theta, L), b.leverage_scores(theta, L)
    np.testing.assert_allclose(np.bincount(rep, weights=h_b, minlength=N), h_a, **close)


def test_constant_weight_tempers_the_likelihood():
    """``w_i = c``: c times the log likelihood (any model); for Gaussian noise the same
    posterior as noise precision ``c tau``."""
    rng, X, _ = _data()
    y = (rng.random(N) < 0.5).astype(float)
    c = 0.37
    theta = rng.standard_normal(D + 1)
    la, ga = LogisticModel(X, y).set_sample_weight(np.full(N, c)).log_likelihood_and_grad(theta)
    lb, gb = LogisticModel(X, y).log_likelihood_and_grad(theta)
    np.testing.assert_allclose([la, *ga], c * np.array([lb, *gb]), rtol=1e-12)
    yr = rng.standard_normal(N)
    tempered = LinearRegressionModel(X, yr, noise_precision=2.0).set_sample_weight(np.full(N, c))
    hotter = LinearRegressionModel(X, yr, noise_precision=2.0 * c)
    np.testing.assert_allclose(tempered.grad_log_posterior(theta), hotter.grad_log_posterior(theta), rtol=1e-12)
    np.testing.assert_allclose(_map_estimate(tempered), _map_estimate(hotter), rtol=1e-9, atol=1e-12)


def test_map_of_integer_and_zero_weights_is_that_of_duplicated_and_dropped_rows():
    rng, X, w = _data(1)
    y = (X @ [1.0, -1.0, 0.5] + rng.logistic(size=N) > 0).astype(float)
    rep = np.repeat(np.arange(N), w.astype(int))
    weighted = _map_estimate(LogisticModel(X, y).set_sample_weight(w))
    np.testing.assert_allclose(weighted, _map_estimate(LogisticModel(X[rep], y[rep])), rtol=1e-7, atol=1e-9)
    keep = w > 0
    dropped = _map_estimate(LogisticModel(X, y).set_sample_weight(keep.astype(float)))
    np.testing.assert_allclose(dropped, _map_estimate(LogisticModel(X[keep], y[keep])), rtol=1e-7, atol=1e-9)


# -- the minibatch estimators -----------------------------------------------------------------


def _weighted_logistic(seed=2, n=300):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    y = (X @ [1.0, -1.0, 0.5] + rng.logistic(size=n) > 0).astype(float)
    w = np.exp(1.5 * rng.standard_normal(n)) * (rng.random(n) > 0.3)
    return LogisticModel(X, y).set_sample_weight(w), w


@pytest.mark.parametrize("kind", ["minibatch", "control_variate"])
def test_weighted_minibatch_force_is_unbiased_and_never_draws_zero_weight_rows(kind):
    """The exact expectation over the row distribution of the force equals the full-data
    weighted gradient: ``N sum_i p_i c_i (w_i g_i)`` with ``c_i = 1 / (N p_i)``."""
    model, w = _weighted_logistic()
    n = model.n_samples
    theta_map = _map_estimate(model)
    theta = theta_map + 0.3
    if kind == "minibatch":
        probs = weight_probabilities(model)
        target = MinibatchGradient(model, 10, row_probabilities=probs)
        rows = model.per_example_gradients(theta, np.arange(n)).to_dense()
        offset = 0.0
    else:
        L = np.linalg.cholesky(np.linalg.inv(model.hessian(theta_map)))
        probs = leverage_probabilities(model, theta_map, L)
        target = ControlVariateGradient(model, 10, theta_hat=theta_map, row_probabilities=probs)
        rows = model.per_example_gradient_differences(theta, theta_map, np.arange(n)).to_dense()
        offset = target.g_hat
    p = target._rows_dist.p
    expected = n * (p * target._row_scale) @ rows + offset + model.grad_log_prior(theta)
    np.testing.assert_allclose(expected, model.grad_log_posterior(theta), rtol=1e-10, atol=1e-10)
    drawn = target.draw_rows(np.random.default_rng(0), 2000)
    assert np.all(w[drawn] > 0)
    # The weights are in the probabilities, not in the reweighting: a drawn row of the plain
    # estimator counts mean(w) times its unweighted gradient.
    if kind == "minibatch":
        some = np.flatnonzero(w > 0)[:10]
        plain = LogisticModel(model.X, model.y).per_example_gradients(theta, some).to_dense()
        np.testing.assert_allclose(
            target._per_example(theta, some).to_dense(), w.mean() * plain, rtol=1e-10, atol=1e-12
        )


# -- through the estimators: the weighted conjugate posterior ---------------------------------


def _weighted_conjugate(N=400, tau=2.0, alpha=1.0, seed=3):
    """Data, skewed weights (a fifth of them zero) and the exact weighted posterior of
    linear regression with known noise precision ``tau``: ``N(m, S)``,
    ``S = (tau Xa' W Xa + alpha I)^-1``, ``m = tau S Xa' W y``."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, 3))
    y = X @ [1.0, -0.5, 0.25] + 0.5 + rng.standard_normal(N) / np.sqrt(tau)
    w = rng.gamma(0.5, 6.0, N) * (rng.random(N) > 0.2)
    Xa = np.column_stack([X, np.ones(N)])
    cov = np.linalg.inv(tau * Xa.T @ (w[:, None] * Xa) + alpha * np.eye(4))
    return X, y, w, tau * cov @ Xa.T @ (w * y), np.sqrt(np.diag(cov))


@pytest.mark.statistical
@pytest.mark.parametrize(
    "setting",
    [
        {"batch_size": 200, "gradient": "minibatch"},
        {"batch_size": 40, "gradient": "control_variate", "n_iter": 3000},
        {"batch_size": 200, "gradient": "minibatch", "batch_scheme": "epochs"},
        {"batch_size": None, "sampler": "gadmala"},
        {"batch_size": None},
    ],
    ids=["minibatch", "control_variate", "epochs", "gadmala", "hmc-default"],
)
def test_sampler_matches_the_weighted_conjugate_posterior(setting):
    """Means and sds within Z_MAX MCSE of the closed form: minibatch rows drawn in
    proportion to the weights, leverage-sampled control variates, reweighted epochs and
    the full-data gadMALA and the default full-data kernel (HMC)."""
    X, y, w, mean, sd = _weighted_conjugate()
    reg = SGBayesLinearRegression(**{"noise_precision": 2.0, "n_iter": 4000, "random_state": 0, **setting})
    reg.fit(X, y, sample_weight=w)
    assert_matches_gaussian(reg.samples_, mean, sd)


@pytest.mark.statistical
def test_partial_fit_weights_match_the_weighted_conjugate_posterior():
    """Chunks with and without weights: the posterior given all data seen, weighted."""
    X, y, w, _, _ = _weighted_conjugate()
    half = X.shape[0] // 2
    w_seen = np.concatenate([np.ones(half), w[half:]])
    Xa = np.column_stack([X, np.ones(X.shape[0])])
    cov = np.linalg.inv(2.0 * Xa.T @ (w_seen[:, None] * Xa) + np.eye(4))
    mean = 2.0 * cov @ Xa.T @ (w_seen * y)
    reg = SGBayesLinearRegression(noise_precision=2.0, n_iter=1500, batch_size=40, random_state=0)
    reg.partial_fit(X[:half], y[:half]).partial_fit(X[half:], y[half:], sample_weight=w[half:])
    assert_matches_gaussian(reg.samples_, mean, np.sqrt(np.diag(cov)))


def test_weights_of_one_leave_the_draws_unchanged():
    X, y, _, _, _ = _weighted_conjugate(N=200)
    kw = dict(n_iter=200, n_chains=2, batch_size=40, random_state=0)
    a = SGBayesLinearRegression(**kw).fit(X, y)
    b = SGBayesLinearRegression(**kw).fit(X, y, sample_weight=np.ones(len(y)))
    np.testing.assert_array_equal(a.samples_, b.samples_)


# -- class_weight ---------------------------------------------------------------------------


def _imbalanced(n=240, classes=2, seed=4):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = np.minimum((rng.random(n) * 1.5 * classes).astype(int), classes - 1)  # last class dominates
    return X, np.array(["a", "b", "c"])[y]


@pytest.mark.parametrize(
    "cls,classes",
    [(SGBayesLogisticRegression, 2), (SGBayesLogisticRegression, 3), (SGBayesDRBMClassifier, 3)],
    ids=["logistic", "softmax", "drbm"],
)
def test_class_weight_equals_the_corresponding_sample_weight(cls, classes):
    X, y = _imbalanced(classes=classes)
    rng = np.random.default_rng(5)
    sw = rng.uniform(0.5, 2.0, y.size)
    kw = dict(n_iter=60, n_chains=2, batch_size=50, random_state=0)
    if cls is SGBayesDRBMClassifier:
        kw["n_hidden"] = 3
    balanced = cls(class_weight="balanced", **kw).fit(X, y, sample_weight=sw)
    by_rows = cls(**kw).fit(X, y, sample_weight=sw * _balanced_rows(y, sw))
    np.testing.assert_allclose(balanced.samples_, by_rows.samples_, rtol=1e-9, atol=1e-12)
    as_dict = cls(class_weight={"a": 3.0}, **kw).fit(X, y)
    by_rows = cls(**kw).fit(X, y, sample_weight=np.where(y == "a", 3.0, 1.0))
    np.testing.assert_array_equal(as_dict.samples_, by_rows.samples_)


def _balanced_rows(y, sw):
    """scikit-learn's balanced class weights with sample weights (as LogisticRegression):
    ``sum(sw) / (K sum_{i in k} sw_i)`` for class ``k``."""
    classes, codes = np.unique(y, return_inverse=True)
    totals = np.bincount(codes, weights=sw)
    return (sw.sum() / (classes.size * totals))[codes]


def test_balanced_class_weight_without_sample_weight_is_compute_sample_weight():
    X, y = _imbalanced(classes=3)
    captured = {}
    clf = SGBayesLogisticRegression(class_weight="balanced", n_iter=20, n_chains=1)
    real = BaseSGBayes._fit

    def spy(self, X, y, streaming=False, sample_weight=None):
        captured["w"] = sample_weight
        return real(self, X, y, streaming=streaming, sample_weight=sample_weight)

    BaseSGBayes._fit, saved = spy, BaseSGBayes._fit
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf.fit(X, y)
            np.testing.assert_allclose(captured["w"], compute_sample_weight("balanced", y))
            # partial_fit: balanced over all the data seen, recomputed with each chunk.
            online = SGBayesLogisticRegression(class_weight="balanced", n_iter=20, n_chains=1)
            online.partial_fit(X[:100], y[:100], classes=["a", "b", "c"])
            np.testing.assert_allclose(captured["w"], compute_sample_weight("balanced", y[:100]))
            online.partial_fit(X[100:], y[100:], sample_weight=np.full(y.size - 100, 2.0))
            sw = np.concatenate([np.ones(100), np.full(y.size - 100, 2.0)])
            np.testing.assert_allclose(captured["w"], sw * _balanced_rows(y, sw))
    finally:
        BaseSGBayes._fit = saved


# -- metadata routing and validation ----------------------------------------------------------


def test_sample_weight_is_routed_by_gridsearchcv_and_pipeline():
    X, y = _imbalanced()
    w = np.random.default_rng(6).uniform(0.0, 3.0, y.size)
    kw = dict(n_iter=60, n_chains=2, batch_size=50, random_state=0)
    direct = SGBayesLogisticRegression(**kw).fit(X, y, sample_weight=w)
    with sklearn.config_context(enable_metadata_routing=True):
        clf = SGBayesLogisticRegression(**kw).set_fit_request(sample_weight=True).set_score_request(sample_weight=True)
        search = GridSearchCV(clf, {"alpha": ["auto"]}, cv=2).fit(X, y, sample_weight=w)
        np.testing.assert_array_equal(search.best_estimator_.samples_, direct.samples_)
        pipe = make_pipeline(
            StandardScaler().set_fit_request(sample_weight=False),
            SGBayesLogisticRegression(**kw).set_fit_request(sample_weight=True),
        )
        pipe.fit(X, y, sample_weight=w)
    unweighted = make_pipeline(StandardScaler(), SGBayesLogisticRegression(**kw)).fit(X, y)
    scaled = StandardScaler().fit_transform(X)
    np.testing.assert_array_equal(
        pipe[-1].samples_, SGBayesLogisticRegression(**kw).fit(scaled, y, sample_weight=w).samples_
    )
    assert not np.array_equal(pipe[-1].samples_, unweighted[-1].samples_)


@pytest.mark.parametrize(
    "weights,message",
    [
        (-np.ones(40), "Negative values"),
        (np.zeros(40), "at least one non-zero"),
        (np.ones(39), "sample_weight.shape"),
        (np.full(40, np.nan), "NaN"),
    ],
)
def test_invalid_sample_weight_raises(weights, message):
    X, y = _imbalanced(n=40)
    for est in (SGBayesLogisticRegression(n_iter=10), SGBayesLinearRegression(n_iter=10)):
        target = y if isinstance(est, SGBayesLogisticRegression) else X[:, 0]
        with pytest.raises(ValueError, match=message):
            est.fit(X, target, sample_weight=weights)


def test_invalid_class_weight_raises():
    X, y = _imbalanced(n=40)
    with pytest.raises(InvalidParameterError, match="class_weight"):
        SGBayesLogisticRegression(class_weight="even", n_iter=10).fit(X, y)
    with pytest.raises(ValueError, match="not in class_weight"):
        SGBayesLogisticRegression(class_weight={"z": 2.0}, n_iter=10).fit(X, y)


def test_partial_fit_rejects_weights_that_leave_no_data():
    X, y = _imbalanced(n=40)
    with pytest.raises(ValueError, match="zero for every row"):
        SGBayesLinearRegression(n_iter=10).partial_fit(X, X[:, 0], sample_weight=np.zeros(40))


def _sampled_noise_posterior(X, y, w, alpha=1.0, a=1e-6, b=1e-6):
    """Exact means and sds of ``(coef, intercept, s = log tau)`` of weighted linear regression
    with the noise precision sampled: conditionally on ``tau`` the weights are conjugate
    (``N(m(tau), S(tau))`` with ``Xa' W Xa``, ``Xa' W y``), and the marginal of ``s`` is
    ``(sum(w) / 2 + a) s - tau (y' W y) / 2 + tau^2 c' A^-1 c / 2 - log|A| / 2 - b tau``,
    ``A = alpha I + tau Xa' W Xa``, integrated on a fine grid in ``s``."""
    Xa = np.column_stack([X, np.ones(X.shape[0])])
    G, c, yy = Xa.T @ (w[:, None] * Xa), Xa.T @ (w * y), float(w @ (y * y))
    lam, U = np.linalg.eigh(G)
    r = U.T @ c
    grid = np.linspace(-4.0, 4.0, 8001)
    tau = np.exp(grid)[:, None]
    d = alpha + tau * lam
    logp = (
        (0.5 * w.sum() + a) * grid
        - 0.5 * tau[:, 0] * yy
        + 0.5 * tau[:, 0] ** 2 * np.sum(r**2 / d, axis=1)
        - 0.5 * np.log(d).sum(axis=1)
        - b * tau[:, 0]
    )
    p = np.exp(logp - logp.max())
    p /= p.sum()
    assert max(p[0], p[-1]) < 1e-12  # the grid covers the posterior of s
    m = (tau * r / d) @ U.T
    var = (1.0 / d) @ (U.T**2)
    mean = p @ m
    sd = np.sqrt(p @ (var + m**2) - mean**2)
    s_mean = p @ grid
    return np.append(mean, s_mean), np.append(sd, np.sqrt(p @ (grid - s_mean) ** 2))


@pytest.mark.statistical
def test_sampled_noise_precision_uses_the_sum_of_the_weights():
    """With ``tau`` sampled, weights multiply each row's precision and ``sum(w)`` replaces N:
    means and sds of the weights and of ``log tau`` within Z_MAX MCSE of the quadrature
    (full-data gadMALA; the minibatch terms of ``log tau`` are checked exactly against
    duplicated rows above)."""
    X, y, w, _, _ = _weighted_conjugate()
    mean, sd = _sampled_noise_posterior(X, y, w)
    reg = SGBayesLinearRegression(n_iter=3000, batch_size=None, sampler="gadmala", random_state=0)
    reg.fit(X, y, sample_weight=w)
    assert_matches_gaussian(reg.samples_, mean, sd)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_drbm_operator_scales_its_rows(dtype):
    """The DRBM's importance-sampled minibatches scale its structured operator row by row."""
    rng, X, _ = _data()
    model = DRBMModel(X, rng.integers(0, 3, N), n_classes=3, n_hidden=4, operator_dtype=dtype, random_state=0)
    theta = 0.3 * rng.standard_normal(model.n_params)
    c = rng.uniform(0.0, 3.0, N)
    dense = c[:, None] * model.per_example_gradients(theta, np.arange(N)).to_dense()
    ops = model.per_example_gradients(theta, np.arange(N)).scale_rows(c)
    v, u = rng.standard_normal(model.n_params), rng.standard_normal(N)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == "float64" else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ops.mean(), dense.mean(axis=0), **tol)
    np.testing.assert_allclose(ops.matvec(v), dense @ v, **tol)
    np.testing.assert_allclose(ops.rmatvec(u), dense.T @ u, **tol)
    np.testing.assert_allclose(ops.sum_of_squares(), (dense**2).sum(axis=0), **tol)


def test_warm_start_with_other_weights_redraws_the_row_probabilities():
    """Rows of zero weight in the first fit are never drawn there; a continuation without
    weights must be able to draw them (else its force would be biased)."""
    X, y, w, _, _ = _weighted_conjugate(N=200)
    reg = SGBayesLinearRegression(n_iter=100, n_chains=2, batch_size=40, warm_start=True, random_state=0)
    reg.fit(X, y, sample_weight=w)
    assert np.any(reg._geometry.row_probabilities.p == 0)
    reg.fit(X, y)
    assert np.all(reg._geometry.row_probabilities.p > 0)


def test_a_model_that_ignores_weights_refuses_them():
    from skbayes_sg.models.normal_gamma import NormalGammaModel

    model = NormalGammaModel(np.arange(5.0))
    model.set_sample_weight(np.ones(5))  # all ones: unweighted, accepted
    with pytest.raises(NotImplementedError, match="does not support sample weights"):
        model.set_sample_weight(np.arange(5.0))
