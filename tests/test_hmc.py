"""HMC: exact against Gaussian and reference posteriors, batched chains as each alone, the default
sampler of full-data fits."""

import pickle

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression, SGBayesPoissonRegressor, _chains
from skbayes_sg.diagnostics import mcse_mean
from skbayes_sg.models import LogisticModel, WhitenedModel
from skbayes_sg.models._fused import fused_force
from skbayes_sg.models._map import find_map
from skbayes_sg.samplers import HMC, MCCAdL
from skbayes_sg.samplers.hmc import _leapfrog_trajectory, _split_trajectory

from ._exact import Z_MAX, assert_matches_gaussian, conjugate_regression, mcse_sd, sample
from .test_batched_chains import _models, _run, _whitened

REFERENCE = "benchmarks/results/reference_breast_cancer_raw.npz"


def test_fused_log_posterior_is_the_models(cancer):
    # The accept test's log posterior comes from the force's pass: its differences between
    # points, and the force, must be the model's own.
    rng = np.random.default_rng(0)
    for name, model in _models(*cancer).items():
        for m in (model, _whitened(model)):
            fused = fused_force(m)
            if fused is None:
                continue
            Z = 0.1 * rng.standard_normal((3, m.n_params))
            out = np.empty_like(Z)
            lp = fused.log_posterior_and_force(Z, out)
            ref = [m.log_posterior_and_grad(z) for z in Z]
            grad = np.array([g for _, g in ref])
            if fused._logistic:
                # The logistic force is single precision (it steers the trajectories; the
                # accept test's log posterior below is double): within a few float32 roundings
                # of the largest term, far below any error in its maths (a term, sign or
                # factor of 2 off moves it by O(1) of its scale).
                np.testing.assert_allclose(out, grad, rtol=0, atol=1e-5 * np.abs(grad).max(), err_msg=name)
            else:
                np.testing.assert_allclose(out, grad, rtol=1e-9, atol=1e-9, err_msg=name)
            np.testing.assert_allclose(lp - lp[0], [v - ref[0][0] for v, _ in ref], rtol=1e-9, atol=1e-8)
            # Row by row: a chain's value does not depend on the others in its stack.
            one = np.empty_like(out[1:2])
            assert fused.log_posterior_and_force(Z[1:2], one)[0] == lp[1]
            np.testing.assert_array_equal(one[0], out[1])
            # The trajectories' force is the accept test's pass's, bit for bit: a point's force
            # must not depend on which of the two computed it (the trajectories' reversibility).
            np.testing.assert_array_equal(fused.leapfrog_force(Z, np.empty_like(Z)), out)


def test_exact_on_a_gaussian_posterior():
    # Known noise precision: the posterior is N(mean, cov) exactly, and HMC has no step-size
    # bias, so every mean and sd must be within Z_MAX Monte Carlo standard errors, with the
    # adapted step, in coordinates whitened by a deliberately wrong factor (off by 30%, centred
    # half an sd away) so that the trajectories are not exact rotations.
    model, mean, cov, _ = conjugate_regression(N=400, D=3, seed=2)
    L = 1.3 * np.linalg.cholesky(cov)
    whitened = WhitenedModel(model, mean + 0.5 * np.sqrt(np.diag(cov)), L)
    draws, stats = sample(HMC(), whitened, np.zeros(4), 2500, 500, None, None)
    assert_matches_gaussian(draws, mean, np.sqrt(np.diag(cov)))
    assert 0.6 < stats["accept_prob"].mean() < 0.97


def test_split_is_exact_in_one_step_on_its_laplace_gaussian():
    # Whitened exactly (at the posterior mean with the posterior's Cholesky factor), U_1 = 0:
    # one split step of any angle is the exact flow, so every proposal is accepted (up to
    # rounding) and one force evaluation makes a trajectory; the draws are then the posterior.
    model, mean, cov, _ = conjugate_regression(N=400, D=3, seed=2)
    sd = np.sqrt(np.diag(cov))
    whitened = WhitenedModel(model, mean, np.linalg.cholesky(cov))
    # An explicit step beyond the longest trajectory (0.55 pi x 1.25): one step; auto: adapted from two.
    for sampler in (HMC(step_size=2.5), HMC()):
        draws, stats = sample(sampler, whitened, np.zeros(4), 1500, 200, None, None)
        assert stats["accept_prob"].min() > 1 - 1e-9
        assert np.all(stats["n_leapfrog"][:, 200:] == 1)
    assert_matches_gaussian(draws, mean, sd)  # the drivers keep draws in theta
    # The leapfrog at the same step is not exact: it rejects.
    _, stats = sample(HMC(step_size=1.0, integrator="leapfrog"), whitened, np.zeros(4), 300, 0, None, None)
    assert stats["accept_prob"].mean() < 0.99


