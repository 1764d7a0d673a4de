"""ArviZ export with data: log_likelihood (LOO), posterior_predictive (PPC), Pipeline names."""

import warnings

import numpy as np
import pytest
from sklearn.compose import make_column_transformer
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from skbayes_sg import SGBayesDRBMClassifier, SGBayesLinearRegression, SGBayesLogisticRegression, to_inference_data
from skbayes_sg.models import LinearRegressionModel, LogisticModel, SoftmaxModel
from skbayes_sg.models.drbm import DRBMModel

az = pytest.importorskip("arviz")


@pytest.fixture(scope="module")
def cancer():
    """300 rows: az.loo fits a Pareto tail per row, the costliest part of these tests."""
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X[:300]), y[:300]


@pytest.fixture(scope="module")
def cancer_fit(cancer):
    X, y = cancer
    return SGBayesLogisticRegression(n_iter=300, random_state=0).fit(X, y)


def _regression(seed=0, n=80):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, 5.0 + X @ [1.0, 2.0, -1.0] + 0.5 * rng.normal(size=n)


def _summed_log_likelihood(est, model, X, y_codes, n_draws=3):
    """The full-data log likelihood of a few draws, from the model's own (fit-time) code."""
    thetas = est._flat_samples()[:: max(1, est._flat_samples().shape[0] // n_draws)][:n_draws]
    return thetas, np.array([model.log_likelihood_and_grad(t)[0] for t in thetas])


def test_log_likelihood_matches_the_models_likelihood_and_loo_runs(cancer_fit, cancer):
    X, y = cancer
    idata = cancer_fit.to_inference_data(X, y)
    C, S = cancer_fit.samples_.shape[:2]
    ll = idata.log_likelihood["y"]
    assert ll.dims == ("chain", "draw", "obs") and ll.shape == (C, S, X.shape[0])
    # Each draw's log likelihood summed over rows is the one the samplers targeted.
    thetas, expected = _summed_log_likelihood(cancer_fit, LogisticModel(X, y), X, y)
    flat = ll.values.reshape(C * S, -1)
    index = [int(np.flatnonzero((cancer_fit._flat_samples() == t).all(axis=1))[0]) for t in thetas]
    np.testing.assert_allclose(flat[index].sum(axis=1), expected, rtol=1e-10)
    loo = az.loo(idata)
    assert np.isfinite(loo.elpd_loo) and loo.n_data_points == X.shape[0] and loo.n_samples == C * S
    # LOO cannot beat the in-sample fit: elpd_loo is below the mean log likelihood's sum.
    assert loo.elpd_loo < flat.mean(axis=0).sum()
    np.testing.assert_array_equal(idata.observed_data["y"].values, y)


def test_log_likelihood_of_softmax_regression_and_drbm():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 3))
    y = np.argmax(X + 0.5 * rng.normal(size=(90, 3)), axis=1)
    labels = np.array(["a", "b", "c"])[y]
    soft = SGBayesLogisticRegression(n_iter=100, n_chains=2, random_state=0).fit(X, labels)
    # float64 kernel: the reference model below evaluates in double precision.
    drbm = SGBayesDRBMClassifier(n_hidden=4, n_iter=60, n_chains=2, dtype="float64", random_state=0).fit(X, labels)
    Xr, yr = _regression()
    reg = SGBayesLinearRegression(n_iter=100, n_chains=2, random_state=0).fit(Xr, yr)
    cases = [
        (soft, SoftmaxModel(X, y, n_classes=3), X, labels),
        (drbm, DRBMModel(X, y, n_classes=3, n_hidden=4), X, labels),
        (reg, LinearRegressionModel(Xr, yr), Xr, yr),
    ]
    for est, model, Xc, yc in cases:
        ll = est.to_inference_data(Xc, yc).log_likelihood["y"].values
        flat = ll.reshape(-1, Xc.shape[0])
        for s in (0, flat.shape[0] - 1):
            expected = model.log_likelihood_and_grad(est._flat_samples()[s])[0]
            assert flat[s].sum() == pytest.approx(expected, rel=1e-10), type(est).__name__


def test_compare_ranks_a_well_specified_prior_first(cancer_fit, cancer):
    X, y = cancer
    strong = SGBayesLogisticRegression(n_iter=300, alpha=300.0, random_state=0).fit(X, y)
    table = az.compare({"alpha=1": cancer_fit.to_inference_data(X, y), "alpha=300": strong.to_inference_data(X, y)})
    assert list(table.index) == ["alpha=1", "alpha=300"]
    # The shrunk model is worse by many standard errors of the difference.
    assert table.loc["alpha=300", "elpd_diff"] > 4 * table.loc["alpha=300", "dse"]


