"""Where a fit's chains run: the MAP, the preconditioner and the gradient estimator.

The estimator decides these once per fit, before any chain starts, from the sampler's
hyperparameters and the estimator's ``gradient``; the chains then see one model (whitened
or not) and one gradient estimator (plain minibatch or control variate).
"""

from dataclasses import dataclass

import numpy as np

from .minibatch import GradientSpec, MinibatchGradient, RowDistribution, gradient_kind
from .models import WhitenedModel
from .models._centred import CentredScaling, CentredWhitenedModel, centred_factor
from .models._map import hessian_at
from .preconditioning import curvature_factor, intercept_layout, resolve_preconditioner
from .samplers._step_size import largest_noise_eigenvalue

#: Rows of the probe that measures the gradient noise for the automatic step size: enough
#: for the power iteration to see ``Sigma``'s top eigenvalue to a few percent (the
#: estimate's relative error is about ``sqrt(P / m)``), a small fraction of one pass.
PROBE_ROWS = 4096

#: The uniform share of the importance-sampling mixture: bounds every row's weight
#: ``1 / (N p_i)`` by ``1 / DEFENSIVE`` where the leverage at the MAP understates a row's
#: gradient difference elsewhere (a defensive mixture, Hesterberg 1995).
DEFENSIVE = 0.05


@dataclass
class Geometry:
    """The coordinates and the gradient estimator of a fit.

    Attributes
    ----------
    theta_map : ndarray of shape (P,) or None
        The MAP, when the fit needed it.
    preconditioner : {"dense", "centred", "diag", "none"}
    L : ndarray of shape (P, P) or (P,), CentredScaling, or None
        ``theta = theta_map + L z`` (None: the chains run in ``theta``).
    gradient : {"minibatch", "control_variate", "full"}
    row_probabilities : RowDistribution or None
        Importance-sampling distribution of the minibatches (None: uniform): the leverages
        of the control variate's rows, or the likelihood weights of a weighted fit's (see
        :func:`row_distribution`).
    batch_scheme : str
        The minibatch scheme the probabilities were decided for.
    coordinates : object or None
        Without a preconditioner, the model's own change of coordinates for the chains, an
        object whose ``chain_model(model)`` is the model in them (the DRBM's
        :class:`~.models.DRBMShear`); None: ``theta``.
    """

    theta_map: np.ndarray
    preconditioner: str
    L: np.ndarray
    gradient: str
    row_probabilities: np.ndarray = None
    batch_scheme: str = "replacement"
    coordinates: object = None

    def for_data(self, model):
        """The same coordinates and centre for a grown data set (``partial_fit``): the MAP and
        ``L`` of the first fit stay valid (any fixed ones are), the row probabilities are
        recomputed for the new rows."""
        probs = row_distribution(model, self.gradient, self.theta_map, self.L, self.batch_scheme)
        return Geometry(
            self.theta_map, self.preconditioner, self.L, self.gradient, probs, self.batch_scheme, self.coordinates
        )

    def chain_model(self, model):
        """The model the chains run on: ``model`` itself, in its own coordinates, or whitened at the MAP."""
        if self.L is None:
            return model if self.coordinates is None else self.coordinates.chain_model(model)
        if isinstance(self.L, CentredScaling):
            return CentredWhitenedModel(model, self.theta_map, self.L)
        return WhitenedModel(model, self.theta_map, self.L)

    def gradient_spec(self, chain_model, batch_size, batch_scheme=None):
        """The chains' :class:`~.minibatch.GradientSpec`: the control variate centred at the MAP
        in the chain's coordinates (its full-data gradient computed here, once for all chains)
        or plain minibatches, with the geometry's row probabilities."""
        scheme = self.batch_scheme if batch_scheme is None else batch_scheme
        if self.gradient != "control_variate":
            return GradientSpec(batch_size, scheme, self.row_probabilities)
        centre = self.to_chain(chain_model, self.theta_map)
        g_hat = chain_model.log_likelihood_and_grad(centre)[1]
        return GradientSpec(batch_size, scheme, self.row_probabilities, centre, g_hat)

    @staticmethod
    def to_chain(chain_model, theta):
        """``theta`` (P,) or (C, P) in the chain's coordinates."""
        from_theta = getattr(chain_model, "from_theta", None)
        return np.array(theta, dtype=float) if from_theta is None else from_theta(theta)


