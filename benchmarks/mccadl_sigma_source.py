"""Where mCCAdL's C step takes ``Sigma`` from: bias of the posterior and cost per step.

Issue: estimating ``Sigma`` from the same minibatch whose noise the C step damps correlates
the two, and at the library's defaults the posterior means moved by up to 9 sd. This
benchmark fits ``SGBayesLogisticRegression`` on synthetic logistic regression (D = 20,
N = 1e4 and 1e5, ``benchmarks/_reference.py``) with every default except the option
under test, and compares the draws with an exact HMC reference
(``benchmarks/reference_posterior.py``; the Laplace approximation's own error is printed
beside it). Options (``MCCAdL(sigma_estimate=...)``):

- ``same``: the per-example gradients of the force just applied (the paper's Algorithm 1);
- ``lagged``: those of the force before it, which no kick of the current iteration used;
- ``independent``: a second minibatch at the C step's position (the library's default);
- ``split``: ``independent`` at half the batch for both, the same rows per iteration as
  ``same``;
- ``sigma_half``, ``sigma_quarter``, ``sigma_eighth``: ``independent`` with the force's batch
  unchanged and a Sigma minibatch of 1/2, 1/4, 1/8 of its rows (``Sigma = N^2/n V`` stays
  the force's noise; only its estimate ``V`` uses fewer rows, so it costs less and is
  noisier). A prototype: :class:`SmallSigmaMCCAdL` takes the first rows of the next
  minibatch through the gradient estimator's private methods, since
  ``MinibatchGradient.noise_gradients`` has no size argument;
- CCAdL's moving average (CCAdL paper eq. 18), for comparison;
- ``independent_every``: the independent minibatch drawn afresh every iteration
  (``sigma_refresh=1``); ``independent`` is the default ``sigma_refresh="auto"``, which with
  plain gradients (the ``plain`` geometry) reuses each for 64 iterations, averaged over the
  last 8.

Each runs on two geometries: ``plain`` (``gradient="minibatch"``, ``preconditioner="none"``
and the curvature-only step ``0.2 / sqrt(lambda_max)``: the papers' setting, where the
correlation bias was measured) and ``default`` (control variates, whitening and the
noise-aware step: what a user gets). ``--problems a9a`` adds a9a (``default`` only: in the
plain geometry its curvature step barely moves the chains), against its stored reference.
Cost per iteration of each option is timed on one chain against SGHMC's in the same run
(same geometry). Prints one JSON object per line.

Usage::

    python benchmarks/mccadl_sigma_source.py [--sizes 1e4 1e5] [--problems a9a] [--n-iter 5000]
        [--options same independent sigma_quarter] [--geometries plain default] [--out FILE]
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference import load_reference, make_problem  # noqa: E402

from skbayes_sg import DivergenceError, SGBayesLogisticRegression  # noqa: E402
from skbayes_sg._chains import ChainSpec, run_chain  # noqa: E402
from skbayes_sg._geometry import Geometry  # noqa: E402
from skbayes_sg.models import LogisticModel  # noqa: E402
from skbayes_sg.models._map import _map_estimate  # noqa: E402
from skbayes_sg.samplers import (  # noqa: E402
    SGHMC,
    CCAdL,
    FitContext,  # noqa: E402
    MCCAdL,
)
from skbayes_sg.samplers._step_size import largest_curvature  # noqa: E402

OPTIONS = (
    "same",
    "lagged",
    "independent",
    "independent_every",
    "split",
    "sigma_half",
    "sigma_quarter",
    "sigma_eighth",
    "ccadl",
)
#: Share of the force's rows in the Sigma minibatch of the ``sigma_*`` options.
SIGMA_FRACTIONS = {"sigma_half": 0.5, "sigma_quarter": 0.25, "sigma_eighth": 0.125}


class SmallSigmaMCCAdL(MCCAdL):
    """mCCAdL with an independent Sigma minibatch of ``sigma_fraction`` of the force's rows.

    Prototype for this benchmark only: the rows are the first ``m`` of a fresh minibatch
    (drawn with replacement, so any ``m`` of them are an independent sample; a slice of an
    epoch block otherwise), evaluated through the estimator's private ``_next_rows`` /
    ``_per_example`` / ``_count``. The library form would be a size argument of
    ``MinibatchGradient.noise_gradients``.
    """

    def __init__(self, sigma_fraction=0.25, step_size="auto", preconditioner="auto"):
        super().__init__(step_size=step_size, preconditioner=preconditioner, sigma_estimate="independent")
        self.sigma_fraction = sigma_fraction

    def _sigma_gradients(self, state, grad_estimator, theta, rng, scale=None):
        rows, _ = grad_estimator._next_rows(rng)
        m = max(2, int(round(self.sigma_fraction * grad_estimator.batch_size)))
        rows = rows[:m] if isinstance(rows, np.ndarray) else slice(rows.start, rows.start + m)
        grads = grad_estimator._per_example(theta, rows)
        grad_estimator._count(grads)
        return grads


def sampler_for(option, geometry, plain_step=None):
    precond = "none" if geometry == "plain" else "auto"
    step = plain_step if geometry == "plain" else "auto"
    if option == "ccadl":
        # CCAdL's own curvature constant is half mCCAdL's.
        return CCAdL(preconditioner=precond, step_size=step if step == "auto" else step / 2)
    if option == "sghmc":
        return SGHMC(preconditioner=precond, step_size=step)
    if option in SIGMA_FRACTIONS:
        return SmallSigmaMCCAdL(SIGMA_FRACTIONS[option], preconditioner=precond, step_size=step)
    if option == "independent_every":
        # A fresh Sigma minibatch every iteration (sigma_refresh=1), the default before
        # sigma_refresh="auto", which reuses (and averages) them with plain gradients.
        return MCCAdL(sigma_estimate="independent", sigma_refresh=1, preconditioner=precond, step_size=step)
    source = "independent" if option == "split" else option
    return MCCAdL(sigma_estimate=source, preconditioner=precond, step_size=step)


def fit(X, y, option, geometry, n_iter, plain_step=None, n_chains=4, seed=0):
    # The reference's (the papers') prior: alpha = 1 on the intercept too.
    kw = dict(n_iter=n_iter, n_chains=n_chains, random_state=seed, max_draws=None, alpha_intercept=1.0)
    if geometry == "plain":
        kw["gradient"] = "minibatch"
    if option == "split":
        kw["batch_size"] = 100
    est = SGBayesLogisticRegression(sampler=sampler_for(option, geometry, plain_step), **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est.fit(X, y)
        seconds = time.perf_counter() - t0
    return est, seconds


def curvature_step(X, y):
    """The curvature-only auto step of mCCAdL in theta, ``0.2 / sqrt(lambda_max)`` at the MAP:
    the step of the papers' setting, at which the issue measured the correlation bias (the
    noise-aware rule would shrink it until the chains barely move)."""
    model = LogisticModel(X, y)
    return 0.2 / np.sqrt(largest_curvature(model, _map_estimate(model)))


def accuracy(est, ref):
    draws = est.samples_.reshape(-1, est.samples_.shape[-1])
    z = (draws.mean(axis=0) - ref["mean"]) / ref["sd"]
    ratio = draws.std(axis=0) / ref["sd"]
    mcse = est.diagnostics_["mcse_mean"] / ref["sd"]
    return {
        "rms_mean_error_sd": float(np.sqrt(np.mean(z**2))),
        "max_mean_error_sd": float(np.abs(z).max()),
        "median_mcse_sd": float(np.median(mcse)),
        "sd_ratio_min": float(ratio.min()),
        "sd_ratio_median": float(np.median(ratio)),
        "sd_ratio_max": float(ratio.max()),
        "min_ess": float(est.diagnostics_["ess"].min()),
        "max_rhat": float(est.diagnostics_["rhat"].max()),
    }


def time_per_iteration(est, X, y, n_iter=3000, repeats=3):
    """Seconds per iteration of one chain of ``est``'s sampler in its fitted geometry (the
    minimum of ``repeats`` runs: the machine is shared, the minimum is the cost)."""
    model = LogisticModel(X, y)
    geometry = est._geometry
    chain_model = geometry.chain_model(model)
    batch = est.diagnostics_["batch_size"]
    gradient = geometry.gradient_spec(chain_model, batch, "replacement")
    start = Geometry.to_chain(chain_model, est.samples_[0, -1])
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        context = FitContext(step=(est.diagnostics_["step_size"], {}))
        run_chain(
            ChainSpec(est._sampler, chain_model, n_iter, 0, 1, 10, gradient, context), start, np.random.SeedSequence(0)
        )
        best = min(best, (time.perf_counter() - t0) / n_iter)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", default=["1e4", "1e5"])
    parser.add_argument("--problems", nargs="*", default=[], help="other reference problems (default geometry)")
    parser.add_argument("--n-iter", type=int, default=5000)
    parser.add_argument("--options", nargs="+", default=list(OPTIONS), choices=OPTIONS)
    parser.add_argument("--geometries", nargs="+", default=["plain", "default"], choices=["plain", "default"])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "mccadl_sigma_source.jsonl"))
    args = parser.parse_args()
    out = open(args.out, "a")
    names = [f"synth_{size}" for size in args.sizes] + list(args.problems)
    for name in names:
        X, y, _, _ = make_problem(name)
        ref = load_reference(name)
        laplace = {
            "laplace_max_mean_error_sd": ref["laplace_mean_dev_max"],
            "laplace_max_sd_error": ref["laplace_sd_dev_max"],
        }
        geometries = [g for g in args.geometries if name.startswith("synth") or g == "default"]
        plain_step = curvature_step(X, y) if "plain" in geometries else None
        for geometry in geometries:
            sghmc, _ = fit(X, y, "sghmc", geometry, 200, plain_step, n_chains=1)
            sghmc_cost = time_per_iteration(sghmc, X, y)
            for option in args.options:
                try:
                    est, seconds = fit(X, y, option, geometry, args.n_iter, plain_step)
                except DivergenceError as err:
                    row = {
                        "problem": name,
                        "geometry": geometry,
                        "option": option,
                        "n_iter": args.n_iter,
                        "diverged": True,
                        "step_size": err.step_size,
                        "iteration": err.iteration,
                    }
                    print(json.dumps(row), flush=True)
                    out.write(json.dumps(row) + "\n")
                    continue
                cost = time_per_iteration(est, X, y)
                row = {
                    "problem": name,
                    "geometry": geometry,
                    "option": option,
                    "n_iter": args.n_iter,
                    "step_size": est.diagnostics_["step_size"],
                    "batch_size": est.diagnostics_["batch_size"],
                    "fit_seconds": seconds,
                    "seconds_per_iter": cost,
                    "cost_vs_sghmc": cost / sghmc_cost,
                    **accuracy(est, ref),
                    **laplace,
                }
                print(json.dumps(row), flush=True)
                out.write(json.dumps(row) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
