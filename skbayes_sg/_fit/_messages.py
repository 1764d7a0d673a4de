"""The texts of a fit's warnings and errors: what went wrong, its likeliest cause and the fix.

:func:`warn_fit` issues at most one warning per fit (``GradientNoiseWarning`` when the chains
ran at the wrong temperature, else ``ConvergenceWarning``); :func:`explain_divergence` names
a nearly flat prior or far random starts as causes of a ``DivergenceError``;
:func:`caller_stacklevel` points every warning at the user's call of ``fit``.
"""

import contextlib
import functools
import os
import sys
import warnings

import joblib
import numpy as np
import scipy.sparse as sp
import sklearn
import threadpoolctl
from sklearn.exceptions import ConvergenceWarning

from .. import _stein, diagnostics
from .._run_length import ESS_MIN_PER_CHAIN, RHAT_MAX
from ..exceptions import DivergenceError, FitInterruptedWarning, GradientNoiseWarning
from ..samplers import get_sampler

#: The package's own directory: its frames are internal to a warning's caller.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


#: ``fit`` warns (``GradientNoiseWarning``) when the mean kinetic temperature is off its
#: target by more than this fraction plus four Monte Carlo standard errors.
KINETIC_TOLERANCE = 0.1


#: A failed convergence check advises standardising when the ratio of the largest to the
#: smallest (non-zero) feature standard deviation exceeds this, and the chains did not run
#: in coordinates whitened by the MAP Hessian (which makes them scale-free).
FEATURE_SCALE_SPREAD = 100.0


def warn_fit(est, sampler, X):
    """Issue at most one warning for the fit, naming its likeliest cause and the fix.

    The checks (predicted gradient noise, kinetic temperature, clipped noise estimate,
    R-hat and ESS) often fail together for one cause, a step size too large or too small
    for the posterior; one warning whose first sentence is that cause is more use than
    several, and a ``GridSearchCV`` over step sizes prints one line per poor cell. The
    category is ``GradientNoiseWarning`` when the chains ran at the wrong temperature
    (the cause), else ``ConvergenceWarning``; the first subclasses the second.
    """
    noise = predicted_noise_message(est, sampler) or kinetic_temperature_message(est, sampler)
    clipped = est.diagnostics_.get("noise_clipped", 0)
    if noise is None and clipped > 0:
        noise = (
            f"the noise estimate exceeded the friction on {clipped} coordinate-iterations and was "
            "clipped, so the chains ran hotter than the posterior. Increase friction or decrease step_size."
        )
    # A hook: the DRBM checks its predictive instead of its (unidentified) weights.
    convergence = est._convergence_messages()
    divergent = divergence_message(est)
    if divergent is not None:
        convergence = [divergent, *convergence]
    if noise is None and not convergence:
        noise = ksd_bias_message(est, sampler)
    if noise is None and not convergence:
        return
    parts = [noise] if noise is not None else []
    if convergence:
        lead = "The chains also failed the convergence checks: " if noise is not None else ""
        advice = convergence_advice(est, sampler, X) if noise is None else []
        text = " Also, ".join(convergence + advice)
        parts.append(lead + text)
    category = GradientNoiseWarning if noise is not None else ConvergenceWarning
    warnings.warn(
        f"{type(est).__name__} with {type(sampler).__name__}: " + " ".join(parts),
        category,
        stacklevel=caller_stacklevel(),
    )


def divergence_message(est):
    """What the exact samplers' divergent trajectories say (HMC's ``n_divergent`` after burn-in),
    or None. A divergent trajectory is rejected, so the draws stay exact, but the posterior has a
    region the step cannot integrate, which the chains then under-visit."""
    n = est.diagnostics_.get("n_divergent", 0)
    if not n:
        return None
    return (
        f"{n} trajectories after burn-in diverged (energy error above 1,000 or not finite) and were rejected: "
        "the step size cannot follow the posterior's curvature everywhere, so the chains may under-visit that "
        "region. Use a higher target_accept or a smaller step_size."
    )


def ksd_bias_message(est, sampler):
    """Why the draws' KSD says they are biased (bootstrap p-value below
    ``_stein.BIAS_LEVEL``), naming the likeliest fix, or None."""
    p = est.diagnostics_.get("ksd_pvalue")
    if p is None or p > _stein.BIAS_LEVEL:
        return None
    h = est.diagnostics_.get("step_size", np.nan)
    if not isinstance(getattr(sampler, "step_size", "auto"), str):
        fix = f"decrease step_size (step_size={h:.3g} was set by hand; step_size='auto' sets it from the noise)"
    elif est.diagnostics_.get("gradient") == "minibatch":
        fix = "use gradient='control_variate' or a larger batch_size"
    else:
        fix = "decrease step_size or increase batch_size"
    return (
        f"the kernel Stein discrepancy of the draws (KSD={est.diagnostics_['ksd']:.3g}) is larger than exact "
        f"draws of the same effective size give (bootstrap p={p:.2g}): the draws are biased, likeliest by a step "
        f"too large for the posterior or its gradient noise. {fix[0].upper() + fix[1:]}."
    )


