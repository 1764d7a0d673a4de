"""Gradient-based adaptive MALA and random-walk Metropolis (Titsias & Dellaportas 2019).

The exact, Metropolis-adjusted samplers of the library: they need the full-data log
posterior and its gradient, learn a proposal covariance ``L L'`` during burn-in, then run
a fixed Metropolis-Hastings kernel whose draws target the posterior exactly.
"""

import math

import numpy as np

from ..models._stacked_posterior import stacked_log_posterior
from ._batched import ChainsState
from ._gad_common import GadSampler, factor_mul, factor_tmul


class _BatchedChains:
    """The batched kernel of the gad samplers, from their ``_propose`` / ``_finish`` halves."""

    #: Batched: the chains' states stay their own (``ChainsState.states``); only theta is
    #: stacked, for the driver's draws and finiteness checks.
    _batch_fields = ("theta",)

    def batched(self, grads):
        """Whether the chains can advance together: full-data gradients of one model whose log
        posterior has a stacked form (:func:`~skbayes_sg.models._stacked_posterior.stacked_log_posterior`)."""
        model = grads.model
        return (
            grads.full and all(e.model is model for e in grads.estimators) and stacked_log_posterior(model) is not None
        )

    def stack_states(self, states):
        """The chains' ``states`` for :meth:`step_batch`, with its work arrays."""
        chains = ChainsState(states, self._batch_fields)
        C = chains.theta.shape[0]
        chains.log_p_y, chains.info = np.empty(C), np.empty((C, 2))
        return chains

    def step_batch(self, chains, grads, rngs):
        """:meth:`step` for a stack of chains: each chain proposes from its own state and
        generator, the log posteriors and gradients of all proposals come from one call
        (:class:`~skbayes_sg.models._stacked_posterior.StackedLogPosterior`, each row
        bit-identical to its own chain's pass),
        and each chain accepts or rejects and adapts as alone."""
        states = chains.states
        C, P = chains.theta.shape
        # Fresh arrays each iteration: an accepting chain keeps its rows as its theta and
        # gradient (views, no copies), and the next iteration must not overwrite them.
        Y, G = np.empty((C, P)), np.empty((C, P))
        proposals = [self._propose(state, rngs[c], Y[c]) for c, state in enumerate(states)]
        log_p, _ = stacked_log_posterior(grads.model)(Y, chains.log_p_y, G)
        for e in grads.estimators:
            e.n_grad_evals += e.n_samples
        info, theta = chains.info, chains.theta
        for c, state in enumerate(states):
            info[c] = self._finish(state, proposals[c], float(log_p[c]), G[c])
            theta[c] = state.theta
        return info


