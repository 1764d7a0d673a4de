"""The discriminative RBM: model maths, structured gradient operator, estimator."""

import importlib
import warnings

import numpy as np
import pytest
from scipy.special import expit, logsumexp
from sklearn.datasets import make_moons
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

from skbayes_sg.drbm import SGBayesDRBMClassifier
from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models.drbm import DRBMModel, DRBMPerExampleGradients


# -- a naive reference, written independently of the model's blocked kernel ------------------
def _reference(model, theta, X, y):
    """Per-example log likelihood (n,) and dense per-example gradients (n, P), by loops."""
    W, U, c, d = model.unpack(theta)
    n = X.shape[0]
    ll = np.empty(n)
    G = np.empty((n, model.n_params))
    H, D, C = model.n_hidden, model.n_features, model.n_classes
    for i in range(n):
        O = c[:, None] + U + (W @ X[i])[:, None]  # (H, C)
        F = d + np.logaddexp(0.0, O).sum(axis=0)
        logp = F - logsumexp(F)
        ll[i] = logp[y[i]]
        r = -np.exp(logp)
        r[y[i]] += 1.0
        A = expit(O) * r  # (H, C)
        a = A.sum(axis=1)
        parts = [np.outer(a, X[i]).ravel(), A.ravel()]
        if model.fit_intercept:
            parts += [a, r]
        G[i] = np.concatenate(parts)
        assert G[i].size == H * D + H * C + (H + C if model.fit_intercept else 0)
    return ll, G


def _small_model(fit_intercept=True, operator_dtype="float64", N=40, D=4, C=3, H=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    y = rng.integers(0, C, size=N)
    model = DRBMModel(
        X,
        y,
        n_classes=C,
        n_hidden=H,
        fit_intercept=fit_intercept,
        init_scale=1.0,
        operator_dtype=operator_dtype,
        random_state=seed,
    )
    theta = model.initial_point() + 0.5 * rng.normal(size=model.n_params)
    return model, theta, X, y


def test_parameter_count_matches_the_papers_letter_setting():
    X = np.zeros((3, 16))
    assert DRBMModel(X, np.zeros(3), n_classes=26, n_hidden=100).n_params == 4326


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_log_likelihood_and_gradients_match_reference_and_finite_differences(fit_intercept):
    model, theta, X, y = _small_model(fit_intercept)
    ll_ref, G_ref = _reference(model, theta, X, y)
    ll, grad = model.log_likelihood_and_grad(theta)
    assert ll == pytest.approx(ll_ref.sum(), rel=1e-12)
    np.testing.assert_allclose(grad, G_ref.sum(axis=0), rtol=1e-10, atol=1e-12)

    # Central differences of one example's log likelihood, every coordinate.
    eps = 1e-6
    eye = np.eye(model.n_params)
    for i in (0, 7):

        def f(t, i=i):
            return model.log_likelihood_and_grad(t, np.array([i]))[0]

        fd = np.array([(f(theta + eps * e) - f(theta - eps * e)) / (2 * eps) for e in eye])
        np.testing.assert_allclose(G_ref[i], fd, rtol=1e-6, atol=1e-8)

    # The posterior adds the Gaussian prior of precision alpha.
    lp, gp = model.log_posterior_and_grad(theta)
    assert lp == pytest.approx(ll - 0.5 * model.alpha * theta @ theta)
    np.testing.assert_allclose(gp, grad - model.alpha * theta)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-11), ("float32", 2e-5)])
def test_structured_products_equal_the_dense_ones(fit_intercept, dtype, rtol):
    model, theta, X, y = _small_model(fit_intercept, dtype)
    idx = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9])  # with repeats, as with replacement
    grads = model.per_example_gradients(theta, idx)
    assert isinstance(grads, DRBMPerExampleGradients)
    assert grads.A.shape == (idx.size, model.n_hidden, model.n_classes) and grads.A.dtype == np.dtype(dtype)
    _, G = _reference(model, theta, X[idx], y[idx])
    rng = np.random.default_rng(1)
    v = rng.normal(size=model.n_params)
    u = rng.normal(size=idx.size)

    def close(a, b, tol=rtol):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())

    close(grads.mean(), G.mean(axis=0), 1e-11)  # the force is double precision in any case
    close(grads.matvec(v), G @ v)
    close(grads.rmatvec(u), G.T @ u)
    close(grads.sum_of_squares(), (G * G).sum(axis=0))
    # The trace of G'G from either layout of A (this operator's was transposed above; a fresh
    # one-block operator still holds the kernel's).
    close(grads.total_sum_of_squares(), (G * G).sum())
    fresh = model.per_example_gradients(theta, idx)
    assert fresh._A is None
    close(fresh.total_sum_of_squares(), (G * G).sum())
    close(fresh.gram(), G @ G.T)  # the row space's inner products, from the kernel's layout
    close(grads.gram(), G @ G.T)
    V = np.cov(G, rowvar=False)
    close(grads.covariance_diag(), np.diag(V), max(rtol, 1e-9))
    close(grads.to_dense(), G)
    # mean() hands out a copy: the minibatch target scales it in place.
    m = grads.mean()
    m *= 0.0
    close(grads.mean(), G.mean(axis=0), 1e-11)