def predicted_noise_message(est, sampler):
    """Why the step's predicted gradient-noise error is over twice the sampler's tolerance,
    or None.

    The one check that covers SGLD, which has no momentum whose temperature could show
    the noise. It fires for explicit step sizes (the auto rule keeps the prediction at
    the tolerance).
    """
    delta = est.diagnostics_.get("predicted_noise_error")
    tolerance = getattr(sampler, "_noise_tolerance", None)
    if delta is None or tolerance is None or delta <= 2 * tolerance:
        return None
    fixes = ["step_size='auto'", "a larger batch_size"]
    if est.diagnostics_.get("gradient") == "minibatch":
        fixes.append("gradient='control_variate'")
    return (
        f"at step_size={est.diagnostics_['step_size']:.3g} the minibatch gradient noise "
        f"(largest eigenvalue {est.diagnostics_['noise_eigenvalue']:.3g}) is predicted to inflate the "
        f"posterior variance along its noisiest direction by about {100 * delta:.0f}% "
        f"(h sigma_max / 2AT = {delta:.3g}). Use {', '.join(fixes[:-1])} or {fixes[-1]}."
    )


def kinetic_temperature_message(est, sampler):
    """Why the chains' mean kinetic temperature is off its target, or None."""
    kinetic = est.sample_stats_.get("kinetic_temperature")
    T = getattr(sampler, "temperature", None)
    if kinetic is None or T is None or kinetic.shape[1] < 4:
        return None
    mean = float(kinetic.mean())
    mcse = float(np.nan_to_num(diagnostics.mcse_mean(kinetic), nan=np.inf))
    T_expected = sampler.expected_kinetic_temperature(est.diagnostics_["step_size"])
    if abs(mean - T_expected) <= KINETIC_TOLERANCE * T_expected + 4 * mcse:
        return None
    est.diagnostics_["kinetic_temperature"] = mean
    if mean > T_expected:
        cause = (
            "Minibatch gradient noise is not being dissipated: increase friction, decrease "
            "step_size or increase batch_size"
        )
        # Only the covariance-controlled samplers cancel the noise; never advise them to
        # a user who already runs one.
        cause += (
            "."
            if getattr(sampler, "controls_noise", False)
            else (", or use a sampler that controls the noise (mccadl).")
        )
    else:
        # A chain started at the mode with thermal momentum gives about half its kinetic
        # energy to the potential before it equilibrates.
        cause = (
            "The chains have not reached equilibrium (a burn-in too short for the friction) or the "
            "step size is too large: increase n_iter or burn_in, or decrease step_size."
        )
    if not isinstance(sampler.step_size, str):
        cause += " step_size was set by hand; step_size='auto' sets it from the posterior's curvature and noise."
    return (
        f"the chains ran {'hotter' if mean > T_expected else 'colder'} than the target: "
        f"mean kinetic temperature {mean:.3g} against T = {T:g}"
        f"{'' if T_expected == T else f' ({T_expected:.3g} expected of this scheme at this step)'}, so the "
        f"posterior variances are off by about that factor. {cause}"
    )


def convergence_messages(est):
    """What the R-hat and ESS checks of the parameters found (a list of sentences, empty when they
    pass): ``BaseSGBayes._convergence_messages``, which an estimator may override."""
    names = est._param_names()
    rhat, ess = est.diagnostics_["rhat"], est.diagnostics_["ess"]
    messages = []
    with np.errstate(invalid="ignore"):
        high = np.flatnonzero(rhat > RHAT_MAX)
        floor = ESS_MIN_PER_CHAIN * est.samples_.shape[0]
        low = np.flatnonzero(ess < floor)
    if high.size:
        worst = high[np.argsort(-rhat[high])][:3]
        listed = ", ".join(f"{names[j]} {rhat[j]:.3f}" for j in worst)
        messages.append(
            f"split R-hat exceeds {RHAT_MAX} for {high.size} of {rhat.size} parameters (worst: {listed}): the "
            "chains have not mixed. Run longer (n_iter, which lengthens burn-in too) or use a larger "
            "step size."
        )
    if low.size:
        worst = low[np.argsort(ess[low])][:3]
        listed = ", ".join(f"{names[j]} {ess[j]:.0f}" for j in worst)
        messages.append(
            f"bulk ESS is below {floor} ({ESS_MIN_PER_CHAIN} per chain) for {low.size} of {ess.size} "
            f"parameters (lowest: {listed}): increase n_iter, or the step size if the chains move slowly."
        )
    if not np.isfinite(ess).any():
        messages.append(
            f"{est.samples_.shape[1]} draw(s) per chain are too few to assess convergence (R-hat and ESS "
            "need at least 4): increase n_iter or max_draws, or lower thin."
        )
    if messages and est.n_iter == "auto" and "n_iter_blocks" in est.diagnostics_:
        messages.append(
            f"n_iter='auto' stopped at its ceiling of {est.diagnostics_['n_iter_blocks'][-1]} iterations per "
            "chain: the chains move too slowly for it. Use a larger step size, a sampler that mixes faster, "
            "or an explicit, larger n_iter."
        )
    return messages


