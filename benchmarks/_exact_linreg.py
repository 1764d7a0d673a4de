"""Exact posterior moments of Bayesian linear regression, the model of
:class:`skbayes_sg.models.LinearRegressionModel`, for the accuracy benchmarks.

Model: ``y ~ N(Xa theta, I / tau)`` with ``Xa = [X, 1]`` (intercept last), prior
``theta ~ N(0, I / alpha)`` (the intercept under the same prior), and either

* ``tau`` known (:func:`known_noise_posterior`): the posterior is ``N(m, S)`` with
  ``S = (tau Xa'Xa + alpha I)^-1`` and ``m = tau S Xa'y``; or
* ``tau`` sampled as ``s = log tau`` (:func:`sampled_noise_posterior`), with
  ``tau ~ Gamma(a, b)`` (shape, rate) and the Jacobian of ``tau = e^s``, so that the prior
  on ``s`` is ``a s - b e^s``. Conditionally on ``tau`` the weights are conjugate Gaussian
  ``N(m(tau), S(tau))``; the marginal of ``s`` is

      log p(s | y) = log N(y; 0, Xa Xa' / alpha + I / tau) + a s - b e^s + const,

  which, with the eigen-decomposition ``Xa'Xa = U diag(lam) U'`` and ``r = U'Xa'y``, is

      N s / 2 - tau y'y / 2 + (tau^2 / 2) sum_k r_k^2 / (alpha + tau lam_k)
              - (1 / 2) sum_k log(alpha + tau lam_k) + a s - b e^s + const

  (``P x P`` work only, never ``N x N``). The moments of ``s`` and the mixtures
  ``E[theta_i] = E_s[m_i(tau)]``, ``E[theta_i^2] = E_s[S_ii(tau) + m_i(tau)^2]`` are
  integrated on a fine uniform grid in ``s`` (4001 points over the mode +- 14 posterior sds
  of ``s``; the integrand is smooth, so the grid sum is exact to rounding).

The data enter only through ``Xa'Xa``, ``Xa'y``, ``y'y`` and ``N``
(:func:`sufficient_statistics`, computed without copying ``X``), so the references cost one
pass over the data even at N = 1e6, D = 100.

``python benchmarks/_exact_linreg.py`` checks the quadrature against a long Gibbs sampler
(``w | tau`` Gaussian, ``tau | w ~ Gamma(a + N/2, b + |r|^2 / 2)``) and against the dense
``N x N`` marginal likelihood on a small problem.
"""

import numpy as np
from scipy.optimize import minimize_scalar

__all__ = ["sufficient_statistics", "known_noise_posterior", "sampled_noise_posterior"]

GRID_POINTS = 4001
GRID_HALF_WIDTH = 14.0  # in posterior sds of s


def sufficient_statistics(X, y, fit_intercept=True, block=200_000):
    """``(G, c, yy, N)``: ``Xa'Xa``, ``Xa'y``, ``y'y`` and the row count, in row blocks
    (no copy of ``X``; the column of ones is handled analytically)."""
    N, D = X.shape
    P = D + int(fit_intercept)
    G = np.zeros((P, P))
    c = np.zeros(P)
    for start in range(0, N, block):
        Xb, yb = X[start : start + block], y[start : start + block]
        G[:D, :D] += Xb.T @ Xb
        c[:D] += Xb.T @ yb
        if fit_intercept:
            colsum = Xb.sum(axis=0)
            G[:D, D] += colsum
            G[D, :D] += colsum
            G[D, D] += Xb.shape[0]
            c[D] += yb.sum()
    return G, c, float(y @ y), N


def known_noise_posterior(stats, alpha=1.0, tau=1.0):
    """Mean, sd and covariance of ``N(m, S)``, ``S = (tau G + alpha I)^-1``, ``m = tau S c``."""
    G, c, _, _ = stats
    A = tau * G + alpha * np.eye(G.shape[0])
    S = np.linalg.inv(A)
    S = 0.5 * (S + S.T)
    m = np.linalg.solve(A, tau * c)
    return {"mean": m, "sd": np.sqrt(np.diag(S)), "cov": S}


class _Marginal:
    """``log p(s | y)`` up to a constant, and the conditional moments of ``theta``."""

    def __init__(self, stats, alpha, a, b):
        G, c, yy, N = stats
        self.lam, self.U = np.linalg.eigh(0.5 * (G + G.T))
        self.lam = np.maximum(self.lam, 0.0)
        self.r = self.U.T @ c
        self.yy, self.N, self.alpha, self.a, self.b = yy, N, alpha, a, b

    def logp(self, s):
        s = np.atleast_1d(np.asarray(s, dtype=float))
        tau = np.exp(s)[:, None]
        d = self.alpha + tau * self.lam[None, :]
        quad = (tau[:, 0] ** 2) * np.sum(self.r**2 / d, axis=1)
        out = (
            0.5 * self.N * s
            - 0.5 * tau[:, 0] * self.yy
            + 0.5 * quad
            - 0.5 * np.log(d).sum(axis=1)
            + self.a * s
            - self.b * np.exp(s)
        )
        return out

    def conditional(self, s):
        """``m(tau)`` (S, P) and ``diag S(tau)`` (S, P) on a grid of ``s``."""
        tau = np.exp(np.asarray(s, dtype=float))[:, None]
        inv_d = 1.0 / (self.alpha + tau * self.lam[None, :])  # (S, P) eigen-coordinates
        m = (tau * inv_d * self.r[None, :]) @ self.U.T  # (S, P)
        var = inv_d @ (self.U.T**2)  # diag(U diag(1/d) U')
        return m, var


