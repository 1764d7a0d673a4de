"""What gadMALA and gadRWM share: the Cholesky factor L, its RMSprop ascent, beta, counters.

Titsias & Dellaportas (2019), "Gradient-based adaptive Markov chain Monte Carlo",
NeurIPS; section and equation numbers below refer to that paper. Both samplers propose
with a Gaussian whose covariance is ``L L'`` and, during burn-in only, take one stochastic
gradient step per iteration on ``L`` towards the maximum of the generalised speed
measure's lower bound (eq. 5-6, Algorithm 1), then a multiplicative step on the entropy
weight ``beta`` that steers the acceptance rate to ``target_accept``.

``L`` is stored as a dense lower-triangular (P, P) array (``cholesky="full"``) or as its
diagonal (P,) (``cholesky="diag"``); every product with it is then a matrix-vector
product, O(P^2), or an elementwise one, O(P).

With ``init_scale="map"`` (the default) the proposal starts from the curvature at the
MAP (:meth:`GadSampler.fix_initial_factor`, which the estimators call whatever the chains'
start) or, driven by hand without it, at the chain's start: ``L = L0 M`` with ``L0 L0'
= H^-1`` fixed (``H`` the Hessian of the negative log posterior there) and ``M``, which
starts at ``c(P) I``, adapted. The speed measure's optimum is the same in any
parametrisation of ``L`` (``log|L| = log|L0| + log|M|``), so this changes only the
optimiser's coordinates: RMSprop's steps, absolute in the units of what it adapts, are
steps in posterior standard deviations, whatever the problem's scale.
"""

import functools
import math

import numpy as np
from scipy.optimize import brentq
from sklearn.utils._param_validation import StrOptions

from .. import preconditioning
from ..preconditioning import curvature_factor, resolve_preconditioner
from ._base import OPEN_UNIT_INTERVAL, POSITIVE, BaseSampler
from ._state import GadState, MetropolisInfo, compose
from ._step_size import largest_curvature

#: Decay of RMSprop's running mean of squared gradients (section 2.1: G_t = 0.9 G_{t-1} + 0.1 g^2).
_RMS_DECAY = 0.9
#: Lower bound on beta: the authors' released code keeps beta above 1e-4 so that a long run of
#: rejections cannot drive the entropy weight to zero, after which L could only shrink.
_BETA_FLOOR = 1e-4
#: Upper bound on beta, against overflow only: while proposals are accepted more often than
#: ``target_accept``, beta grows geometrically (by up to 1 + rho_beta per iteration); the
#: RMSprop-normalised step on L is the same for any beta that large.
_BETA_CEIL = 1e100
#: Lower bound on each diagonal entry of the adapted factor, as a fraction of its initial
#: value. The released code clips the diagonal at 1e-3 for a start of 0.1 / sqrt(P) (1 / 20
#: of it at P = 25). With ``init_scale="map"`` the adapted factor is ``M`` in ``L = L0 M``, so
#: the floor on ``L_ii = L0_ii M_ii`` is 1 / 20 of each coordinate's own start: relative to the
#: posterior's scale, not to 0.1 / sqrt(P), and L stays positive definite at any scale.
_DIAG_FLOOR_FRACTION = 0.05

#: Iterations whose randomness (the proposal's ``epsilon`` and the M-H uniform) one call to
#: the generator draws, at most ``_NOISE_FLOATS`` floats: a call costs about a microsecond
#: whatever its size, as much as the rest of a frozen gadMALA iteration's arithmetic on a
#: small posterior, and reading a row of the block costs a tenth of that.
_NOISE_ROWS = 256
_NOISE_FLOATS = 2**16

#: Draws of the pair of chi-square variables from which the acceptance rate of the proposal
#: on a standard Gaussian is computed (:func:`gaussian_scale`); fixed, so that the same
#: ``(P, target_accept)`` always give the same scale. The acceptance is then within 0.003
#: of its exact value, the scale within 0.5%, and solving for it takes 2 ms.
_REFERENCE_DRAWS = 2**15

CHOLESKY_KINDS = ("full", "diag")
#: The string values of ``init_scale``.
INIT_SCALES = ("map", "auto")


