"""partial_fit: chains continued over chunks target the posterior of all data seen."""

import numpy as np
import pytest

from skbayes_sg import SGBayesLinearRegression, SGBayesLogisticRegression
from skbayes_sg.diagnostics import mcse_mean


@pytest.mark.statistical
def test_partial_fits_reach_the_posterior_of_all_the_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1200, 3))
    y = X @ [1.0, -0.5, 2.0] + 0.3 + rng.normal(size=1200)
    kw = dict(noise_precision=1.0, n_iter=3000, n_chains=4)
    stream = SGBayesLinearRegression(random_state=0, **kw)
    for chunk in np.array_split(np.arange(1200), 4):
        stream.partial_fit(X[chunk], y[chunk])
    assert stream.n_iter_ == 4 * 3000
    # The exact conjugate posterior of all 1200 rows, under the default priors stated in the
    # units the first chunk fixed: N(0, 1) on the weights and N(0, 100) on the intercept of
    # (y - y_mean_) / y_scale_, whose noise precision is y_scale_^2.
    first = np.array_split(np.arange(1200), 4)[0]
    m, s = stream.y_mean_, stream.y_scale_
    assert (m, s) == (pytest.approx(y[first].mean()), pytest.approx(y[first].std()))
    Xa = np.column_stack([X, np.ones(1200)])
    cov = np.linalg.inv(s**2 * Xa.T @ Xa + np.diag([1.0, 1.0, 1.0, 0.01]))
    mean = s**2 * cov @ Xa.T @ (y - m) / s
    mean, cov = s * mean + np.r_[0.0, 0.0, 0.0, m], s**2 * cov
    draws = stream.samples_
    flat = draws.reshape(-1, 4)
    assert np.all(np.abs(flat.mean(0) - mean) < 4.5 * mcse_mean(draws))
    np.testing.assert_allclose(flat.std(0), np.sqrt(np.diag(cov)), rtol=0.15)
    # ...and not that of the last chunk alone, whose mean is several sds away somewhere.
    last = np.array_split(np.arange(1200), 4)[-1]
    Xl = Xa[last]
    mean_last = np.linalg.solve(Xl.T @ Xl + np.eye(4), Xl.T @ y[last])
    assert np.max(np.abs(mean_last - mean) / np.sqrt(np.diag(cov))) > 1.0


def test_partial_fit_step_size_follows_n_and_chains_continue():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(800, 2))
    y = (X @ [2.0, -1.0] + rng.logistic(size=800) > 0).astype(int)
    clf = SGBayesLogisticRegression(n_iter=200, n_chains=2, random_state=0)
    clf.partial_fit(X[:100], y[:100], classes=[0, 1])
    h_small = clf.diagnostics_["step_size"]
    last = clf.samples_[:, -1].copy()  # the chains' last states (thin=1, no max_draws cut)
    clf.partial_fit(X[100:], y[100:])
    assert clf.diagnostics_["step_size"] < 0.6 * h_small  # ~ sqrt(100 / 800) of it
    assert clf.samples_.shape == (2, 200, 3) and clf.n_iter_ == 400
    # The second call did not restart from the MAP: its first draw is near the last state.
    assert np.all(np.linalg.norm(clf.samples_[:, 0] - np.array(last), axis=1) < 1.0)
    from sklearn.linear_model import LogisticRegression

    assert clf.score(X, y) > LogisticRegression().fit(X, y).score(X, y) - 0.02


def test_partial_fit_errors_and_fit_starts_over():
    X = np.random.default_rng(2).normal(size=(40, 2))
    y = np.arange(40) % 2
    clf = SGBayesLogisticRegression(n_iter=50, n_chains=1, random_state=0)
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        clf.partial_fit(X, y)
    clf.partial_fit(X[:20], y[:20], classes=[0, 1, 2])
    assert list(clf.classes_) == [0, 1, 2] and clf.coef_.shape == (3, 2)
    with pytest.raises(ValueError, match=r"labels \[7\] not in classes_"):
        clf.partial_fit(X[:3], [0, 7, 1])
    with pytest.raises(ValueError, match="expecting 2 features"):
        clf.partial_fit(X[:, :1], y)
    clf.fit(X, y)
    assert clf._seen_X is None and list(clf.classes_) == [0, 1]