def sampled_noise_posterior(stats, alpha=1.0, a=1e-6, b=1e-6, n_grid=GRID_POINTS, half_width=GRID_HALF_WIDTH):
    """Exact posterior mean and sd of ``(theta, s = log tau)`` by quadrature over ``s``.

    Returns
    -------
    dict with ``mean``, ``sd`` (P + 1,): the weights, the intercept, then ``s``;
    ``s_mode``, ``s_grid_sd`` (the Laplace sd of ``s`` that set the grid) and
    ``edge_mass`` (the normalised density at the grid's ends, a check that it covers the
    posterior).
    """
    marg = _Marginal(stats, alpha, a, b)
    _, c, yy, N = stats
    # Start from the precision of the ridge-free residuals; Brent on a wide bracket.
    G = stats[0]
    w0 = np.linalg.solve(G + 1e-8 * np.trace(G) / G.shape[0] * np.eye(G.shape[0]), c)
    rss = max(yy - c @ w0, 1e-12 * yy + 1e-300)
    s0 = np.log(max(N, 1) / rss)
    res = minimize_scalar(lambda s: -marg.logp(s)[0], bracket=(s0 - 1.0, s0 + 1.0), tol=1e-12)
    s_mode = float(res.x)
    # Curvature by a central difference at a scale matched to the expected sd ~ sqrt(2 / N).
    eps = 1e-3 * np.sqrt(2.0 / max(N, 1)) + 1e-6
    f = marg.logp(np.array([s_mode - eps, s_mode, s_mode + eps]))
    curv = -(f[0] - 2 * f[1] + f[2]) / eps**2
    s_sd = 1.0 / np.sqrt(curv) if curv > 0 else 1.0
    grid = np.linspace(s_mode - half_width * s_sd, s_mode + half_width * s_sd, n_grid)
    lp = marg.logp(grid)
    w = np.exp(lp - lp.max())
    w /= w.sum()
    m, var = marg.conditional(grid)
    mean = w @ m
    second = w @ (var + m**2)
    sd = np.sqrt(np.maximum(second - mean**2, 0.0))
    s_mean = float(w @ grid)
    s_sd_exact = float(np.sqrt(w @ (grid - s_mean) ** 2))
    return {
        "mean": np.append(mean, s_mean),
        "sd": np.append(sd, s_sd_exact),
        "s_mode": s_mode,
        "s_grid_sd": float(s_sd),
        "edge_mass": float(max(w[0], w[-1])),
    }


def _gibbs(X, y, alpha, a, b, n_iter, rng):
    N, D = X.shape
    Xa = np.column_stack([X, np.ones(N)])
    G, c = Xa.T @ Xa, Xa.T @ y
    tau = 1.0
    out = np.empty((n_iter, D + 2))
    for t in range(n_iter):
        A = tau * G + alpha * np.eye(D + 1)
        L = np.linalg.cholesky(A)
        mean = np.linalg.solve(A, tau * c)
        w = mean + np.linalg.solve(L.T, rng.standard_normal(D + 1))
        r = y - Xa @ w
        tau = rng.gamma(a + 0.5 * N, 1.0 / (b + 0.5 * r @ r))
        out[t] = np.append(w, np.log(tau))
    return out


def _selfcheck():
    from scipy.stats import multivariate_normal

    rng = np.random.default_rng(1)
    N, D, alpha, a, b = 40, 3, 1.0, 1e-6, 1e-6
    X = rng.standard_normal((N, D))
    y = X @ rng.standard_normal(D) + 0.5 + 0.7 * rng.standard_normal(N)
    stats = sufficient_statistics(X, y, block=7)
    marg = _Marginal(stats, alpha, a, b)
    Xa = np.column_stack([X, np.ones(N)])
    ss = np.array([-1.0, 0.0, 0.5, 1.2])
    dense = np.array(
        [
            multivariate_normal(np.zeros(N), Xa @ Xa.T / alpha + np.eye(N) / np.exp(s)).logpdf(y)
            + a * s
            - b * np.exp(s)
            for s in ss
        ]
    )
    ours = marg.logp(ss)
    diff = (ours - ours[0]) - (dense - dense[0])
    print("marginal log density vs dense N x N (differences, should be ~1e-10):", np.abs(diff).max())
    exact = sampled_noise_posterior(stats, alpha, a, b)
    draws = _gibbs(X, y, alpha, a, b, 200_000, rng)[1000:]
    se = draws.std(0) / np.sqrt(draws.shape[0] / 2.0)  # Gibbs here mixes in ~1-2 steps
    print("edge mass", exact["edge_mass"])
    print("quadrature mean", np.round(exact["mean"], 5))
    print("Gibbs mean     ", np.round(draws.mean(0), 5), " z:", np.round((exact["mean"] - draws.mean(0)) / se, 2))
    print("quadrature sd  ", np.round(exact["sd"], 5))
    print("Gibbs sd       ", np.round(draws.std(0), 5))
    kn = known_noise_posterior(stats, alpha, 1.0)
    S = np.linalg.inv(Xa.T @ Xa + alpha * np.eye(D + 1))
    print("known-noise mean error:", np.abs(kn["mean"] - S @ Xa.T @ y).max())


if __name__ == "__main__":
    _selfcheck()