def _trajectory(integrate, model, eps, n, q, p):
    """``n`` steps of ``eps`` from ``(q, p)`` (copies): the end point, momentum and energy error."""
    grads = type("Grads", (), {"estimators": [], "model": model, "full": True})()
    fused = fused_force(model)
    q, p, g = q.copy(), p.copy(), np.empty_like(q)
    lp0 = fused.log_posterior_and_force(q, g)
    e_all = np.full((n, q.shape[0], 1), eps)
    H0 = 0.5 * (p * p).sum(1) - lp0
    lp = integrate(grads, fused, q, p, g, e_all, 0.5 * e_all)
    return q, p, 0.5 * (p * p).sum(1) - lp - H0


def test_split_is_reversible_and_beats_the_leapfrogs_energy_error(cancer):
    # Breast cancer whitened at its MAP (the fits' coordinates): far enough from Gaussian that
    # neither integrator is exact. Both are reversible (negate the momentum, integrate again:
    # back at the start, with the opposite energy error); at two steps of 0.8 per trajectory
    # the split's error is what the Laplace approximation misses, below the leapfrog's
    # (measured: rms 3.5 against 4.5, mean acceptance 0.77 against 0.53).
    X, y = cancer
    model = LogisticModel(X, y, alpha=1.0)
    theta_map = find_map(model)[0]
    whitened = WhitenedModel(model, theta_map, np.linalg.cholesky(np.linalg.inv(model.hessian(theta_map))))
    q0, p0 = np.random.default_rng(5).standard_normal((2, 64, whitened.n_params))
    errors, accept = {}, {}
    for name, integrate in (("split", _split_trajectory), ("leapfrog", _leapfrog_trajectory)):
        q, p, dH = _trajectory(integrate, whitened, 0.8, 2, q0, p0)
        back_q, back_p, back_dH = _trajectory(integrate, whitened, 0.8, 2, q, -p)
        np.testing.assert_allclose(back_q, q0, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(-back_p, p0, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(back_dH, -dH, atol=1e-8, err_msg=name)
        errors[name] = np.sqrt(np.mean(dH**2))
        accept[name] = np.minimum(1.0, np.exp(-dH)).mean()
    assert errors["split"] < 0.85 * errors["leapfrog"], errors
    assert accept["split"] > accept["leapfrog"] + 0.15, accept
    # Second order: half the step, a quarter of the energy error over the same trajectory
    # (an inconsistent scheme, such as a rotation by the wrong angle, stays reversible and
    # symplectic but its error does not shrink with the step).
    coarse, fine = (_trajectory(_split_trajectory, whitened, 1.6 / n, n, q0, p0)[2] for n in (16, 32))
    assert 0.2 < np.sqrt(np.mean(fine**2) / np.mean(coarse**2)) < 0.3


def test_fixed_step_in_theta_coordinates_is_exact():
    # An explicit step: no adaptation, no whitening (the trajectory length in theta units).
    model, mean, cov, _ = conjugate_regression(N=200, D=2, seed=3)
    sd = np.sqrt(np.diag(cov))
    sampler = HMC(step_size=0.25 * sd.min(), trajectory_length=1.5 * sd.min())
    draws, stats = sample(sampler, model, mean, 3000, 300, None, None)
    assert_matches_gaussian(draws, mean, sd)
    assert stats["accept_prob"].mean() > 0.5


def _reference_z(est, ref):
    draws = est.samples_
    flat = draws.reshape(-1, draws.shape[-1])
    z_mean = (flat.mean(0) - ref["mean"]) / np.hypot(mcse_mean(draws), ref["mcse_mean"])
    ref_mcse_sd = ref["sd"] / np.sqrt(2 * ref["ess_bulk"])
    z_sd = (flat.std(0, ddof=1) - ref["sd"]) / np.hypot(mcse_sd(draws), ref_mcse_sd)
    return z_mean, z_sd


def test_default_logistic_fit_is_hmc_and_matches_the_reference():
    # The default fit on breast cancer (raw features, intercept) against a long exact reference
    # run (its prior: alpha = alpha_intercept = 1, so alpha is given: the default prior is
    # alpha='auto'): means and sds within Z_MAX combined Monte Carlo standard errors.
    ref = np.load(REFERENCE)
    X, y = load_breast_cancer(return_X_y=True)
    est = SGBayesLogisticRegression(alpha=1.0, alpha_intercept=1.0, random_state=0).fit(X, y)
    assert isinstance(est._sampler, HMC)
    assert est.diagnostics_["batch_size"] is None
    z_mean, z_sd = _reference_z(est, ref)
    assert np.abs(z_mean).max() < Z_MAX, z_mean
    assert np.abs(z_sd).max() < Z_MAX, z_sd
    d = est.diagnostics_
    assert 0.6 < d["acceptance_rate"] < 0.98 and d["n_divergent"] == 0
    assert d["ess"].min() >= 1000 and d["rhat"].max() < 1.01
    # The split integrator's step is a rotation angle, capped at the longest trajectory.
    assert 0.1 < d["step_size"] <= 1.25 * np.pi / 2


def test_n_jobs_gives_the_same_draws(cancer, monkeypatch):
    # Worker processes from the first round (no start-up cost to weigh), two groups of chains.
    monkeypatch.setattr(_chains, "PROCESS_START_SECONDS", 0.0)
    X, y = cancer
    kw = dict(sampler="hmc", n_iter=300, random_state=3)
    a = SGBayesLogisticRegression(n_jobs=1, **kw).fit(X, y)
    b = SGBayesLogisticRegression(n_jobs=2, **kw).fit(X, y)
    np.testing.assert_array_equal(a.samples_, b.samples_)
    for name, values in a.sample_stats_.items():
        np.testing.assert_array_equal(b.sample_stats_[name], values)


def test_batched_chains_match_each_chain_alone(cancer):
    # The fused force sums in another order than a chain's own estimator: the same trajectories
    # up to rounding, the same accept decisions.
    model = _whitened(LogisticModel(*cancer, alpha=1.0))
    draws, stats = _run(HMC(), model, None, batched=True)
    alone, alone_stats = _run(HMC(), model, None, batched=False)
    np.testing.assert_allclose(draws, alone, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(stats, alone_stats, rtol=1e-8, atol=1e-10)


def test_auto_sampler_resolution(cancer):
    X, y = cancer
    small = dict(n_iter=200, n_chains=2, random_state=0)
    assert isinstance(SGBayesLogisticRegression(**small).fit(X, y)._sampler, HMC)
    # Minibatches keep mCCAdL, as does partial_fit; an explicit name is kept as given.
    assert isinstance(SGBayesLogisticRegression(batch_size=64, **small).fit(X, y)._sampler, MCCAdL)
    streamed = SGBayesLogisticRegression(**small).partial_fit(X[:300], y[:300], classes=[0.0, 1.0])
    assert isinstance(streamed._sampler, MCCAdL)
    assert isinstance(SGBayesLogisticRegression(sampler="mccadl", **small).fit(X, y)._sampler, MCCAdL)
    rng = np.random.default_rng(0)
    counts = rng.poisson(np.exp(0.3 * X[:, 0]))
    assert isinstance(SGBayesPoissonRegressor(**small).fit(X[:, :5], counts)._sampler, HMC)
    reg = SGBayesLinearRegression(**small).fit(X[:, :5], X[:, 6])  # noise precision sampled
    assert isinstance(reg._sampler, HMC) and np.isfinite(reg.noise_precision_)


def test_explicit_batch_size_is_refused(cancer):
    X, y = cancer
    with pytest.raises(ValueError, match="HMC is a Metropolis-adjusted sampler.*batch_size=None"):
        SGBayesLogisticRegression(sampler="hmc", batch_size=64, n_iter=50).fit(X, y)


def test_partial_fit_and_pickle(cancer):
    X, y = cancer
    est = SGBayesLogisticRegression(sampler="hmc", n_iter=200, n_chains=2, random_state=0)
    est.partial_fit(X[:200], y[:200], classes=[0.0, 1.0]).partial_fit(X[200:], y[200:])
    assert np.isfinite(est.samples_).all() and est.diagnostics_["acceptance_rate"] > 0.3
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict_proba(X), est.predict_proba(X))


def test_divergent_trajectories_are_rejected_and_warned(cancer):
    X, y = cancer
    est = SGBayesLogisticRegression(sampler=HMC(step_size=3.0), n_iter=200, n_chains=2, random_state=0)
    with pytest.warns(UserWarning, match="trajectories after burn-in diverged"):
        est.fit(X, y)
    assert est.diagnostics_["n_divergent"] > 0 and np.isfinite(est.samples_).all()
