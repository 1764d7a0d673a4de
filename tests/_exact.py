"""Exact posteriors, predicted stationary moments and MCSE-based checks for the statistical tests.

Every tolerance here is a number of Monte Carlo standard errors of the quantity checked:
the mean (:func:`skbayes_sg.diagnostics.mcse_mean`), the sd (:func:`mcse_sd`, the delta
method on the second moment) and the thermostat's mean ``xi``. Where a scheme is biased
at a fixed step size, the check compares against the scheme's own *predicted* stationary
moments (:func:`predicted_moments`), not against the posterior with a looser tolerance.
"""

from collections import namedtuple

import numpy as np
from scipy.optimize import brentq
from sklearn.base import clone
from threadpoolctl import threadpool_limits

from skbayes_sg._chains import ChainSpec, run_chains
from skbayes_sg.diagnostics import mcse_mean
from skbayes_sg.minibatch import GradientSpec
from skbayes_sg.models import LinearRegressionModel
from skbayes_sg.samplers import SGHMC, SGLD, SGNHT, CCAdL, MCCAdL

#: Threshold of every |z| (estimate minus prediction, in MCSE). A check takes the worst of
#: 2 P z-scores (a mean and an sd per coordinate, P = 4 here) plus at most two per-draw
#: statistics (xi, kinetic temperature), and the statistical tests make ~50 such checks,
#: ~500 z-scores: at |z| = 4.5 a two-sided normal tail is 6.8e-6, about 3e-3 for the whole
#: run (Bonferroni), where 4 would give 3%. The MCSEs are themselves estimated (from ESSs of
#: a few hundred, to ~10%), which fattens the tail a little. A mutant must exceed Z_MAX.
Z_MAX = 4.5