def convergence_advice(est, sampler, X):
    """Fixes of a failed convergence check that fit its likeliest cause."""
    advice = []
    if not isinstance(getattr(sampler, "step_size", "auto"), str):
        advice.append(
            f"step_size={est.diagnostics_['step_size']:.3g} was set by hand: step_size='auto' sets it from the "
            "posterior's curvature and the gradient noise."
        )
    if est.diagnostics_.get("preconditioner") != "dense" and hasattr(X, "shape"):  # (not rows on a cluster)
        # Without the MAP-Hessian whitening the chains run in the features' own units, and
        # features on scales orders of magnitude apart make the posterior too elongated
        # for any one step size.
        scaling = feature_scaling_advice(est, X)
        if scaling is not None:
            advice.append(scaling)
    return advice


def feature_scaling_advice(est, X):
    """The advice to rescale the features when their scales differ by more than
    :data:`FEATURE_SCALE_SPREAD`, in the estimator's own convention, or None.

    A linear model is advised to standardise (the spread of the columns' standard
    deviations). An estimator with ``_feature_scaling = "max_abs"`` (the DRBM, whose docs
    ask for features in ``[-1, 1]``) is judged on the spread of the columns' largest
    ``|x|`` and advised to scale them to ``[-1, 1]``: pixels that are nearly always 0 have
    tiny standard deviations, and standardising them would contradict that advice.
    """
    if getattr(est, "_feature_scaling", "standardise") == "max_abs":
        spread = feature_range_spread(X)
        if spread <= FEATURE_SCALE_SPREAD:
            return None
        return (
            f"the features' largest values differ by a factor of {spread:.3g}: scale them to [-1, 1] (for "
            "example make_pipeline(MaxAbsScaler(), estimator))."
        )
    spread = feature_scale_spread(X)
    if spread <= FEATURE_SCALE_SPREAD:
        return None
    return (
        f"the features' scales differ by a factor of {spread:.3g}: standardise them (for example "
        "make_pipeline(StandardScaler(), estimator))."
    )


def feature_range_spread(X):
    """Ratio of the largest to the smallest non-zero column maximum of ``|X|``."""
    if sp.issparse(X):
        size = np.asarray(abs(sp.csr_matrix(X)).max(axis=0).todense()).ravel()
    else:
        size = np.zeros(X.shape[1])
        for start in range(0, X.shape[0], 4096):  # by row blocks: a memmap is never copied whole
            np.maximum(size, np.abs(np.asarray(X[start : start + 4096], dtype=float)).max(axis=0), out=size)
    size = size[np.isfinite(size) & (size > 0)]
    with np.errstate(over="ignore"):
        return float(size.max() / size.min()) if size.size else 1.0


#: :func:`explain_divergence`).
FLAT_PRIOR_ALPHA = 1e-3


def explain_divergence(exc, estimator):
    """``exc``, with the prior named as a cause when it is nearly flat.

    On data that (nearly) separate the classes a nearly flat prior leaves a posterior whose
    tails are far longer than the curvature at the mode says, so no step size set there is
    stable across it: a smaller step would not help, a proper prior does.
    """
    alpha = getattr(estimator, "alpha", None)
    if isinstance(alpha, str):  # "auto": N(0, 1) per sd of each feature, never nearly flat there
        alpha = None
    hints = []
    if alpha is not None and np.min(alpha) < FLAT_PRIOR_ALPHA:
        fix = (
            "alpha='auto' (the default: N(0, 1) per standard deviation of each feature) or a larger alpha"
            if getattr(estimator, "_auto_alpha", False)
            else "a larger alpha (default 1.0)"
        )
        hints.append(
            f"The prior is nearly flat (smallest alpha = {np.min(alpha):.3g}): where the data (nearly) "
            f"separate the classes, the posterior then reaches far beyond its curvature at the mode. Use {fix}."
        )
    init_scale = getattr(estimator, "init_scale", None)
    if isinstance(estimator.init, str) and estimator.init == "random" and init_scale is not None and init_scale > 1:
        # The automatic step is set where the chains spend their time; chains started at
        # weights of this size meet forces (and, for the Euler thermostats, frictions) far
        # beyond it in their first steps.
        hints.append(
            f"The chains started at random weights of scale init_scale={init_scale:g}, far from the "
            "posterior, where the step is too large for the forces: use a smaller init_scale (default 0.1)."
        )
    hints += standardised_step_hint(estimator)
    if not hints:
        return exc
    return DivergenceError(
        " ".join([exc.args[0], *hints]), sampler=exc.sampler, step_size=exc.step_size, iteration=exc.iteration
    )