def test_single_precision_products_do_not_overflow_where_double_would_not():
    model, theta, X, y = _small_model(operator_dtype="float32")
    grads = model.per_example_gradients(theta, np.arange(20))
    _, G = _reference(model, theta, X[:20], y[:20])
    rng = np.random.default_rng(2)
    v, u = 1e60 * rng.normal(size=model.n_params), 1e60 * rng.normal(size=20)  # beyond float32's 3e38
    np.testing.assert_allclose(grads.matvec(v), G @ v, rtol=2e-5, atol=2e-5 * np.abs(G @ v).max())
    np.testing.assert_allclose(grads.rmatvec(u), G.T @ u, rtol=2e-5, atol=2e-5 * np.abs(G.T @ u).max())


def test_blocked_kernel_and_predictive_match_reference_beyond_one_block():
    # H C = 26 * 60: one block holds 42 rows, so 130 rows span four blocks.
    model, theta, X, y = _small_model(N=130, D=3, C=26, H=60)
    ll_ref, _ = _reference(model, theta, X, y)
    ll, _ = model.log_likelihood_and_grad(theta)
    assert ll == pytest.approx(ll_ref.sum(), rel=1e-12)
    thetas = np.stack([theta, model.initial_point()])
    proba = model.predict_draws(thetas, X)
    assert proba.shape == (2, 130, 26)
    np.testing.assert_allclose(proba.sum(axis=-1), 1.0)
    np.testing.assert_allclose(np.log(proba[0, np.arange(130), y]), ll_ref, rtol=1e-10)


def test_stable_for_extreme_parameters_and_many_hidden_units():
    model, theta, X, y = _small_model()
    ll, grad = model.log_likelihood_and_grad(1e3 * theta)
    assert np.isfinite(ll) and np.all(np.isfinite(grad))
    assert np.all(np.isfinite(model.predict_draws(1e3 * theta[None], X)))
    # 1,100 units at o = 0: prod (1 + e^0) = 2^1100 overflows unless taken in groups.
    rng = np.random.default_rng(0)
    big = DRBMModel(rng.normal(size=(5, 2)), np.arange(5) % 2, n_classes=2, n_hidden=1100)
    ll, grad = big.log_likelihood_and_grad(np.zeros(big.n_params))
    assert ll == pytest.approx(5 * np.log(0.5))
    # At W = U = 0 the gradients of W and c vanish (sum_y r_iy = 0): the saddle of init="zeros".
    gW, gU, gc, gd = big.unpack(grad)
    np.testing.assert_allclose(gW, 0.0, atol=1e-12)
    np.testing.assert_allclose(gc, 0.0, atol=1e-12)
    assert np.all(np.isfinite(gU))


def test_initial_point_is_seeded_random_at_init_scale():
    X = np.zeros((4, 30))
    a = DRBMModel(X, np.zeros(4), n_classes=10, n_hidden=50, init_scale=0.1, random_state=3)
    b = DRBMModel(X, np.zeros(4), n_classes=10, n_hidden=50, init_scale=0.1, random_state=3)
    c = DRBMModel(X, np.zeros(4), n_classes=10, n_hidden=50, init_scale=0.1, random_state=4)
    np.testing.assert_array_equal(a.initial_point(), b.initial_point())
    np.testing.assert_array_equal(a.initial_point(), a.initial_point())
    assert not np.array_equal(a.initial_point(), c.initial_point())
    W, U, cb, d = a.unpack(a.initial_point())
    weights = np.concatenate([W.ravel(), U.ravel()])
    assert weights.std() == pytest.approx(0.1, rel=0.05)  # 2,000 draws: 3.5 % standard error
    assert not np.any(cb) and not np.any(d)


def test_param_names_follow_the_layout():
    model, _, _, _ = _small_model()
    names = model.param_names(["a", "b", "c", "e"], ["u", "v", "w"])
    assert len(names) == model.n_params
    assert names[0] == "W[0, a]" and names[5 * 4] == "U[0, u]" and names[-1] == "d[w]"


def test_model_without_data_still_predicts():
    model, theta, X, _ = _small_model()
    light = model.without_data()
    assert light.X is None and light.y is None
    np.testing.assert_allclose(light.predict_draws(theta[None], X), model.predict_draws(theta[None], X))