def conjugate_regression(N=400, D=3, n_batch=100, seed=0, tau=1.0, alpha=1.0):
    """Bayesian linear regression with known noise and its exact Gaussian posterior.

    The intercept is a column of ones under the same ``N(0, 1/alpha)`` prior, so the
    posterior is ``N(m, S)``, ``S = (tau Xa'Xa + alpha I)^-1``, ``m = tau S Xa'y``.

    Returns
    -------
    model, mean, cov, sigma_max
        ``sigma_max`` is the largest diagonal entry of the minibatch gradient-noise
        covariance ``Sigma = N^2 / n Cov_i[g_i]`` at the posterior mean.
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    y = X @ rng.normal(size=D) + 0.5 + rng.normal(size=N) / np.sqrt(tau)
    model = LinearRegressionModel(X, y, noise_precision=tau, alpha=alpha)
    Xa = np.column_stack([X, np.ones(N)])
    cov = np.linalg.inv(tau * Xa.T @ Xa + alpha * np.eye(D + 1))
    mean = tau * cov @ Xa.T @ y
    V = model.per_example_gradients(mean, slice(None)).covariance_diag()
    return model, mean, cov, float(N * N / n_batch * V.max())


def with_step(sampler, step_size):
    """A copy of ``sampler`` that runs at step size ``step_size`` (None: its own)."""
    return sampler if step_size is None else clone(sampler).set_params(step_size=step_size)


def sample(sampler, model, start, n_iter, n_burn, batch_size, step_size, n_chains=4, thin=1, seed=1):
    """Draws (n_chains, n_draws, P) and per-draw stats of ``n_chains`` chains from ``start``.

    The chains run in this process (joblib's default ``n_jobs``), so a test's monkeypatches
    of the sampler modules apply to them.
    """
    results = run_chains(
        ChainSpec(with_step(sampler, step_size), model, n_iter, n_burn, thin, None, GradientSpec(batch_size)),
        [np.asarray(start, float)] * n_chains,
        np.random.SeedSequence(seed).spawn(n_chains),
    )
    draws = np.stack([r.draws for r in results])
    stats = {k: np.stack([r.stats[k] for r in results]) for k in results[0].stats}
    return draws, stats


# -- Monte Carlo standard errors -----------------------------------------------------------


def ess_mean(x):
    """ESS of the mean of ``x`` (n_chains, n_draws[, P]) on split chains, without ranks.

    Read back from :func:`~skbayes_sg.diagnostics.mcse_mean`, which is ``sd / sqrt(ess)``
    with exactly this ESS (ArviZ's ``ess(method="mean")``).
    """
    x = np.asarray(x, float)
    sd = x.reshape(-1, *x.shape[2:]).std(axis=0, ddof=1)
    return (sd / mcse_mean(x)) ** 2


def mcse_sd(draws):
    """Monte Carlo standard error of each coordinate's sd, by the delta method.

    As ArviZ's / the ``posterior`` package's ``mcse_sd``: with ``c = x - mean(x)``, the
    variance estimate ``mean(c^2)`` has MCSE ``sqrt((mean(c^4) - mean(c^2)^2) / ESS(c^2))``
    (Kenney & Keeping's variance of a variance, no normality assumed, ``ESS`` that of the
    mean of ``c^2`` across split chains), and ``sd = sqrt(var)`` divides it by ``2 sd``.

    Parameters
    ----------
    draws : ndarray of shape (n_chains, n_draws, P)

    Returns
    -------
    ndarray of shape (P,)
    """
    draws = np.asarray(draws, float)
    c2 = (draws - draws.reshape(-1, draws.shape[-1]).mean(axis=0)) ** 2
    flat = c2.reshape(-1, draws.shape[-1])
    m2, m4 = flat.mean(axis=0), (flat**2).mean(axis=0)
    var_var = (m4 - m2**2) / ess_mean(c2)
    return np.sqrt(var_var / (4.0 * m2))


# -- checks ------------------------------------------------------------------------------


def gaussian_z(draws, mean, sd):
    """z-scores of the sample means and sds against ``mean`` and ``sd``, in MCSE.

    Parameters
    ----------
    draws : ndarray of shape (n_chains, n_draws, P)
    mean, sd : array_like of shape (P,)
        The predicted stationary mean and sd (the exact posterior's, or the scheme's own
        biased ones from :func:`predicted_moments`).

    Returns
    -------
    z_mean, z_sd : ndarray of shape (P,)
    """
    flat = draws.reshape(-1, draws.shape[-1])
    z_mean = (flat.mean(axis=0) - np.asarray(mean)) / mcse_mean(draws)
    z_sd = (flat.std(axis=0, ddof=1) - np.asarray(sd)) / mcse_sd(draws)
    return z_mean, z_sd


def stationary_z(draws, stats, mean, moments):
    """Every z-score of a run against the predicted stationary law, by name.

    ``mean[j]`` and ``sd[j]`` for each coordinate of ``theta`` (:func:`gaussian_z`), and
    ``xi`` and ``kinetic_temperature``, the means of those per-draw statistics, where
    ``moments`` predicts them (:func:`predicted_moments`). For a thermostat the mean
    kinetic temperature is exactly ``T`` at stationarity whatever the noise (``xi`` moves
    in proportion to ``p'p - N_d T``); its mean ``xi`` is Proposition 1 (SGNHT:
    ``A + h sigma^2 / 2`` for isotropic noise) or 2 (CCAdL, mCCAdL: ``A``) of the CCAdL
    paper, with the discretisation's shift.

    Parameters
    ----------
    draws : ndarray of shape (n_chains, n_draws, P)
    stats : dict of ndarray of shape (n_chains, n_draws)
    mean : array_like of shape (P,)
    moments : Moments

    Returns
    -------
    dict of str to float
    """
    z_mean, z_sd = gaussian_z(draws, mean, moments.sd)
    out = {f"mean[{j}]": float(v) for j, v in enumerate(z_mean)}
    out.update({f"sd[{j}]": float(v) for j, v in enumerate(z_sd)})
    for name, target in (("xi", moments.xi), ("kinetic_temperature", moments.kinetic)):
        if target is not None:
            x = np.asarray(stats[name], float)[..., None]
            out[name] = float((x.mean() - target) / mcse_mean(x)[0])
    return out


def worst_z(z):
    """The largest ``|z|`` of a :func:`stationary_z` dict and its name."""
    where = max(z, key=lambda k: abs(z[k]))
    return abs(z[where]), where


def assert_matches_gaussian(draws, mean, sd, z_max=Z_MAX):
    """Posterior means and sds each within ``z_max`` of their own Monte Carlo standard error.

    ``sd`` should be the sd the scheme is predicted to sample (:func:`predicted_moments`)
    where it is biased beyond its MCSE at the test's step size.
    """
    z_mean, z_sd = gaussian_z(draws, mean, sd)
    assert np.all(np.abs(z_mean) < z_max), f"means off by {z_mean} MCSE"
    sds = draws.reshape(-1, draws.shape[-1]).std(axis=0)
    assert np.all(np.abs(z_sd) < z_max), f"sds off by {z_sd} MCSE (sds {sds}, expected {sd})"


# -- predicted stationary moments of the schemes on a linear-Gaussian model ---------------

#: Predicted stationary moments: sd of theta (P,), mean xi and mean kinetic temperature
#: (None where the scheme has no such statistic).
Moments = namedtuple("Moments", ["sd", "xi", "kinetic"])


class _AffineNoise:
    """Minibatch force noise of a model whose per-example gradients are affine in ``theta``.

    With ``g_i(m + e) = g_i(m) + J_i e``, the noisy force from ``n`` rows drawn with
    replacement is ``F~(m + e) = -H e + delta``, where ``delta`` has mean zero, is
    uncorrelated with ``e`` and has covariance ``Sigma(m) + Q(C)`` averaged over ``e`` of
    covariance ``C``, with ``Q(C) = N^2/n (mean_i J_i C J_i' - Jbar C Jbar')``: the
    multiplicative part of the noise. ``Sigma(m) + Q(C)`` is also the mean of the
    minibatch covariance estimates ``noise_scale V`` that CCAdL, mCCAdL and SGHMC use.

    Attributes
    ----------
    sigma0 : ndarray of shape (P, P)
        ``Sigma(m) = N^2/n Cov_i[g_i(m)]``.
    Q : ndarray of shape (P^2, P^2)
        ``Q`` as a matrix acting on ``C.ravel()``.
    """

    def __init__(self, model, mean, batch_size):
        mean = np.asarray(mean, float)
        N, P = model.n_samples, model.n_params
        G0 = model.per_example_gradients(mean, slice(None)).to_dense()
        cols = [model.per_example_gradients(mean + e, slice(None)).to_dense() - G0 for e in np.eye(P)]
        twice = model.per_example_gradients(mean + 2 * np.eye(P)[0], slice(None)).to_dense() - G0
        assert np.allclose(twice, 2 * cols[0]), "per-example gradients are not affine in theta"
        J = np.stack(cols, axis=2)  # J[i, a, j] = d g_ia / d theta_j
        Jbar = J.mean(axis=0)
        # Full data (as MinibatchGradient decides): no noise at all.
        full = batch_size is None or batch_size >= N
        scale = 0.0 if full else N * N / batch_size
        self.G0, self.scale, self.batch_size = G0, scale, N if full else batch_size
        self.sigma0 = scale * np.cov(G0.T, bias=True)
        # vec(J C J') = (J kron J) vec(C) for row-major vec.
        self.Q = scale * (np.einsum("iab,icd->acbd", J, J).reshape(P * P, P * P) / N - np.kron(Jbar, Jbar))

    def sigma(self, C):
        """Mean noise covariance of the force over positions of covariance ``C``."""
        return self.sigma0 + (self.Q @ np.ravel(C)).reshape(self.sigma0.shape)

    def batch_sigmas(self, n_batches=20_000, seed=0):
        """Minibatch estimates ``noise_scale V_B`` at ``m`` of ``n_batches`` random batches.

        Their spread matters where ``Sigma`` enters nonlinearly (mCCAdL's ``exp(-c Sigma)``:
        by Jensen, a fluctuating ``Sigma`` damps less on average than its mean does).
        """
        rng = np.random.default_rng(seed)
        rows = rng.integers(0, self.G0.shape[0], size=(n_batches, self.batch_size))
        G = self.G0[rows]
        G = G - G.mean(axis=1, keepdims=True)
        return self.scale * np.einsum("bia,bic->bac", G, G) / (self.batch_size - 1)


class _Affine:
    """An affine map ``vec(C) -> K vec(C) + c`` on covariance matrices (row-major vec)."""

    def __init__(self, K, c):
        self.K, self.c = K, c

    def then(self, other):
        """``other`` after ``self``."""
        return _Affine(other.K @ self.K, other.K @ self.c + other.c)

    def __call__(self, C):
        n = C.shape[0]
        return (self.K @ C.ravel() + self.c).reshape(n, n)

    def fixed_point(self):
        """The stationary covariance; NaN if the recursion is unstable (no stationary law)."""
        n2 = self.c.size
        n = int(round(n2**0.5))
        C = np.linalg.solve(np.eye(n2) - self.K, self.c).reshape(n, n)
        C = 0.5 * (C + C.T)
        # The noise enters every coordinate within an iteration or two, so a stable
        # recursion has a positive definite stationary covariance, and an unstable one
        # (spectral radius >= 1) has none: the "solution" is then indefinite.
        return C if np.linalg.eigvalsh(C).min() > 0 else np.full((n, n), np.nan)


class _Ops:
    """Sub-steps of the schemes as :class:`_Affine` maps on the covariance of ``z``.

    ``z = (theta - m, p)`` (or ``theta - m`` alone for SGLD); ``e`` and ``p`` are its
    blocks. Every sub-step is linear in ``z`` plus noise whose covariance is affine in
    the current covariance, so each is an affine map on ``vec(C)``.
    """

    def __init__(self, noise_model, H, momentum=True):
        self.nm, self.H = noise_model, H
        self.P = P = H.shape[0]
        self.n = n = 2 * P if momentum else P
        eye = np.eye(n)
        self.E, self.Pm = eye[:, :P], eye[:, P:]  # embed the e / p block into z

    def lin(self, M):
        """``z <- M z``."""
        return _Affine(np.kron(M, M), np.zeros(self.n**2))

    def embed(self, V_vec, block):
        """Embed a P x P (vectorised) covariance into ``block`` of z's covariance."""
        return np.kron(block, block) @ V_vec

    def select(self, block):
        """Extract ``block`` of z's covariance, as a matrix on vec."""
        return np.kron(block.T, block.T)

    def noise(self, V, block=None):
        """Add independent noise of covariance ``V`` (P x P) to ``block`` (default p)."""
        block = self.Pm if block is None else block
        return _Affine(np.eye(self.n**2), self.embed(np.ravel(V), block))

    def force_noise(self, scale, block=None):
        """Add ``scale^2 Cov(delta)``, the force noise at the current ``e``, to ``block``.

        Only valid where ``block`` is not ``e`` itself or ``e`` is not moved in the same
        sub-step (the kicks); SGLD combines it with its position update.
        """
        block = self.Pm if block is None else block
        K = np.eye(self.n**2) + scale**2 * np.kron(block, block) @ self.nm.Q @ self.select(self.E)
        return _Affine(K, scale**2 * self.embed(self.nm.sigma0.ravel(), block))

    def sigma_diag_noise(self, coef):
        """Add ``coef * diag(Sigma(m) + Q(C_ee))`` to the p block (SGHMC's ``-2 h B^``)."""
        P = self.P
        diag = np.diag(np.eye(P).ravel())  # keeps the diagonal of a vectorised P x P matrix
        K = np.eye(self.n**2) + coef * np.kron(self.Pm, self.Pm) @ diag @ self.nm.Q @ self.select(self.E)
        return _Affine(K, coef * self.embed(diag @ self.nm.sigma0.ravel(), self.Pm))


def _compose(*ops):
    out = ops[0]
    for op in ops[1:]:
        out = out.then(op)
    return out


@threadpool_limits.wrap(limits=1)
def predicted_moments(sampler, model, mean, cov, h, batch_size, noise=1.0, friction=1.0, control=1.0):
    """Stationary sd of ``theta`` (and mean ``xi``) of a scheme on a linear-Gaussian model.

    On a model with affine per-example gradients (linear regression with known noise) the
    schemes are random *linear* recursions in ``z = (theta - m, p)`` driven by the
    minibatch force noise, and the second moments of their stationary law solve a linear
    (Lyapunov-type) equation. For SGLD and SGHMC this is exact: it is the fixed-``h`` bias
    of SGLD's docstring (``1 / (1 - h lambda / 2)`` per eigen-direction together with the
    gradient noise's ``1 + h Sigma / (2 T)``, including the multiplicative part of that
    noise) and of SGHMC, with its ``B^`` noise estimate too (``B^`` is linear in the
    minibatch covariance, whose mean is affine in ``C``), as long as ``B^`` is never
    clipped. Their stationary mean is exactly ``m``.

    For the thermostats (SGNHT, CCAdL, mCCAdL) ``xi`` is frozen at the value where it is
    stationary (``E[p'p] = N_d T`` where the D steps read ``p``, solved for) and CCAdL's
    moving-average ``Sigma`` at its mean ``Sigma(m) + Q(C)``. mCCAdL's C step
    ``exp(-(h^2 / 2T) Sigma_B)`` is averaged over minibatch estimates ``Sigma_B`` drawn
    independently of the force's noise (its ``sigma_estimate="independent"``): by Jensen
    a fluctuating ``Sigma_B`` damps less than its mean, which moves ``xi`` by several MCSE
    at the test settings. The fluctuations of ``xi`` itself are neglected: in continuous
    time ``p`` is independent of ``xi`` at equilibrium (Propositions 1 and 2 of the CCAdL
    paper, for any thermal mass), so they enter only with the discretisation. At the
    settings of :data:`CASES`, runs 8 times as long as the tests' (0.7-1.3 x 10^5
    iterations) agree with these predictions within 2.2 MCSE on every statistic, and runs
    32 times as long within 3 MCSE (mCCAdL's sd[0]): what the approximations miss is a
    fraction of an MCSE at the tests' length.

    Parameters
    ----------
    sampler : SGLD, SGHMC, SGNHT, CCAdL or MCCAdL
    model : Model
        Affine per-example gradients (checked), e.g. from :func:`conjugate_regression`.
    mean, cov : ndarray
        The exact posterior; ``inv(cov)`` is the Hessian ``H``.
    h : float
    batch_size : int or None
        Rows per minibatch, drawn with replacement; None (or ``N``) for full data.
    noise, friction, control : float, default=1.0
        Factors on the injected noise's diffusion (the O step's ``diffusion`` argument,
        SGLD's ``T`` in ``sqrt(2 h T)``), on the O step's friction argument, and on the
        noise control (SGHMC's ``B^``, CCAdL's correction, mCCAdL's C-step ``scale``): the
        predictions for the mutants of ``tests/test_mutation.py``.

    Returns
    -------
    Moments
        ``sd`` (P,), the stationary sd of each coordinate of ``theta``; ``xi``, the mean
        of ``xi`` (None without a thermostat); ``kinetic``, the mean of the per-draw
        ``kinetic_temperature`` statistic (None for SGLD; ``T`` for the thermostats).
    """
    name = type(sampler).__name__
    H = np.linalg.inv(cov)
    P = H.shape[0]
    I, Z = np.eye(P), np.zeros((P, P))
    T = sampler.temperature
    nm = _AffineNoise(model, mean, batch_size)

    if name == "SGLD":
        ops = _Ops(nm, H, momentum=False)
        # theta <- theta + h F~(theta) + sqrt(2 h T) xi: the force noise's multiplicative
        # part depends on theta *before* the update, hence one operator for both.
        force = ops.force_noise(h, block=ops.E)
        move = ops.lin(I - h * H)
        step = _compose(_Affine(move.K + force.K - np.eye(P * P), force.c), ops.noise(2 * h * T * noise * I, ops.E))
        C = step.fixed_point()
        return Moments(np.sqrt(np.diag(C)), None, None)

    ops = _Ops(nm, H)
    A = sampler.friction
    drift = ops.lin(np.block([[I, h * I], [Z, I]]))
    kick = ops.lin(np.block([[I, Z], [-h * H, I]]))  # the mean force; force_noise adds delta

    def euler_o(xi_eff, K=None):
        """p <- (1 - h xi) p [- K p] (+ the noise, added by the caller)."""
        decay = (1 - h * xi_eff) * I - (0 if K is None else K)
        return ops.lin(np.block([[I, Z], [Z, decay]]))

    if name == "SGHMC":
        # theta <- theta + h p; p <- (1 - h A) p + h F~(theta) + N(0, 2 (A T - B^) h)
        parts = [drift, euler_o(friction * A), ops.noise(2 * h * noise * A * T * I)]
        if sampler.noise_estimate == "empirical":
            # B^ = (h/2) diag(Sigma^), Sigma^ from the minibatch at the drifted theta, with
            # mean Sigma(m) + Q(C): an affine function of C.
            parts.append(ops.sigma_diag_noise(-2 * h * noise * control * 0.5 * h))
        step = _compose(*parts, kick, ops.force_noise(h))
        C = step.fixed_point()
        # SGHMC's kinetic_temperature is p'p / N_d at the end of the iteration.
        return Moments(np.sqrt(np.diag(C)[:P]), None, np.trace(C[P:, P:]) / P)

    if name in ("SGNHT", "CCAdL"):
        full = name == "CCAdL" and _full_covariance(sampler, P)
        injected = ops.noise(2 * h * noise * A * T * I)
        kick_force = _compose(kick, ops.force_noise(h))

        def stationary(xi, S_run):
            K = None
            if name == "CCAdL":
                # -h (h/2) beta Sigma_t p_{t-1}; Sigma_t the moving average, frozen at its mean.
                K = control * h * (0.5 * h / T) * (S_run if full else np.diag(np.diag(S_run)))
            C = _compose(drift, euler_o(friction * xi, K), injected, kick_force).fixed_point()
            # The D step reads p at the end of the iteration.
            return C, np.trace(C[P:, P:]) / P

    elif name == "MCCAdL":
        half = 0.5 * h
        drift_half = ops.lin(np.block([[I, half * I], [Z, I]]))
        # One iteration shifted to start at a force evaluation: the closing half kick of an
        # iteration and the opening one of the next use the same minibatch force, so
        # together they are one kick of h with one noise draw.
        kick_drift = _compose(kick, ops.force_noise(h), drift_half)

        def o_exact(xi_eff):
            a = np.exp(-xi_eff * half)
            var = noise * A * T * -np.expm1(-2 * xi_eff * half) / xi_eff
            return _compose(ops.lin(np.block([[I, Z], [Z, a * I]])), ops.noise(var * I))

        # C: p <- exp(t Sigma~) p with t = h, Sigma~ = -(h/2) beta Sigma, Sigma estimated
        # afresh from a minibatch at each step (independent of the force's), averaged over
        # those estimates (shifted so that their mean is Sigma(m) + Q(C)): by Jensen a
        # fluctuating Sigma damps less on average than its mean would.
        batch_sigmas = nm.batch_sigmas()
        c_steps = {}

        def c_step_op(S_run):
            key = S_run.tobytes()
            if key not in c_steps:
                s, U = np.linalg.eigh(batch_sigmas + (S_run - nm.sigma0))
                E = np.einsum("bij,bj,bkj->bik", U, np.exp(-control * h * (half / T) * s), U)
                # E[kron(M, M)] for M = blockdiag(I, E_B), block by block.
                K = np.zeros((2 * P,) * 4)
                e, p = slice(0, P), slice(P, 2 * P)
                K[e, e, e, e] = np.einsum("ac,df->adcf", I, I)
                K[e, p, e, p] = np.einsum("ac,df->adcf", I, E.mean(axis=0))
                K[p, e, p, e] = np.einsum("ac,df->adcf", E.mean(axis=0), I)
                K[p, p, p, p] = np.einsum("bac,bdf->adcf", E, E) / len(E)
                c_steps[key] = _Affine(K.reshape(4 * P * P, 4 * P * P), np.zeros(4 * P * P))
            return c_steps[key]

        def stationary(xi, S_run):
            o_step = o_exact(friction * xi)
            to_a = kick_drift.then(o_step)
            to_b = to_a.then(c_step_op(S_run))
            C = _compose(to_b, o_step, drift_half).fixed_point()
            # The two D steps read p after the first O and after C.
            kinetic = 0.5 * (np.trace(to_a(C)[P:, P:]) + np.trace(to_b(C)[P:, P:])) / P
            return C, kinetic
    else:
        raise ValueError(f"no moment prediction for {name}")

    # The root in xi of E[p'p] = N_d T, and an outer fixed point for the covariance
    # control's Sigma: its mean depends on C only through the small multiplicative part
    # Q(C), so one refinement from the exact posterior's covariance is plenty.
    S_run = nm.sigma(cov)
    # Start from Proposition 1's xi = A + h tr(Sigma) / (2 N_d T) (less what the control
    # removes) and widen the bracket within the range where the recursion is stable.
    removed = control if name in ("CCAdL", "MCCAdL") else 0.0
    guess = (noise * A + (1 - removed) * h * np.trace(S_run) / (2 * P * T)) / friction
    guess = max(guess, 0.1 * noise * A / friction)

    def excess(x):
        C, kinetic = stationary(x, S_run)
        return kinetic - T if np.isfinite(kinetic) else np.nan

    for width in (1.1, 1.01):
        lo, hi = guess / width, guess * width
        while not excess(lo) > 0:
            lo /= width
        while not excess(hi) < 0:
            hi *= width
            assert hi < 100 * guess, "no stable xi"
        xi = brentq(excess, lo, hi, xtol=1e-8 * A)
        C, _ = stationary(xi, S_run)
        S_run = nm.sigma(C[:P, :P])
        guess = xi
    # At the root the recorded kinetic temperature is T by construction (and exactly so,
    # without the frozen-xi approximation: E[d xi] = 0 at stationarity).
    return Moments(np.sqrt(np.diag(C)[:P]), float(xi), float(T))


def _full_covariance(sampler, P):
    """Whether CCAdL keeps the full ``P x P`` moving average (its ``covariance`` rule)."""
    from skbayes_sg.samplers.ccadl import MAX_FULL_PARAMS

    return sampler.covariance == "full" or (sampler.covariance == "auto" and P <= MAX_FULL_PARAMS)


# -- the exact-posterior cases shared by test_samplers.py and test_mutation.py --------------


class Case:
    """A sampler on :func:`conjugate_regression`, its settings and its predicted law.

    Parameters
    ----------
    sampler : BaseSampler
        Run in ``theta`` itself (``preconditioner="none"`` where the sampler has one), as
        :func:`predicted_moments` assumes.
    step : float
        ``h`` in units of the curvature: ``h = step / lambda_max`` for SGLD,
        ``step / sqrt(lambda_max)`` for the momentum schemes (whose auto constants are 0.1
        and 0.1-0.2).
    batch_size : int
    n_iter, n_burn : int
        Iterations of each of four chains, of which the first ``n_burn`` are discarded.
    D : int, default=3
        Features of the regression (``P = D + 1`` parameters).
    """

    def __init__(self, sampler, step, batch_size, n_iter, n_burn, D=3):
        if "preconditioner" in sampler.get_params():
            sampler = sampler.set_params(preconditioner="none")
        self.sampler, self.step, self.batch_size = sampler, step, batch_size
        self.n_iter, self.n_burn, self.D = n_iter, n_burn, D
        self.model, self.mean, self.cov, _ = conjugate_regression(D=D, n_batch=batch_size)
        lam = np.linalg.eigvalsh(np.linalg.inv(self.cov)).max()
        self.h = step / (lam if sampler._step_size_order == 1 else np.sqrt(lam))
        self._predictions = {}

    def __repr__(self):
        return f"Case({self.sampler!r}, h={self.h:.4g}, n={self.batch_size}, n_iter={self.n_iter})"

    def predict(self, **factors):
        """:func:`predicted_moments` of this case (cached), with mutation ``factors``."""
        key = tuple(sorted(factors.items()))
        if key not in self._predictions:
            self._predictions[key] = predicted_moments(
                self.sampler, self.model, self.mean, self.cov, self.h, self.batch_size, **factors
            )
        return self._predictions[key]

    def run(self, seed=1):
        """Four chains from the posterior mean.

        Returns
        -------
        draws : ndarray of shape (4, n_draws, P)
        stats : dict of ndarray of shape (4, n_draws)
        summaries : list of dict
            Each chain's state ``summary()`` (e.g. SGHMC's ``noise_clipped``).
        """
        sampler, gradient = with_step(self.sampler, self.h), GradientSpec(self.batch_size)
        spec = ChainSpec(sampler, self.model, self.n_iter, self.n_burn, gradient=gradient)
        results = run_chains(spec, [self.mean] * 4, np.random.SeedSequence(seed).spawn(4))
        draws = np.stack([r.draws for r in results])
        stats = {k: np.stack([r.stats[k] for r in results]) for k in results[0].stats}
        return draws, stats, [r.summary for r in results]

    def z(self, seed=1, **factors):
        """:func:`stationary_z` of a seeded run against the prediction (with ``factors``).

        Returns
        -------
        z : dict of str to float
        run : tuple
            What :meth:`run` returned.
        """
        run = self.run(seed)
        return stationary_z(run[0], run[1], self.mean, self.predict(**factors)), run


# Settings where every ingredient of each sampler moves a checked statistic by 8 MCSE or
# more (see tests/test_mutation.py), at one or two seconds a run:
#
# - SGLD at a quarter of its stability limit: its sds are 55% above the posterior's, all
#   of it predicted, and it mixes in a few iterations.
# - SGHMC at h sqrt(lambda_max) = 0.3 with A near critical damping (2 sqrt(lambda)):
#   fast mixing; the gradient noise (h Sigma / 2 ~ 0.3-0.4 A) keeps the friction, the
#   injected noise and B^ all visible. With A = 30, A T - B^ is clipped in only a handful
#   of the ~7 x 10^4 coordinate-iterations (heavy-tailed minibatch variances).
# - The thermostats with a small thermal mass mu = 0.05: xi's autocorrelation time is
#   mu xi / (N_d T h) ~ 10-50 iterations, so that its mean, the statistic that a scaled
#   noise or friction moves (the thermostat protects the posterior), has an ESS of a few
#   hundred; Propositions 1 and 2 hold for any mu. CCAdL with n = 50 and both it and
#   mCCAdL at twice their auto steps (mCCAdL is stable far beyond) make h Sigma / 2 1-1.5
#   times A, so that the covariance control removes as much noise as is injected, or more.
CASES = {
    "sgld": Case(SGLD(), 0.5, 100, 4500, 500),
    "sghmc": Case(SGHMC(friction=40.0), 0.3, 100, 4500, 500),
    "sghmc_empirical": Case(SGHMC(friction=30.0, noise_estimate="empirical"), 0.3, 100, 4500, 500),
    "sgnht": Case(SGNHT(friction=20.0, thermal_mass=0.05), 0.2, 100, 4000, 500),
    "ccadl": Case(CCAdL(friction=10.0, thermal_mass=0.05), 0.2, 50, 4000, 500),
    "mccadl": Case(MCCAdL(friction=16.0, thermal_mass=0.05), 0.4, 100, 2500, 500),
}


# -- an exact Poisson regression posterior, independent of the package ---------------------

#: A posterior summary with Monte Carlo errors: means, sds and their MCSEs (P,), the ESS.
Reference = namedtuple("Reference", ["mean", "sd", "mcse_mean", "mcse_sd", "ess"])


def _poisson_log_posterior(theta, X, y, prec, offset):
    """Log posterior (up to a constant), gradient and Hessian of Poisson regression with the
    intercept last, in plain numpy."""
    eta = X @ theta[:-1] + theta[-1] + offset
    mu = np.exp(eta)
    Xa = np.column_stack([X, np.ones(len(y))])
    lp = float(y @ eta - mu.sum() - 0.5 * theta @ (prec * theta))
    return lp, Xa.T @ (y - mu) - prec * theta, Xa.T @ (Xa * mu[:, None]) + np.diag(prec)


def poisson_reference(X, y, alpha=1.0, alpha_intercept=0.01, offset=None, n_draws=20_000, df=7, seed=0):
    """Posterior summary of Poisson regression by self-normalised importance sampling.

    The posterior ``y_i ~ Poisson(exp(x_i w + b + offset_i))``, ``w_j ~ N(0, 1 / alpha)``,
    ``b ~ N(0, 1 / alpha_intercept)`` (``SGBayesPoissonRegressor``'s), written here in numpy
    and sampled by importance sampling from a multivariate t with ``df`` degrees of freedom
    centred at the MAP (Newton's method on the exact Hessian) with the Laplace covariance:
    its heavier tails cover the posterior's, so the weights are bounded and the estimate is
    exact up to its Monte Carlo error, which is returned with it (the delta method on the
    self-normalised weights ``w``: ``MCSE(mean)^2 = sum w^2 (x - mean)^2``, and of the
    variance ``sum w^2 ((x - mean)^2 - var)^2``). Independent of skbayes_sg's models and
    samplers, so that an error in either shows as a difference.

    Returns
    -------
    Reference
        Means, sds, their MCSEs (shape (D + 1,), the intercept last) and the importance ESS.
    """
    X, y = np.asarray(X, float), np.asarray(y, float)
    offset = np.zeros(len(y)) if offset is None else np.asarray(offset, float)
    P = X.shape[1] + 1
    prec = np.append(np.full(P - 1, alpha), alpha_intercept)
    theta = np.zeros(P)
    theta[-1] = np.log(max(y.mean(), 1e-3)) - offset.mean()
    lp = _poisson_log_posterior(theta, X, y, prec, offset)[0]
    for _ in range(100):  # damped Newton: the log posterior is concave
        _, g, H = _poisson_log_posterior(theta, X, y, prec, offset)
        step, t = np.linalg.solve(H, g), 1.0
        while _poisson_log_posterior(theta + t * step, X, y, prec, offset)[0] < lp - 1e-12 * abs(lp):
            t /= 2
        theta, lp_old = theta + t * step, lp
        lp = _poisson_log_posterior(theta, X, y, prec, offset)[0]
        if abs(lp - lp_old) < 1e-12 * abs(lp) and float(g @ step) < 1e-12:
            break
    draws, log_q = t_proposal(theta, _poisson_log_posterior(theta, X, y, prec, offset)[2], n_draws, df, seed)
    # The log posterior of each draw in blocks of rows.
    log_p = -0.5 * np.einsum("sp,p,sp->s", draws, prec, draws)
    for start in range(0, len(y), 4096):
        rows = slice(start, start + 4096)
        eta = draws[:, :-1] @ X[rows].T + draws[:, -1:] + offset[rows]
        log_p += eta @ y[rows] - np.exp(eta).sum(axis=1)
    return importance_summary(draws, log_p - log_q)


def t_proposal(theta, H, n_draws, df, seed):
    """``n_draws`` draws of a multivariate t with ``df`` degrees of freedom centred at the
    MAP ``theta`` with the Laplace covariance ``H^-1``, and their log densities up to a
    constant: the importance proposal of the references here."""
    P = theta.size
    L = np.linalg.cholesky(np.linalg.inv(H))
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n_draws, P)) / np.sqrt(rng.chisquare(df, n_draws) / df)[:, None]
    return theta + z @ L.T, -0.5 * (df + P) * np.log1p(np.einsum("sp,sp->s", z, z) / df)


def importance_summary(draws, log_w):
    """The :class:`Reference` of ``draws`` (S, P) under self-normalised log weights ``log_w``
    (S,): means and sds with their delta-method MCSEs (``MCSE(mean)^2 = sum w^2 (x - mean)^2``,
    of the variance ``sum w^2 ((x - mean)^2 - var)^2``), and the importance ESS."""
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    mean = w @ draws
    c2 = (draws - mean) ** 2
    var = w @ c2
    sd = np.sqrt(var)
    mcse_var = np.sqrt((w * w) @ (c2 - var) ** 2)
    return Reference(mean, sd, np.sqrt((w * w) @ c2), mcse_var / (2 * sd), 1.0 / float(w @ w))
