"""A chain pickled between rounds (as every round in a worker process is) continues to the
last bit as it would have in this process: whatever it carries from one iteration to the
next must pickle without changing the arithmetic that follows."""

import pickle

import numpy as np
import pytest
from sklearn.datasets import make_classification

import skbayes_sg._chains as chains
import skbayes_sg._pools as _pools
from skbayes_sg import SGBayesLogisticRegression

# mCCAdL on minibatches: its C step shifts by the trace of the minibatch's per-example
# gradient covariance, which the operator it keeps in its state (``grads``) computes from
# the model's cached row weights; an array alpha (one precision per feature) as "auto" gives.
# Before the operator kept those weights when pickled, its trace after a round trip was
# another sum (of the explicit G L): 1.2e-14 apart after 400 iterations here (breast
# cancer's 31 parameters happened to round alike).
KW = dict(sampler="mccadl", batch_size=100, n_iter=400, n_chains=2, random_state=0, alpha=np.linspace(0.5, 2.0, 60))


@pytest.fixture(scope="module")
def data():
    return make_classification(3000, 60, n_informative=20, random_state=0)


@pytest.mark.parametrize("storage", ["memory", "disk"])
def test_chains_pickled_between_rounds_draw_what_they_would_have_drawn(data, storage, tmp_path, monkeypatch):
    # Rows on disk keep no per-row cache: the pickled operator recomputes the row weights
    # from its own minibatch by the closure's formula, not by another sum.
    X, y = data
    if storage == "disk":
        np.save(tmp_path / "X.npy", X)
        X = np.load(tmp_path / "X.npy", mmap_mode="r")
    kept = SGBayesLogisticRegression(**KW).fit(X, y)
    advance = chains._advance
    monkeypatch.setattr(chains, "_advance", lambda runners, *a: advance(pickle.loads(pickle.dumps(runners)), *a))
    # Rounds of 64 iterations: several round trips, the first after the chains' first steps.
    monkeypatch.setattr(chains, "ROUND_SECONDS", 0.0)
    pickled = SGBayesLogisticRegression(**KW).fit(X, y)
    np.testing.assert_array_equal(kept.samples_, pickled.samples_)


@pytest.mark.parametrize("forks", [True, False], ids=["forked", "loky"])
def test_draws_with_an_array_alpha_are_identical_for_n_jobs_1_and_2(data, monkeypatch, forks):
    X, y = data
    one = SGBayesLogisticRegression(n_jobs=1, **KW).fit(X, y)
    # Start the process pool whatever the work left: the chains then travel to the workers
    # (and the model too, to loky's).
    monkeypatch.setattr(chains, "PROCESS_START_SECONDS", 0.0)
    if forks and not _pools.forks_workers():
        pytest.skip("worker processes are not forked here")
    monkeypatch.setattr(_pools, "forks_workers", lambda: forks)
    groups = []
    factory = chains._parallel
    monkeypatch.setattr(
        chains, "_parallel", lambda n, forked, **kw: groups.append((n, forked)) or factory(n, forked, **kw)
    )
    two = SGBayesLogisticRegression(n_jobs=2, **KW).fit(X, y)
    assert groups == [(2, forks)]
    np.testing.assert_array_equal(one.samples_, two.samples_)


def test_a_pickled_per_example_operator_keeps_its_trace(data):
    # The operator a chain state keeps: its trace from the model's row weights, to the bit.
    from skbayes_sg.models import LogisticModel, WhitenedModel

    X, y = data
    model = LogisticModel(X, y.astype(float), alpha=np.linspace(0.5, 2.0, 60), alpha_intercept=0.01)
    P = model.n_params
    L = np.linalg.cholesky(np.linalg.inv(-model.loglik_hessian(np.zeros(P)) + np.eye(P)))
    whitened = WhitenedModel(model, np.zeros(P), L)
    idx = np.random.default_rng(0).choice(X.shape[0], 300, replace=False)
    for theta in np.random.default_rng(1).standard_normal((5, P)):
        grads = whitened.per_example_gradients(theta, idx)
        copy = pickle.loads(pickle.dumps(grads))
        assert copy.total_sum_of_squares() == grads.total_sum_of_squares()
