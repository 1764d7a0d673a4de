"""Multilevel SGLD: model curvature, level couplings, MLMC driver and estimator integration.

References are exact: finite differences for the derivatives, the closed-form covariance of
the Euler-discretised Langevin dynamics for full-data Bayesian linear regression, and the
conjugate Gaussian posterior for the multilevel estimates. Statistical tolerances are
derived from the Monte Carlo error of the quantity tested.
"""

import numpy as np
import pytest
from scipy import stats

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg.minibatch import MinibatchGradient, TaylorControlVariateGradient
from skbayes_sg.models import LinearRegressionModel, LogisticModel, NormalGammaModel, SoftmaxModel, find_map
from skbayes_sg.models._map import _map_estimate, _newton_map
from skbayes_sg.multilevel import CoupledSGLD, estimate
from skbayes_sg.multilevel._coupling import _coarse_rows
from skbayes_sg.samplers import MLSGLD, SGLD
from skbayes_sg.samplers._substeps import langevin_step


def _models(rng, N=40, D=3):
    X = rng.standard_normal((N, D))
    return {
        "logistic": LogisticModel(X, (rng.random(N) < 0.5).astype(float), alpha=0.7),
        "softmax": SoftmaxModel(X, rng.integers(0, 3, N), n_classes=3, alpha=0.7),
        "linear_fixed_tau": LinearRegressionModel(X, rng.standard_normal(N), noise_precision=2.0),
        "linear_log_tau": LinearRegressionModel(X, rng.standard_normal(N)),
        "linear_no_intercept": LinearRegressionModel(X, rng.standard_normal(N), fit_intercept=False),
        "normal_gamma": NormalGammaModel(rng.standard_normal(N) + 1.0),
    }


def _point(model, rng):
    theta = 0.3 * rng.standard_normal(model.n_params)
    if isinstance(model, NormalGammaModel):
        theta[1] = 1.2
    return theta


@pytest.mark.parametrize("name", list(_models(np.random.default_rng(0))))
def test_minibatch_hvp_matches_finite_differences(name):
    rng = np.random.default_rng(1)
    model = _models(rng)[name]
    theta, v = _point(model, rng), rng.standard_normal(model.n_params)
    idx = rng.integers(0, model.n_samples, 7)
    eps = 1e-6
    fd = (
        model.log_likelihood_and_grad(theta + eps * v, idx)[1] - model.log_likelihood_and_grad(theta - eps * v, idx)[1]
    ) / (2 * eps)
    np.testing.assert_allclose(model.loglik_hvp(theta, v, idx), fd, rtol=1e-6, atol=1e-6)
    # Full data and the posterior Hessian (prior included) against differences of the gradient.
    H = model.posterior_hessian(theta)
    fd_H = np.stack(
        [
            (model.grad_log_posterior(theta + eps * e) - model.grad_log_posterior(theta - eps * e)) / (2 * eps)
            for e in np.eye(model.n_params)
        ],
        axis=1,
    )
    np.testing.assert_allclose(H, fd_H, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(_models(np.random.default_rng(0))))
def test_path_stacks_match_single_path_calls(name):
    rng = np.random.default_rng(2)
    model = _models(rng)[name]
    M, n = 5, 6
    thetas = np.stack([_point(model, rng) for _ in range(M)])
    idx = rng.integers(0, model.n_samples, (M, n))
    V = rng.standard_normal(thetas.shape)
    theta0 = _point(model, rng)
    grads = model.loglik_grad_paths(thetas, idx)
    for m in range(M):
        np.testing.assert_allclose(grads[m], model.log_likelihood_and_grad(thetas[m], idx[m])[1], atol=1e-10)
        np.testing.assert_allclose(model.grad_log_prior_paths(thetas)[m], model.log_prior_and_grad(thetas[m])[1])
    hv = model.loglik_hvp_paths(thetas, V, idx)
    for m in range(M):
        np.testing.assert_allclose(hv[m], model.loglik_hvp(thetas[m], V[m], idx[m]), atol=1e-8)
    # Eq. 11's remainder, fused, equals its definition term by term.
    rem = model.taylor_remainder_paths(thetas, theta0, idx)
    ref = (
        grads
        - model.loglik_grad_paths(np.tile(theta0, (M, 1)), idx)
        - model.loglik_hvp_paths(theta0, thetas - theta0, idx)
    )
    np.testing.assert_allclose(rem, ref, atol=1e-8)