def test_posterior_predictive_draws_follow_each_draws_probabilities(cancer_fit, cancer):
    X, y = cancer
    labels = np.array(["malignant", "benign"])[y]
    clf = SGBayesLogisticRegression(n_iter=200, n_chains=2, random_state=0).fit(X, labels)
    idata = clf.to_inference_data(X, labels)
    pp = idata.posterior_predictive["y"]
    C, S = clf.samples_.shape[:2]
    assert pp.dims == ("chain", "draw", "obs") and pp.shape == (C, S, X.shape[0])
    assert set(np.unique(pp.values)) <= set(clf.classes_)
    # Given the draws, the labels are independent Bernoulli(p_s): their frequency has
    # variance sum_s p_s (1 - p_s) / S^2 around the mean probability.
    p = clf.predict_proba_samples(X)[:, :, 1]
    freq = (pp.values.reshape(C * S, -1) == clf.classes_[1]).mean(axis=0)
    var = (p * (1 - p)).sum(axis=0) / (C * S) ** 2
    ok = var > 1e-6
    z = (freq[ok] - p[:, ok].mean(axis=0)) / np.sqrt(var[ok])
    assert ok.sum() > 30 and np.mean(z**2) < 1.5 and np.abs(z).max() < 5
    # Reproducible from random_state, fresh for another.
    again = clf.to_inference_data(X, labels).posterior_predictive["y"].values
    np.testing.assert_array_equal(again, pp.values)
    other = clf.to_inference_data(X, labels, random_state=1).posterior_predictive["y"].values
    assert (other != pp.values).any()


def test_regression_posterior_predictive_moments_and_plot_ppc():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y = _regression()
    reg = SGBayesLinearRegression(n_iter=400, n_chains=2, random_state=0, n_predict_draws=None).fit(X, y)
    idata = reg.to_inference_data(X, y)
    draws = idata.posterior_predictive["y"].values.reshape(-1, X.shape[0])
    mean, std = reg.predict(X, return_std=True)
    n = draws.shape[0]
    # The draws' mean has sd std / sqrt(n) (they are independent given the posterior draws
    # only up to the chains' autocorrelation, which the predictive noise dominates).
    z = (draws.mean(axis=0) - mean) / (std / np.sqrt(n))
    assert np.mean(z**2) < 2.0
    np.testing.assert_allclose(draws.std(axis=0), std, rtol=5 / np.sqrt(2 * n))
    az.plot_ppc(idata, num_pp_samples=20)
    plt.close("all")
    assert np.isfinite(az.loo(idata).elpd_loo)


def test_posterior_predictive_without_targets_has_no_likelihood(cancer_fit, cancer):
    X, _ = cancer
    idata = cancer_fit.to_inference_data(X[:10])
    assert "posterior_predictive" in idata.groups() and "log_likelihood" not in idata.groups()
    assert "observed_data" not in idata.groups()
    assert idata.posterior_predictive["y"].shape[-1] == 10


def test_pipeline_feature_names_reach_the_posterior():
    pd = pytest.importorskip("pandas")
    data = load_breast_cancer(as_frame=True)
    X = data.data.iloc[:, :4].copy()
    X["site"] = np.where(np.arange(len(X)) % 3 == 0, "north", "south")
    y = data.target.to_numpy()
    pipe = make_pipeline(
        make_column_transformer((StandardScaler(), list(X.columns[:4])), (OneHotEncoder(), ["site"])),
        SGBayesLogisticRegression(n_iter=100, n_chains=2, random_state=0),
    ).fit(X, y)
    idata = to_inference_data(pipe, X, y)
    names = list(idata.posterior["coef"].coords["feature"].values)
    assert names == list(pipe[:-1].get_feature_names_out())
    assert names[0] == "standardscaler__mean radius" and names[-1] == "onehotencoder__site_south"
    direct = pipe[-1].to_inference_data(pipe[:-1].transform(X), y)
    np.testing.assert_array_equal(idata.log_likelihood["y"].values, direct.log_likelihood["y"].values)
    assert list(direct.posterior["coef"].coords["feature"].values)[0] == "x0"
    summary = pipe[-1].summary(feature_names=pipe[:-1].get_feature_names_out())
    assert summary["parameter"][0] == "coef[standardscaler__mean radius]"
    explicit = to_inference_data(pipe, feature_names=[f"f{i}" for i in range(6)])
    assert list(explicit.posterior["coef"].coords["feature"].values)[-1] == "f5"
    assert isinstance(pd.DataFrame(az.summary(idata, var_names=["coef"])), pd.DataFrame)


