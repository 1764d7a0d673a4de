"""Modified covariance-controlled adaptive Langevin thermostat (Wei & Shang 2026)."""

import numpy as np
from sklearn.utils._param_validation import StrOptions

from ..models._fused_minibatch import StackedGLMGradients
from ..preconditioning import PRECONDITIONERS
from ._base import AUTO, OPEN_UNIT_INTERVAL, POSITIVE, POSITIVE_INT, ThermostatSampler
from ._batched import ou_exact_rows, row_dots
from ._expmv import DEFAULT_TOL, NoiseCovariance, c_step
from ._stacked_c_step import stacked_c_step
from ._state import MCCAdLState, ThermostatInfo
from ._substeps import drift, kick, ou_exact, thermostat

#: Where the C step's ``Sigma`` comes from (see :class:`MCCAdL`, Notes); ``"auto"`` resolves
#: to ``"same"`` or ``"independent"`` by the gradient estimator (:meth:`MCCAdL.sigma_source`).
SIGMA_ESTIMATES = ("auto", "independent", "lagged", "same")

#: ``sigma_refresh="auto"`` with plain minibatch gradients: iterations that one independent
#: ``Sigma`` minibatch serves. On a9a (batch 500, theta coordinates, h = 1e-4 and the auto
#: step) the full-data ``Sigma(theta)`` moves by 0.03-0.08% in Frobenius norm over 16
#: iterations and 0.13-0.20% over 64, far inside the ``O(sqrt(P / n))`` sampling error of one
#: minibatch's estimate (``benchmarks/mccadl_sigma_staleness.py``).
AUTO_SIGMA_REFRESH = 64

#: Minibatches in the running average of a ``Sigma`` held as a matrix (``sigma_refresh > 1``):
#: reusing one noisy estimate for many iterations lets the momentum adapt to its errors (the
#: directions it overestimates are damped, so the C step then removes less energy than the
#: noise brings and ``xi`` settles above ``A``), which an average of several independent
#: estimates, whose error is that of one minibatch of ``SIGMA_WINDOW n`` rows, makes small.
SIGMA_WINDOW = 8