def factor_mul(F, v):
    """``F v`` for a lower-triangular (P, P) or diagonal (P,) factor ``F``; ``v`` if F is None."""
    if F is None:
        return v
    return F @ v if F.ndim == 2 else F * v


def factor_tmul(F, v):
    """``F' v``, as :func:`factor_mul`."""
    if F is None:
        return v
    return F.T @ v if F.ndim == 2 else F * v


def _has_closed_form_diagonal(model):
    """Whether ``model`` overrides :meth:`Model.hessian_diagonal` (whose default forms the dense Hessian)."""
    from ..models import Model

    return type(model).hessian_diagonal is not Model.hessian_diagonal


class _DiagonallyScaled:
    """The curvature of the posterior in ``z = theta / d``: ``v -> d H (d v)``."""

    def __init__(self, model, d):
        self.model, self.d = model, d

    def hessian_vector_product(self, theta, v, eps=None):
        return self.d * self.model.hessian_vector_product(theta, self.d * v)


def gaussian_acceptance(sampler_cls, c, chi2):
    """Mean acceptance of ``sampler_cls``'s proposal with ``L = c I`` on ``N(0, I_P)`` at stationarity.

    The M-H log ratio is a sum over coordinates of the same quadratic form in ``(x_i,
    epsilon_i)``, independent standard normals: with ``A`` its 2 x 2 matrix and ``lambda_1,
    lambda_2`` the eigenvalues of ``A``, it is ``lambda_1 C_1 + lambda_2 C_2`` for independent
    ``C_1, C_2 ~ chi^2_P``, whatever P. ``chi2`` holds draws of ``(C_1, C_2)``, shape (2, n).
    """
    q = functools.partial(sampler_cls._coordinate_log_ratio, c)
    a11, a22 = q(1.0, 0.0), q(0.0, 1.0)
    a12 = 0.5 * (q(1.0, 1.0) - a11 - a22)
    lam = np.linalg.eigvalsh(np.array([[a11, a12], [a12, a22]]))
    return float(np.mean(np.exp(np.minimum(lam[0] * chi2[0] + lam[1] * chi2[1], 0.0))))


@functools.lru_cache(maxsize=256)
def gaussian_scale(sampler_cls, n_params, target_accept):
    """The ``c`` at which ``sampler_cls``'s proposal ``L = c I`` accepts ``target_accept`` on ``N(0, I_P)``.

    The asymptotic optima (MALA's ``1.65 P^(-1/6)``, acceptance 0.574, Roberts & Rosenthal
    1998; RWM's ``2.38 / sqrt(P)``, 0.234, Roberts, Gelman & Gilks 1997) accept more at
    finite P (MALA: 0.615 at P = 3, 0.583 at P = 14), and the paper's targets are 0.55 and
    0.25: at the scale found here, the proposal ``c L0`` starts at the target acceptance
    on the Laplace approximation, and a short adaptation has no scale left to correct on a
    near-Gaussian posterior. Root of :func:`gaussian_acceptance` (decreasing in ``c``) with
    fixed chi-square draws.
    """
    chi2 = np.random.default_rng(0).chisquare(n_params, size=(2, _REFERENCE_DRAWS))
    c0 = sampler_cls._asymptotic_scale(n_params)

    def excess(c):
        return gaussian_acceptance(sampler_cls, c, chi2) - target_accept

    lo, hi = c0 / 8.0, c0 * 2.0
    while excess(hi) > 0.0:
        hi *= 2.0
    return float(brentq(excess, lo, hi, xtol=1e-4 * c0))


