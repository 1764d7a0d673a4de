"""Cost of mCCAdL's C step alone against one SGHMC iteration on a9a (issue 15's goal).

The goal: "mCCAdL's C step: at most 1.5x the cost of an SGHMC step at batch 500 on a9a,
at the step sizes the automatic rule picks". The C step of :meth:`MCCAdL.step` is two
calls (``samplers/mccadl.py``):

- the covariance estimate, ``MCCAdL._sigma_gradients``: with ``sigma_estimate=
  "independent"`` (what the default ``"auto"`` picks with plain gradients) a fresh
  minibatch's per-example gradients at the C step's position
  (``grad_estimator.noise_gradients``: row draw, gather, residuals, whitening operator) and
  their :class:`~skbayes_sg.samplers._expmv.NoiseCovariance` (mean gradient); its trace,
  which the C step needs first, is counted here too. No other sub-step uses that minibatch,
  so nothing is shared with the force. With plain gradients (``sigma_refresh="auto"``: one
  Sigma minibatch per 64 iterations, held as a ``P x P`` matrix averaged over the last 8)
  this is the amortised refresh (Gram matrix). With ``sigma_estimate="same"`` (what
  ``"auto"`` picks with control variates) the per-example gradients are those of the force
  just applied, already computed: the estimate is then only their ``NoiseCovariance`` (mean
  gradient) and its trace, which ``c_step`` would otherwise build itself (built here
  instead, so that it is counted as the estimate, and passed on, so the C step does no more
  and no less than untimed);
- the application, ``_expmv.c_step``: ``p <- exp(-h (h/2) beta Sigma) p`` by the Taylor
  series or Lanczos (whichever the switch picks), or one matrix-vector product with the
  cached ``exp`` of the compact matrix (plain setting; the ``expm`` build, once per refresh,
  is amortised here).

Timed, one BLAS thread, in rounds that interleave (i) SGHMC iterations (``sampler.step``),
(ii) mCCAdL iterations, and (iii)/(iv) an instrumented mCCAdL chain whose two calls above
are timed with ``perf_counter`` inside its real iterations ((iii) = estimate +
application, (iv) = application alone); each quantity is the best round's mean. Two
settings: ``default``, what ``SGBayesLogisticRegression(random_state=0).fit`` on a9a runs
(whitened coordinates, control-variate gradients, leverage rows, the auto step; built as
``mccadl_throughput.py`` builds it), and ``plain`` (theta, plain gradients, h = 1e-4).
Also records the C step's method (Taylor or Lanczos), products and Taylor degree ``(m, s)``
per iteration, and with ``--profile`` lists every scipy / sklearn function called during
a profiled run of mCCAdL iterations, with calls per iteration.

Prints one JSON object per line and saves ``results/mccadl_cstep.jsonl``.

Usage::

    python benchmarks/mccadl_cstep.py [--quick] [--profile] [--sigma-estimate independent same]

Each ``--sigma-estimate`` value gives one row per setting (``sigma_estimate`` in the row).
"""

import argparse
import collections
import copy
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

import skbayes_sg.samplers._expmv as expmv_mod
import skbayes_sg.samplers.mccadl as mccadl_mod
from skbayes_sg.minibatch import MinibatchGradient
from skbayes_sg.models import LogisticModel
from skbayes_sg.samplers import SGHMC, FitContext, MCCAdL
from skbayes_sg.samplers._expmv import NoiseCovariance

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _default_chain import default_chain  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
RESULTS = Path(__file__).resolve().parent / "results"
BATCH = 500

_c_step = mccadl_mod.c_step
_expmv = expmv_mod.expmv


