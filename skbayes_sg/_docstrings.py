"""Numpydoc paragraphs shared by the estimators' class docstrings, written once.

An estimator's docstring names a shared paragraph by a line holding only ``{name}``, indented
as the paragraph should be; :func:`fill_docstring` replaces each such line by the paragraph
(its parameter line at that indentation, its description four spaces further in). Any other
text is left as written, braces included, so docstrings need no escaping. A paragraph whose
meaning differs between estimators (the DRBM's ``n_iter``, the regressors' ``alpha``) stays
in the estimator's own docstring.
"""

import re

#: Parameter paragraphs, by parameter name.
PARAMETERS = {
    "sampler": """\
sampler : str or sampler instance, default="auto"
    The MCMC transition: a name (``"mccadl"``, ``"hmc"``, ``"sgnht"``, ``"sghmc"``,
    ``"sgld"``, ``"gadmala"``...: the lower-case class names of
    :mod:`skbayes_sg.samplers`) or an instance such as ``SGHMC(step_size=1e-3,
    friction=10)``, whose hyperparameters can be tuned as ``sampler__step_size`` in
    ``GridSearchCV``. ``"auto"``: exact, Metropolis-adjusted HMC
    (:class:`~skbayes_sg.samplers.HMC`) on the full data (``batch_size`` None, or
    ``"auto"`` while ``n_samples * (n_params + 30) <= 2,000,000``: about 34,000 rows of 28
    features, where its nearly independent draws cost less than mCCAdL's iterations; for
    several classes or memory-mapped rows while ``n_samples * n_params <= 200,000``),
    mCCAdL with minibatches and in ``partial_fit``; mCCAdL controls the parameter-dependent minibatch noise that biases
    SGHMC and SGNHT (see :class:`~skbayes_sg.samplers.MCCAdL`).""",
    "sampler_drbm": """\
sampler : str or sampler instance, default="mccadl"
    The MCMC transition: a name (``"mccadl"``, ``"sgnht"``, ``"sghmc"``, ``"sgld"``,
    ``"gadmala"``...: the lower-case class names of :mod:`skbayes_sg.samplers`) or an
    instance such as ``SGHMC(step_size=1e-3, friction=10)``, whose hyperparameters can
    be tuned as ``sampler__step_size`` in ``GridSearchCV``. The default, mCCAdL,
    controls the parameter-dependent minibatch noise that biases SGHMC and SGNHT (see
    :class:`~skbayes_sg.samplers.MCCAdL`); ``"auto"`` is mCCAdL too.""",
    "n_iter": """\
n_iter : int or "auto", default="auto"
    Sampler iterations per chain, burn-in included. ``"auto"`` runs the chains in
    blocks (1,000 iterations, then as many more as the diagnostics predict are needed)
    until every parameter's bulk ESS reaches 1,000 (a Monte Carlo error of every
    posterior mean of at most 0.032 posterior sd), every tail ESS 100 per chain and
    every split R-hat is below 1.01, or until 100,000 iterations per chain, with a
    ``ConvergenceWarning`` if the targets were not met. The fit is then as short as
    the posterior allows, and its draws are those a fit with the final ``n_iter``
    would have kept (see :ref:`run-length`); the blocks are in
    ``diagnostics_["n_iter_blocks"]``.""",
    "burn_in": """\
burn_in : float in [0, 1), int or "auto", default="auto"
    Iterations discarded at the start of each chain: a fraction of ``n_iter`` (of the
    final length with ``"auto"``) or a count (which must be below ``n_iter``).
    ``"auto"``: 0.2, as in the papers, except for the adaptive samplers (``"gadmala"``,
    ``"gadrwm"``) under ``init="map"``: their chains start at draws of the Laplace
    approximation with a proposal already scaled to the curvature at the MAP, so their
    burn-in only refines it, and 0.05 (250 iterations of the first 5,000 with
    ``n_iter="auto"``) gives the acceptance and ESS per draw of 1,000 (see
    :ref:`burn-in`); 0.1 for HMC (the default full-data sampler) under ``init="map"``,
    whose chains also start at draws of the Laplace approximation and adapt only their
    step size (45 iterations of the first 450); and 0.05 for mCCAdL (the default minibatch
    sampler) under ``init="map"`` whitened densely at the MAP (up to 1,000 parameters with
    its automatic step), whose chains start at such draws too, with its thermostat and
    momenta at their stationary means.""",
    "thin": """\
thin : int, default=1
    Keep every ``thin``-th iteration after burn-in.""",
    "batch_size": """\
batch_size : int, "auto" or None, default="auto"
    Minibatch size ``n``. ``"auto"`` uses the full data when a full gradient is cheap
    (``n_samples * n_params <= 200,000``, where it costs about as much as an
    iteration's fixed overhead) and ``min(200, n_samples)`` otherwise, grown (with
    ``step_size="auto"``) until the gradient noise no longer caps the automatic step below
    its curvature value, since the iterations an ESS target needs grow as ``1 / h`` (past
    half the rows, the full data); ``None`` uses the full data (exact gradients). A value
    larger than the data is clipped to it with a warning, as ``MLPClassifier`` does.""",
    "batch_scheme": """\
batch_scheme : {"replacement", "epochs"}, default="replacement"
    How minibatches are drawn: uniformly with replacement as in the papers, or as
    contiguous blocks of a once-shuffled copy of the data visited in random order each
    epoch (faster on large data: slices need no gather). See
    :class:`skbayes_sg.minibatch.MinibatchGradient`.""",
    "gradient": """\
gradient : {"auto", "minibatch", "control_variate"}, default="auto"
    The minibatch estimator of the log-likelihood gradient. ``"control_variate"``
    centres it at the MAP (Baker et al. 2019,
    :class:`skbayes_sg.minibatch.ControlVariateGradient`): unbiased, with a noise that
    vanishes at the mode and does not grow with N, so the automatic step stays large
    and the posterior stays right at any data size, for one extra full-data pass.
    ``"minibatch"``: the plain estimator of the papers, whose noise grows like
    ``N / n``. ``"auto"``: the control variate whenever minibatches are used.""",
    "n_chains": """\
n_chains : int, default=4
    Independent chains; R-hat needs at least 2.""",
    "n_jobs": """\
n_jobs : int or None, default=None
    Chains run in parallel, in groups on ``n_jobs`` worker processes once their work
    outweighs starting them (on Linux forked from this process, which takes a few
    hundredths of a second; elsewhere, or under a ``joblib.parallel_config`` backend, that
    joblib backend's), and
    the fit's full-data passes (the prior's scales, the MAP, its Hessian, the leverages, the
    KSD's scores) by blocks of rows on up to ``n_jobs`` threads (at most the machine's
    cores). Draws do not depend on ``n_jobs``.""",
    "random_state": """\
random_state : int, RandomState instance or None, default=None
    Seeds the chains (each gets a child of one ``numpy.random.SeedSequence``): the same
    value gives bit-identical draws whatever ``n_jobs``.""",
    "init": """\
init : {"map", "zeros"} or array-like, default="map"
    Starting point of every chain: the maximum a posteriori point (full-data L-BFGS),
    zeros, or an array of shape ``(n_params,)`` or ``(n_chains, n_params)``.""",
    "warm_start": """\
warm_start : bool, default=False
    When True, a second ``fit`` continues every chain from its last state (sampler
    state, step size and thermostat included) for ``n_iter`` more iterations with no
    burn-in (with ``"auto"``: until the new draws alone meet the targets), and
    appends the new draws. The continuation is exact: the chains' random streams,
    minibatch queues and thinning grid carry on, so fitting in parts (saved and
    loaded between them or not) gives the draws of one fit.""",
    "max_draws": """\
max_draws : int, "auto" or None, default="auto"
    At most this many draws are stored per chain: thinning is raised above ``thin``
    when needed, so memory stays at ``n_chains * max_draws * n_params`` floats however
    long the run. ``None`` stores every kept draw. ``"auto"``: every kept draw while all
    chains' draws fit in 2^19 floats (4 MiB, what 4 chains of 1,000 draws of 124
    parameters take), at least 1,000 per chain (250 for the DRBM), so that thinning
    discards no effective samples and ``to_inference_data`` (PSIS-LOO) gets every kept
    draw. Predicting averages over ``n_predict_draws`` of them.""",
    "n_predict_draws": """\
n_predict_draws : int, "auto" or None, default="auto"
    How many of the stored draws the posterior predictive averages over
    (``predict_proba``, ``predict``, ``score``; for the regressor the ``return_std``
    of ``predict``, whose mean is linear in the draws and uses all of them), evenly
    spaced within each chain, the same number from every chain.
    Prediction costs time linear in them. An int keeps at most that many in all
    (rounded down to a multiple of ``n_chains``, at least one per chain); ``None``
    keeps every stored draw. ``"auto"`` keeps the fewest draws ``M`` whose total
    Monte Carlo standard error of a posterior mean, estimated as
    ``sqrt(1 / ESS + 1 / M)`` posterior standard deviations with ``ESS`` the smallest
    bulk ESS of the fit's parameters, is at most 0.05 (``M = 1 / (1/400 - 1/ESS)``:
    667 draws at an ESS of 1,000, 400 at most for independent draws); with an ESS of
    400 or less (a short fit, or the DRBM, whose hidden units swap between chains) it
    keeps every draw. The predictive's own Monte Carlo error is then at most 5% of
    its posterior standard deviation, which adds at most 0.25% to the predictive
    variance. The binary logistic regression's ``predict_proba`` at ``"auto"`` uses a
    control variate on 64 of the draws instead where it is accurate (see its description
    above). The per-draw methods (``predict_proba_samples``, ``sample_y``) and
    ``to_inference_data`` use every draw. Multilevel fits (signed weights) always use
    every draw. Changing it with ``set_params`` after ``fit`` needs no refit.""",
    "verbose": """\
verbose : int, default=0
    Progress output of the parallel chains (joblib's verbosity).""",
    "class_weight": """\
class_weight : dict, "balanced" or None, default=None
    Likelihood weights by class, as in ``LogisticRegression``: the log likelihood of a
    row of class ``k`` is multiplied by ``class_weight[k]`` (classes missing from the
    dict weigh 1), and by its ``sample_weight`` when ``fit`` is given one.
    ``"balanced"`` weighs class ``k`` by ``n_samples / (n_classes * n_k)``, with ``n_k``
    the class's (sample-weighted) count. In ``partial_fit`` the balanced weights are
    computed over all the data seen so far, and recomputed with every chunk (the
    estimator keeps the data seen, so the posterior is that of ``fit`` on all of it);
    ``n_classes`` counts the classes seen so far. See :ref:`sample-weights`.""",
}