# -- estimator -----------------------------------------------------------------------------
# float64 kernel: scikit-learn's sample-weight check asks weighted and repeated rows to agree
# to 1e-7, and the float32 kernel's sums (relative error ~1e-6 per gradient) differ between
# the two layouts; the chains then amplify the difference.
@parametrize_with_checks([SGBayesDRBMClassifier(n_hidden=8, n_iter=200, n_chains=2, max_draws=30, dtype="float64")])
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_documented_defaults_match_the_signature():
    import inspect
    import re

    doc = SGBayesDRBMClassifier.__doc__
    defaults = {k: p.default for k, p in inspect.signature(SGBayesDRBMClassifier).parameters.items()}
    documented = dict(re.findall(r"^    (\w+) : .*default=(.*)$", doc, re.M))
    assert set(documented) == set(defaults)
    for name, value in defaults.items():
        assert documented[name] == (f'"{value}"' if isinstance(value, str) else repr(value)), name


def _moons():
    X, y = make_moons(n_samples=300, noise=0.15, random_state=0)
    return X, y


def _samplers():
    """Every sampler class available now, with settings for the moons problem.

    CCAdL, MCCAdL and GadMALA are being added alongside; their cases run once the
    modules exist (the registry in ``skbayes_sg.samplers`` picks them up).
    """
    from skbayes_sg import samplers as s

    out = [
        ("sgld", dict(step_size=1e-2), 50, 1500),
        ("sghmc", dict(step_size=3e-2, friction=5.0), 50, 1500),
        ("sgnht", dict(step_size=3e-2, friction=5.0), 50, 1500),
    ]
    if hasattr(s, "CCAdL"):
        # Euler-type and unstable at h = 0.03 (the papers' point), hence the smaller step.
        out.append(("ccadl", dict(step_size=2e-2, friction=5.0), 50, 2000))
    if hasattr(s, "MCCAdL"):
        out.append(("mccadl", dict(step_size=3e-2, friction=5.0), 50, 1500))
    if hasattr(s, "GadMALA"):
        out.append(("gadmala", {}, None, 3000))
    return out


@pytest.mark.parametrize("name, params, batch_size, n_iter", _samplers(), ids=[case[0] for case in _samplers()])
def test_every_sampler_learns_a_nonlinear_boundary(name, params, batch_size, n_iter):
    samplers = importlib.import_module("skbayes_sg.samplers")
    sampler = samplers.SAMPLERS[name](**params)
    X, y = _moons()
    labels = np.array(["blue", "red"])[y]
    # alpha = 0.1: under alpha = 1 even the MAP point is nearly linear on these moons (0.85).
    clf = SGBayesDRBMClassifier(
        n_hidden=10,
        alpha=0.1,
        init_scale=1.0,
        sampler=sampler,
        n_iter=n_iter,
        batch_size=batch_size,
        n_chains=2,
        random_state=0,
    )
    clf.fit(X, labels)
    proba = clf.predict_proba(X)
    assert proba.shape == (300, 2) and np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    # A linear classifier gets ~0.86 on these moons; the DRBM must bend the boundary.
    assert clf.score(X, labels) > 0.92
    assert set(clf.predict(X)) <= {"blue", "red"}
    assert clf.predict_proba_samples(X[:5]).shape == (clf.samples_.shape[0] * clf.samples_.shape[1], 5, 2)
    assert clf.components_.shape == (10, 2) and clf.class_weights_.shape == (10, 2)
    assert clf.diagnostics_["n_grad_evals"] > 0


def test_random_init_gives_each_chain_its_own_reproducible_start():
    X, y = _moons()
    kw = dict(n_hidden=4, n_iter=20, n_chains=3, random_state=5, sampler="sgld")
    clf = SGBayesDRBMClassifier(**kw).fit(X, y)
    model = clf._build_model(X, y)
    starts = clf._initial_points(model)
    assert starts.shape == (3, model.n_params)
    assert not np.allclose(starts[0], starts[1])
    np.testing.assert_array_equal(SGBayesDRBMClassifier(**kw).fit(X, y).samples_, clf.samples_)
    other = SGBayesDRBMClassifier(**{**kw, "random_state": 6})
    other.classes_ = clf.classes_
    assert not np.allclose(other._initial_points(other._build_model(X, y)), starts)


