"""Gradient-based adaptive MALA and random-walk Metropolis (Titsias & Dellaportas 2019).

The exact, Metropolis-adjusted samplers of the library: they need the full-data log
posterior and its gradient, learn a proposal covariance ``L L'`` during burn-in, then run
a fixed Metropolis-Hastings kernel whose draws target the posterior exactly.
"""

import math

import numpy as np

from ._gad_common import GadSampler, metropolis_accept


class GadMALA(GadSampler):
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

    Parameters
    ----------
    target_accept : float, default=0.55
        The average acceptance probability ``alpha*`` that ``beta`` steers to; the paper
        uses 0.55 for MALA.
    learning_rate : float, default=1.5e-4
        RMSprop's baseline rate ``eta``: ``rho_t = eta / (1 + sqrt(G_t))`` (section 2.1).
        The value of the paper's experiments; it lowers it to 1e-5 for P = 785. Since an
        RMSprop step moves each entry of ``L`` by at most a few ``eta``, the burn-in must be
        long enough for ``L`` to reach the posterior's scale from ``init_scale``: about
        ``scale / (3 eta)`` iterations (standardised features help).
    cholesky : {"full", "diag"}, default="full"
        ``"full"`` adapts a lower-triangular ``L`` (any correlation, O(P^2) per iteration),
        ``"diag"`` a diagonal one (O(P)).
    init_scale : float, "auto" or None, default=None
        Initial ``L = init_scale * I``. None uses the paper's ``0.1 / sqrt(P)``. ``"auto"``
        uses ``1.65 P^(-1/6) / sqrt(lambda_max)``, the optimal isotropic MALA scale
        (Roberts & Rosenthal 1998) for the stiffest direction of the posterior at the
        initial point, found from a few dozen Hessian-vector products: far fewer adapting
        iterations are then needed when the posterior's scale is far from 0.1.
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

    def __init__(self, target_accept=0.55, learning_rate=1.5e-4, cholesky="full", init_scale=None,
                 beta_rate=0.02):
        self.target_accept = target_accept
        self.learning_rate = learning_rate
        self.cholesky = cholesky
        self.init_scale = init_scale
        self.beta_rate = beta_rate

    def _auto_scale_constant(self, n_params):
        return 1.65 * n_params ** (-1.0 / 6.0)

    def _refresh_cache(self, state):
        """``L' grad log pi(x)`` for the current ``x`` and ``L``."""
        L, grad = state.extra["L"], state.extra["grad"]
        state.extra["Lt_grad"] = L.T @ grad if L.ndim == 2 else L * grad

    def step(self, state, target, rng):
        """One gadMALA iteration: propose, adapt ``L`` (burn-in), accept or reject, adapt ``beta``."""
        extra = state.extra
        L = extra["L"]
        full = L.ndim == 2
        x, g_x = state.theta, extra["grad"]
        eps = rng.standard_normal(x.size)
        u = 0.5 * extra["Lt_grad"]
        u += eps
        y = x + (L @ u if full else L * u)
        log_p_y, g_y = target.log_posterior_and_grad(y)
        Lt_g_y = L.T @ g_y if full else L * g_y
        d = 0.5 * Lt_g_y
        d += u
        log_ratio = float(log_p_y - extra["log_p"] - 0.5 * (d @ d - eps @ eps))
        accepted = metropolis_accept(log_ratio, rng)
        adapting = extra["adapting"]
        self._record(state, log_ratio, accepted)
        if adapting:
            if -math.inf < log_ratio < 0.0:
                # b = u - L'g_y / 2 = L'(g_x - g_y) / 2 + epsilon, reusing both cached products.
                b = 0.5 * Lt_g_y
                np.subtract(u, b, out=b)
                self._adapt(state, -0.5 * (g_x - g_y), b)
            else:
                self._adapt(state, None, None)
            self._update_beta(state, accepted)
        if accepted:
            state.theta = y
            extra["log_p"] = float(log_p_y)
            extra["grad"] = g_y
            extra["Lt_grad"] = Lt_g_y
        if adapting:
            # L has moved: the cached L' grad log pi(x) is stale whether or not y was taken.
            self._refresh_cache(state)
        return state


class GadRWM(GadSampler):
    """Gradient-based adaptive random-walk Metropolis (gadRWM).

    Proposal ``y = x + L epsilon``, ``epsilon ~ N(0, I)`` (Titsias & Dellaportas 2019,
    section 2.2), symmetric, so the M-H log ratio is ``log pi(y) - log pi(x)``. During
    burn-in ``L`` ascends the lower bound of eq. 7 by RMSprop, with the one-sample
    gradient::

        [grad log pi(y) epsilon']_lower + beta diag(1 / L_ii)   if log pi(y) < log pi(x)
        beta diag(1 / L_ii)                                     otherwise

    and ``beta`` steers the acceptance rate to ``target_accept`` (Algorithm 1). The
    gradient of the target is used by the adaptation only; after burn-in an iteration is
    one product ``L epsilon``, O(P^2).

    Parameters
    ----------
    target_accept : float, default=0.25
        ``alpha*``; about 1/4 is optimal for random-walk proposals (section 2).
    learning_rate : float, default=5e-5
        RMSprop's baseline rate ``eta`` (section 4.2's value for gadRWM).
    cholesky : {"full", "diag"}, default="full"
    init_scale : float, "auto" or None, default=None
        Initial ``L = init_scale * I``; None uses ``0.1 / sqrt(P)``; ``"auto"`` uses
        ``2.38 / sqrt(P lambda_max)``, the optimal isotropic random-walk scale (Roberts,
        Gelman & Gilks 1997) for the stiffest direction at the initial point.
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

    def __init__(self, target_accept=0.25, learning_rate=5e-5, cholesky="full", init_scale=None,
                 beta_rate=0.02):
        self.target_accept = target_accept
        self.learning_rate = learning_rate
        self.cholesky = cholesky
        self.init_scale = init_scale
        self.beta_rate = beta_rate

    def _auto_scale_constant(self, n_params):
        return 2.38 / math.sqrt(n_params)

    def step(self, state, target, rng):
        """One gadRWM iteration: propose, adapt ``L`` (burn-in), accept or reject, adapt ``beta``."""
        extra = state.extra
        L = extra["L"]
        x = state.theta
        eps = rng.standard_normal(x.size)
        y = x + (L @ eps if L.ndim == 2 else L * eps)
        log_p_y, g_y = target.log_posterior_and_grad(y)
        log_ratio = float(log_p_y - extra["log_p"])
        accepted = metropolis_accept(log_ratio, rng)
        adapting = extra["adapting"]
        self._record(state, log_ratio, accepted)
        if adapting:
            if -math.inf < log_ratio < 0.0 and np.isfinite(g_y).all():
                self._adapt(state, g_y, eps)
            else:
                self._adapt(state, None, None)
            self._update_beta(state, accepted)
        if accepted:
            state.theta = y
            extra["log_p"] = float(log_p_y)
            extra["grad"] = g_y
        return state
