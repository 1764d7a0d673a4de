"""The chain a default fit runs, for benchmarks that time or probe single iterations."""

import warnings

import numpy as np

from skbayes_sg import SGBayesLogisticRegression
from skbayes_sg._chains import ChainRunner, ChainSpec
from skbayes_sg.samplers import FitContext


def default_chain(X, y, model, sampler, batch_size):
    """A ``ChainRunner`` of ``sampler`` as a default ``SGBayesLogisticRegression`` fit runs it.

    The geometry (whitening at the MAP, control-variate centre, leverage rows), the minibatch
    size and the automatic step come from a 20-iteration fit with ``batch_size``; the chain
    starts at a draw of the Laplace approximation, as fits do, and runs without stored draws.

    Returns
    -------
    runner : ChainRunner
    n : int
        The minibatch size the fit chose.
    h : float
        Its step size.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a 20-iteration fit does not converge, by design
        est = SGBayesLogisticRegression(
            sampler=sampler, n_iter=20, n_chains=1, random_state=0, batch_size=batch_size
        ).fit(X, y)
    geometry = est._geometry
    chain_model = geometry.chain_model(model)
    n, h = est.diagnostics_["batch_size"], est.diagnostics_["step_size"]
    start = np.random.default_rng(1).standard_normal(model.n_params)
    gradient = geometry.gradient_spec(chain_model, n, "replacement")
    spec = ChainSpec(est._sampler, chain_model, 10**9, 0, 10**6, 10, gradient, FitContext(step=(h, {})))
    runner = ChainRunner(spec, start, np.random.SeedSequence(0))
    return runner, n, h
