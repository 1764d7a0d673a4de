"""The worked example of docs/architecture_gradients.rst: a new gradient estimator.

Stratified minibatches: every minibatch takes ``n_k = n / K`` rows from each of ``K`` strata
(classes of an imbalanced problem, say), so that no minibatch misses a rare stratum. The force
``sum_k N_k / n_k sum_{i in S_k} g_i + grad log prior`` is unbiased; written as a
:class:`~skbayes_sg.minibatch.MinibatchGradient` whose rows carry the weights
``c_i = (N_k / n_k) / (N / n)``, every sampler's noise estimate sees the weighted rows. The
tests check the force against the full-data gradient and the chains against the exact
posterior of a conjugate Gaussian regression.
"""

from dataclasses import dataclass

import numpy as np

from skbayes_sg._chains import ChainSpec, run_chains
from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models import LinearRegressionModel
from skbayes_sg.samplers import MCCAdL

from ._exact import Z_MAX, assert_matches_gaussian, ess_mean


# -- the example, as in docs/architecture_gradients.rst ------------------------------------------
class StratifiedGradient(MinibatchGradient):
    """``n / K`` rows drawn with replacement from each of the ``K`` strata, weighted to stay unbiased."""

    def __init__(self, model, batch_size, strata):
        super().__init__(model, batch_size)
        self.strata = [np.flatnonzero(strata == s) for s in np.unique(strata)]
        self.n_k = batch_size // len(self.strata)
        self.batch_size = n = self.n_k * len(self.strata)
        self.noise_scale = self.n_samples**2 / n  # Sigma = c V, with V of the weighted rows
        # c_i = (N_k / n_k) / (N / n): the force (N / n) sum_S c_i g_i is then unbiased.
        self._row_scale = np.empty(self.n_samples)
        for rows in self.strata:
            self._row_scale[rows] = rows.size / self.n_k * n / self.n_samples

    def _fill_queue(self, rng):
        # Minibatches are drawn ahead in blocks (and rebuilt from the generator's state on a
        # resume): the queue holds whole minibatches, stratum by stratum.
        parts = [rows[rng.integers(0, rows.size, size=(self._block, self.n_k))] for rows in self.strata]
        self._queue = list(np.concatenate(parts, axis=1))
        self._queue.reverse()


@dataclass
class StratifiedSpec:
    """What a chain needs to build its own estimator (each chain keeps its own queue)."""

    batch_size: int
    strata: np.ndarray

    def build(self, model):
        return StratifiedGradient(model, self.batch_size, self.strata)


# -----------------------------------------------------------------------------------------------


def _problem():
    """A conjugate Gaussian regression (noise precision 1, prior N(0, I)) with a rare stratum:
    20 of 400 rows whose targets are shifted by 3, so that weighing it wrongly biases the force."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 3))
    y = X @ [1.0, -0.5, 2.0] + 0.5 + rng.normal(size=400)
    strata = np.zeros(400, dtype=int)
    strata[:20] = 1
    y[:20] += 3.0
    model = LinearRegressionModel(X, y, noise_precision=1.0, alpha=1.0, alpha_intercept=1.0)
    Xa = np.column_stack([X, np.ones(400)])
    cov = np.linalg.inv(Xa.T @ Xa + np.eye(4))
    return model, cov @ Xa.T @ y, cov, strata


def test_stratified_force_is_unbiased():
    model, mean, _, strata = _problem()
    grad = StratifiedSpec(40, strata).build(model)
    rng = np.random.default_rng(0)
    theta = mean + 0.3
    forces = np.array([grad.gradient(theta, rng)[0] for _ in range(4000)])
    exact = model.grad_log_posterior(theta)
    se = forces.std(axis=0) / np.sqrt(len(forces))
    z = (forces.mean(axis=0) - exact) / se
    assert np.all(np.abs(z) < Z_MAX), z
    # Every minibatch holds n_k rows of the rare stratum, and the count is the papers' unit.
    assert grad.n_grad_evals == 4000 * 40


def test_chains_with_stratified_minibatches_sample_the_posterior():
    model, mean, cov, strata = _problem()
    spec = ChainSpec(MCCAdL(step_size=2e-3), model, n_iter=6000, n_burn=1000, gradient=StratifiedSpec(40, strata))
    results = run_chains(spec, [mean] * 4, np.random.SeedSequence(0).spawn(4))
    draws = np.stack([r.draws for r in results])
    assert ess_mean(draws).min() > 200
    assert_matches_gaussian(draws, mean, np.sqrt(np.diag(cov)))