def standardised_step_hint(estimator):
    """Say that a hand-set step is in standardised-y units (``normalize_y=True``), or nothing.

    The chains then run on ``(y - y_mean_) / y_scale_``, where the likelihood's curvature is
    ``y_scale_**2`` times that of the raw targets: a step copied from a paper written for
    raw ``y`` is too large by about that factor (``y_scale_`` for the momentum samplers).
    """
    if not getattr(estimator, "normalize_y", False) or getattr(estimator, "y_scale_", 1.0) == 1.0:
        return []
    if isinstance(getattr(get_sampler(estimator.sampler), "step_size", "auto"), str):
        return []
    return [
        f"step_size is in standardised-y units since normalize_y=True: the chains sample (y - y_mean_) / y_scale_ "
        f"(y_scale_={estimator.y_scale_:.3g}), whose curvature is y_scale_**2 times that of the raw y. To "
        "reproduce a paper's setting on raw y, use sampler=SGLD(step_size=h, preconditioner='none'), "
        "gradient='minibatch' and normalize_y=False."
    ]


def feature_scale_spread(X):
    """Ratio of the largest to the smallest non-zero column standard deviation of ``X``."""
    if sp.issparse(X):
        from sklearn.utils.sparsefuncs import mean_variance_axis

        sd = np.sqrt(mean_variance_axis(sp.csr_matrix(X), axis=0)[1])
    else:
        # By row blocks, shifted by the first row for accuracy: a memory-mapped or integer X
        # is never copied whole (a fit on a memmap allocates O(D) per pass, not O(N D)).
        # Each column is first divided by its largest |value|, so that features near 1e300
        # cannot overflow the squares.
        blocks = range(0, X.shape[0], 4096)
        size = np.zeros(X.shape[1])
        for start in blocks:
            np.maximum(size, np.abs(np.asarray(X[start : start + 4096], dtype=float)).max(axis=0), out=size)
        size[~(size > 0) | ~np.isfinite(size)] = 1.0
        shift = np.asarray(X[:1], dtype=float) / size
        total, total_sq = np.zeros(X.shape[1]), np.zeros(X.shape[1])
        for start in blocks:
            block = np.asarray(X[start : start + 4096], dtype=float) / size - shift
            total += block.sum(axis=0)
            total_sq += np.einsum("ij,ij->j", block, block)
        mean = total / X.shape[0]
        sd = size * np.sqrt(np.maximum(total_sq / X.shape[0] - mean * mean, 0.0))
    sd = sd[np.isfinite(sd) & (sd > 0)]
    with np.errstate(over="ignore"):  # sds of 1e300 and 1e-300: an infinite spread
        return float(sd.max() / sd.min()) if sd.size else 1.0


def caller_stacklevel():
    """``stacklevel`` for ``warnings.warn`` that points at the user's call of ``fit``.

    The frames between (this package, scikit-learn's wrappers, threadpoolctl's and
    contextlib's decorators, joblib) vary with the entry point (``fit``, ``partial_fit``,
    a Pipeline, ``GridSearchCV``), so a constant level would attribute the warning to one
    of them.
    """
    frame, level = sys._getframe(2), 2  # level 1 is warn's caller
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def _is_internal(filename):
    packages = (_PACKAGE_DIR,) + tuple(os.path.dirname(m.__file__) + os.sep for m in (sklearn, joblib))
    return filename.startswith(packages) or filename in (
        contextlib.__file__,
        functools.__file__,
        threadpoolctl.__file__,
    )


def warn_interrupted(est, interrupted):
    """Warn (``FitInterruptedWarning``) that ``est`` is fitted on the draws an interrupt left,
    and say whether ``warm_start=True`` can continue its chains."""
    est.diagnostics_["interrupted"] = True
    continued = (
        "; warm_start=True continues the chains from there"
        if est._chain_states is not None
        else "; the chains stopped at different iterations, so warm_start=True starts afresh"
    )
    warnings.warn(
        f"{type(est).__name__}: the fit was interrupted at iteration {interrupted['iteration']} of "
        f"{interrupted['n_iter']} per chain; the estimator is fitted on the {est.samples_.shape[1]} draws "
        f"per chain kept so far and its diagnostics are computed on them{continued}.",
        FitInterruptedWarning,
        stacklevel=caller_stacklevel(),
    )