class GadMALA(_BatchedChains, GadSampler):
    """Gradient-based adaptive Metropolis-adjusted Langevin algorithm (gadMALA).

    Proposal (Titsias & Dellaportas 2019, section 2.3)::

        y = x + (1/2) L L' grad log pi(x) + L epsilon,   epsilon ~ N(0, I)

    i.e. ``q(y | x) = N(y | x + (1/2) L L' grad log pi(x), L L')``, accepted with the
    Metropolis-Hastings probability (eq. 1). With ``d = (1/2) L' [grad log pi(x) +
    grad log pi(y)] + epsilon``, ``log q(x | y) - log q(y | x) = -(|d|^2 - |epsilon|^2) / 2``.

    During burn-in ``L`` ascends the reparametrised lower bound ``F_L`` of the generalised
    speed measure (eq. 3-6) by one RMSprop step per iteration, from rejected proposals too
    (Algorithm 1). This is the fast variant (gadMALAf): ``grad log pi(y)`` is treated as
    constant in ``L``, so the gradient of the M-H log ratio, when that ratio is negative,
    is the outer product (supplement B)::

        -(1/2) (g_x - g_y) ((1/2) L' (g_x - g_y) + epsilon)'   (lower triangle kept)

    plus ``beta diag(1 / L_ii)`` from the entropy ``beta log|L|``. The entropy weight
    follows ``beta <- beta (1 + rho_beta (alpha_t - target_accept))`` with ``alpha_t`` the
    0 / 1 acceptance of the step. Adaptation stops when burn-in ends
    (:meth:`end_adaptation`); then ``L`` is fixed and an iteration costs one gradient
    evaluation and two triangular products, ``L u`` and ``L' grad log pi(y)``, O(P^2): the
    gradient and ``L' grad log pi(x)`` of the current state are cached.

    By default (``init_scale="map"``) the proposal starts from the curvature at the MAP
    (:meth:`fix_initial_factor`, which the estimators call with the MAP wherever the chains
    start, but for the DRBM's random starts): ``L = c(P) L0`` with ``L0 L0' = H^-1``, the MALA proposal that accepts
    ``target_accept`` on the Laplace approximation, and the adaptation refines ``M`` in ``L = L0 M`` (see
    :class:`~._gad_common.GadSampler`). The proposal is then right in scale and correlation
    from the first iteration, whatever the units of the features; the estimators start the
    chains at draws of that Laplace approximation and adapt for 5% of the run
    (``burn_in="auto"``: 250 iterations of the first 5,000 with ``n_iter="auto"``). While
    adapting, an iteration costs two more triangular products (``L0 (M u)`` and
    ``M' (L0' g)``).

    Parameters
    ----------
    target_accept : float, default=0.55
        The average acceptance probability ``alpha*`` that ``beta`` steers to; the paper
        uses 0.55 for MALA.
    learning_rate : float, default=1.5e-4
        RMSprop's baseline rate ``eta``: ``rho_t = eta / (1 + sqrt(G_t))`` (section 2.1),
        the value of the paper's experiments (it lowers it to 1e-5 for P = 785). An RMSprop
        step moves each entry of the adapted factor by at most a few ``eta``, in that
        factor's units: posterior sds with ``init_scale="map"`` (``M``, which starts at
        ``c(P) ~ 1``), so the adaptation refines the start by up to ~10% per 1,000
        iterations; theta's units otherwise, where the burn-in must be long enough for ``L``
        to grow from its start to the posterior's scale, about ``scale / (3 eta)``
        iterations.
    cholesky : {"full", "diag"}, default="full"
        ``"full"`` adapts a lower-triangular ``L`` (any correlation, O(P^2) per iteration),
        ``"diag"`` a diagonal one (O(P)). A diagonal proposal mixes slowly on strongly
        correlated posteriors (unscaled features with non-zero means, whose weights are
        correlated with the intercept): use ``"full"`` there.
    init_scale : "map", "auto", float or None, default="map"
        The initial proposal. ``"map"``: ``L = c(P) L0``, with ``c(P)`` the scale at which
        MALA on a standard Gaussian in P dimensions accepts ``target_accept``
        (:func:`~._gad_common.gaussian_scale`: 1.03 to 1.06 times Roberts & Rosenthal's
        (1998) asymptotic optimum ``1.65 P^(-1/6)``, which accepts 0.574 as P grows but more
        at finite P), so that the proposal starts at the target acceptance on the Laplace
        approximation, and ``L0`` the Cholesky factor of the inverse Hessian of the negative log posterior at the
        MAP under the estimators' ``init="map"``, at the chain's start otherwise
        (:func:`~skbayes_sg.preconditioning.curvature_factor`): dense up to
        :data:`~skbayes_sg.preconditioning.MAX_DENSE_PARAMS` parameters, its diagonal
        ``H_jj^(-1/2)`` beyond and with ``cholesky="diag"``, where ``c(P)`` is multiplied by
        ``(P / tr(R^3))^(1/6)`` for the correlations ``R = L0 H L0`` the diagonal leaves.
        The diagonal floor is then 1/20 of each coordinate's start. None: the paper's
        ``L = 0.1 / sqrt(P) I`` (section 4.2), with which the paper's tables are
        reproduced (``benchmarks/gadmala.py``). ``"auto"``: ``L = c(P) / sqrt(lambda_max) I``
        for the stiffest direction at the start (a few dozen Hessian-vector products). A
        number: ``L = init_scale I``.
    beta_rate : float, default=0.02
        ``rho_beta`` of the ``beta`` update (Algorithm 1).

    See Also
    --------
    GadRWM : the random-walk variant (no gradient in the proposal).

    Notes
    -----
    The diagonal of ``L`` is kept above 1/20 of its initial value and ``beta`` above
    1e-4, as in the authors' released code, so that ``L`` stays a valid Cholesky factor.
    The fit loop must call :meth:`end_adaptation` when burn-in ends; driven by hand,
    call it yourself before collecting draws.

    On full data of a one-output GLM held in memory the estimators advance a fit's chains
    together (:meth:`step_batch`): each chain proposes from its own state, one call
    evaluates the log posterior and gradient at every proposal, each chain's row bit-identical to its own
    full-data pass, and each chain accepts and adapts as alone. The draws are those of the
    chains run one at a time, whatever ``n_jobs``.

    ``init_scale="map"`` takes the curvature at the point given to
    :meth:`fix_initial_factor`: the estimators give the MAP under ``init="map"`` (the
    default), ``"zeros"`` and given starts alike, so that the proposal does not depend on
    where a chain starts. Driven by hand without it, the curvature is taken at each chain's
    start, which the adaptation can correct only by some 10% per 1,000 iterations at the
    default ``learning_rate``: on australian credit (standardised) chains from zeros with
    the curvature there reached a min bulk ESS of 234 in 20,000 kept iterations, against
    3,885 with the MAP's (issue 30).

    References
    ----------
    .. [1] Titsias, M. K. and Dellaportas, P. (2019). Gradient-based adaptive Markov chain
       Monte Carlo. *Advances in Neural Information Processing Systems 32*.

    Examples
    --------
    >>> from skbayes_sg import SGBayesLogisticRegression
    >>> from skbayes_sg.samplers import GadMALA
    >>> clf = SGBayesLogisticRegression(sampler=GadMALA(), batch_size=None)
    """

    def __init__(self, target_accept=0.55, learning_rate=1.5e-4, cholesky="full", init_scale="map", beta_rate=0.02):
        self.target_accept = target_accept
        self.learning_rate = learning_rate
        self.cholesky = cholesky
        self.init_scale = init_scale
        self.beta_rate = beta_rate

    @staticmethod
    def _coordinate_log_ratio(c, x, e):
        """``log pi(y) + log q(x | y) - log pi(x) - log q(y | x)`` on ``N(0, 1)``, ``h = c^2``:
        ``y = (1 - h/2) x + c e``."""
        h = c * c
        y = (1.0 - 0.5 * h) * x + c * e
        back = x - (1.0 - 0.5 * h) * y
        return 0.5 * (x * x - y * y) - back * back / (2.0 * h) + 0.5 * e * e

    @staticmethod
    def _asymptotic_scale(n_params):
        """``1.65 P^(-1/6)``: MALA's optimal ``sqrt(h)`` on a standard Gaussian as P grows,
        acceptance 0.574 (Roberts & Rosenthal 1998)."""
        return 1.65 * n_params ** (-1.0 / 6.0)

    def _correlation_correction(self, curvature, theta, n_params, n_probes=20):
        """``(P / tr(R^3))^(1/6)``: MALA's optimal scale for a Gaussian of curvature ``R``.

        MALA's log acceptance ratio on ``N(0, R^-1)`` is, to leading order, ``-C h^3
        sum_i lambda_i^3`` (Roberts & Rosenthal 1998): the acceptance depends on ``h`` and
        ``R`` through ``h^3 tr(R^3)``, so the ``h = c(P)^2`` optimal at ``R = I`` (``tr = P``)
        becomes ``c(P)^2 (P / tr(R^3))^(1/3)``. ``tr(R^3)`` exactly from the ``P`` columns of
        ``R`` when ``P <= 2 n_probes``; beyond, by Hutchinson's estimator ``mean_k (R v_k)' R
        (R v_k)`` over ``n_probes`` fixed Rademacher vectors (two Hessian-vector products
        each; the sixth root divides its relative error by six).
        """
        if n_params <= 2 * n_probes:
            R = np.column_stack([curvature.hessian_vector_product(theta, e) for e in np.eye(n_params)])
            R = 0.5 * (R + R.T)
            tr3 = float(np.sum(R * (R @ R)))
        else:
            rng = np.random.default_rng(0)
            total = 0.0
            for _ in range(n_probes):
                v = rng.choice((-1.0, 1.0), size=n_params)
                Rv = curvature.hessian_vector_product(theta, v)
                total += float(Rv @ curvature.hessian_vector_product(theta, Rv))
            tr3 = total / n_probes
        return (n_params / tr3) ** (1.0 / 6.0) if np.isfinite(tr3) and tr3 > 0 else 1.0

    def _refresh_cache(self, state):
        """``h = (1/2) L' grad log pi(x)`` for the current ``x`` and ``L``; frozen, ``(1/2) L'`` too.

        While adapting, ``(1/2) M' (L0' grad log pi(x))``. Once ``L`` is frozen its half
        transpose is kept contiguous, so that each iteration's ``(1/2) L' grad log pi(y)`` is
        one matrix-vector product.
        """
        L = state.L
        if state.adapting:
            state.half_Lt_grad = 0.5 * factor_tmul(L, state.w)
        else:
            half_Lt = state.half_Lt = np.ascontiguousarray(0.5 * L.T) if L.ndim == 2 else 0.5 * L
            state.half_Lt_grad = factor_mul(half_Lt, state.grad)

    def step(self, state, grad_estimator, rng):
        """One gadMALA iteration: propose, adapt ``L`` (burn-in), accept or reject, adapt ``beta``."""
        proposal = self._propose(state, rng)
        log_p_y, g_y = grad_estimator.log_posterior_and_grad(proposal[0])
        return state, self._finish(state, proposal, log_p_y, g_y)

    def _propose(self, state, rng, out=None):
        """The proposal ``y = x + L u``, ``u = (1/2) L' grad log pi(x) + epsilon``: ``(y, u, eps_sq, log_u)``;
        ``y`` written into ``out`` if given."""
        eps, eps_sq, log_u = self._noise(state, rng)
        u = state.half_Lt_grad + eps
        L = state.L
        if state.adapting:
            # While adapting with a base factor, L = L0 M is never formed (O(P^3) per change of
            # M): L u = L0 (M u), two triangular products.
            y = np.add(state.theta, factor_mul(state.L0, factor_mul(L, u)), out=out)
        else:
            y = np.matmul(L, u, out=out) if L.ndim == 2 else np.multiply(L, u, out=out)
            y += state.theta
        return y, u, eps_sq, log_u

    def _finish(self, state, proposal, log_p_y, g_y):
        """Accept or reject ``proposal`` given ``log pi(y)`` and its gradient; adapt while
        burning in; return the iteration's info."""
        if state.adapting:
            return self._adapting_finish(state, proposal, log_p_y, g_y)
        # The frozen kernel, most of a fit's iterations: two products with L per iteration
        # and as few other array operations as the M-H ratio needs (on small problems each
        # costs about a tenth of the gradient). With u = h_x + epsilon and y = x + L u,
        # d = h_y + u = (1/2) L' (g_x + g_y) + epsilon.
        y, u, eps_sq, log_u = proposal
        h_y = state.half_Lt @ g_y if state.L.ndim == 2 else state.half_Lt * g_y
        d = h_y + u
        log_ratio = log_p_y - state.log_p - 0.5 * (d @ d - eps_sq)
        accepted = bool(log_u < log_ratio)
        info = self._record(state, log_ratio, accepted)
        if accepted:
            state.theta = y
            state.log_p = log_p_y
            state.grad = state.w = g_y
            state.half_Lt_grad = h_y
        return info

    def _adapting_finish(self, state, proposal, log_p_y, g_y):
        """:meth:`_finish` of a burn-in iteration: with the RMSprop step on ``L`` (``M``) and
        the ``beta`` update of Algorithm 1, and ``L = L0 M`` applied as two factors."""
        y, u, eps_sq, log_u = proposal
        M, L0 = state.L, state.L0
        w_x = state.w
        # L' g = M' (L0' g), and L0' g is what the adaptation uses.
        w_y = factor_tmul(L0, g_y)
        h_y = 0.5 * factor_tmul(M, w_y)
        d = h_y + u
        log_ratio = log_p_y - state.log_p - 0.5 * (d @ d - eps_sq)
        accepted = bool(log_u < log_ratio)
        info = self._record(state, log_ratio, accepted)
        if -math.inf < log_ratio < 0.0:
            # b = u - L'g_y / 2 = L'(g_x - g_y) / 2 + epsilon, reusing both cached products;
            # a = -(g_x - g_y) / 2 in M's coordinates, L0' a.
            np.subtract(u, h_y, out=h_y)
            self._adapt(state, -0.5 * (w_x - w_y), h_y)
        else:
            self._adapt(state, None, None)
        self._update_beta(state, accepted)
        if accepted:
            state.theta = y
            state.log_p = log_p_y
            state.grad = g_y
            state.w = w_y
        # L has moved: the cached L' grad log pi(x) is stale whether or not y was taken.
        self._refresh_cache(state)
        return info