#: Attribute paragraphs of every fitted estimator, by attribute name.
ATTRIBUTES = {
    "alpha_": """\
alpha_ : float or ndarray
    The prior precisions of the weights the fit used: ``alpha`` as given, or what
    ``"auto"`` resolved to: ``alpha_j = s_j^2`` (a prior sd of 1 per ``s_j`` of feature
    ``j``) with ``s_j`` the feature's standard deviation (its root mean square without
    ``fit_intercept``), its range ``max - min`` if it is binary, its absolute value if
    constant; a float when every feature gets the same (all 0/1 columns, for example).
    Fixed by the first fit or chunk of a continued one (``warm_start`` or
    ``partial_fit``). ``summary()`` prints each coefficient's prior sd in the user's
    units.""",
    "samples_": """\
samples_ : ndarray of shape (n_chains, n_draws, n_params)
    Raw flat draws after burn-in and thinning.""",
    "sample_weight_": """\
sample_weight_ : None
    Weights of the draws; None means equal weights.""",
    "sample_stats_": """\
sample_stats_ : dict of ndarray of shape (n_chains, n_draws)
    Per-draw sampler statistics (thermostat ``xi``, kinetic temperature...).""",
    "n_iter_": """\
n_iter_ : int
    Iterations run per chain (accumulated over ``warm_start`` continuations): with
    ``n_iter="auto"``, the length the run stopped at.""",
    "n_predict_draws_": """\
n_predict_draws_ : int
    Number of draws the posterior predictive averages over (see ``n_predict_draws``).""",
    "n_features_in_": """\
n_features_in_ : int""",
    "feature_names_in_": """\
feature_names_in_ : ndarray of shape (`n_features_in_`,)
    Defined only when X has feature names that are all strings.""",
    "diagnostics_": """\
diagnostics_ : dict
    ``step_size`` (the ``h`` used; with ``"auto"`` also ``lambda_max``), ``ess`` and
    ``rhat`` per parameter (bulk ESS, rank-normalised split R-hat), ``mcse_mean``,
    ``n_grad_evals`` (per-example gradient evaluations, the papers' cost unit),
    ``batch_size``, ``thin`` and sampler-specific entries.""",
}

_PLACEHOLDER = re.compile(r"^(?P<indent>[ ]*)\{(?P<name>\w+)\}[ ]*$", re.MULTILINE)


def fill_docstring(obj):
    """Replace each ``{name}`` line of ``obj.__doc__`` by the shared paragraph ``name``.

    Parameters
    ----------
    obj : class or function
        Its docstring is rewritten in place.

    Returns
    -------
    obj
        The same object, so that this works as a decorator.

    Raises
    ------
    KeyError
        For a placeholder that names no shared paragraph (a typo would otherwise reach the
        rendered documentation).
    """
    paragraphs = {**PARAMETERS, **ATTRIBUTES}

    def expand(match):
        indent = match.group("indent")
        return "\n".join(indent + line if line else line for line in paragraphs[match.group("name")].splitlines())

    if obj.__doc__ is not None:
        obj.__doc__ = _PLACEHOLDER.sub(expand, obj.__doc__)
    return obj