@pytest.mark.parametrize("taylor", [False, True])
def test_stochastic_force_is_unbiased(taylor):
    # With n = 1, averaging the force over every row as the minibatch is its expectation
    # under uniform sampling: it must equal the full-data gradient of the log posterior.
    rng = np.random.default_rng(3)
    model = _models(rng)["logistic"]
    N = model.n_samples
    theta, theta0 = _point(model, rng), _point(model, rng)
    grad_estimator = CoupledSGLD(model, theta0, 0.1, 5, 1, taylor=taylor).grad_estimator
    assert type(grad_estimator) is (TaylorControlVariateGradient if taylor else MinibatchGradient)
    F = grad_estimator.gradient_paths(np.tile(theta, (N, 1)), np.arange(N)[:, None])
    np.testing.assert_allclose(F.mean(axis=0), model.grad_log_posterior(theta), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("taylor", [False, True])
def test_coupled_paths_step_with_the_shared_estimators_force(taylor):
    # Replays a level-1 antithetic sample path by path: every fine and coarse step must be
    # theta + h F + sqrt(2 h) xi with F the shared gradient layer's single-vector force
    # (per-example operators, not the vectorised path kernels) at the rows the coupling drew,
    # and the draws in the coupling's order: (rows, xi) per fine step alone, then per coarse
    # step (rows_1, xi_1, rows_2, xi_2), c+ taking rows_1 and c- rows_2, both (xi_1 + xi_2) / sqrt 2.
    rng = np.random.default_rng(12)
    model = _models(rng, N=60)["logistic"]
    theta0 = _point(model, rng)
    M, n, h0, m = 4, 5, 0.02, 2
    coupled = CoupledSGLD(model, theta0, h0, m, n, antithetic=True, taylor=taylor)
    res = coupled.sample(1, M, np.random.default_rng(13), keep_points=True)
    ref = TaylorControlVariateGradient(model, n, theta_hat=theta0) if taylor else MinibatchGradient(model, n)
    N, P = model.n_samples, model.n_params

    def step(thetas, h, rows, xi):
        F = np.stack([ref._force_at(t, r, N / n)[0] for t, r in zip(thetas, rows)])
        return thetas + h * F + np.sqrt(2 * h) * xi

    replay = np.random.default_rng(13)
    h = coupled.step_size(1)
    fine = np.tile(theta0, (M, 1))
    for _ in range(coupled.n_steps(1) - 2 * coupled.n_steps(0)):
        fine = step(fine, h, replay.integers(0, N, (M, n)), replay.standard_normal((M, P)))
    plus = minus = np.tile(theta0, (M, 1))
    for _ in range(coupled.n_steps(0)):
        rows1, xi1 = replay.integers(0, N, (M, n)), replay.standard_normal((M, P))
        fine = step(fine, h, rows1, xi1)
        rows2, xi2 = replay.integers(0, N, (M, n)), replay.standard_normal((M, P))
        fine = step(fine, h, rows2, xi2)
        xi_c = (xi1 + xi2) / np.sqrt(2)
        plus, minus = step(plus, 2 * h, rows1, xi_c), step(minus, 2 * h, rows2, xi_c)
    for j, expected in enumerate((fine, plus, minus)):
        np.testing.assert_allclose(res.points[:, j], expected, rtol=1e-10, atol=1e-12)


def test_coarse_minibatch_is_drawn_without_replacement_from_the_fine_ones():
    rng = np.random.default_rng(4)
    idx1, idx2 = rng.integers(0, 1000, (20000, 4)), rng.integers(0, 1000, (20000, 4))
    idx1[:, 0] = idx2[:, 0] = -1  # marks slot 0 of each fine batch
    idx_c = _coarse_rows(rng, idx1, idx2)
    assert _coarse_rows(rng, None, None) is None  # full data
    # n of the 2n slots without replacement: a marked slot is picked with probability 1/2,
    # and both marked slots with probability (n choose 2)... hypergeometric: n(n-1)/(2n(2n-1)).
    both = (idx_c == -1).sum(axis=1)
    n = 4
    p2 = n * (n - 1) / (2 * n * (2 * n - 1))
    for k, p in ((2, p2), (1, 2 * (0.5 - p2))):
        freq = np.mean(both == k)
        assert abs(freq - p) < 4 * np.sqrt(p * (1 - p) / both.size)
    assert np.all(np.sort(np.concatenate([idx1, idx2], 1), 1)[:, :1] == -1)


def _gaussian_problem(N=200, D=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    y = X @ np.linspace(1.0, -1.0, D) + 0.5 + rng.standard_normal(N)
    model = LinearRegressionModel(X, y, noise_precision=1.0)
    Xa = np.column_stack([X, np.ones(N)])
    S = np.linalg.inv(Xa.T @ Xa + np.eye(D + 1))
    return model, S @ Xa.T @ y, S


def _euler_cov(A, h, steps):
    """Covariance after ``steps`` Euler-Langevin steps from a point, for the Gaussian target N(., A^-1)."""
    B = np.eye(len(A)) - h * A
    C = np.zeros_like(A)
    for _ in range(steps):
        C = B @ C @ B.T + 2 * h * np.eye(len(A))
    return C


@pytest.mark.statistical
@pytest.mark.parametrize("antithetic", [False, True])
def test_fine_and_coarse_paths_have_the_euler_laws(antithetic):
    # Full data: SGLD is Euler-Maruyama for an OU process, whose covariance after s steps is
    # known. The fine path at level l must have it at (h_l, s_l) and the coarse path at
    # (h_{l-1}, s_{l-1}), the law of level l - 1 (the telescoping sum needs exactly this).
    model, mu, S = _gaussian_problem()
    A = np.linalg.inv(S)
    h0 = 0.5 / np.linalg.eigvalsh(A)[-1]
    coupled = CoupledSGLD(model, mu, h0, 5, None, antithetic=antithetic, taylor=False)
    level, M = 2, 3000
    res = coupled.sample(level, M, np.random.default_rng(5), keep_points=True)
    fine, coarse = res.points[:, 0], res.points[:, 1]
    for pts, h, s in (
        (fine, coupled.step_size(level), coupled.n_steps(level)),
        (coarse, coupled.step_size(level - 1), coupled.n_steps(level - 1)),
    ):
        exact = np.diag(_euler_cov(A, h, s))
        emp = ((pts - mu) ** 2).mean(axis=0)
        # Sample second moment of a Gaussian: relative sd sqrt(2 / M).
        assert np.all(np.abs(emp / exact - 1) < 4 * np.sqrt(2 / M)), (emp, exact)
    if antithetic:  # full data: both coarse paths see the same gradient and noise
        np.testing.assert_allclose(res.points[:, 1], res.points[:, 2])


@pytest.mark.statistical
def test_level_variances_decay_at_order_one_plain_and_two_antithetic():
    # Section 4.1: V_l = O(h_l) for the plain coupling (the coarse minibatch differs from
    # the fine ones) and O(h_l^2) for the antithetic one. Standard (not Taylor) gradients,
    # so that minibatch noise is present; a long horizon (m = 10) puts levels 1..5 in the
    # asymptotic regime. The slope's Monte Carlo sd is about sqrt(2 / M) / ln 2 / sqrt(10)
    # = 0.03 for M = 600; the tolerance 0.35 leaves room for the pre-asymptotic curvature.
    model, mu, S = _gaussian_problem()
    h0 = 0.25 / np.linalg.eigvalsh(np.linalg.inv(S))[-1]
    levels = np.arange(1, 6)
    slopes = {}
    for antithetic in (False, True):
        coupled = CoupledSGLD(model, mu, h0, 10, 6, antithetic=antithetic, taylor=False)
        V = [
            coupled.sample(lv, 600, np.random.default_rng(10 + lv), lambda t: t - mu).delta.var(axis=0).sum()
            for lv in levels
        ]
        slopes[antithetic] = np.polyfit(levels, np.log2(V), 1)[0]
    assert abs(slopes[False] + 1.0) < 0.35, slopes
    assert abs(slopes[True] + 2.0) < 0.35, slopes


def _normalised_errors(taylor, averaging, r, n_seeds):
    model, mu, S = _gaussian_problem()
    exact = np.r_[mu, np.diag(S)]
    eps = r * np.r_[np.sqrt(np.diag(S)), np.diag(S)]

    def g(t):
        return np.concatenate([t, (t - mu) ** 2], axis=1)

    errs = []
    for seed in range(n_seeds):
        sampler = MLSGLD(eps, taylor=taylor, averaging=averaging)
        res = estimate(sampler, model, g, theta0=mu, rmse_units="absolute", batch_size=6, random_state=seed)
        errs.append((res.estimate - exact) / eps)
    return np.array(errs)


@pytest.mark.statistical
@pytest.mark.parametrize("taylor, averaging, r", [(False, False, 0.3), (True, True, 0.2)])
def test_multilevel_estimate_is_within_its_stated_rmse(taylor, averaging, r):
    # The driver targets MSE <= eps^2 for each coordinate of g = (theta, (theta - m)^2): the
    # posterior mean and variances, against the exact Gaussian posterior. The variances are
    # biased at every fixed level (step size, minibatch noise and finite horizon), so only a
    # correct telescoping sum meets the target. With errors e = (estimate - exact) / eps of
    # MSE <= 1, the mean of e^2 over S seeds is at most chi2_S / S in the worst case (b = 0,
    # v = 1); its 1 - 0.001 / q quantile (Bonferroni over q coordinates) is the bound.
    n_seeds = 16
    errs = _normalised_errors(taylor, averaging, r, n_seeds)
    bound = stats.chi2.ppf(1 - 0.001 / errs.shape[1], n_seeds) / n_seeds
    assert np.all((errs**2).mean(axis=0) < bound), ((errs**2).mean(axis=0), bound)


def test_draws_and_weights_reproduce_the_estimate_and_do_not_depend_on_n_jobs(monkeypatch):
    model, mu, S = _gaussian_problem(N=100)
    sampler = MLSGLD(target_rmse=0.05, taylor=False, n_initial=40)
    kwargs = dict(theta0=mu, rmse_units="absolute", batch_size=5, random_state=7, keep_draws=True)
    rows = [0]
    gradient_paths = MinibatchGradient.gradient_paths

    def counting(self, thetas, idx):  # the data items every force touches, in this process (n_jobs=1)
        rows[0] += thetas.shape[0] * (self.batch_size if idx is None else idx.shape[1])
        return gradient_paths(self, thetas, idx)

    monkeypatch.setattr(MinibatchGradient, "gradient_paths", counting)
    a = estimate(sampler, model, None, **kwargs)
    b = estimate(sampler, model, None, n_jobs=2, **kwargs)
    np.testing.assert_array_equal(a.estimate, b.estimate)
    np.testing.assert_array_equal(a.draws, b.draws)
    np.testing.assert_allclose(a.weights @ a.draws, a.estimate, atol=1e-12)
    assert np.isclose(a.weights.sum(), 1.0)
    # The stated cost is what the paths touched, level by level (sum_l N_l C_l).
    assert a.n_grad_evals == rows[0] == sum(lv["n_samples"] * lv["cost"] for lv in a.levels)
    assert a.n_iter * 5 == a.n_grad_evals
    c = estimate(sampler, model, None, **{**kwargs, "random_state": 8})
    assert not np.array_equal(a.estimate, c.estimate)


def test_find_map_is_the_estimators_map_and_counts_its_passes():
    model = _models(np.random.default_rng(6))["logistic"]
    theta, passes = find_map(model)
    np.testing.assert_array_equal(theta, _map_estimate(model))
    # Stationary to the estimators' tolerance: a Newton decrement (the distance to the mode
    # in posterior standard deviations) below 1e-3.
    g = model.grad_log_posterior(theta)
    assert np.sqrt(g @ np.linalg.solve(model.hessian(theta), g)) < 1e-3
    # Newton from zeros: a log posterior and gradient per iterate and a Hessian per step.
    assert 3 <= passes < 50


def test_estimate_starts_at_the_estimators_map_and_a_tighter_map_changes_it_by_far_less_than_its_rmse():
    # The default theta_0 is the estimators' MAP (a Newton decrement below 1e-3), no longer a
    # MAP to 1e-10: with the same seed the paths see the same random numbers from a start
    # moved by < 1e-3 posterior sd, so the estimate moves by a small fraction of its RMSE.
    model = _models(np.random.default_rng(6), N=200)["logistic"]
    sampler = MLSGLD(target_rmse=0.3, n_initial=30)
    a = estimate(sampler, model, random_state=1)
    np.testing.assert_array_equal(a.settings["theta0"], _map_estimate(model))
    assert a.n_grad_evals_setup > 3 * model.n_samples  # the MAP's passes are counted
    b = estimate(sampler, model, theta0=_newton_map(model, tol=1e-12), random_state=1)
    assert np.all(np.abs(a.estimate - b.estimate) < 0.05 * a.rmse), (a.estimate - b.estimate, a.rmse)


def test_estimators_fit_by_mlsgld_with_signed_weights():
    model, mu, S = _gaussian_problem(N=150)
    reg = SGBayesLinearRegression(
        sampler=MLSGLD(target_rmse=0.2),
        noise_precision=1.0,
        batch_size=6,
        random_state=0,
        normalize_y=False,
        alpha_intercept=1.0,
    ).fit(model.X, model.y)
    assert reg.samples_.ndim == 3 and reg.samples_.shape[0] == 1
    assert reg.sample_weight_.shape == reg.samples_.shape[:2]
    assert np.isclose(reg.sample_weight_.sum(), 1.0) and (reg.sample_weight_ < 0).any()
    d = reg.diagnostics_
    for key in ("n_grad_evals", "levels", "n_iter", "rmse", "converged", "weak_rate", "variance_rate"):
        assert key in d
    # Giles' rates are clipped below at 1/2; the antithetic coupling's V_l decays about twice
    # as fast as |E Delta_l|. The prior's alpha is not shadowed by a rate of the same name.
    assert d["weak_rate"] >= 0.5 and d["variance_rate"] >= 0.5 and "alpha" not in d and "beta" not in d
    # RMSE 0.2 sd per coordinate; 5 sd of slack for a single fit.
    assert np.all(np.abs(np.r_[reg.coef_, reg.intercept_] - mu) < 5 * 0.2 * np.sqrt(np.diag(S)))
    mean, std = reg.predict(model.X[:4], return_std=True)
    assert np.all(np.isfinite(std))

    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 2))
    y = np.where(X[:, 0] - X[:, 1] + rng.logistic(size=200) > 0, "a", "b")
    clf = SGBayesLogisticRegression(sampler="mlsgld", batch_size=6, random_state=0).fit(X, y)
    proba = clf.predict_proba(X)
    assert np.all((proba >= 0) & (proba <= 1)) and np.allclose(proba.sum(axis=1), 1.0)
    assert set(clf.predict(X)) <= {"a", "b"}


