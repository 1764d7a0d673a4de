"""The worked example of docs/architecture_samplers.rst: a new sampler in 30 lines.

A preconditioned SGLD (Li et al. 2016, pSGLD) whose diagonal preconditioner is the RMSprop
average of the squared forces, adapted during burn-in and frozen after it (so that the kept
draws come from a fixed kernel, and the Gamma correction pSGLD otherwise needs vanishes).
It is registered under a name and fitted through an estimator; on a conjugate Gaussian linear
regression its posterior mean must match the exact one within Monte Carlo error.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from skbayes_sg import SGBayesLinearRegression, samplers
from skbayes_sg.samplers import BaseSampler, SamplerState, register


# -- the example, as in docs/architecture_samplers.rst -------------------------------------------
@dataclass
class PSGLDState(SamplerState):  # theta and step_size come from SamplerState
    v: np.ndarray = None  # running mean of the squared forces
    adapting: bool = True

    def summary(self):  # chain-level diagnostics, into diagnostics_
        return {"preconditioner_max": float(1.0 / np.sqrt(self.v).min())}


class PSGLDInfo(NamedTuple):  # per-draw statistics, into sample_stats_
    force_norm: float


class PSGLD(BaseSampler):
    """theta <- theta + h G F~ + sqrt(2 h T G) xi, G = 1 / sqrt(v) (elementwise)."""

    _step_size_order = 2  # h G lambda is stable below 2 with G ~ lambda^(-1/2)
    _auto_step_constant = 0.2
    info_type = PSGLDInfo

    def __init__(self, step_size="auto", decay=0.99, temperature=1.0):
        self.step_size = step_size
        self.decay = decay
        self.temperature = temperature

    def init_state(self, theta0, grad_estimator, rng, context=None):
        theta = np.array(theta0, dtype=float)
        return PSGLDState(theta, self.step_size_for(context, theta), v=np.ones_like(theta))

    def step(self, state, grad_estimator, rng):
        force, _ = grad_estimator.gradient(state.theta, rng)
        if state.adapting:
            state.v = self.decay * state.v + (1.0 - self.decay) * force**2
        G, h = 1.0 / np.sqrt(state.v), state.step_size
        state.theta += h * G * force + np.sqrt(2.0 * h * self.temperature * G) * rng.standard_normal(G.size)
        return state, PSGLDInfo(float(np.linalg.norm(force)))

    def end_adaptation(self, state):
        state.adapting = False
        return state


# -----------------------------------------------------------------------------------------------


def test_example_sampler_recovers_the_exact_posterior_mean(monkeypatch):
    # Registered for this test only (register adds to samplers.SAMPLERS, here a copy).
    monkeypatch.setattr(samplers, "SAMPLERS", dict(samplers.SAMPLERS))
    register(PSGLD)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3)) * [1.0, 3.0, 0.3]
    y = X @ [1.0, -0.5, 2.0] + 0.7 + rng.normal(size=300)
    reg = SGBayesLinearRegression(
        sampler="psgld",
        noise_precision=1.0,
        normalize_y=False,
        alpha=1.0,
        alpha_intercept=1.0,
        n_iter=6000,
        n_chains=4,
        random_state=0,
    ).fit(X, y)
    # Exact posterior: N(m, S), S = (Xa'Xa + I)^-1, m = S Xa'y (noise precision 1, prior N(0, I)).
    Xa = np.column_stack([X, np.ones(len(y))])
    S = np.linalg.inv(Xa.T @ Xa + np.eye(4))
    m = S @ Xa.T @ y
    draws = reg.samples_.reshape(-1, 4)
    # The chains mixed (so that the MCSE means something), and the means are within 4.5 MCSE.
    assert reg.diagnostics_["ess"].min() > 100 and reg.diagnostics_["rhat"].max() < 1.1
    z = (draws.mean(axis=0) - m) / reg.diagnostics_["mcse_mean"]
    assert np.all(np.abs(z) < 4.5), z
    # A fixed-h scheme inflates the variances by O(h); at this step by a few percent.
    np.testing.assert_allclose(draws.std(axis=0), np.sqrt(np.diag(S)), rtol=0.15)
    # What the sampler reported: its step size, per-draw info and chain summary.
    assert reg.diagnostics_["step_size"] > 0 and "lambda_max" in reg.diagnostics_
    assert reg.sample_stats_["force_norm"].shape == reg.samples_.shape[:2]
    assert reg.diagnostics_["preconditioner_max"] > 0
    assert isinstance(reg._chain_states[0], PSGLDState) and not reg._chain_states[0].adapting
