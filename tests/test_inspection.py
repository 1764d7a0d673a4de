"""What a fitted estimator tells its user: convergence warnings, summary(), ArviZ export."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg.diagnostics import posterior_summary
from skbayes_sg.samplers import SGLD, MCCAdL


@pytest.fixture(scope="module")
def cancer():
    data = load_breast_cancer(as_frame=True)
    X = StandardScaler().set_output(transform="pandas").fit_transform(data.data)
    return X, data.target.map({0: "malignant", 1: "benign"}).to_numpy()


def test_unmixed_chains_warn_naming_the_worst_parameters(cancer):
    X, y = cancer
    # A tiny SGLD step barely moves the chains: R-hat and ESS both fail.
    clf = SGBayesLogisticRegression(sampler=SGLD(step_size=1e-6), n_iter=200, n_chains=3, init="zeros", random_state=0)
    with pytest.warns(ConvergenceWarning, match=r"split R-hat exceeds 1.01 .*worst: coef\[.*\].*n_iter") as rec:
        clf.fit(X, y)
    assert "bulk ESS is below 300 (100 per chain)" in str(rec[0].message)


def test_well_mixed_chains_do_not_warn():
    import warnings

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = X @ [1.0, -1.0] + rng.normal(size=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SGBayesLinearRegression(noise_precision=1.0, n_iter=6000, n_chains=4, random_state=0).fit(X, y)


def test_hot_sghmc_chains_warn_about_gradient_noise():
    """The auto step keeps h Sigma / (2 A) small; at the curvature-only step of before,
    h Sigma / (2 A) ~ 2.5 here and the chains run at kinetic temperature ~ 3: a warning."""
    import warnings

    from skbayes_sg import GradientNoiseWarning
    from skbayes_sg.samplers import SGHMC

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = X @ [1.0, -1.0] + rng.normal(size=300)
    # The papers' prior on the raw targets, the problem the noise figures below were measured on.
    kw = dict(
        noise_precision=1.0,
        n_iter=3000,
        n_chains=2,
        random_state=0,
        gradient="minibatch",
        batch_size=200,
        normalize_y=False,
        alpha_intercept=1.0,
    )
    est = SGBayesLinearRegression(sampler=SGHMC(preconditioner="none"), **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientNoiseWarning)
        est.fit(X, y)
    d = est.diagnostics_
    assert d["predicted_noise_error"] == pytest.approx(0.05)
    h_curvature = 0.2 / np.sqrt(d["lambda_max"])
    assert d["step_size"] < 0.2 * h_curvature
    est.set_params(sampler__step_size=h_curvature)
    with pytest.warns(GradientNoiseWarning, match=r"SGHMC: at step_size=.*by about 2\d\d%"):
        est.fit(X, y)
    # The prediction is what the chains show: kinetic temperature ~ 1 + h sigma_max / (2 A T).
    predicted = 1.0 + est.diagnostics_["predicted_noise_error"]
    assert abs(est.sample_stats_["kinetic_temperature"].mean() / predicted - 1.0) < 0.25
    # Without the prediction (no probe: plain gradients from a non-MAP start), the measured
    # temperature still warns.
    est.set_params(init="zeros")
    with pytest.warns(GradientNoiseWarning, match=r"ran hotter .*kinetic temperature [2-4]\.\d+ against T = 1"):
        est.fit(X, y)
    # A step small enough that friction 10 both dissipates the noise (h Sigma / (2 A) ~ 0.02)
    # and keeps the Euler friction step's own bias 1 / (1 - h A / 2) small: no warning, and
    # the kinetic temperature is back at T.
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientNoiseWarning)
        est.set_params(sampler__friction=10.0, sampler__step_size=1e-3, n_iter=8000).fit(X, y)
    assert abs(est.sample_stats_["kinetic_temperature"].mean() - 1.0) < 0.1


def test_summary_table_matches_draws(cancer):
    X, y = cancer
    clf = SGBayesLogisticRegression(n_iter=600, n_chains=2, random_state=0).fit(X, y)
    s = clf.summary(ci=0.8)
    assert s["parameter"][0] == "coef[mean radius]" and s["parameter"][-1] == "intercept"
    flat = clf.samples_.reshape(-1, clf.samples_.shape[-1])
    np.testing.assert_allclose(s["mean"], flat.mean(axis=0))
    np.testing.assert_allclose(s["ci_lower"], np.quantile(flat, 0.1, axis=0))
    np.testing.assert_allclose(s["r_hat"], clf.diagnostics_["rhat"])
    text = str(s)
    header = ["parameter", "mean", "sd", "10%", "90%", "ess_bulk", "ess_tail", "r_hat", "prior_sd"]
    assert text.splitlines()[0].split() == header
    # header, one row per coefficient and the intercept, then the draws' KSD
    assert len(text.splitlines()) == 1 + X.shape[1] + 1 + 1
    assert text.splitlines()[-1] == f"kernel Stein discrepancy of the draws: {clf.diagnostics_['ksd']:.4g}"
    # The default prior in the user's units: sd 1 on the logit per sd of each feature.
    np.testing.assert_allclose(s["prior_sd"], np.r_[1 / np.asarray(X).std(axis=0), 10.0], rtol=1e-10)


def test_weighted_summary_uses_weights():
    draws = np.array([[[0.0], [1.0], [3.0]]])
    s = posterior_summary(draws, ["a"], weights=np.array([[0.5, 0.75, -0.25]]))
    assert s["mean"][0] == pytest.approx(0.0)
    assert np.isnan(s["r_hat"][0]) and np.isnan(s["ci_lower"][0])


def test_to_inference_data(cancer):
    az = pytest.importorskip("arviz")
    X, y = cancer
    # mCCAdL, whose sample_stats (xi, kinetic temperature) the export is checked for.
    clf = SGBayesLogisticRegression(sampler="mccadl", n_iter=300, burn_in=0.2, n_chains=2, random_state=0).fit(X, y)
    idata = clf.to_inference_data()
    assert isinstance(idata, az.InferenceData)
    coef = idata.posterior["coef"]
    assert coef.dims == ("chain", "draw", "feature") and coef.shape == (2, 240, 30)
    assert list(coef.coords["feature"].values[:2]) == ["mean radius", "mean texture"]
    np.testing.assert_array_equal(coef.values, clf.samples_[:, :, :30])
    assert set(idata.sample_stats.data_vars) >= {"xi", "kinetic_temperature", "step_size"}
    assert list(idata.observed_data["y"].values[:3]) == list(y[:3])
    summary = az.summary(idata, var_names=["intercept"])
    assert summary["r_hat"].iloc[0] == pytest.approx(clf.diagnostics_["rhat"][-1], abs=0.011)


def test_to_inference_data_multiclass_and_regression():
    pytest.importorskip("arviz")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 2))
    clf = SGBayesLogisticRegression(n_iter=100, n_chains=2, random_state=0).fit(X, np.arange(90) % 3)
    assert clf.to_inference_data().posterior["coef"].dims == ("chain", "draw", "class", "feature")
    reg = SGBayesLinearRegression(n_iter=100, n_chains=2, random_state=0).fit(X, X @ [1.0, 2.0])
    post = reg.to_inference_data().posterior
    assert set(post.data_vars) == {"coef", "intercept", "noise_precision"}


@pytest.mark.filterwarnings("ignore::skbayes_sg.GradientNoiseWarning")  # 50 iterations, by design
def test_to_inference_data_without_arviz(cancer, monkeypatch):
    import sys

    X, y = cancer
    clf = SGBayesLogisticRegression(n_iter=50, n_chains=1, random_state=0).fit(X, y)
    monkeypatch.setitem(sys.modules, "arviz", None)
    with pytest.raises(ImportError, match="pip install arviz"):
        clf.to_inference_data()


def test_unequilibrated_chains_warn_colder_and_say_why(cancer):
    """From the mode with thermal momentum, half the kinetic energy drains into the potential
    first: a run too short for that reads cold, and the advice is to run longer."""
    from skbayes_sg import GradientNoiseWarning

    X, y = cancer
    with pytest.warns(GradientNoiseWarning, match=r"ran colder .*not reached equilibrium.*increase n_iter"):
        # Started at the mode itself (no preconditioner, so no Laplace-draw starts).
        SGBayesLogisticRegression(
            sampler=MCCAdL(preconditioner="none"), gradient="minibatch", n_iter=50, n_chains=1, random_state=0
        ).fit(X, y)


def test_sgld_with_a_noisy_explicit_step_warns_and_the_auto_step_does_not():
    """SGLD has no momentum to show a temperature: the predicted noise error must warn."""
    import warnings

    from skbayes_sg import GradientNoiseWarning

    rng = np.random.default_rng(3)
    X = rng.normal(size=(4000, 3))
    y = X @ [1.0, -1.0, 0.5] + rng.normal(size=4000)
    kw = dict(
        noise_precision=1.0,
        n_iter=400,
        n_chains=2,
        random_state=0,
        batch_size=5,
        gradient="minibatch",
        normalize_y=False,
        alpha_intercept=1.0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientNoiseWarning)
        est = SGBayesLinearRegression(sampler=SGLD(preconditioner="none"), **kw).fit(X, y)
    h = est.diagnostics_["step_size"]
    assert est.diagnostics_["predicted_noise_error"] <= 0.05 + 1e-12
    # Three times the auto step: three times the predicted error, and a warning that says so.
    with pytest.warns(GradientNoiseWarning, match=r"SGLD: at step_size=.*by about 15%"):
        SGBayesLinearRegression(sampler=SGLD(step_size=3 * h, preconditioner="none"), **kw).fit(X, y)


def test_sghmc_euler_momentum_is_not_mistaken_for_gradient_noise():
    """With exact gradients SGHMC's momentum runs at T / (1 - h A / 2) (1.11 at the whitened
    auto step): the scheme's own prediction, not gradient noise, so no warning."""
    import warnings

    from skbayes_sg import GradientNoiseWarning
    from skbayes_sg.samplers import SGHMC

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = X @ [1.0, -1.0] + rng.normal(size=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientNoiseWarning)
        est = SGBayesLinearRegression(
            sampler=SGHMC(),
            noise_precision=1.0,
            n_iter=6000,
            n_chains=2,
            random_state=0,
            normalize_y=False,
            alpha_intercept=1.0,
        ).fit(X, y)
    h = est.diagnostics_["step_size"]
    assert est.diagnostics_["batch_size"] is None and h == pytest.approx(0.2)
    expected = 1.0 / (1.0 - 0.5 * h)
    kinetic = est.sample_stats_["kinetic_temperature"]
    from skbayes_sg.diagnostics import mcse_mean

    assert abs(kinetic.mean() - expected) < 4 * mcse_mean(kinetic) + 0.01