@pytest.mark.parametrize(
    "params", [{"target_rmse": 0}, {"n_initial": 0}, {"horizon": 0}, {"step_size": -1.0}, {"max_levels": 1}]
)
def test_mlsgld_rejects_bad_hyperparameters(params):
    with pytest.raises(ValueError):
        MLSGLD(**params).validate()


def test_mlsgld_estimate_names_bad_arguments():
    model, mu, _ = _gaussian_problem(N=50)
    with pytest.raises(ValueError, match=r"theta0 must have shape \(3,\)"):
        estimate(MLSGLD(), model, theta0=mu[:2])
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        estimate(MLSGLD(), model, theta0=mu, batch_size=0)
    with pytest.raises(ValueError, match="rmse_units must be 'absolute' or 'posterior_sd'"):
        estimate(MLSGLD(), model, theta0=mu, rmse_units="sd")
    with pytest.raises(ValueError, match=r"target_rmse has shape \(2,\); g has 3 outputs"):
        estimate(MLSGLD(target_rmse=[0.1, 0.1], n_initial=10), model, theta0=mu, rmse_units="absolute")


def test_mlsgld_is_a_strategy_chosen_by_the_fit_layer_not_by_the_sampler():
    # The fit layer (skbayes_sg._fit) fits an MLSGLD by the multilevel strategy, which refuses
    # partial_fit (the data grow, the levels cannot continue); the sampler holds hyperparameters
    # only: no fit_estimator calling back into the estimator, and no transition of its own.
    X = np.random.default_rng(0).standard_normal((30, 2))
    y = np.arange(30) % 2
    with pytest.raises(ValueError, match="partial_fit does not support multilevel samplers"):
        SGBayesLogisticRegression(sampler="mlsgld").partial_fit(X, y, classes=[0, 1])
    sampler = MLSGLD()
    assert not hasattr(sampler, "fit_estimator") and not hasattr(SGLD(), "fit_estimator")
    assert not hasattr(sampler, "estimate")
    with pytest.raises(NotImplementedError):
        sampler.step(None, None, None)