class GadSampler(BaseSampler):
    """Base of the gradient-based adaptive Metropolis samplers (Titsias & Dellaportas 2019).

    Holds what gadMALA and gadRWM share: hyperparameter checks, the initial state (``L``
    from the curvature at the start, or at ``init_scale`` times the identity; ``beta =
    1``), the RMSprop step on ``L`` and the ``beta`` update of Algorithm 1, the end of
    adaptation, and the acceptance counters. Subclasses implement :meth:`step` and
    :meth:`_optimal_scale` (``c(P)``).

    The step size ``h`` of the other samplers does not apply: the scale of the proposal is
    in ``L``. :meth:`resolve_step_size` returns NaN, which the estimator reports as
    ``diagnostics_["step_size"]``.

    Adaptation runs from :meth:`init_state` until :meth:`end_adaptation` (called by the fit
    loop once burn-in is over); from then on ``L`` and ``beta`` are frozen and every
    iteration is a step of one fixed Metropolis-Hastings kernel that leaves the posterior
    invariant.

    The proposal factor is ``L = L0 M``. ``L0`` is fixed: the Cholesky factor of ``H^-1`` at
    the start with ``init_scale="map"`` (dense up to
    :data:`~skbayes_sg.preconditioning.MAX_DENSE_PARAMS` parameters with
    ``cholesky="full"``, its diagonal ``H_jj^(-1/2)`` beyond and with ``cholesky="diag"``),
    the identity otherwise. ``M`` is what the RMSprop ascent adapts, in the state's ``L``;
    its ``L0`` holds ``L0`` (None for the identity). Adapting ``M`` is adapting ``L``
    in the coordinates ``z = L0^-1 theta``: the data term of the gradient becomes
    ``[(L0' a) b']_lower`` and the entropy's ``beta diag(1 / M_ii)`` (``log|L| = log|L0| +
    log|M|``). :meth:`end_adaptation` multiplies the two once, so that the frozen kernel
    costs what it costs with the paper's start.
    """

    requires_full_data = True
    state_type = GadState
    info_type = MetropolisInfo
    #: Iterations of adaptation the estimators' ``n_iter="auto"`` gives (its first block
    #: is long enough that its burn-in covers them) when the chains start elsewhere than at
    #: draws of the Laplace approximation (``init="zeros"``, a given start, or a proposal
    #: that does not start from the curvature).
    _min_adaptation = 1000
    #: The same, and the estimators' ``burn_in="auto"``, for chains started at draws of the
    #: Laplace approximation with the proposal from the MAP's curvature (the default): the
    #: proposal then accepts about ``target_accept`` from the first iteration and the
    #: adaptation only refines it; after 250 iterations the acceptance and the ESS per draw
    #: are those of 4,000 (``benchmarks/gadmala.py``, budget part). 250 / 0.05 = 5,000 iterations in the
    #: first block: its 4,750 kept ones give a bulk ESS of 1,000 at an ESS per iteration
    #: of 0.05, a third of the smallest seen (german, 0.15).
    _laplace_min_adaptation = 250
    _laplace_burn_in = 0.05
    #: The estimators' ``max_draws="auto"`` stores every draw (up to a memory budget): with
    #: autocorrelation times of a few iterations, thinning would discard effective samples.
    _store_every_draw = True

    # -- hyperparameters ------------------------------------------------------------
    _parameter_constraints: dict = {
        "target_accept": [OPEN_UNIT_INTERVAL],
        "learning_rate": [POSITIVE],
        "cholesky": [StrOptions(set(CHOLESKY_KINDS))],
        "init_scale": [StrOptions(set(INIT_SCALES)), POSITIVE, None],
        "beta_rate": [POSITIVE],
    }

    def resolve_step_size(self, model, theta0, sigma_max=None, lambda_max=None, scale=1.0):
        """No step size: the proposal's scale is the adapted ``L``. Returns ``(nan, {})``."""
        return float("nan"), {}

    # -- state ----------------------------------------------------------------------------
    @staticmethod
    def _coordinate_log_ratio(c, x, e):
        """One coordinate's term of the M-H log ratio on ``N(0, I)`` with ``L = c I``, from
        ``x`` and the proposal's ``epsilon`` ``e`` (the terms add over coordinates)."""
        raise NotImplementedError

    @staticmethod
    def _asymptotic_scale(n_params):
        """The optimal scale of the proposal on ``N(0, I_P)`` as ``P -> infinity``."""
        raise NotImplementedError

    def _optimal_scale(self, n_params):
        """``c(P)``: the scale of ``L = c I`` at which the proposal accepts ``target_accept``
        on average on a standard Gaussian target in P dimensions (:func:`gaussian_scale`)."""
        return gaussian_scale(type(self), int(n_params), float(self.target_accept))

    def _correlation_correction(self, curvature, theta, n_params):
        """Factor on ``c(P)`` for a Gaussian target whose curvature ``R`` (an object with
        ``hessian_vector_product``) has a unit diagonal but is not the identity; 1 here."""
        return 1.0

    def initial_factor(self, n_params, model=None, theta=None):
        """``(L0, m0)``: the fixed base factor (or None) and the initial ``M = m0 I``.

        ``init_scale="map"``: ``L0`` from the curvature at ``theta``
        (:func:`~skbayes_sg.preconditioning.curvature_factor`, ``L0 L0' = H^-1``) and ``m0 =
        c(P)``, so that the first proposal accepts ``target_accept`` on the Laplace
        approximation at ``theta`` (with a diagonal ``L0``, ``c(P)`` corrected for the
        correlations it leaves, :meth:`_correlation_correction`). A model with more than
        :data:`~skbayes_sg.preconditioning.MAX_DENSE_PARAMS` parameters and no closed-form
        Hessian diagonal starts as with ``"auto"`` instead. None: the paper's ``L = 0.1 /
        sqrt(P) I`` (section 4.2). ``"auto"``: ``c(P) / sqrt(lambda_max)``, ``lambda_max``
        the largest curvature at ``theta`` (a few dozen Hessian-vector products). A number:
        ``L = init_scale I``.
        """
        if self.init_scale is None:
            return None, 0.1 / math.sqrt(n_params)
        if self.init_scale == "map":
            kind = "diag" if self.cholesky == "diag" else resolve_preconditioner("auto", n_params)
            if kind == "diag" and n_params > preconditioning.MAX_DENSE_PARAMS and not _has_closed_form_diagonal(model):
                # Model's default diagonal stacks P Hessian-vector products into a dense (P, P)
                # Hessian: for a DRBM of thousands of weights that is hours of full-data passes
                # and hundreds of MB per chain. The isotropic start of "auto" needs a few dozen.
                return None, self._optimal_scale(n_params) / math.sqrt(largest_curvature(model, theta))
            try:
                L0 = curvature_factor(model, theta, kind)
            except ValueError as err:
                raise ValueError(
                    f"{type(self).__name__}(init_scale='map'): the curvature at the chain's start is "
                    "not finite; start elsewhere (init), or use init_scale='auto' or None."
                ) from err
            scale = self._optimal_scale(n_params)
            if L0.ndim == 1:
                # A diagonal L0 whitens the scales but leaves the correlations: in z =
                # theta / L0 the curvature R = L0 H L0 has a unit diagonal, not unit
                # eigenvalues (unscaled features, or a column of ones next to features with
                # non-zero means, give eigenvalues from 0.01 to 20), and c(P) is optimal only
                # for R = I.
                scale *= self._correlation_correction(_DiagonallyScaled(model, L0), theta, n_params)
            return L0, scale
        if self.init_scale == "auto":
            lam = largest_curvature(model, theta)
            return None, self._optimal_scale(n_params) / math.sqrt(lam)
        return None, float(self.init_scale)

    def fix_initial_factor(self, model, theta):
        """The initial factor of the curvature at ``theta``, for every chain of a fit.

        The estimators call it with the MAP when their chains start at draws of the Laplace
        approximation around it (``init="map"``) and pass the result to the chains'
        :meth:`init_state` as ``FitContext.initial_factor``: the proposal of every chain
        then starts from the MAP's curvature, not from that at its own start, and the
        Hessian and its Cholesky factor are computed once per fit instead of once per chain.

        Returns
        -------
        (L0, m0) : tuple
            As :meth:`initial_factor`; ``L0`` is None unless ``init_scale="map"``.
        """
        return self.initial_factor(np.size(theta), model, np.asarray(theta, dtype=float))

    def init_state(self, theta0, grad_estimator, rng, context=None):
        """State at ``theta0``: ``L = L0 M`` with ``M = m0 I`` (:meth:`initial_factor`), ``beta = 1``.

        ``L0`` and ``m0`` are ``context.initial_factor`` when the fit fixed one for every chain
        (:meth:`fix_initial_factor`), else taken at ``theta0`` from the curvature of
        ``context.model`` (a :class:`~._step_size.FitContext`; needed unless ``init_scale`` is
        None or a number).
        Evaluates the full-data log posterior and its gradient at ``theta0`` once; both are
        cached in the state and refreshed only when a proposal is accepted.
        """
        theta = np.array(theta0, dtype=float)
        n = theta.size
        fixed = None if context is None else context.initial_factor
        if fixed is None:
            model = None if context is None else context.model
            if model is None and isinstance(self.init_scale, str):
                raise ValueError(
                    f"{type(self).__name__}(init_scale={self.init_scale!r}).init_state needs the "
                    "posterior's curvature: pass context=FitContext(model), or "
                    "FitContext(initial_factor=sampler.fix_initial_factor(model, theta))."
                )
            fixed = self.initial_factor(n, model, theta)
        L0, scale = fixed
        full = self.cholesky == "full"
        L = scale * np.eye(n) if full else np.full(n, scale)
        log_p, grad = grad_estimator.log_posterior_and_grad(theta)
        grad = np.array(grad, dtype=float)
        state = GadState(
            theta=theta,
            L=L,
            L0=L0,
            beta=1.0,
            G=np.zeros_like(L),
            n_rms=0,
            diag_floor=_DIAG_FLOOR_FRACTION * scale,
            log_p=float(log_p),
            grad=grad,
            # The gradient in the coordinates M acts in, L0' grad log pi(x).
            w=factor_tmul(L0, grad),
            adapting=True,
            # Randomness of the next iterations, drawn by blocks (_noise); empty until the first.
            noise=np.empty((0, n)),
            noise_i=0,
            # Work arrays of the adaptation, allocated once per chain.
            buf=np.empty_like(L),
            tmp=np.empty_like(L),
            tril=np.tri(n) if full else None,
        )
        self._refresh_cache(state)
        return state

    def _refresh_cache(self, state):
        """Recompute what depends on ``L`` and the current state (nothing for gadRWM)."""

    def end_adaptation(self, state):
        """Freeze ``L`` and ``beta``: from now on the chain is a fixed MH kernel.

        Called by the fit loop once, before the first iteration after burn-in (and at the
        start of a ``warm_start`` continuation, where it changes nothing). ``L = L0 M`` is
        formed once (one triangular matrix product) and the RMSprop buffers are dropped.
        """
        if state.adapting:
            state.adapting = False
            state.L = compose(state.L0, state.L)
            state.L0 = None
            state.w = state.grad
            state.G = state.buf = state.tmp = state.tril = None
            self._refresh_cache(state)
        return state

    # -- adaptation (Algorithm 1) ----------------------------------------------------
    def _ascend(self, state, grad_L, diag_only):
        """One RMSprop ascent step on ``L`` along ``grad_L`` (section 2.1), in place.

        ``rho_t = eta / (1 + sqrt(G_t))`` elementwise, ``G_t = 0.9 G_{t-1} + 0.1 g_t^2``;
        the first step sets ``G_1 = g_1^2`` as in the authors' code. ``diag_only`` says
        that ``grad_L`` (full case) is zero off the diagonal, where only the decay of ``G``
        is then needed. The diagonal is kept above a floor so that ``L`` stays a Cholesky
        factor.
        """
        L, G = state.L, state.G
        eta = self.learning_rate
        first = state.n_rms == 0
        state.n_rms += 1
        if L.ndim == 1 or not diag_only:
            tmp = state.tmp
            np.square(grad_L, out=tmp)
            if first:
                G[...] = tmp
            else:
                G *= _RMS_DECAY
                tmp *= 1.0 - _RMS_DECAY
                G += tmp
            np.sqrt(G, out=tmp)
            tmp += 1.0
            np.divide(grad_L, tmp, out=tmp)
            tmp *= eta
            L += tmp
            Ld = L if L.ndim == 1 else L.reshape(-1)[:: L.shape[0] + 1]
        else:
            n = L.shape[0]
            Ld = L.reshape(-1)[:: n + 1]
            Gd = G.reshape(-1)[:: n + 1]
            g2 = grad_L * grad_L
            if first:
                G[...] = 0.0
                Gd[...] = g2
            else:
                G *= _RMS_DECAY
                Gd += (1.0 - _RMS_DECAY) * g2
            Ld += eta * grad_L / (1.0 + np.sqrt(Gd))
        np.maximum(Ld, state.diag_floor, out=Ld)

    def _adapt(self, state, a, b):
        """Ascend ``F_L`` along its one-sample gradient ``[a b']_lower + beta diag(1 / L_ii)``.

        The first term is the gradient of the M-H log ratio, present only when that ratio
        is negative (the ReLU-like ``min{0, .}`` of eq. 6); pass ``a = None`` otherwise.
        gadRWM has ``a = grad log pi(y)``, ``b = epsilon`` (section 2.2); gadMALA has
        ``a = -(grad log pi(x) - grad log pi(y)) / 2``,
        ``b = L' (grad log pi(x) - grad log pi(y)) / 2 + epsilon`` (supplement B). With
        ``cholesky="diag"`` only the diagonal of the outer product is kept.

        With a base factor ``L0`` (``L = L0 M``, ``M`` adapted) the caller passes ``a`` in
        ``M``'s coordinates, ``L0' a``: by the chain rule ``dF / dM = L0' (dF / dL)``, whose
        lower triangle is ``[(L0' a) b']_lower`` because ``L0`` is lower triangular; and
        ``log|L| = log|L0| + sum log M_ii`` gives the entropy term ``beta diag(1 / M_ii)``.
        """
        L = state.L
        entropy = self._entropy_gradient(state)
        if a is None:
            self._ascend(state, entropy, diag_only=True)
            return
        buf = state.buf
        if L.ndim == 1:
            np.multiply(a, b, out=buf)
            buf += entropy
        else:
            np.multiply.outer(a, b, out=buf)
            buf *= state.tril
            buf.reshape(-1)[:: L.shape[0] + 1] += entropy
        self._ascend(state, buf, diag_only=False)

    def _entropy_gradient(self, state):
        """``beta * diag(1 / L_11, ..., 1 / L_PP)``: gradient of ``beta log|L|`` (eq. 7), as (P,)."""
        L = state.L
        Ld = L if L.ndim == 1 else L.diagonal()
        return state.beta / Ld

    def _update_beta(self, state, accepted):
        """``beta <- beta (1 + rho_beta (alpha_t - alpha*))`` (Algorithm 1), kept in [1e-4, 1e100]."""
        beta = state.beta * (1.0 + self.beta_rate * (accepted - self.target_accept))
        state.beta = min(max(beta, _BETA_FLOOR), _BETA_CEIL)

    # -- randomness -------------------------------------------------------------------
    def _noise(self, state, rng):
        """``(epsilon, |epsilon|^2, log u)`` of this iteration: ``epsilon ~ N(0, I)``, ``u ~ U(0, 1)``.

        Drawn by blocks of iterations (``_NOISE_ROWS``), kept in the state: the draws are
        those of the chain's own generator in a fixed order, so they do not depend on how
        the run is cut into calls (progress chunks, ``n_iter="auto"``'s blocks, a
        continued fit). Accepting when ``log u < log r`` is accepting with probability
        ``min(1, r)``; a NaN ratio rejects.
        """
        i = state.noise_i
        E = state.noise
        if i == E.shape[0]:
            P = E.shape[1]
            rows = max(1, min(_NOISE_ROWS, _NOISE_FLOATS // max(P, 1)))
            E = state.noise = rng.standard_normal((rows, P))
            state.noise_sq = np.einsum("ij,ij->i", E, E)
            with np.errstate(divide="ignore"):
                state.noise_log_u = np.log(rng.random(rows))
            i = 0
        state.noise_i = i + 1
        return E[i], state.noise_sq[i], state.noise_log_u[i]

    # -- bookkeeping ----------------------------------------------------------------------
    @staticmethod
    def _record(state, log_ratio, accepted):
        """Count the proposal; return the iteration's :class:`~._state.MetropolisInfo`:
        ``accepted`` (1 or 0) and ``accept_prob`` (``min(1, MH ratio)``, 0 for a NaN ratio)."""
        if state.adapting:
            state.n_adapt_steps += 1
            state.n_adapt_accepted += accepted
        else:
            state.n_steps += 1
            state.n_accepted += accepted
        return MetropolisInfo(
            1.0 if accepted else 0.0,
            1.0 if log_ratio >= 0.0 else math.exp(log_ratio) if log_ratio == log_ratio else 0.0,
        )