def build_geometry(
    model,
    sampler,
    batch_size,
    gradient,
    map_estimate,
    auto_preconditioner=True,
    auto_control_variate=True,
    batch_scheme="replacement",
    start_at_map=False,
    coordinates=None,
):
    """Decide the fit's :class:`Geometry`.

    Parameters
    ----------
    model : Model
    sampler : BaseSampler
    batch_size : int or None
        The resolved minibatch size (None: full data).
    gradient : {"auto", "minibatch", "control_variate"}
    map_estimate : callable
        ``map_estimate(model) -> theta_map``, called at most once.
    auto_preconditioner, auto_control_variate : bool
        What ``"auto"`` means for this estimator's model (False for models whose posterior is
        multimodal by construction, such as the DRBM's hidden-unit permutations).
    batch_scheme : str
    start_at_map : bool
        The chains start at the MAP anyway (``init="map"``): keep it, the noise probe uses it.
    coordinates : callable, optional
        ``coordinates(model)``: the model's own coordinates for its chains when no
        preconditioner applies (:attr:`Geometry.coordinates`), or None.
    """
    kind = gradient_kind(gradient, batch_size, model.n_samples, auto_control_variate)
    precond = resolved_preconditioner(sampler, model.n_params, auto_preconditioner, intercept_layout(model) is not None)
    need_map = precond != "none" or kind == "control_variate" or start_at_map
    theta_map = map_estimate(model) if need_map else None
    if precond == "none":
        L = None
    elif precond == "centred":
        L = centred_factor(model, theta_map)
    else:
        L = curvature_factor(model, theta_map, precond, hessian_at)
    probs = row_distribution(model, kind, theta_map, L, batch_scheme)
    coords = coordinates(model) if coordinates is not None and L is None else None
    return Geometry(theta_map, precond, L, kind, probs, batch_scheme, coords)


def resolved_preconditioner(sampler, n_params, auto_preconditioner=True, centrable=False):
    """The coordinates ``sampler``'s chains run in, ``"dense"``, ``"centred"``, ``"diag"`` or
    ``"none"``: its ``preconditioner``, ``"auto"`` resolved by ``P = n_params`` and whether the
    model has intercepts to centre (``centrable``, see
    :func:`~skbayes_sg.preconditioning.resolve_preconditioner`; ``auto_preconditioner``: the
    estimator's; False keeps ``"auto"`` in ``theta``)."""
    requested = getattr(sampler, "preconditioner", "none")
    explicit_step = not (isinstance(getattr(sampler, "step_size", "auto"), str))
    if requested == "auto" and (not auto_preconditioner or explicit_step):
        # An explicit step size is in the units of theta (a paper's setting, a tuned value):
        # "auto" then keeps the chains in theta, where that step means what it says.
        requested = "none"
    return resolve_preconditioner(requested, n_params, centrable)


def row_distribution(model, kind, theta_map, L, batch_scheme):
    """The minibatches' importance-sampling :class:`~.minibatch.RowDistribution`, or None (uniform).

    The control variate's rows are drawn by their leverages at the MAP
    (:func:`leverage_probabilities`, weighted leverages for a weighted model). Plain
    minibatches of a model with likelihood weights ``w_i`` draw row ``i`` with probability
    ``w_i / sum w`` (:func:`weight_probabilities`): each drawn row then counts ``sum w / N``
    times its gradient, the estimate stays unbiased, and on skewed weights its noise is far
    below that of uniform rows reweighted by ``w_i`` (``benchmarks/sample_weight_variance.py``:
    ``tr(Sigma)`` 1.4x lower with class_weight="balanced" on a9a, 5x with log-normal
    weights, ``sigma_max`` 1.7x and 22x); zero-weight rows are never drawn. Only for rows
    drawn with replacement, and not for memory-mapped data, which keep no per-row state (the
    N-vector of probabilities would be the one allocation of the fit that grows with N):
    their minibatches stay uniform, the weights then carried by each row's gradient.
    """
    in_memory = getattr(model, "_cache_row_norms", True)
    if kind == "full" or batch_scheme != "replacement" or not in_memory:
        return None
    if kind == "control_variate" and L is not None:
        probs = leverage_probabilities(model, theta_map, L)
        if probs is not None:
            return probs
    return weight_probabilities(model)


