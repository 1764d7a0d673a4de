"""Exact full-data reference posteriors for the accuracy benchmarks, by HMC.

For each named problem of :mod:`_reference` (Bayesian logistic regression, priors
``N(0, 1 / alpha)`` on the weights and ``N(0, 1 / alpha_intercept)`` on the intercept:
a diagonal prior precision ``A``, ``alpha I`` for the papers' prior), this script

1. finds the MAP by Newton's method on the log posterior of
   :class:`skbayes_sg.models.LogisticModel` (the posterior the library samples), after
   checking that model against an independent NumPy formula at a random point;
2. computes the dense Hessian ``H = X~' diag(p (1 - p)) X~ + A`` (``X~ = [X, 1]``) of
   the negative log posterior at the MAP;
3. runs 4 chains of Hamiltonian Monte Carlo with a Metropolis correction and mass matrix
   ``H``, i.e. unit mass in the coordinates ``z = L' (theta - MAP)`` with ``H = L L'``,
   where the posterior is close to ``N(0, I)``. Chains start at ``MAP + L^-T xi``,
   ``xi ~ N(0, I)`` (Laplace draws); the step size is tuned in warm-up by dual averaging
   (Hoffman & Gelman 2014) for a mean acceptance of 0.85; each trajectory has a number
   of leapfrog steps drawn uniformly about ``(pi / 2) / eps``, a trajectory length of
   ``pi / 2 +- 50%``, which on ``N(0, I)`` leaves successive draws nearly uncorrelated
   (the jitter removes the periodicities a fixed length would hit);
4. extends the chains until the minimum bulk ESS over coordinates reaches 4,000 (MCSE of
   every mean below 0.016 sd) and the maximum rank-normalised split R-hat is below 1.005
   (diagnostics from :mod:`skbayes_sg.diagnostics`);
5. reports how far the Laplace approximation ``N(MAP, H^-1)`` is from the HMC reference,
   saves ``results/reference_<name>.npz`` (read it with ``_reference.load_reference``) and
   appends one JSON line per problem to ``results/reference_posterior.jsonl``.

Usage, from the repo root::

    python benchmarks/reference_posterior.py NAME [NAME ...]
    python benchmarks/reference_posterior.py all
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from scipy.linalg import cho_factor, cho_solve, cholesky, solve_triangular
from scipy.special import expit
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from _reference import PROBLEMS, RESULTS_DIR, make_problem, prior_precision, problem_prior, reference_path  # noqa: E402

from skbayes_sg.diagnostics import ess_bulk, ess_tail, mcse_mean, split_rhat  # noqa: E402
from skbayes_sg.models import LogisticModel  # noqa: E402

TARGET_ACCEPT = 0.85
TRAJECTORY_LENGTH = np.pi / 2
JITTER = 0.5  # trajectory lengths uniform on (1 +- JITTER) * TRAJECTORY_LENGTH
TARGET_ESS = 4000.0
MAX_RHAT = 1.005
# An energy error this large means the integrator has left the typical set (a
# divergence): the proposal is rejected whatever the uniform draw.
DIVERGENCE_ENERGY = 1000.0
MAX_LEAPFROG = 1000


# ---------------------------------------------------------------------------------------
# Posterior: the library's model, its independent check and its Hessian
# ---------------------------------------------------------------------------------------
def numpy_log_posterior_and_grad(theta, X, y, alpha):
    """Log posterior (up to a constant) and gradient of logistic regression, from scratch.

    Independent of skbayes_sg, to check its model: ``sum_i y_i z_i - log(1 + e^{z_i})``
    with ``z = X w + b``, written with ``np.logaddexp`` for stability, plus the prior
    ``-1/2 sum_j alpha_j theta_j^2`` on the weights and the intercept; ``alpha`` is the
    prior precision, a float (the same for every coordinate) or an array of shape (P,).
    """
    w, b = theta[:-1], theta[-1]
    z = X @ w + b
    resid = y - expit(z)
    logp = float(y @ z - np.logaddexp(0.0, z).sum()) - 0.5 * float(theta @ (alpha * theta))
    grad = np.append(X.T @ resid, resid.sum()) - alpha * theta
    return logp, grad


def neg_log_posterior_hessian(theta, X, alpha):
    """Dense Hessian of the negative log posterior, ``X~' diag(p (1 - p)) X~ + diag(alpha)``.

    ``alpha``: the prior precision, a float or an array of shape (P,). Built by blocks so
    that ``X~ = [X, 1]`` (a copy of X) is never formed.
    """
    p = expit(X @ theta[:-1] + theta[-1])
    weight = p * (1.0 - p)
    D = X.shape[1]
    H = np.empty((D + 1, D + 1))
    H[:D, :D] = X.T @ (X * weight[:, None])
    H[:D, D] = H[D, :D] = X.T @ weight
    H[D, D] = weight.sum()
    H[np.diag_indices(D + 1)] += alpha
    return H


def check_model(model, X, y, alpha, rng):
    """Relative differences between the library's model and the NumPy formula.

    At one random point (scale 0.1, where the likelihood terms are far from saturated and
    every data row contributes): the log posterior, its gradient and one Hessian-vector
    product. Raises if any exceeds 1e-9, since then the reference would not be of the
    posterior the library samples.
    """
    theta = 0.1 * rng.standard_normal(model.n_params)
    lp_lib, g_lib = model.log_posterior_and_grad(theta)
    lp_np, g_np = numpy_log_posterior_and_grad(theta, X, y, alpha)
    v = rng.standard_normal(model.n_params)
    hv_lib = model.hessian_vector_product(theta, v)
    hv_np = neg_log_posterior_hessian(theta, X, alpha) @ v
    errors = {
        "logp": abs(lp_lib - lp_np) / max(1.0, abs(lp_np)),
        "grad": float(np.max(np.abs(g_lib - g_np)) / max(1.0, np.max(np.abs(g_np)))),
        "hvp": float(np.max(np.abs(hv_lib - hv_np)) / max(1.0, np.max(np.abs(hv_np)))),
    }
    if max(errors.values()) > 1e-9:
        raise RuntimeError(f"skbayes_sg's LogisticModel disagrees with the NumPy formula: {errors}")
    return errors


def find_map(model, X, alpha, max_iter=200):
    """MAP of the (strictly log-concave) posterior by damped Newton iterations.

    Stops when the Newton decrement ``g' H^-1 g`` is below 1e-18: the distance to the
    optimum in the Hessian's metric, i.e. in posterior sds, is then ~1e-9. The backtracking
    line search only runs far from the optimum, where the log posterior's rounding error
    is negligible next to its change.
    """
    theta = np.zeros(model.n_params)
    logp, grad = model.log_posterior_and_grad(theta)
    for iteration in range(1, max_iter + 1):
        H = neg_log_posterior_hessian(theta, X, alpha)
        step = cho_solve(cho_factor(H), grad)
        decrement = float(grad @ step)
        if decrement < 1e-18:
            return theta, iteration
        t = 1.0
        if decrement > 1e-8:
            while True:
                new_logp, new_grad = model.log_posterior_and_grad(theta + t * step)
                if new_logp >= logp + 1e-4 * t * decrement or t < 1e-10:
                    break
                t *= 0.5
        else:
            new_logp, new_grad = model.log_posterior_and_grad(theta + step)
        theta = theta + t * step
        logp, grad = new_logp, new_grad
    raise RuntimeError(f"Newton's method did not converge in {max_iter} iterations (decrement {decrement:.3g})")


# ---------------------------------------------------------------------------------------
# HMC in whitened coordinates
# ---------------------------------------------------------------------------------------
class WhitenedTarget:
    """The posterior in the coordinates ``z = L' (theta - theta_map)``, ``H = L L'``.

    There the Laplace approximation is ``N(0, I)``, so unit-mass HMC on ``z`` is HMC with
    mass matrix ``H`` on ``theta``.
    """

    def __init__(self, model, theta_map, H):
        self.model = model
        self.theta_map = theta_map
        self.L = cholesky(H, lower=True)
        self.n_evals = 0

    def to_theta(self, z):
        """``theta_map + L^-T z`` for ``z`` of shape (P,) or (P, S)."""
        offset = solve_triangular(self.L, z, lower=True, trans="T")
        return self.theta_map + (offset if offset.ndim == 1 else offset.T)

    def neg_logp_and_grad(self, z):
        """Potential energy ``-log p`` and its gradient in ``z``."""
        self.n_evals += 1
        logp, grad = self.model.log_posterior_and_grad(self.to_theta(z))
        # d theta / d z = L^-T, so grad_z = L^-1 grad_theta.
        return -logp, -solve_triangular(self.L, grad, lower=True)


class HMCChain:
    """One HMC chain with unit mass, jittered trajectory lengths and a tunable step size."""

    def __init__(self, target, z0, step_size, rng):
        self.target = target
        self.rng = rng
        self.z = np.array(z0, dtype=float)
        self.U, self.grad = target.neg_logp_and_grad(self.z)
        self.step_size = step_size
        self.n_divergent = 0

    def _n_steps(self):
        mean = TRAJECTORY_LENGTH / self.step_size
        low = max(1, int(round((1 - JITTER) * mean)))
        high = max(low, int(round((1 + JITTER) * mean)))
        return min(MAX_LEAPFROG, int(self.rng.integers(low, high + 1)))

    def step(self):
        """One HMC transition; returns its Metropolis acceptance probability."""
        eps, n_steps = self.step_size, self._n_steps()
        p = self.rng.standard_normal(self.z.size)
        energy0 = self.U + 0.5 * float(p @ p)
        z, grad = self.z.copy(), self.grad
        p = p - 0.5 * eps * grad
        for i in range(n_steps):
            z += eps * p
            U, grad = self.target.neg_logp_and_grad(z)
            if not np.isfinite(U):
                break
            p -= (eps if i < n_steps - 1 else 0.5 * eps) * grad
        delta = U + 0.5 * float(p @ p) - energy0 if np.isfinite(U) else np.inf
        if not np.isfinite(delta) or delta > DIVERGENCE_ENERGY:
            self.n_divergent += 1
            return 0.0
        accept_prob = min(1.0, float(np.exp(-delta)))
        if self.rng.random() < accept_prob:
            self.z, self.U, self.grad = z, U, grad
        return accept_prob

    def warmup(self, n_iter):
        """Tune the step size by Nesterov dual averaging (Hoffman & Gelman 2014, Alg. 5).

        Its constants (gamma 0.05, t0 10, kappa 0.75, shrinkage towards 10 eps0) are the
        paper's and Stan's. The final step size is the averaged iterate.
        """
        mu, gamma, t0, kappa = np.log(10 * self.step_size), 0.05, 10.0, 0.75
        h_bar, log_eps_bar = 0.0, 0.0
        for t in range(1, n_iter + 1):
            accept_prob = self.step()
            h_bar += ((TARGET_ACCEPT - accept_prob) - h_bar) / (t + t0)
            log_eps = mu - np.sqrt(t) / gamma * h_bar
            weight = t**-kappa
            log_eps_bar = weight * log_eps + (1 - weight) * log_eps_bar
            self.step_size = float(np.exp(log_eps))
        self.step_size = float(np.exp(log_eps_bar))
        self.n_divergent = 0

    def sample(self, n_draws):
        """``n_draws`` draws of ``z`` (n_draws, P) and their mean acceptance probability."""
        draws = np.empty((n_draws, self.z.size))
        accept = 0.0
        for i in range(n_draws):
            accept += self.step()
            draws[i] = self.z
        return draws, accept / n_draws


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------
def diagnose(thetas):
    """Per-coordinate diagnostics of draws of shape (chains, draws, P)."""
    return {
        "ess_bulk": ess_bulk(thetas),
        "ess_tail": ess_tail(thetas),
        "rhat": split_rhat(thetas),
        "mcse_mean": mcse_mean(thetas),
    }


def run_hmc(target, n_chains, n_warmup, n_draws, seed, max_draws, log):
    """Sample until the ESS and R-hat targets hold; returns draws of theta and statistics.

    ``n_draws`` per chain first, then as many more as the smallest bulk ESS says are
    needed (plus 10%), up to ``max_draws`` per chain.
    """
    P = target.theta_map.size
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n_chains)]
    chains = []
    for rng in rngs:
        chain = HMCChain(target, rng.standard_normal(P), 0.5, rng)
        chain.warmup(n_warmup)
        chains.append(chain)
    log(f"  warm-up done: step sizes {[round(c.step_size, 3) for c in chains]}")
    z_draws = [np.empty((0, P)) for _ in chains]
    accept_sums = np.zeros(n_chains)
    n_new = n_draws
    while True:
        for k, chain in enumerate(chains):
            draws, accept = chain.sample(n_new)
            z_draws[k] = np.vstack([z_draws[k], draws])
            accept_sums[k] += accept * n_new
        n_per_chain = z_draws[0].shape[0]
        thetas = np.stack([target.to_theta(z.T) for z in z_draws])
        diag = diagnose(thetas)
        ess_min, rhat_max = float(np.min(diag["ess_bulk"])), float(np.max(diag["rhat"]))
        log(f"  {n_per_chain} draws per chain: min bulk ESS {ess_min:.0f}, max R-hat {rhat_max:.4f}")
        if (ess_min >= TARGET_ESS and rhat_max < MAX_RHAT) or n_per_chain >= max_draws:
            break
        wanted = int(np.ceil(n_per_chain * (1.1 * TARGET_ESS / ess_min - 1)))
        n_new = int(np.clip(wanted, n_per_chain // 4, max_draws - n_per_chain))
    stats = {
        "step_size": float(np.mean([c.step_size for c in chains])),
        "accept_rate": float(accept_sums.sum() / (n_chains * n_per_chain)),
        "n_divergent": int(sum(c.n_divergent for c in chains)),
        "draws_per_chain": n_per_chain,
        "converged": bool(ess_min >= TARGET_ESS and rhat_max < MAX_RHAT),
    }
    return thetas, diag, stats


def laplace_discrepancy(theta_map, laplace_sd, mean, sd):
    """Largest ``|map - mean| / sd`` and ``|laplace_sd / sd - 1|`` over coordinates."""
    mean_dev = np.abs(theta_map - mean) / sd
    sd_dev = np.abs(laplace_sd / sd - 1.0)
    return {
        "laplace_mean_dev_max": float(mean_dev.max()),
        "laplace_mean_dev_argmax": int(mean_dev.argmax()),
        "laplace_sd_dev_max": float(sd_dev.max()),
        "laplace_sd_dev_argmax": int(sd_dev.argmax()),
    }


def _commit():
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def compute_reference(name, *, n_chains=4, n_warmup=500, n_draws=2500, max_draws=100_000, seed=0, log=print):
    """Compute, save and return the reference summary of problem ``name``.

    Returns
    -------
    record : dict
        The JSON line of the run (settings, diagnostics, Laplace discrepancy, seconds).
    """
    start = time.perf_counter()
    X, y, _, fit_intercept = make_problem(name)
    alpha, alpha_intercept = problem_prior(name)
    # Per coordinate (P,), or a float for the papers' isotropic prior: then every formula's
    # arithmetic is the scalar's it always was, and the older problems' results are unchanged.
    precision = prior_precision(name, X.shape[1])
    y = y.astype(np.float64)
    model = LogisticModel(X, y, alpha=alpha, alpha_intercept=alpha_intercept, fit_intercept=fit_intercept)
    # The seed mixes in the problem's name so that problems do not share streams.
    seed_seq = [seed, *name.encode()]
    check = check_model(model, X, y, precision, np.random.default_rng(seed_seq))
    theta_map, newton_iter = find_map(model, X, precision)
    H = neg_log_posterior_hessian(theta_map, X, precision)
    laplace_cov = cho_solve(cho_factor(H), np.eye(H.shape[0]))
    laplace_sd = np.sqrt(np.diag(laplace_cov))
    log(f"{name}: N={X.shape[0]} D={X.shape[1]}, MAP in {newton_iter} Newton iterations, model check {check}")

    target = WhitenedTarget(model, theta_map, H)
    thetas, diag, stats = run_hmc(target, n_chains, n_warmup, n_draws, seed_seq, max_draws, log)
    pooled = thetas.reshape(-1, thetas.shape[-1])
    mean, cov = pooled.mean(axis=0), np.cov(pooled, rowvar=False)
    sd = np.sqrt(np.diag(cov))
    seconds = time.perf_counter() - start

    record = {
        "problem": name,
        "n_samples": X.shape[0],
        "n_features": X.shape[1],
        "alpha": alpha,
        "alpha_intercept": alpha_intercept,
        "n_chains": n_chains,
        "n_warmup": n_warmup,
        "n_draws": int(pooled.shape[0]),
        **stats,
        "n_grad_evals": target.n_evals,
        "ess_bulk_min": float(diag["ess_bulk"].min()),
        "ess_tail_min": float(diag["ess_tail"].min()),
        "rhat_max": float(diag["rhat"].max()),
        "mcse_over_sd_max": float((diag["mcse_mean"] / sd).max()),
        **laplace_discrepancy(theta_map, laplace_sd, mean, sd),
        "seconds": round(seconds, 1),
        "seed": seed,
        "commit": _commit(),
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    np.savez_compressed(
        reference_path(name),
        mean=mean,
        sd=sd,
        cov=cov,
        map=theta_map,
        laplace_sd=laplace_sd,
        hessian=H,
        ess_bulk=diag["ess_bulk"],
        ess_tail=diag["ess_tail"],
        rhat=diag["rhat"],
        mcse_mean=diag["mcse_mean"],
        n_draws=pooled.shape[0],
        n_chains=n_chains,
        ess_bulk_min=record["ess_bulk_min"],
        ess_tail_min=record["ess_tail_min"],
        rhat_max=record["rhat_max"],
        step_size=stats["step_size"],
        accept_rate=stats["accept_rate"],
        seconds=seconds,
        seed=seed,
        alpha=alpha,
        alpha_intercept=alpha_intercept,
        prior_precision=np.broadcast_to(precision, theta_map.shape),
        fit_intercept=fit_intercept,
        n_samples=X.shape[0],
        n_features=X.shape[1],
        laplace_mean_dev_max=record["laplace_mean_dev_max"],
        laplace_sd_dev_max=record["laplace_sd_dev_max"],
    )
    with open(RESULTS_DIR / "reference_posterior.jsonl", "a") as fh:
        fh.write(json.dumps(record) + "\n")
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="+", help=f"problems ({', '.join(PROBLEMS)}) or 'all'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=500, help="warm-up iterations per chain")
    parser.add_argument("--draws", type=int, default=2500, help="initial kept draws per chain")
    args = parser.parse_args(argv)
    names = PROBLEMS if args.names == ["all"] else args.names
    unknown = set(names) - set(PROBLEMS)
    if unknown:
        parser.error(f"unknown problems {sorted(unknown)}; expected some of {PROBLEMS}")
    # One BLAS thread: the gradient is two matrix-vector products, memory-bound, and on a
    # busy 2-core machine a threaded gemv spends more in synchronisation than it saves
    # (measured 3.5x slower per gradient on a9a with the other core loaded).
    with threadpool_limits(1):
        for name in names:
            record = compute_reference(
                name,
                n_warmup=args.warmup,
                n_draws=args.draws,
                seed=args.seed,
                log=lambda msg: print(msg, file=sys.stderr, flush=True),
            )
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