class Timers:
    """Seconds spent in the C step's estimate and application, and what the application did."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.est = self.app = 0.0
        self.calls = 0
        self.products = collections.Counter()
        self.degrees = collections.Counter()
        self.lanczos = 0


class TimedMCCAdL(MCCAdL):
    """mCCAdL whose covariance estimate (with its trace) is timed; see :func:`timed_c_step`."""

    timers = None

    def _sigma_gradients(self, state, grad_estimator, theta, rng, scale):
        t0 = time.perf_counter()
        cov = super()._sigma_gradients(state, grad_estimator, theta, rng, scale)
        if not isinstance(cov, NoiseCovariance):
            # "same" / "lagged": what c_step would build from the per-example gradients.
            cov = NoiseCovariance(cov, grad_estimator.noise_scale, -scale)
        cov.trace()  # the first thing the C step needs; cached on the operator
        self.timers.est += time.perf_counter() - t0
        return cov


def make_timed_c_step(timers):
    def timed_c_step(p, grads, noise_scale, t, scale, tol, eigvec, cache=None, method="auto"):
        before = cache.get("n_lanczos", 0)
        t0 = time.perf_counter()
        out = _c_step(p, grads, noise_scale, t, scale, tol, eigvec, cache=cache, method=method)
        timers.app += time.perf_counter() - t0
        timers.calls += 1
        timers.products[out[1]] += 1
        timers.lanczos += cache.get("n_lanczos", 0) - before
        return out

    def recording_expmv(t, matvec, b, trace, norm, tol, m_max=expmv_mod.M_MAX, norm_bound=np.inf, degree=None):
        timers.degrees[str(degree)] += 1
        return _expmv(t, matvec, b, trace, norm, tol, m_max=m_max, norm_bound=norm_bound, degree=degree)

    return timed_c_step, recording_expmv


def stepper(sampler, state, grad_estimator, rng):
    """A closure advancing the chain ``n`` iterations by ``sampler.step``."""
    chain = {"state": state}

    def run(n):
        s = chain["state"]
        for _ in range(n):
            s, _ = sampler.step(s, grad_estimator, rng)
        chain["state"] = s

    return run, chain


def default_setting(X, y, model, sigma_estimate="independent"):
    """(SGHMC, mCCAdL) chains in the default fit's geometry, noise model and auto steps."""
    chains = {}
    for name, make in (("SGHMC", SGHMC), ("MCCAdL", lambda: MCCAdL(sigma_estimate=sigma_estimate))):
        runner, _, h = default_chain(X, y, model, make(), BATCH)
        chains[name] = (runner.sampler, runner.state, runner.grad_estimator, runner.rng, h)
    return chains


def plain_setting(model, sigma_estimate="independent", h=1e-4):
    chains = {}
    theta0 = np.zeros(model.n_params)
    for name, sampler in (
        ("SGHMC", SGHMC(friction=1.0)),
        ("MCCAdL", MCCAdL(friction=1.0, sigma_estimate=sigma_estimate)),
    ):
        rng = np.random.default_rng(0)
        grad_estimator = MinibatchGradient(model, BATCH)
        state = sampler.init_state(theta0, grad_estimator, rng, FitContext(step=(h, {})))
        chains[name] = (sampler, state, grad_estimator, rng, h)
    return chains