def test_other_inits_and_no_intercept():
    X, y = _moons()
    clf = SGBayesDRBMClassifier(
        n_hidden=3, n_iter=10, n_chains=2, init="zeros", random_state=0, fit_intercept=False, sampler="sgld"
    ).fit(X, y)
    assert clf.samples_.shape[-1] == 3 * 2 + 3 * 2
    assert not np.any(clf.intercept_hidden_) and not np.any(clf.intercept_class_)
    P = 3 * 2 + 3 * 2 + 3 + 2
    start = np.full(P, 0.1)
    clf = SGBayesDRBMClassifier(n_hidden=3, n_iter=5, n_chains=2, init=start, random_state=0, sampler="sgld").fit(X, y)
    assert clf.samples_.shape == (2, 4, P)
    with pytest.raises(ValueError, match="init array has shape"):
        SGBayesDRBMClassifier(n_hidden=3, n_iter=5, init=np.zeros(4)).fit(X, y)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_warm_start_and_partial_fit_continue_the_chains():
    X, y = _moons()
    kw = dict(n_hidden=4, n_iter=40, n_chains=2, sampler="sgld", random_state=0)
    clf = SGBayesDRBMClassifier(warm_start=True, **kw).fit(X, y).fit(X, y)
    assert clf.n_iter_ == 80 and clf.samples_.shape == (2, 72, 4 * 2 + 4 * 2 + 4 + 2)
    stream = SGBayesDRBMClassifier(**kw)
    stream.partial_fit(X[:100], y[:100], classes=[0, 1]).partial_fit(X[100:], y[100:])
    assert stream.n_iter_ == 80 and np.all(np.isfinite(stream.predict_proba(X)))
    assert len(stream._param_names()) == stream.samples_.shape[-1] == 22


def test_map_init_starts_at_a_stationary_point():
    X, y = _moons()
    clf = SGBayesDRBMClassifier(n_hidden=4, init="map", random_state=0)
    clf.classes_ = np.unique(y)
    model = clf._build_model(X, y)
    start = clf._initial_points(model)[0]
    _, grad = model.log_posterior_and_grad(start)
    _, grad0 = model.log_posterior_and_grad(model.initial_point())
    assert np.linalg.norm(grad) < 1e-2 * np.linalg.norm(grad0)


def test_minibatch_force_is_unbiased_over_the_operator():
    model, theta, X, y = _small_model()
    target = MinibatchGradient(model, batch_size=10)
    rng = np.random.default_rng(0)
    forces = np.stack([target.gradient(theta, rng)[0] for _ in range(4000)])
    exact = model.grad_log_posterior(theta)
    se = forces.std(axis=0) / np.sqrt(len(forces))
    assert np.all(np.abs(forces.mean(axis=0) - exact) < 4.5 * se + 1e-12)


def test_huge_features_fall_back_to_double_precision_operators():
    # Issue 20: features of size 1e150 overflowed the float32 per-example products
    # ("overflow encountered in cast"); they now run in float64, silently and finitely.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 3)) * 1e150
    y = rng.integers(0, 2, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = SGBayesDRBMClassifier(n_hidden=3, n_iter=20, n_chains=2, random_state=0).fit(X, y)
        assert np.isfinite(clf.predict_proba(X)).all()
    assert DRBMModel(X, y, n_classes=2, n_hidden=3).operator_dtype == np.float64
    assert DRBMModel(X / 1e150, y, n_classes=2, n_hidden=3).operator_dtype == np.float32


def test_one_block_operator_defers_the_transposed_copy_and_equals_the_eager_one():
    # Issue 31: a minibatch in one block keeps the kernel's (n, C, H) array and builds A (n, H, C)
    # on the first product; the force's operator, used for its mean alone, never does. The
    # products are the same, bit for bit, as those of the operator whose A is copied eagerly
    # (the blocked path's).
    model, theta, X, y = _small_model(True, "float32")
    idx = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9])
    lazy = model.per_example_gradients(theta, idx)
    assert lazy._A is None
    lazy.mean()
    assert lazy._A is None  # the mean needs no A
    Xi, yi, w, _ = model.rows.gather(idx)
    A = np.empty((idx.size, model.n_hidden, model.n_classes), dtype=model.operator_dtype)
    _, a, r, A_sum = model._batch(theta, Xi, yi, A_out=A, w=w)
    eager = DRBMPerExampleGradients(Xi, A, a, r, model.fit_intercept, A_sum=A_sum)
    rng = np.random.default_rng(3)
    v, u = rng.normal(size=model.n_params), rng.normal(size=idx.size)
    np.testing.assert_array_equal(lazy.mean(), eager.mean())
    np.testing.assert_array_equal(lazy.matvec(v), eager.matvec(v))
    np.testing.assert_array_equal(lazy.rmatvec(u), eager.rmatvec(u))
    np.testing.assert_array_equal(lazy.sum_of_squares(), eager.sum_of_squares())
    np.testing.assert_array_equal(lazy.A, eager.A)
    # scale_rows (importance weights) builds A and scales it in place, as before.
    c = rng.uniform(0.5, 2.0, idx.size)
    np.testing.assert_array_equal(lazy.scale_rows(c).matvec(v), eager.scale_rows(c).matvec(v))
