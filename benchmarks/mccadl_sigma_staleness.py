"""How fast mCCAdL's ``Sigma(theta)`` changes along a chain: what ``sigma_refresh`` may reuse.

The C step needs the covariance of the gradient noise at the current position. Reusing one
independent estimate for ``k`` iterations (``MCCAdL(sigma_refresh=k)``) is harmless only if
``Sigma(theta)`` moves little over ``k`` iterations compared with the sampling error of one
minibatch's estimate, of order ``sqrt(P / n)``. This runs an mCCAdL chain on a9a (batch 500)
in two settings and measures ``||Sigma(theta_(t+k)) - Sigma(theta_t)||_F / ||Sigma(theta_t)||_F``
with ``Sigma`` estimated from the same 20,000 rows at both positions (common rows, so the
ratio is the change of ``Sigma(theta)`` and not sampling noise), averaged over 20 origins ``t``:

- ``default``: what the estimators run, whitened coordinates at the MAP with control-variate
  gradients (leverage-sampled rows), at the auto step ``h = 0.2``. The noise is that of
  ``g_i(theta) - g_i(theta_hat)``, quadratic in ``theta - theta_hat``;
- ``plain``: theta coordinates, plain minibatch gradients, at ``h = 1e-4`` and at the auto
  step.

Prints one JSON object per line and writes ``results/mccadl_sigma_staleness.jsonl``.
Usage: ``python benchmarks/mccadl_sigma_staleness.py``
"""

import json
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from skbayes_sg._chains import ChainRunner, ChainSpec
from skbayes_sg.minibatch import GradientSpec
from skbayes_sg.models import LogisticModel
from skbayes_sg.samplers import FitContext, MCCAdL

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _default_chain import default_chain  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared"
RESULTS = Path(__file__).resolve().parent / "results"
LAGS = (1, 2, 4, 8, 16, 32, 64)
ROWS = 20000


def changes(runner, rows):
    """Mean relative Frobenius change of Sigma over each lag, and between origins 100 apart."""
    runner.advance(3000)  # burn-in
    thetas = []
    for _ in range(2000):
        runner.advance(1)
        thetas.append(runner.state.theta.copy())
    target = runner.grad_estimator
    cache = {}

    def sigma(t):
        if t not in cache:
            grads = target._per_example(thetas[t], rows)
            cache[t] = grads.centred_gram() * (target.noise_scale / (grads.n_batch - 1))
        return cache[t]

    origins = range(0, 1900, 100)
    out = {
        f"lag_{k}": float(
            np.mean([np.linalg.norm(sigma(t + k) - sigma(t)) / np.linalg.norm(sigma(t)) for t in origins])
        )
        for k in LAGS
    }
    out["apart_100"] = float(
        np.mean([np.linalg.norm(sigma(t + 100) - sigma(t)) / np.linalg.norm(sigma(t)) for t in origins[:-1]])
    )
    out["sigma_max"] = float(np.mean([np.linalg.eigvalsh(sigma(t))[-1] for t in origins]))
    return out


def main():
    data = np.load(SHARED / "data" / "a9a.npz")
    X, y = data["X_train"].astype(float), data["y_train"].astype(float)
    model = LogisticModel(X, y, alpha=1.0)
    rows_rng = np.random.default_rng(5)
    out = []
    with threadpool_limits(limits=1, user_api="blas"):
        runner, _, h = default_chain(X, y, model, MCCAdL(), 500)
        rows = runner.grad_estimator._rows_dist.draw(rows_rng, ROWS)
        out.append({"setting": "default", "h": h, "batch": 500, **changes(runner, rows)})
        print(json.dumps(out[-1]), flush=True)
        sampler = MCCAdL(preconditioner="none")
        theta0 = np.zeros(model.n_params)
        for h in (1e-4, sampler.resolve_step_size(model, theta0)[0]):
            spec = ChainSpec(sampler, model, 10**9, 0, 10**6, 10, GradientSpec(500), FitContext(step=(h, {})))
            runner = ChainRunner(spec, theta0, np.random.SeedSequence(0))
            rows = rows_rng.integers(0, X.shape[0], ROWS)
            out.append({"setting": "plain", "h": h, "batch": 500, **changes(runner, rows)})
            print(json.dumps(out[-1]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "mccadl_sigma_staleness.jsonl", "w") as fh:
        for row in out:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    sys.exit(main())
