"""Resuming is exact: a fit in warm-started parts, saved between them, is one fit."""

import pickle

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, make_moons
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGBayesDRBMClassifier, SGBayesLinearRegression, SGBayesLogisticRegression

skops_io = pytest.importorskip("skops.io")


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _pickle(est):
    return pickle.loads(pickle.dumps(est))


def _skops(est):
    data = skops_io.dumps(est)
    return skops_io.loads(data, trusted=skops_io.get_untrusted_types(data=data))


# Each case exercises what a continuation must carry over: the minibatch queue drawn with
# replacement (sghmc) or by epochs (mccadl, whose force and thermostat also continue), the
# adapted proposal (gadmala, adapting during the burn-in), a thinning grid that does not
# restart at the split (thin=3, 200 iterations after burn-in is not a multiple of 3), and
# max_draws coarsening the grid (one fit of 600 keeps every 2nd draw, the first part every
# draw). Each case saves the first part with pickle or with skops.
CASES = {
    "sghmc-pickle": (dict(sampler="sghmc", batch_size=50), _pickle),
    "mccadl-epochs-skops": (dict(sampler="mccadl", batch_size=32, batch_scheme="epochs"), _skops),
    "gadmala-skops": (dict(sampler="gadmala", burn_in=150), _skops),
    # HMC: the step adapted during the burn-in and frozen, the trajectories' jitter by iteration.
    "hmc-pickle": (dict(sampler="hmc"), _pickle),
    "hmc-skops": (dict(sampler="hmc", burn_in=250), _skops),
    "sgld-thin-pickle": (dict(sampler="sgld", batch_size=64, thin=3), _pickle),
    "ccadl-max_draws-skops": (dict(sampler="ccadl", batch_size=40, max_draws=300), _skops),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_two_warm_started_halves_are_one_fit(cancer, case):
    X, y = cancer
    params, save = CASES[case]
    kw = {**dict(n_chains=2, burn_in=100, random_state=0), **params}
    one = SGBayesLogisticRegression(n_iter=600, **kw).fit(X, y)
    half = SGBayesLogisticRegression(n_iter=300, warm_start=True, **kw).fit(X, y)
    half = save(half)
    half.fit(X, y)
    assert half.n_iter_ == one.n_iter_ == 600
    assert half.diagnostics_["thin"] == one.diagnostics_["thin"]
    np.testing.assert_array_equal(half.samples_, one.samples_)
    for name, values in one.sample_stats_.items():
        np.testing.assert_array_equal(half.sample_stats_[name], values)
    assert half.diagnostics_["n_grad_evals"] == one.diagnostics_["n_grad_evals"]
    np.testing.assert_array_equal(half.predict_proba(X), one.predict_proba(X))


def test_three_parts_and_n_jobs_are_one_fit(cancer):
    X, y = cancer
    kw = dict(sampler="sgld", batch_size=32, n_chains=2, burn_in=60, random_state=1, max_draws=None)
    one = SGBayesLogisticRegression(n_iter=700, **kw).fit(X, y)
    parts = SGBayesLogisticRegression(n_iter=200, warm_start=True, **kw).fit(X, y)
    parts.set_params(n_iter=250, n_jobs=2).fit(X, y)
    _pickle(parts).fit(X, y)  # the copy continues; the original is unchanged
    parts = _pickle(parts).fit(X, y)
    assert parts.n_iter_ == 700
    np.testing.assert_array_equal(parts.samples_, one.samples_)


def test_auto_continuation_is_one_fit_of_its_length():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3))
    y = X @ rng.standard_normal(3) + rng.standard_normal(300)
    kw = dict(sampler="mccadl", n_chains=2, burn_in=100, random_state=0, max_draws=None, noise_precision=1.0)
    est = SGBayesLinearRegression(n_iter=300, warm_start=True, **kw).fit(X, y)
    est = _pickle(est).set_params(n_iter="auto").fit(X, y)
    assert len(est.diagnostics_["n_iter_blocks"]) >= 2  # it ran in blocks
    one = SGBayesLinearRegression(n_iter=est.n_iter_, **kw).fit(X, y)
    np.testing.assert_array_equal(est.samples_, one.samples_)


def test_saved_chain_holds_no_draws_and_no_generators(cancer):
    X, y = cancer
    est = SGBayesLogisticRegression(sampler="sghmc", batch_size=50, n_iter=400, n_chains=2, random_state=0).fit(X, y)
    for progress in est._chain_progress:
        assert set(progress) == {"rng", "queue", "t", "n_burn", "n_adapt", "eff_thin"}
        assert isinstance(progress["rng"], dict) and progress["t"] == 400
        # The minibatches still queued are rebuilt from the generator's state, not stored.
        assert set(progress["queue"]) == {"rng", "remaining"}
    # Saving the fitted estimator costs the draws once, plus the chains' small states.
    assert len(pickle.dumps(est)) < 1.5 * est.samples_.nbytes + len(pickle.dumps(est._chain_states)) + 100_000


@pytest.mark.parametrize(
    "make",
    [
        lambda: (SGBayesLogisticRegression(n_iter=300, n_chains=2, random_state=0), "cancer"),
        lambda: (SGBayesLinearRegression(sampler="gadmala", n_iter=300, n_chains=2, random_state=0), "regression"),
        lambda: (SGBayesDRBMClassifier(n_hidden=3, n_iter=100, n_chains=2, random_state=0), "moons"),
    ],
    ids=["logistic", "linear-gadmala", "drbm"],
)
def test_skops_round_trip_trusts_only_this_package(cancer, make):
    est, data = make()
    if data == "cancer":
        X, y = cancer
    elif data == "regression":
        X, y = cancer[0][:, :5], cancer[0][:, 5]
    else:
        X, y = make_moons(200, noise=0.2, random_state=0)
    est.fit(X, y)
    blob = skops_io.dumps(est)
    untrusted = skops_io.get_untrusted_types(data=blob)
    assert untrusted and all(name.startswith("skbayes_sg.") for name in untrusted), untrusted
    loaded = skops_io.loads(blob, trusted=untrusted)
    np.testing.assert_array_equal(loaded.samples_, est.samples_)
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))
    if hasattr(est, "predict_proba"):
        np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))
    else:
        for a, b in zip(loaded.predict(X, return_std=True), est.predict(X, return_std=True)):
            np.testing.assert_array_equal(a, b)