def weight_probabilities(model):
    """:class:`~.minibatch.RowDistribution` proportional to the model's likelihood weights, or
    None when it has none or they are all equal (uniform rows, the cheaper draw)."""
    w = getattr(model, "sample_weight", None)
    if w is None or np.all(w == w[0]):
        return None
    return RowDistribution(w)


def leverage_probabilities(model, theta_map, L):
    """The rows' :class:`~.minibatch.RowDistribution` ``(1 - DEFENSIVE) h_i / sum h + DEFENSIVE / N``
    from the leverages ``h_i`` at the MAP, or None for a model that has no leverages.

    With likelihood weights the leverages are the weighted ones (``w_i h_i``, the rows' share
    of the weighted Hessian) and the defensive part is ``DEFENSIVE w_i / sum w`` instead of
    uniform: zero-weight rows are never drawn, and a row's factor ``w_i / (N p_i)`` stays
    below ``mean(w) / DEFENSIVE``.
    """
    scores = getattr(model, "leverage_scores", None)
    h = None if scores is None else scores(theta_map, L)
    if h is None or not np.all(np.isfinite(h)) or h.sum() <= 0:
        return None
    # h is this call's own: (1 - DEFENSIVE) h / sum h + the defensive part, computed in place
    # (the same operations in the same order), no N-vector allocated on the way.
    total = h.sum()
    h *= 1.0 - DEFENSIVE
    h /= total
    w = getattr(model, "sample_weight", None)
    if w is not None:
        h += DEFENSIVE * w / w.sum()
    else:
        h += DEFENSIVE / h.size
    return RowDistribution(h, copy=False)


def noise_probe(chain_model, geometry, batch_size, batch_scheme="replacement", seed=0):
    """``sigma_max`` of the chains' gradient estimator at a typical point, for the auto step.

    The control-variate estimator's noise vanishes at its centre and grows with the
    distance from it, so it is probed at a draw ``z ~ N(0, I)`` of the Laplace
    approximation (in whitened coordinates; ``theta_map + N(0, diag(H)^-1)`` otherwise), and so
    is the plain estimator. Without a MAP (no preconditioner, plain gradients and a start
    other than ``init="map"``) there is no probe and the step is set by curvature alone. The probe's rows are drawn as
    the chains' are (importance sampled where they are) with a fixed generator, so the same
    data give the same step; ``Sigma`` is scaled to the chains' batch size.
    """
    if geometry.gradient == "full" or geometry.theta_map is None:
        # Without a mode there is no typical point to probe: at a random start (the DRBM's)
        # the noise is that of a point the chain leaves at once, and capping h by it would
        # stall the chain before it gets anywhere.
        return None
    rng = np.random.default_rng(seed)
    N, P = chain_model.n_samples, chain_model.n_params
    m = min(N, max(PROBE_ROWS, 4 * batch_size))
    probs = geometry.row_probabilities
    if m == N and probs is not None:
        if getattr(getattr(chain_model, "model", chain_model), "sample_weight", None) is not None:
            # All N rows once would measure the noise of uniformly drawn rows; the chains draw
            # them in proportion to the weights, whose noise is several times lower on
            # skewed weights (4x on the weighted conjugate test's data): draw the probe's
            # rows from the chains' distribution, more of them than N.
            m = max(PROBE_ROWS, 4 * batch_size)
        else:
            probs = None  # the unweighted fits' probe, unchanged (every row once)
    chains = MinibatchGradient(chain_model, batch_size, batch_scheme)
    if chains.noise_scale == 0.0:
        return None
    if geometry.L is not None:
        point = rng.standard_normal(P)
    else:
        d = np.abs(chain_model.hessian_diagonal(geometry.theta_map))
        point = geometry.theta_map + rng.standard_normal(P) / np.sqrt(np.maximum(d, 1e-300))
    # The chains' estimator at the probe's size; its noise alone matters (g_hat is not needed).
    centre = Geometry.to_chain(chain_model, geometry.theta_map) if geometry.gradient == "control_variate" else None
    probe = GradientSpec(m, "replacement", probs, centre, None if centre is None else np.zeros(P)).build(chain_model)
    # One minibatch is all the probe reads: a chain's queue of 256 (a million draws from the
    # rows' distribution on a9a, 20-50 ms) would be thrown away.
    probe._block = 1
    grads = probe.noise_gradients(point, rng)
    return largest_noise_eigenvalue(grads, chains.noise_scale)