def test_the_shared_sgld_transition_is_eq_2_on_one_chain_and_on_a_path_stack():
    # theta + h F + sqrt(2 h T) dW, leaving dW intact unless it is the workspace: the coarse
    # path reuses the fine increments.
    rng = np.random.default_rng(3)
    theta, F, dW = rng.standard_normal((3, 4, 2))
    expected = theta + 0.1 * F + np.sqrt(2 * 0.1 * 1.5) * dW
    kept = dW.copy()
    np.testing.assert_allclose(langevin_step(theta.copy(), F, 0.1, dW, 1.5), expected, rtol=1e-14)
    np.testing.assert_array_equal(dW, kept)
    np.testing.assert_allclose(
        langevin_step(theta[0].copy(), F[0], 0.1, dW[0], 1.5, out=dW[0]), expected[0], rtol=1e-14
    )


def test_a_multilevel_fit_runs_in_the_chains_rounds_progress_bar_and_interrupt(monkeypatch, capsys):
    # The path chunks run through the chains' round set-up (_chains.parallel_rounds): the
    # estimator's verbose shows its progress bar, and a Ctrl-C reaches the caller after joblib
    # stopped the workers, leaving the estimator unfitted (there is no partial estimate).
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 2))
    y = (X[:, 0] + rng.logistic(size=200) > 0).astype(int)
    SGBayesLogisticRegression(sampler=MLSGLD(target_rmse=0.5), verbose=1, random_state=0).fit(X, y)
    assert "MLSGLD: " in capsys.readouterr().err
    sample, calls = CoupledSGLD.sample, [0]

    def interrupted(self, *args):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return sample(self, *args)

    monkeypatch.setattr(CoupledSGLD, "sample", interrupted)
    est = SGBayesLogisticRegression(sampler=MLSGLD(target_rmse=0.5), n_jobs=1, random_state=0)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    assert calls[0] == 3 and not hasattr(est, "samples_")