def test_drbm_exports_named_views_of_the_draws():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int)
    drbm = SGBayesDRBMClassifier(n_hidden=5, n_iter=40, n_chains=2, random_state=0).fit(X, y)
    post = drbm.to_inference_data().posterior
    assert set(post.data_vars) == {"W", "U", "c", "d"}
    assert post["W"].dims == ("chain", "draw", "hidden", "feature") and post["W"].shape[2:] == (5, 3)
    assert post["U"].dims == ("chain", "draw", "hidden", "class") and post["d"].dims == ("chain", "draw", "class")
    W, U, c, d = drbm._model.unpack(drbm._flat_samples())
    np.testing.assert_array_equal(post["U"].values.reshape(U.shape), U)
    np.testing.assert_array_equal(post["c"].values.reshape(c.shape), c)
    # No copy of the draws per variable: the arrays are views of samples_.
    assert np.shares_memory(post["W"].values, drbm.samples_)
    nobias = SGBayesDRBMClassifier(n_hidden=2, n_iter=20, n_chains=1, fit_intercept=False, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 20 iterations: not converged, by design
        nobias.fit(X, y)
    assert set(nobias.to_inference_data().posterior.data_vars) == {"W", "U"}


def test_validation_errors(cancer_fit, cancer):
    X, y = cancer
    with pytest.raises(ValueError, match="y without X"):
        cancer_fit.to_inference_data(y=y)
    with pytest.raises(ValueError, match="y has 10 targets but X has 300 rows"):
        cancer_fit.to_inference_data(X, y[:10])
    with pytest.raises(ValueError, match=r"labels \[7\] not in classes_"):
        cancer_fit.to_inference_data(X[:3], [0, 1, 7])
    with pytest.raises(ValueError, match="X has 3 features"):
        cancer_fit.to_inference_data(X[:, :3])
    with pytest.raises(ValueError, match="feature_names has 2 names but the estimator was fit on 30"):
        cancer_fit.to_inference_data(feature_names=["a", "b"])
    Xr, yr = _regression()
    reg = SGBayesLinearRegression(n_iter=50, n_chains=1, random_state=0).fit(Xr, yr)
    with pytest.raises(ValueError, match="NaN or infinity"):
        reg.to_inference_data(Xr[:2], [1.0, np.nan])
    with pytest.raises(TypeError, match="last step is LogisticRegression"):
        to_inference_data(make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y))
    with pytest.raises(TypeError, match="got LogisticRegression"):
        to_inference_data(LogisticRegression().fit(X, y))


def test_regression_log_likelihood_and_predictive_are_in_the_targets_units():
    # normalize_y samples a standardised problem; the exported log likelihood and
    # posterior predictive must be those of y as given: rescaling y by c shifts every
    # log density by -log c and leaves the draws otherwise identical.
    pytest.importorskip("arviz")
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X, y = X[:150], y[:150]
    # alpha=1.0: the MAP is then found by Newton's method in both fits, so the draws agree to
    # rounding (under alpha="auto" on these unscaled features Newton's start is not concave and
    # L-BFGS's tolerance leaves the two centres, and so the draws, apart by Monte Carlo noise).
    # mCCAdL: HMC's accept test would turn a difference in the last bits into another draw.
    kw = dict(sampler="mccadl", n_iter=300, n_chains=2, random_state=0, alpha=1.0)
    fits = [SGBayesLinearRegression(**kw).fit(X, t) for t in (y, 1000 * y + 5)]
    raw, scaled = fits[0].to_inference_data(X, y), fits[1].to_inference_data(X, 1000 * y + 5)
    np.testing.assert_allclose(
        raw.log_likelihood["y"].values, scaled.log_likelihood["y"].values + np.log(1000), atol=1e-9
    )
    np.testing.assert_allclose(
        1000 * raw.posterior_predictive["y"].values + 5, scaled.posterior_predictive["y"].values, rtol=1e-9
    )


def test_a_default_fit_exports_every_kept_draw(cancer):
    # Issue 30 item 7: a default fit of standardised breast cancer ran 5,128 iterations per chain
    # (4,102 after burn-in) and stored, so exported, 512 of them (max_draws=1,000 and a thinning
    # that doubles). Every kept draw fits the 4 MiB budget: all of them reach ArviZ.
    X, y = cancer
    # mCCAdL at its defaults: a long run (HMC meets the ESS target in 500 iterations).
    pipe = make_pipeline(StandardScaler(), SGBayesLogisticRegression(sampler="mccadl", random_state=0)).fit(X, y)
    est = pipe[-1]
    n_kept = est.n_iter_ - int(0.2 * est.n_iter_)
    assert est.diagnostics_["thin"] == 1 and est.samples_.shape[1] >= n_kept - 1
    idata = to_inference_data(pipe, X, y)
    assert idata.posterior.sizes["draw"] == est.samples_.shape[1] > 1000
    assert idata.log_likelihood.sizes["draw"] == est.samples_.shape[1]