class GadRWM(_BatchedChains, GadSampler):
    """Gradient-based adaptive random-walk Metropolis (gadRWM).

    Proposal ``y = x + L epsilon``, ``epsilon ~ N(0, I)`` (Titsias & Dellaportas 2019,
    section 2.2), symmetric, so the M-H log ratio is ``log pi(y) - log pi(x)``. During
    burn-in ``L`` ascends the lower bound of eq. 7 by RMSprop, with the one-sample
    gradient::

        [grad log pi(y) epsilon']_lower + beta diag(1 / L_ii)   if log pi(y) < log pi(x)
        beta diag(1 / L_ii)                                     otherwise

    and ``beta`` steers the acceptance rate to ``target_accept`` (Algorithm 1). The
    gradient of the log posterior is used by the adaptation only; after burn-in an iteration is
    one product ``L epsilon``, O(P^2).

    Parameters
    ----------
    target_accept : float, default=0.25
        ``alpha*``; about 1/4 is optimal for random-walk proposals (section 2).
    learning_rate : float, default=5e-5
        RMSprop's baseline rate ``eta`` (section 4.2's value for gadRWM), in the units of
        the adapted factor (see :class:`GadMALA`).
    cholesky : {"full", "diag"}, default="full"
    init_scale : "map", "auto", float or None, default="map"
        ``"map"``: ``L = c(P) L0``, ``c(P)`` the scale at which the random walk on a
        standard Gaussian accepts ``target_accept`` (near the optimal ``2.38 / sqrt(P)``,
        Roberts, Gelman & Gilks 1997, which accepts 0.234 as P grows) and ``L0 L0' = H^-1``
        at the MAP, as for :class:`GadMALA` (with a diagonal ``L0``, ``c(P)`` needs no
        correction: the random walk's acceptance depends on ``h tr(R) = h P``). None: the
        paper's ``0.1 / sqrt(P) I``. ``"auto"``: ``c(P) / sqrt(lambda_max) I``, for the
        stiffest direction at the start. A number: ``L = init_scale I``.
    beta_rate : float, default=0.02
        ``rho_beta`` of the ``beta`` update.

    See Also
    --------
    GadMALA : the Langevin variant, usually far more efficient per gradient evaluation.

    References
    ----------
    .. [1] Titsias, M. K. and Dellaportas, P. (2019). Gradient-based adaptive Markov chain
       Monte Carlo. *Advances in Neural Information Processing Systems 32*.

    Examples
    --------
    >>> from skbayes_sg import SGBayesLinearRegression
    >>> from skbayes_sg.samplers import GadRWM
    >>> reg = SGBayesLinearRegression(sampler=GadRWM(), batch_size=None)
    """

    def __init__(self, target_accept=0.25, learning_rate=5e-5, cholesky="full", init_scale="map", beta_rate=0.02):
        self.target_accept = target_accept
        self.learning_rate = learning_rate
        self.cholesky = cholesky
        self.init_scale = init_scale
        self.beta_rate = beta_rate

    @staticmethod
    def _coordinate_log_ratio(c, x, e):
        """``log pi(y) - log pi(x)`` on ``N(0, 1)`` for ``y = x + c e``."""
        y = x + c * e
        return 0.5 * (x * x - y * y)

    @staticmethod
    def _asymptotic_scale(n_params):
        """``2.38 / sqrt(P)``: the optimal random-walk scale on a standard Gaussian as P
        grows, acceptance 0.234 (Roberts, Gelman & Gilks 1997)."""
        return 2.38 / math.sqrt(n_params)

    def step(self, state, grad_estimator, rng):
        """One gadRWM iteration: propose, adapt ``L`` (burn-in), accept or reject, adapt ``beta``."""
        proposal = self._propose(state, rng)
        log_p_y, g_y = grad_estimator.log_posterior_and_grad(proposal[0])
        return state, self._finish(state, proposal, log_p_y, g_y)

    def _propose(self, state, rng, out=None):
        """The proposal ``y = x + L epsilon`` (into ``out`` if given): ``(y, epsilon, log_u)``."""
        eps, _, log_u = self._noise(state, rng)
        y = np.add(state.theta, factor_mul(state.L0, factor_mul(state.L, eps)), out=out)
        return y, eps, log_u

    def _finish(self, state, proposal, log_p_y, g_y):
        """Accept or reject ``proposal`` given ``log pi(y)`` and its gradient; adapt while
        burning in; return the iteration's info."""
        y, eps, log_u = proposal
        log_ratio = log_p_y - state.log_p
        accepted = bool(log_u < log_ratio)
        adapting = state.adapting
        info = self._record(state, log_ratio, accepted)
        if adapting:
            if -math.inf < log_ratio < 0.0 and np.isfinite(g_y).all():
                # a = grad log pi(y) in M's coordinates, L0' grad log pi(y).
                self._adapt(state, factor_tmul(state.L0, g_y), eps)
            else:
                self._adapt(state, None, None)
            self._update_beta(state, accepted)
        if accepted:
            state.theta = y
            state.log_p = log_p_y
            state.grad = g_y
        return info