def measure(setting, chains, rounds, steps, profile):
    timers = Timers()
    TimedMCCAdL.timers = timers
    timed_c_step, recording_expmv = make_timed_c_step(timers)
    sghmc = chains["SGHMC"]
    mccadl = chains["MCCAdL"]
    # The instrumented chain: a copy of the mCCAdL chain (its own state, minibatch queue and rng).
    timed_sampler = TimedMCCAdL(**mccadl[0].get_params())
    _, state, grad_estimator, rng, h = copy.deepcopy(mccadl)
    run_sghmc, _ = stepper(*sghmc[:4])
    run_mccadl, m_chain = stepper(*mccadl[:4])
    run_timed, t_chain = stepper(timed_sampler, state, grad_estimator, rng)
    best = {"sghmc": np.inf, "mccadl": np.inf, "cstep": np.inf, "cstep_apply": np.inf, "cstep_estimate": np.inf}
    with threadpool_limits(limits=1, user_api="blas"):
        for run in (run_sghmc, run_mccadl, run_timed):
            run(300)  # warm-up: caches, the C step's norm estimate, the Sigma average (plain)
        timers.reset()
        for _ in range(rounds):
            for name, run in (("sghmc", run_sghmc), ("mccadl", run_mccadl)):
                t0 = time.perf_counter()
                run(steps)
                best[name] = min(best[name], (time.perf_counter() - t0) / steps)
            est0, app0 = timers.est, timers.app
            mccadl_mod.c_step, expmv_mod.expmv = timed_c_step, recording_expmv
            try:
                run_timed(steps)
            finally:
                mccadl_mod.c_step, expmv_mod.expmv = _c_step, _expmv
            est, app = (timers.est - est0) / steps, (timers.app - app0) / steps
            best["cstep"] = min(best["cstep"], est + app)
            best["cstep_apply"] = min(best["cstep_apply"], app)
            best["cstep_estimate"] = min(best["cstep_estimate"], est)
        if profile:
            prof = cProfile.Profile()
            n_prof = 2000
            prof.runcall(run_mccadl, n_prof)
            stats = pstats.Stats(prof)
            foreign = []
            for (filename, line, func), (_, nc, _, ct, _) in stats.stats.items():
                # Python functions in scipy / sklearn, and their compiled functions (builtins,
                # reported with filename "~": expit, the sparse kernels of EllRows).
                if any(lib in filename or lib in func for lib in ("scipy", "sklearn")):
                    foreign.append(
                        {
                            "function": f"{Path(filename).name}:{line}:{func}",
                            "calls_per_iter": round(nc / n_prof, 3),
                            "us_per_iter": round(1e6 * ct / n_prof, 2),
                        }
                    )
            row = {
                "setting": setting,
                "profile": "scipy/sklearn functions called during mCCAdL iterations",
                "iterations": n_prof,
                "functions": sorted(foreign, key=lambda r: -r["calls_per_iter"]),
            }
            print(json.dumps(row), flush=True)
            out = pstats.Stats(prof)
            out.sort_stats("tottime").print_stats(15)
    us = {k: round(1e6 * v, 2) for k, v in best.items()}
    n_calls = max(timers.calls, 1)
    c_state = t_chain["state"]
    row = {
        "setting": setting,
        "sigma_estimate": timed_sampler.sigma_estimate,
        "sigma_source": timed_sampler.sigma_source(grad_estimator),
        "batch": BATCH,
        "h": h,
        "blas_threads": 1,
        "rounds": rounds,
        "steps_per_round": steps,
        "us_sghmc_step": us["sghmc"],
        "us_mccadl_step": us["mccadl"],
        "us_cstep": us["cstep"],
        "us_cstep_estimate": us["cstep_estimate"],
        "us_cstep_apply": us["cstep_apply"],
        "cstep_over_sghmc": round(best["cstep"] / best["sghmc"], 2),
        "cstep_apply_over_sghmc": round(best["cstep_apply"] / best["sghmc"], 2),
        "mccadl_over_sghmc": round(best["mccadl"] / best["sghmc"], 2),
        "c_step_calls": timers.calls,
        "lanczos_fraction": round(timers.lanczos / n_calls, 3),
        "products_per_call": round(sum(k * v for k, v in timers.products.items()) / n_calls, 2),
        "products_histogram": {str(k): v for k, v in sorted(timers.products.items())},
        "taylor_degree_m_s_histogram": dict(timers.degrees.most_common()),
        "sigma_minibatches_per_iter": round(c_state.sigma_minibatches / max(c_state.n_steps, 1), 3),
        "sigma_compact": bool(getattr(c_state.sigma_cov, "is_compact", False)),
    }
    print(json.dumps(row), flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true", help="list scipy/sklearn calls per mCCAdL iteration")
    parser.add_argument(
        "--sigma-estimate",
        nargs="+",
        default=["independent", "same"],
        choices=["auto", "independent", "same", "lagged"],
        help="MCCAdL(sigma_estimate=...) values to measure, one row per setting each",
    )
    args = parser.parse_args()
    rounds, steps = (3, 200) if args.quick else (9, 600)
    data = np.load(SHARED / "data" / "a9a.npz")
    X, y = data["X_train"].astype(float), data["y_train"].astype(float)
    model = LogisticModel(X, y, alpha=1.0)
    rows = []
    for source in args.sigma_estimate:
        rows.append(measure("default", default_setting(X, y, model, source), rounds, steps, args.profile))
        rows.append(measure("plain", plain_setting(model, source), rounds, steps, args.profile))
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        with open(RESULTS / "mccadl_cstep.jsonl", "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    sys.exit(main())