class MCCAdL(ThermostatSampler):
    """mCCAdL: the CCAdL thermostat integrated by the symmetric BAODCDOAB splitting.

    The CCAdL dynamics (Wei & Shang 2026, eq. 8; Shang et al. 2015, eq. 12) split into
    the sub-steps A (drift), B (noisy force kick), O (friction ``xi`` and noise, solved
    exactly), D (thermostat) and C (covariance control ``dp = -(h/2) beta Sigma p dt``),
    composed as (eq. 26, Algorithm 1)

    ``B(h/2) A(h/2) O(h/2) D(h/2) C(h) D(h/2) O(h/2) A(h/2) B(h/2)``.

    - O is the exact Ornstein-Uhlenbeck solution with friction ``xi`` (Algorithm 1,
      lines 6-10, including the ``xi = 0`` branch), :func:`~._substeps.ou_exact`.
    - C is ``p <- exp(h Sigma~) p`` with ``Sigma~ = -(h/2) beta Sigma`` (eq. 17), computed
      matrix-free by the shifted, scaled Taylor series of Al-Mohy & Higham (section 2.2,
      eqs. 18-22) in :mod:`._expmv`; ``Sigma`` is never formed.
    - ``Sigma = noise_scale * V`` (eq. 15) is estimated *directly*, without the moving
      average of CCAdL (eq. 10). Algorithm 1 takes ``V`` from the per-example gradients of
      the force just applied; so does this class by default with the estimators'
      control-variate gradients, and with plain minibatch gradients it takes it from an
      independent minibatch at the C step's position (``sigma_estimate``, and Notes). The
      force at the end of one iteration is reused by the first B of the next, so each
      iteration costs one minibatch force (and, for an independent ``Sigma``, one more
      minibatch of gradients every ``sigma_refresh`` iterations).
    - With full-data gradients ``noise_scale = 0``: C is the identity and the scheme is
      the BAODDOAB splitting of adaptive Langevin.

    By Proposition 2 of the CCAdL paper the invariant law is
    ``exp(-beta H(theta, p)) exp(-beta mu (xi - A)^2 / 2)``: ``xi`` settles at ``A`` and
    the kinetic temperature ``p'p / N_d`` at ``1/beta``. The splitting has weak order 2
    (section 2.3), against order 1 for SGHMC, SGNHT and CCAdL, and is stable at step
    sizes an order of magnitude beyond CCAdL's (section 3).

    Per-draw statistics: ``xi`` and ``kinetic_temperature``, the mean of ``p'p / N_d`` at
    the two D sub-steps, i.e. the momentum the thermostat controls; since ``xi`` is
    stationary its average is exactly ``T``. (The end-of-iteration momentum carries only
    half of the next noisy kick and reads lower, by about ``h^2 tr(Sigma) / (4 N_d)``.)

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        ``h``; ``"auto"`` sets ``h = 0.2 / sqrt(lambda_max)`` from the largest curvature of
        the negative log posterior at the initial point, as for :class:`SGNHT` (the
        estimators double the constant on large data whitened at the MAP, where the
        posterior is near its Laplace approximation: ``_estimator.LARGE_DATA_STEP_SCALE``),
        capped where the gradient noise's predicted error reaches its tolerance.
    friction : float, default=1.0
        ``A``, the effective friction: strength of the injected noise and the value at
        which ``xi`` starts and settles.
    thermal_mass : float or None, default=None
        ``mu``; ``None`` uses ``N_d``, the number of parameters, as both papers do.
    temperature : float, default=1.0
        ``T = 1 / beta``.
    expm_tol : float, default=2**-6
        Relative backward error requested from the C step's Taylor approximation; it sets
        the Taylor degree ``m`` and scaling ``s``. The default perturbs ``Sigma`` by at most
        1.6%, inside the sampling error of its minibatch estimate (see
        :data:`._expmv.DEFAULT_TOL`); lower it (e.g. ``2**-24``) to make the C step exact
        to single precision.
    expm_method : {"auto", "taylor", "lanczos"}, default="auto"
        How the C step computes ``exp(h Sigma~) p``. ``"taylor"``: the paper's shifted,
        scaled Taylor series (section 2.2), whose cost grows like ``||h Sigma~||``.
        ``"lanczos"``: a Krylov approximation (:func:`._expmv.lanczos_expmv`) whose cost
        grows like ``sqrt(||h Sigma~||)``. ``"auto"`` keeps the Taylor series while it needs
        at most 12 products and switches to Lanczos beyond; with fewer minibatch rows than
        parameters and an operator that forms their Gram matrix (the DRBM's), it computes the
        same exponential in the rows' ``n`` dimensions instead (one product with the rows,
        then ``n x n`` products; ``samplers/_row_space.py``).
    preconditioner : {"auto", "dense", "centred", "diag", "none"}, default="auto"
        Coordinates the scheme runs in. ``"dense"``: ``theta = theta_hat + L z`` with
        ``L L'`` the inverse Hessian of the negative log posterior at the MAP
        ``theta_hat``; ``"diag"``: its diagonal; ``"centred"``: for a GLM with
        intercepts, the diagonal after centring the predictors for the intercepts, with
        a Lanczos correction of the few directions it leaves far from unit curvature, O(P)
        to apply (the diagonal for other models); ``"none"``: ``theta`` itself. The scheme
        above is applied unchanged to ``z`` (equivalently, in ``theta`` with the constant
        mass matrix ``H``), where a near-Gaussian posterior is near ``N(0, I)``, so one
        step size fits every direction however the features are scaled.
        ``"auto"``: dense up to 1,000 parameters, centred beyond (see
        :mod:`skbayes_sg.preconditioning`) with ``step_size="auto"``; ``"none"`` with an
        explicit ``step_size``, which is in the units of ``theta``. Used by the
        estimators, which find the MAP.
    sigma_estimate : {"auto", "independent", "lagged", "same"}, default="auto"
        Where the C step's ``Sigma`` comes from. ``"independent"``: the per-example
        gradients of a fresh minibatch at the C step's position, which no kick uses (the
        library's deviation from Algorithm 1, see Notes). ``"same"``: those of the force
        just applied, as in Algorithm 1 (one minibatch per iteration). ``"lagged"``: those
        of the force before it. ``"auto"`` (:meth:`sigma_source`): ``"same"`` with the
        estimators' control-variate gradients, whose small noise makes the correlation
        bias of Algorithm 1 negligible and the second minibatch a cost for nothing (see
        Notes for the measurements); ``"independent"`` with plain minibatch gradients (and
        any gradient estimator that does not say it is a control variate), where that bias
        is several posterior sd.
    sigma_refresh : int or "auto", default="auto"
        With an independent ``Sigma`` (``sigma_estimate="independent"``, or ``"auto"``
        resolved to it), the number of iterations one independent
        ``Sigma`` minibatch serves: it is drawn at the C step's position, and the following
        ``sigma_refresh - 1`` C steps reuse its covariance, which stays independent of every
        kick's noise (what removes the correlation bias, see Notes). Reuse makes the C step
        cheap: the minibatch's gradients, mean and trace are computed once, and when ``P``
        is small against the products it will serve, ``Sigma`` is held as a ``P x P``
        matrix (one BLAS-3 Gram product per refresh, then matrix-vector products of size
        ``P``; see ``NoiseCovariance.compact`` in ``samplers/_expmv.py``). The price is a ``Sigma`` from a
        position up to ``sigma_refresh - 1`` iterations old. ``"auto"``: 1 with the
        estimators' control-variate gradients, whose noise covariance is quadratic in
        ``theta - theta_hat`` and moves as fast as the chain (on a9a at the auto step it
        changes by 20% in one iteration and is decorrelated after about 8, so an older
        estimate would no longer describe the noise the C step must cancel); 64 with plain
        minibatch gradients, whose ``Sigma(theta)`` is nearly constant across the posterior
        (0.1-0.2% change over 64 iterations on a9a), when ``Sigma`` is held as a matrix
        (then a running average over minibatches); 1 when it is not (more parameters than
        :data:`~._expmv.COMPACT_MAX_PARAMS`, or the row-space C step of the DRBM). One
        minibatch's estimate then has rank below ``n``, and the exponential saturates in
        those few directions, so one estimate applied ``k`` times damps less than ``k``
        fresh ones: on digits, the DRBM's chains with ``sigma_refresh=4`` ran 28% faster but
        hot, their test log loss 0.006 above the small-step reference (0.009 with 8),
        against 0.0002 with 1 (``benchmarks/results/drbm_digits_sampler_options.jsonl``).
        Ignored by the other ``sigma_estimate`` options.

    Notes
    -----
    Estimating ``Sigma`` from the same minibatch whose noise the C step damps correlates
    the two: ``E[Sigma^ eps] = N^3 kappa_3 / n^2`` for skewed per-example gradients (third
    cumulant ``kappa_3``), which acts as a force bias of order ``h^2 N^3 kappa_3 / n^2`` and
    shifts the sampled mean by about ``h^2 N^2 kappa_3 / n^2`` posterior units. At the
    papers' curvature step on synthetic logistic regression (D = 20, N = 1e4, n = 200) that
    is 2.9 sd rms (worst coordinate 5.0 sd); from the previous force's minibatch, whose
    noise is still in ``p``, 1.1 sd; from an independent minibatch 0.06 sd, within Monte
    Carlo error (``benchmarks/mccadl_sigma_source.py``). Hence ``"independent"`` with plain
    gradients (what ``sigma_estimate="auto"`` picks there), which costs a second minibatch of
    per-example gradients (no force) per ``sigma_refresh`` iterations.

    With the estimators' control-variate gradients the per-example noise is that of
    ``g_i(theta) - g_i(theta_hat)``, small and nearly symmetric, so the correlation (and
    ``kappa_3``) is small whichever source is used (the paper's section 2.1 estimate,
    eq. 15, from the force's own minibatch, is then unbiased to Monte Carlo error), while
    an independent minibatch drawn afresh every iteration (``sigma_refresh="auto"`` under
    control variates) costs nearly an SGHMC step. ``"auto"`` therefore takes ``"same"``
    there. Measured with the default estimator (``benchmarks/mccadl_sigma_same.py``,
    5 seeds of each source, pooled, against exact HMC references): worst mean error 0.034
    (same) vs 0.037 (independent) sd on a9a with its default prior, 0.032 vs 0.034 on
    synthetic N = 1e4, 0.025 vs 0.027 at N = 1e5; pooled sd ratios 0.974-1.035 vs
    0.965-1.026; R-hat <= 1.009; the two sources' means differ by at most 2.6 (rms 0.64-0.88)
    Monte Carlo standard errors over the 21-124 coordinates; likewise for
    ``SGBayesLinearRegression``'s defaults on exact Gaussian posteriors (N = 1e4 and 1e5,
    D = 5 and 100: at most 2.6 MCSE apart, worst mean error 0.050 vs 0.049 sd). The C step
    then costs 1.09x an SGHMC step on a9a at batch 500 and the auto ``h = 0.2``, against
    1.86x with an independent ``Sigma`` (the whole iteration 2.30x against 3.20x;
    ``benchmarks/mccadl_cstep.py``).

    That second minibatch has the force's size. ``Sigma = (N^2 / n) V`` only needs an
    estimate of the per-example covariance ``V``, so fewer rows would be cheaper, but not
    free: the noisier ``Sigma`` widens the sampled sds where the C step matters (papers'
    setting, N = 1e4, n = 200: median sd ratio to the exact posterior 1.12, 1.21, 1.33 and
    1.48 with all, 1/2, 1/4 and 1/8 of the rows, each drawn afresh every iteration; at
    N = 1e5, 2.18 to 3.67), while under the estimators' defaults, where the C step damps a
    few percent, no source is distinguishable from another. More rows, not fewer, are what
    helps: the mean of the last 8 minibatches that ``sigma_refresh="auto"`` uses with plain
    gradients brings that 1.12 to 1.02 (0.95-1.08 over the coordinates), at a fraction of
    the cost (:ref:`maths_mccadl`).

    See Also
    --------
    CCAdL : the original Euler-type scheme with a moving-average covariance.
    SGNHT : the thermostat without covariance control.
    """

    _auto_step_constant = 0.2
    #: ``burn_in="auto"`` for chains whitened densely at the MAP under ``init="map"``: they start
    #: at draws of the Laplace approximation, ``N(0, I)`` in those coordinates, near the
    #: posterior (on a9a within 0.16 sd), with ``xi`` at ``A`` and ``p ~ N(0, T I)``; a
    #: mismatch of that size relaxes within a few of the chains' autocorrelation times (about
    #: 14 iterations at a9a's auto step). 5% of a run is at least 50 iterations (the first
    #: block's), as the adaptive samplers' ``_laplace_burn_in``. On a9a over three seeds
    #: 4,000 iterations instead of 5,000 for the same ESS target (1.9-2.0 s against 2.1-2.4 s),
    #: means within 0.07-0.09 sd and sds within 0.95-1.07 of the exact posterior, as at 20%.
    _dense_map_burn_in = 0.05
    #: ``n_iter="auto"``'s first block for those chains at the automatic step: in those
    #: coordinates the posterior is near ``N(0, I)``, and the chains' ESS per iteration is set by
    #: ``h`` and the friction more than by the data. At the largest automatic step (0.4, large
    #: data) they reached ESS 1,000 at 1,932-2,047 iterations (a9a, synthetic N = 1e5 to 4e6,
    #: ``posterior_accuracy.py``'s gaussian fits), after a first block of 1,000 and a second
    #: whose length its diagnostics predicted. A first block of that length meets the target at
    #: its first check in those fits: one set of diagnostics and one round trip to the workers
    #: fewer (a9a: 60-70 ms). Smaller steps need longer, and the rule extends as before.
    _dense_map_first_block = 2000
    state_type = MCCAdLState
    # The C step cancels the noise it is given; what is left is the error of Sigma's
    # minibatch estimate, so the auto step allows three times the uncontrolled samplers'
    # predicted noise error (on a9a, whitened with control variates: h = 0.2 gives sds
    # within 3% and means within 0.05 sd of an exact HMC posterior).
    _noise_tolerance = 0.15
    #: Estimates and cancels the minibatch noise covariance (a warning never advises
    #: switching to a noise-controlling sampler when this one is in use).
    controls_noise = True

    _parameter_constraints: dict = {
        "step_size": [POSITIVE, AUTO],
        "friction": [POSITIVE],
        "thermal_mass": [POSITIVE, None],
        "temperature": [POSITIVE],
        "expm_tol": [OPEN_UNIT_INTERVAL],
        "expm_method": [StrOptions({"auto", "taylor", "lanczos"})],
        "sigma_estimate": [StrOptions(set(SIGMA_ESTIMATES))],
        "sigma_refresh": [POSITIVE_INT, AUTO],
        "preconditioner": [StrOptions(set(PRECONDITIONERS))],
    }

    def __init__(
        self,
        step_size="auto",
        friction=1.0,
        thermal_mass=None,
        temperature=1.0,
        expm_tol=DEFAULT_TOL,
        expm_method="auto",
        sigma_estimate="auto",
        sigma_refresh="auto",
        preconditioner="auto",
    ):
        self.preconditioner = preconditioner
        self.step_size = step_size
        self.friction = friction
        self.thermal_mass = thermal_mass
        self.temperature = temperature
        self.expm_tol = expm_tol
        self.expm_method = expm_method
        self.sigma_estimate = sigma_estimate
        self.sigma_refresh = sigma_refresh

    def sigma_source(self, grad_estimator):
        """``sigma_estimate`` resolved for ``grad_estimator``: ``"auto"`` is ``"same"`` for a
        control variate (a gradient estimator with ``control_variate = True``, as
        :class:`~skbayes_sg.minibatch.ControlVariateGradient`), ``"independent"`` otherwise."""
        if self.sigma_estimate != "auto":
            return self.sigma_estimate
        return "same" if getattr(grad_estimator, "control_variate", False) else "independent"

    def _refresh_period(self, grad_estimator):
        """``sigma_refresh`` resolved for ``grad_estimator`` (see the parameter)."""
        if isinstance(self.sigma_refresh, str):
            return 1 if getattr(grad_estimator, "position_dependent_noise", True) else AUTO_SIGMA_REFRESH
        return int(self.sigma_refresh)

    def init_state(self, theta0, grad_estimator, rng, context=None):
        state = super().init_state(theta0, grad_estimator, rng, context)
        state.force, state.grads = grad_estimator.gradient(state.theta, rng)
        # Warm start of the power iteration that estimates lambda_max(Sigma) when the
        # trace bound is too loose (see _expmv.c_step); zeros mean "not started".
        state.sigma_eigvec = np.zeros_like(state.theta)
        state.sigma_norm_cache = {}
        if self.sigma_estimate == "lagged":
            state.grads_prev = state.grads
        return state

    def _sigma_gradients(self, state, grad_estimator, theta, rng, scale):
        """Per-example gradients whose covariance is the C step's ``Sigma`` (see Notes).

        ``"independent"``: a :class:`~._expmv.NoiseCovariance` of a fresh minibatch at
        ``theta``, kept for ``sigma_refresh`` iterations (its mean and trace computed once).
        """
        source = self.sigma_source(grad_estimator)
        if source == "independent":
            if state.sigma_period == 1 and self.sigma_refresh in ("auto", 1):
                # Every iteration (control variates with an independent Sigma): no bookkeeping.
                state.sigma_minibatches += 1
                return NoiseCovariance(grad_estimator.noise_gradients(theta, rng), grad_estimator.noise_scale, -scale)
            cov = state.sigma_cov
            age = state.sigma_age
            if (
                cov is None
                or age >= state.sigma_period
                or cov.coef != -scale
                or cov.noise_scale != grad_estimator.noise_scale
            ):
                new = NoiseCovariance(grad_estimator.noise_gradients(theta, rng), grad_estimator.noise_scale, -scale)
                state.sigma_minibatches += 1
                age = 0
                period = self._refresh_period(grad_estimator)
                # Products this covariance will serve, from the chain's own count so far.
                per_iter = max(state.c_products / max(state.n_steps, 1), 1.0)
                if period > 1 and self.expm_method == "auto" and new.compact(period * per_iter):
                    if (
                        cov is not None
                        and cov.is_compact
                        and cov.coef == new.coef
                        and cov.noise_scale == new.noise_scale
                    ):
                        # A running average over the last SIGMA_WINDOW minibatches (a mean of
                        # all of them until there are that many): see sigma_refresh.
                        j = state.sigma_batches = state.sigma_batches + 1
                        new.blend(cov, 1.0 / min(j, SIGMA_WINDOW))
                    else:
                        state.sigma_batches = 1
                elif isinstance(self.sigma_refresh, str):
                    # No matrix, so no average: "auto" reuses nothing (see sigma_refresh).
                    period = 1
                state.sigma_period = period
                # Kept only if another C step will reuse it: a minibatch held past its step
                # keeps its gathered rows alive, and the next gather then gets fresh memory
                # (page faults and cold cache: 10% of a default-setting iteration on a9a).
                state.sigma_cov = new if period > 1 else None
                cov = new
            state.sigma_age = age + 1
            return cov
        if source == "lagged":
            return state.grads if state.grads_prev is None else state.grads_prev
        return state.grads

    _normals_per_step = 2
    # n_steps stays in each chain's state: the C step's bookkeeping reads it.
    _batch_fields = ("theta", "p", "xi", "force")

    def step_batch(self, chains, grads, rngs):
        h, A, T = chains.step_size, self.friction, self.temperature
        half = 0.5 * h
        theta, p, force = chains.theta, chains.p, chains.force
        C, P = p.shape
        mu = self._mu(P)
        PT, AT = P * T, A * T
        # One work array for the scaled kicks and drifts (no temporaries), the same products.
        work = chains.work
        p += np.multiply(force, half, out=work)
        theta += np.multiply(p, half, out=work)
        ou_exact_rows(p, chains.xi, AT, half, chains, rngs)
        kinetic = row_dots(p)
        xi = chains.xi + half * (kinetic - PT) / mu
        if grads.noise_scale > 0.0:
            self._c_steps(chains, grads, theta, p, rngs)
        # (With full data, noise_scale = 0, C is the identity.)
        pp = row_dots(p)
        kinetic += pp
        xi = xi + half * (pp - PT) / mu
        ou_exact_rows(p, xi, AT, half, chains, rngs)
        theta += np.multiply(p, half, out=work)
        per_example = grads.forces(theta, rngs, force, per_example=grads.noise_scale > 0.0)
        if per_example is not None:
            lagged = self.sigma_estimate == "lagged"
            for state, g in zip(chains.states, per_example):
                if lagged:
                    state.grads_prev = state.grads
                state.grads = g
        p += np.multiply(force, half, out=work)
        chains.xi = xi
        for state in chains.states:
            state.n_steps += 1
        info = np.empty((C, 2))
        info[:, 0] = xi
        info[:, 1] = 0.5 * kinetic / P
        return info

    def _c_steps(self, chains, grads, theta, p, rngs):
        """C(h) of every chain, each with its own minibatch's ``Sigma``: one stacked series for
        the chains whose ``Sigma`` is the force's own minibatch's and whose operators stack
        (the estimators' default, :mod:`._stacked_c_step`), the others chain by chain."""
        states = chains.states
        alone = range(len(states))
        if self.expm_method != "lanczos" and self.sigma_source(grads.estimators[0]) == "same":
            stack = StackedGLMGradients.of([s.grads for s in states])
            if stack is not None:
                half = 0.5 * chains.step_size
                n_products, alone = stacked_c_step(
                    p,
                    stack,
                    grads.noise_scale,
                    chains.step_size,
                    half / self.temperature,
                    self.expm_tol,
                    self.expm_method,
                )
                for state, n in zip(states, n_products):
                    state.c_products += n
        for c in alone:
            p[c] = self._c_step(states[c], grads.estimators[c], theta[c], p[c], rngs[c])

    def _c_step(self, state, grad_estimator, theta, p, rng):
        """C(h) of one chain: ``exp(h Sigma~) p`` (eq. 17), counting its operator products."""
        h, T = state.step_size, self.temperature
        half = 0.5 * h
        if state.sigma_eigvec is None:
            state.sigma_eigvec, state.sigma_norm_cache = np.zeros_like(theta), {}
        p, n_prod = c_step(
            p,
            self._sigma_gradients(state, grad_estimator, theta, rng, half / T),
            grad_estimator.noise_scale,
            h,
            half / T,
            self.expm_tol,
            state.sigma_eigvec,
            cache=state.sigma_norm_cache,
            method=self.expm_method,
        )
        state.c_products += n_prod
        return p

    def step(self, state, grad_estimator, rng):
        h, A, T = state.step_size, self.friction, self.temperature
        half = 0.5 * h
        mu = self._mu(state.p.size)
        theta, p = state.theta, state.p
        if state.force is None:  # a state built elsewhere: evaluate the force once
            state.force, state.grads = grad_estimator.gradient(theta, rng)

        kick(p, state.force, half)
        drift(theta, p, half)
        ou_exact(p, state.xi, A * T, half, rng)
        kinetic = float(p @ p)
        xi = thermostat(state.xi, p, half, mu, T, kinetic)
        if grad_estimator.noise_scale > 0.0:
            p = self._c_step(state, grad_estimator, theta, p, rng)
        pp = float(p @ p)
        kinetic += pp
        xi = thermostat(xi, p, half, mu, T, pp)
        ou_exact(p, xi, A * T, half, rng)
        drift(theta, p, half)
        if self.sigma_estimate == "lagged":
            state.grads_prev = state.grads
        state.force, state.grads = grad_estimator.gradient(theta, rng)
        kick(p, state.force, half)

        state.p, state.xi = p, xi
        state.n_steps += 1
        return state, ThermostatInfo(xi, 0.5 * kinetic / p.size)
