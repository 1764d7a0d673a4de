"""Bayesian discriminative restricted Boltzmann machine classifier sampled by SG-MCMC."""

from numbers import Integral, Real

import numpy as np
from scipy.optimize import minimize
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions

from . import diagnostics
from ._classifier import BaseSGBayesClassifier
from ._docstrings import fill_docstring
from ._run_length import ESS_MIN_PER_CHAIN, RHAT_MAX, required_growth
from .linear_model import _SparseInput
from .models import DRBMShear, ShearedDRBM
from .models.drbm import DRBMModel
from .samplers import MCCAdL

# Stream tags: the model's seeded start and the per-chain random starts get streams of
# their own, apart from the chains' SeedSequence children (see BaseSGBayes._seeds).
_MODEL_STREAM = 0x5EED0
_START_STREAM = 0x5EED1
#: Full-data L-BFGS iterations from the first start to the point where the ``"auto"`` step
#: size measures the curvature (see ``SGBayesDRBMClassifier._curvature_point``).
CURVATURE_LBFGS_ITER = 30

#: Ceiling of ``n_iter="auto"`` for the DRBM, iterations per chain: the default fit on digits
#: (1,257 x 64, 10 classes) stays well under a minute of wall time even when it reaches it
#: (the whole fit, 3,664 iterations of the four chains on two forked worker processes, took
#: 7.1 s of wall time on a quiet 2-core AMD EPYC virtual machine, so about 19 s at the ceiling;
#: ``benchmarks/drbm_vs_mlp.py``, ``benchmarks/results/drbm_vs_mlp.jsonl``).
AUTO_MAX_ITER = 10000
#: Multiplier of the sampler's constant ``c`` in the curvature part of ``step_size="auto"``
#: (``h = c / sqrt(lambda_max)``; mCCAdL's ``c`` is 0.2, so ``h = 0.48 / sqrt(lambda_max)``,
#: a quarter of the stability limit ``2 / sqrt(lambda_max)``), with ``lambda_max`` measured in
#: the chains' sheared coordinates (:class:`~skbayes_sg.models.ShearedDRBM`). The predictive's
#: slowest direction mixes in a number of iterations inversely proportional to ``h``, and
#: its discretisation bias grows with ``h``: on digits this scale gives the same bias in the
#: posterior predictive as the scale of 3 did in ``theta`` (where ``lambda_max`` was about
#: six times larger), in about 3,700 iterations per chain instead of about 6,800; a scale of
#: 3 in the sheared coordinates saves another 5% of the iterations at twice the bias (see the
#: class Notes; ``benchmarks/drbm_digits_step_bias.py``).
AUTO_STEP_SCALE = 2.4
#: ``batch_size="auto"`` and ``max_draws="auto"`` of the DRBM (see the parameters).
AUTO_BATCH_SIZE = 100
AUTO_MAX_DRAWS = 250

#: Training rows (evenly spaced; all of them below this) on which the per-draw log loss,
#: the DRBM's convergence monitor, is computed.
MONITOR_ROWS = 256
# Draws per block of the monitor's predictive (bounds its (draws, rows, classes) array).
_MONITOR_CHUNK = 256
#: Largest split R-hat of a single monitored row's log predictive probability before ``fit``
#: warns. Above the 1.01 of a single quantity because it is the worst of up to 256: for
#: chains of independent draws at the ESS floor (100 per chain) the largest of 256 R-hats
#: reaches 1.04 (1.011 at the 800 draws of a default fit on digits), so 1.01 would warn on
#: every fit; a row whose chains sit in different modes shows far larger values.
RHAT_MAX_ROWS = 1.05


def row_diagnostics(logp):
    """Convergence of the per-row log predictive probabilities ``logp`` (chains, draws, rows):
    the worst row's split R-hat and its index, and the lowest and median bulk ESS of the rows.

    Each row's ``log p(y_i | x_i, theta)`` is, like the log loss, unchanged by permutations
    of the hidden units, and chains in different modes that fit the rows equally well on
    average (so pass the log loss's check) still predict single rows differently.
    """
    summary = diagnostics.summarize(logp)
    rhat, ess = np.nan_to_num(summary["rhat"], nan=1.0), summary["ess_bulk"]
    worst = int(np.argmax(rhat))
    return {
        "predictive_rows_rhat": float(rhat[worst]),
        "predictive_rows_worst": worst,
        "predictive_rows_ess_min": float(np.nanmin(ess)) if np.isfinite(ess).any() else float("nan"),
        "predictive_rows_ess_median": float(np.nanmedian(ess)) if np.isfinite(ess).any() else float("nan"),
        "predictive_rows_high": int(np.sum(rhat > RHAT_MAX_ROWS)),
    }


@fill_docstring
class SGBayesDRBMClassifier(_SparseInput, BaseSGBayesClassifier):
    """Bayesian discriminative restricted Boltzmann machine sampled by SG-MCMC.

    The non-linear classifier of Larochelle & Bengio (2008), as used in the CCAdL paper
    (Shang et al. 2015, section 4.3) and the mCCAdL paper (Wei & Shang 2026, section 3.3):

    ``p(y | x) = exp(F_y(x)) / sum_y* exp(F_y*(x))``,
    ``F_y(x) = d_y + sum_j softplus(c_j + U_jy + W_j . x)``

    with ``n_hidden`` binary hidden units summed out exactly, parameters ``W``
    (n_hidden x n_features), ``U`` (n_hidden x n_classes), ``c`` (n_hidden) and ``d``
    (n_classes), and an isotropic Gaussian prior of precision ``alpha`` on all of them.
    ``predict_proba`` is the posterior predictive: the average over draws of each draw's
    class probabilities. Scale features to ``[-1, 1]`` or standardise them: with all-positive
    inputs every hidden unit's bias is coupled to its weights, and on letter the same model
    fits far worse from ``[0, 1]`` features (test error after 100 passes of SGHMC 0.21
    against 0.16 from ``[-1, 1]``, and of scikit-learn's ``MLPClassifier`` 0.12 against
    0.069; ``benchmarks/drbm_letter.py``).

    The minibatch gradients reach the samplers as a structured operator
    (:class:`skbayes_sg.models.drbm.DRBMPerExampleGradients`) whose products cost
    O(n (H C + H D)) and never form the n x P per-example gradient matrix, so the
    covariance-controlling samplers (``CCAdL``, ``MCCAdL``) stay affordable.

    ``X`` may be a ``scipy.sparse`` matrix (CSR; other formats are converted once): the
    minibatches stay sparse and every product with them is a sparse-dense product, so the
    cost of the input layer scales with the non-zeros and X is never densified.

    Parameters
    ----------
    n_hidden : int, default=50
        ``H``, the number of hidden units. The papers use 100 on letter; 50 costs half as
        much per iteration and on digits, at the same run length, loses 0.4 points of test
        accuracy (97.8% against 98.1%; test log loss 0.159 against 0.139), so that the
        default fit converges there in well under a minute of wall time (7.1 s on a quiet
        2-core AMD EPYC virtual machine, see :data:`AUTO_MAX_ITER`).
    init_scale : float, default=0.1
        Standard deviation of the random starting weights ``W`` and ``U`` (biases start
        at zero). Random weights break the symmetry between hidden units.
    dtype : {"float32", "float64"}, default="float32"
        Floating-point precision of the likelihood's ``(n, H, C)`` kernel (the free
        energies, sigmoids and per-example gradients of ``U``). Single precision runs it
        about twice as fast at a relative error ~1e-6 in each minibatch gradient, orders
        of magnitude below the minibatch noise, and gives the same posterior predictive
        within Monte Carlo error; the chains' parameters, the force and the draws stay
        double. ``"float64"`` for exact gradients (as the linear models use).
    {sampler_drbm}
    n_iter : int or "auto", default="auto"
        Sampler iterations per chain, burn-in included. ``"auto"`` runs in blocks until the
        predictive has converged (the per-draw training log loss has split R-hat below 1.01
        and bulk and tail ESS of 100 per chain, and the monitored rows' median bulk ESS is
        100 per chain and their largest R-hat below :data:`RHAT_MAX_ROWS`, see Notes), at most
        :data:`AUTO_MAX_ITER` (10,000) iterations per chain: a ceiling set so that the
        default fit of a data set the size of digits (1,257 x 64, 10 classes) takes under a
        minute of wall time even when it reaches it (it converges there in about 3,700, in
        7.1 s on a quiet 2-core AMD EPYC virtual machine); where
        the predictive needs longer, ``fit`` warns and an explicit, larger ``n_iter`` runs
        on. The weights' own R-hat is not used: hidden
        units can swap, so it need not fall below 1.01 even when the predictive has
        converged.
    {burn_in}
    {thin}
    batch_size : int, "auto" or None, default="auto"
        Minibatch size ``n``. ``"auto"`` uses the full data when a full gradient is cheap
        (``n_samples * n_params <= 200,000``) and ``min(100, n_samples)`` otherwise (the
        linear models' 200 halved: the step is set by the curvature, not by the gradient
        noise, so a smaller minibatch mixes as well per iteration at about 60% of the
        cost); ``None`` uses the full data. A value larger than the data is clipped to
        it with a warning.
    {batch_scheme}
    {gradient}
    {n_chains}
    {n_jobs}
    {random_state}
    alpha : float, default=1.0
        Precision of the isotropic Gaussian prior on every weight, intercept included.
    fit_intercept : bool, default=True
        Whether to add intercepts (with the same Gaussian prior as the weights).
    {warm_start}
    max_draws : int, "auto" or None, default="auto"
        At most this many draws are stored per chain (thinning is raised above ``thin``
        when needed). ``"auto"``: 250. Successive DRBM draws are strongly correlated (on
        digits about 50 iterations per effective draw of the log loss at the default
        step), so storing more adds little
        information while memory (``n_chains * max_draws * n_params`` floats) and the
        cost of every prediction grow with it. ``None`` stores every kept draw.
    {n_predict_draws}
    {verbose}
    init : {"random", "map", "zeros"} or array-like, default="random"
        Starting point of the chains. ``"random"``: each chain starts at its own random
        weights, ``W`` and ``U`` i.i.d. ``N(0, init_scale^2)`` and zero biases (the
        papers' setting; distinct starts make R-hat meaningful). ``"map"``: every chain
        starts at a maximum a posteriori point found by full-data L-BFGS from one such
        random start; the posterior is multimodal, so this is *a* mode, and each
        L-BFGS iteration costs a full pass over the data (about 0.4 s on letter), which
        is why it is not the default. ``"zeros"``: all parameters zero, a saddle where
        the hidden units are interchangeable and the gradients of ``W`` and ``c``
        vanish; only the injected noise leaves it (not recommended). An array of shape
        ``(n_params,)`` or ``(n_chains, n_params)`` gives the starts explicitly.
    {class_weight}

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    components_ : ndarray of shape (n_hidden, n_features)
        Posterior mean of ``W``.
    class_weights_ : ndarray of shape (n_hidden, n_classes)
        Posterior mean of ``U``.
    intercept_hidden_ : ndarray of shape (n_hidden,)
        Posterior mean of ``c`` (zeros without ``fit_intercept``).
    intercept_class_ : ndarray of shape (n_classes,)
        Posterior mean of ``d`` (zeros without ``fit_intercept``).
    {samples_}
    {sample_weight_}
    {sample_stats_}
    {n_iter_}
    {n_predict_draws_}
    {n_features_in_}
    {feature_names_in_}
    {diagnostics_}
        The DRBM adds ``predictive_rhat``, ``predictive_ess`` and ``predictive_ess_tail``,
        the diagnostics of the per-draw training log loss ``sample_stats_["log_loss"]``
        on which it judges convergence, and ``predictive_rows_rhat`` (the largest split
        R-hat of a monitored row's log predictive probability), ``predictive_rows_worst``
        (that row's index among the monitored rows), ``predictive_rows_high`` (the rows
        above :data:`RHAT_MAX_ROWS`), ``predictive_rows_ess_min`` and
        ``predictive_rows_ess_median`` (see Notes).

    Notes
    -----
    The likelihood is invariant under permutations of the hidden units, so the posterior
    has many equivalent modes. A chain usually stays near one, but the posterior means
    of the weights (``components_`` and the like) average across whatever the chains
    visited and are summaries only: predictions average probabilities over draws, never
    weights, and are unaffected. For the same reason ``diagnostics_["rhat"]`` of the
    weights is large across chains started apart even when each chain is well mixed, and
    it is not what the estimator checks.

    Convergence is judged on the predictive instead: each stored draw's mean log loss
    ``-mean_i log p(y_i | x_i, theta)`` on up to :data:`MONITOR_ROWS` (256) evenly spaced
    training rows, a scalar that no permutation of the hidden units changes (the DRBM's
    counterpart of Stan's ``lp__``). It is kept in ``sample_stats_["log_loss"]``; its
    rank-normalised split R-hat and bulk and tail ESS are ``diagnostics_["predictive_rhat"]``,
    ``["predictive_ess"]`` and ``["predictive_ess_tail"]``. ``fit`` raises a
    ``ConvergenceWarning`` when that R-hat exceeds 1.01 or either ESS is below 100 per
    chain (Vehtari et al. 2021). Each
    monitored row's log predictive probability is checked too (chains in different modes
    can agree on the mean and not on single rows): ``fit`` also warns when the largest of
    their R-hats exceeds :data:`RHAT_MAX_ROWS` (1.05, the bound for the worst of 256) or
    their median bulk ESS is below 100 per chain. ``n_iter="auto"`` runs until none of
    these holds. ``summary()`` lists both monitors before
    the parameters. The log
    loss follows the overall scale of the weights, the slowest direction of the chains.
    The training rows are what ``fit`` has: the per-draw log loss on held-out rows can
    mix more slowly (on digits its ESS was 0.3 to 1.3 times the monitor's, 0.8 with the
    defaults, ``benchmarks/drbm_digits_defaults.py``), so compute it on validation data
    (``predict_proba_samples``) for a stricter check.

    The chains run in sheared coordinates (:class:`~skbayes_sg.models.ShearedDRBM`):
    ``c~ = c + W xbar`` with ``xbar`` the inputs' mean, and ``d~ = d + sum_j U_j / 2``. Moving
    a unit's weights shifts its pre-activations by ``W_j . xbar`` on average, as its bias does,
    and moving ``U_jy`` for every unit shifts class ``y``'s free energy by about half as many
    times, as ``d_y`` does; those couplings were the stiffest directions, and centring them
    out divides the largest curvature by 3.5 (on digits at posterior draws, 550-555 becomes
    140-165; ``benchmarks/drbm_sheared.py``). The map is linear with unit Jacobian, so the
    posterior is the same, and the draws are stored in the DRBM's own parameters. Sparse
    inputs are not centred (that would densify them); their class shear still applies.

    The ``"auto"`` step size measures the curvature, in those coordinates, after 30
    full-data L-BFGS iterations from the first chain's start, where the network fits the
    data: at the random start every class is about equally likely and every hidden unit is
    in its steepest range, and the curvature there is several times that of the posterior
    bulk, which would shrink the step. Under mCCAdL (the default sampler) the step is then
    :data:`AUTO_STEP_SCALE` (2.4) times the sampler's rule, ``h = 0.48 / sqrt(lambda_max)``,
    a quarter of the stability limit ``2 / sqrt(lambda_max)``: the predictive's slowest
    direction mixes in a number of iterations about inversely proportional to ``h``. On
    digits ``lambda_max`` is about 200 (1,160 in ``theta``), ``h`` about 0.034, and
    ``"auto"`` stops at 3,700 to 4,000 iterations per chain: 7.1 s of wall time for the
    whole fit on a quiet 2-core AMD EPYC virtual machine, against 11 s before the shear
    (``benchmarks/drbm_vs_mlp.py``). The price is a discretisation bias, measured against a
    step eight times smaller run long (``benchmarks/drbm_digits_step_bias.py``): on digits
    the posterior predictive's test log loss differs by -0.0003 and +0.0007 from it (Monte
    Carlo error 0.0007 to 0.0008; +0.0008 on average over five seeds, 0.5% of the log loss:
    ``results/drbm_digits_sampler_options.jsonl``) and its probabilities by 0.0015 on
    average, as much as two reference runs differ from each other; the bias shows in the
    mean of the per-draw log loss (the posterior's spread), 0.003 to 0.005 higher, as it
    did at the smaller step before the shear. Give ``sampler=MCCAdL(step_size=...)`` and a longer ``n_iter``
    for a smaller step; the other samplers take their own rule unscaled.

    See Also
    --------
    sklearn.neural_network.MLPClassifier : a point-estimate non-linear classifier.
    SGBayesLogisticRegression : the linear counterpart.

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from skbayes_sg import SGBayesDRBMClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = SGBayesDRBMClassifier(n_hidden=20, n_iter=200, n_chains=2, random_state=0)
    >>> clf = clf.fit(X / 16.0, y)
    >>> clf.predict_proba(X[:2] / 16.0).shape
    (2, 10)
    """

    # The likelihood is invariant under permutations of the hidden units: the MAP is one of
    # many equivalent modes, so neither a control variate nor a preconditioner centred there
    # is used unless asked for (gradient="control_variate", preconditioner="diag").
    _auto_control_variate = False
    #: ``sampler="auto"`` is mCCAdL on any data: the DRBM's posterior is multimodal (hidden-unit
    #: permutations) and no Laplace whitening makes HMC's trajectories near rotations.
    _auto_exact_sampler = None
    # MLSGLD's coupled paths loop over paths in Python with the DRBM's (n, H, C) kernel: a
    # fit of 10 rows took over a minute (benchmarks/fuzz_sweep.py), so it is refused.
    _supports_multilevel = False
    _auto_preconditioner = False
    _ksd_at_fit = False  # the hidden units' permutations: a multimodal posterior
    # The chains run in sheared coordinates (inputs centred for c, d~ = d + sum_j U_j / 2): the
    # same posterior, about a third of the largest curvature on digits, so a larger step.
    _chain_coordinates = staticmethod(DRBMShear.of)

    _parameter_constraints = {
        **BaseSGBayesClassifier._parameter_constraints,
        "n_hidden": [Interval(Integral, 1, None, closed="left")],
        "init_scale": [Interval(Real, 0, None, closed="neither")],
        "init": [StrOptions({"random", "map", "zeros"}), "array-like"],
        "dtype": [StrOptions({"float32", "float64"})],
    }

    def __init__(
        self,
        *,
        n_hidden=50,
        init_scale=0.1,
        dtype="float32",
        sampler="mccadl",
        n_iter="auto",
        burn_in="auto",
        thin=1,
        batch_size="auto",
        batch_scheme="replacement",
        gradient="auto",
        n_chains=4,
        n_jobs=None,
        random_state=None,
        init="random",
        alpha=1.0,
        fit_intercept=True,
        warm_start=False,
        max_draws="auto",
        verbose=0,
        class_weight=None,
        n_predict_draws="auto",
    ):
        self.n_hidden = n_hidden
        self.init_scale = init_scale
        self.dtype = dtype
        self.sampler = sampler
        self.n_iter = n_iter
        self.burn_in = burn_in
        self.thin = thin
        self.batch_size = batch_size
        self.batch_scheme = batch_scheme
        self.gradient = gradient
        self.n_chains = n_chains
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.init = init
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.warm_start = warm_start
        self.max_draws = max_draws
        self.verbose = verbose
        self.class_weight = class_weight
        self.n_predict_draws = n_predict_draws

    # -- model and starts ------------------------------------------------------------------
    def _init_entropy(self):
        """One integer per fit from ``random_state``, seeding the random starting weights."""
        rs = self.random_state
        if isinstance(rs, Integral):
            return int(rs)
        return int(check_random_state(rs).randint(2**31 - 1))

    def _build_model(self, X, y):
        self._start_entropy = self._init_entropy()
        model = DRBMModel(
            X,
            y,
            n_classes=self.classes_.size,
            n_hidden=self.n_hidden,
            alpha=self.alpha,
            fit_intercept=self.fit_intercept,
            init_scale=self.init_scale,
            dtype=self.dtype,
            random_state=np.random.SeedSequence([self._start_entropy, _MODEL_STREAM]),
        )
        self._set_monitor(model)
        return model

    def _curvature_point(self, chain_model, start):
        """Where the ``"auto"`` step measures the curvature: :data:`CURVATURE_LBFGS_ITER`
        full-data L-BFGS iterations from the first chain's start.

        The curvature of the likelihood is largest where the class probabilities are least
        certain: at the random start (every class about equally likely, every hidden unit
        in its linear range) it is several times that where the chains spend their time,
        once the network fits the data (on digits with 100 hidden units: 8,400 at the start,
        2,000 after 30 L-BFGS iterations, 1,700 at posterior draws and 1,400 at the MAP), so
        a step set at the start is about half what the chains can take. A short ascent is
        enough to reach the fitted regime and, stopped early, stays on the safe side of the
        bulk's curvature. The chains still start at their own random points.
        """
        if not isinstance(chain_model, (DRBMModel, ShearedDRBM)):  # whitened (preconditioner="diag")
            return start

        def objective(theta):
            lp, grad = chain_model.log_posterior_and_grad(theta)
            return -lp, -grad

        with np.errstate(over="ignore", invalid="ignore"):
            res = minimize(
                objective, start, jac=True, method="L-BFGS-B", options={"maxiter": CURVATURE_LBFGS_ITER, "gtol": 0.0}
            )
        return res.x if np.all(np.isfinite(res.x)) else start

    # -- the predictive convergence monitor ------------------------------------------------
    # The likelihood is invariant under permutations of the hidden units, so the weights'
    # R-hat compares chains in different (equivalent) modes and stays large however well
    # each mixes. What predictions depend on is invariant: the per-draw log loss
    # -mean_i log p(y_i | x_i, theta) on fixed training rows, a scalar like Stan's lp__.
    # Its R-hat and ESS judge convergence (warning, n_iter="auto").
    _run_length_on_parameters = False
    # Its docs ask for features in [-1, 1]: a failed check advises that scaling, not standardising.
    _feature_scaling = "max_abs"
    _run_length_max_iter = AUTO_MAX_ITER

    def _auto_step_scale(self, sampler):
        """:data:`AUTO_STEP_SCALE` for mCCAdL (the default, where it was measured), 1 for the
        other samplers (whose first-order or Euler steps have less room)."""
        return AUTO_STEP_SCALE if isinstance(sampler, MCCAdL) else 1.0

    _auto_batch_size = AUTO_BATCH_SIZE
    _auto_max_draws = AUTO_MAX_DRAWS

    @property
    def _run_length_ess_target(self):
        return ESS_MIN_PER_CHAIN * self.n_chains

    def _set_monitor(self, model):
        """Keep the monitored training rows (and a data-free copy of the model) for this fit."""
        X, y = model.X, model.y
        n = X.shape[0]
        rows = np.unique(np.linspace(0, n - 1, min(n, MONITOR_ROWS)).round().astype(np.intp))
        self._monitor = (model.without_data(), X[rows], np.asarray(y)[rows])
        self._monitor_cache = None

    def _per_draw_log_loss(self, draws):
        """Per-draw mean log loss on the monitored rows, shape ``draws.shape[:-1]``."""
        return self._monitor_values(draws)[0]

    def _per_draw_row_log_proba(self, draws):
        """Per draw and monitored row ``log p(y_i | x_i, theta)``, shape ``draws.shape[:-1] +
        (n_rows,)``."""
        return self._monitor_values(draws)[1]

    def _monitor_values(self, draws):
        """The per-draw log loss and per-row log predictive probabilities of the monitored rows.

        The last result is kept: the final block of ``n_iter="auto"`` and the fitted
        diagnostics ask for the same draws.
        """
        model, X, y = self._monitor
        flat = draws.reshape(-1, draws.shape[-1])
        cache = self._monitor_cache
        if cache is None or cache[0] != flat.shape or not np.array_equal(cache[1], flat[[0, -1]]):
            loss, per_row = np.empty(flat.shape[0]), np.empty((flat.shape[0], y.size))
            rows = np.arange(y.size)
            for s in range(0, flat.shape[0], _MONITOR_CHUNK):
                logp = model.log_proba_draws(flat[s : s + _MONITOR_CHUNK], X)[:, rows, y]
                loss[s : s + _MONITOR_CHUNK] = -logp.mean(axis=1)
                per_row[s : s + _MONITOR_CHUNK] = logp
            cache = self._monitor_cache = (flat.shape, flat[[0, -1]], loss, per_row)
        return cache[2].reshape(draws.shape[:-1]), cache[3].reshape(draws.shape[:-1] + (y.size,))

    def _run_length_summary(self, draws):
        """What ``n_iter="auto"`` runs on: the log loss's diagnostics and the per-row check's.

        The fitted estimator warns on both monitors (:meth:`_convergence_messages`), so the run
        goes on until both pass: the log loss's split R-hat below 1.01 and its bulk and tail
        ESS at the floor, and the monitored rows' median bulk ESS at the floor and their
        largest R-hat below :data:`RHAT_MAX_ROWS`. That largest R-hat enters as the single
        quantity's R-hat with the same excess relative to its bound
        (``1 + (rhat - 1) (RHAT_MAX - 1) / (RHAT_MAX_ROWS - 1)``), so the rule predicts from
        it as from any R-hat (:func:`~skbayes_sg._run_length.rhat_growth`: ``R-hat - 1``
        falls as ``1 / n`` for chains that mix, the worst of 256 rows too): a near miss
        (1.053 on digits at 4,000 iterations) asks for a quarter more, not a doubling, and
        rows in different modes (R-hat 1.2 and more: chains stuck apart) still double.
        """
        summary = diagnostics.summarize(self._per_draw_log_loss(draws))
        rows = row_diagnostics(self._per_draw_row_log_proba(draws))
        excess = rows["predictive_rows_rhat"] - 1.0
        rows_rhat = 1.0 + excess * (RHAT_MAX - 1.0) / (RHAT_MAX_ROWS - 1.0) if excess > RHAT_MAX_ROWS - 1.0 else 1.0
        return {
            "ess_bulk": np.array([summary["ess_bulk"], rows["predictive_rows_ess_median"]]),
            "ess_tail": np.array([summary["ess_tail"]]),
            "rhat": np.array([summary["rhat"], rows_rhat]),
        }

    def _initial_points(self, model):
        if isinstance(self.init, str) and self.init == "random":
            rng = np.random.default_rng(np.random.SeedSequence([self._start_entropy, _START_STREAM]))
            return np.stack([model.random_point(rng) for _ in range(self.n_chains)])
        if isinstance(self.init, str) and self.init == "zeros":
            return np.zeros((self.n_chains, model.n_params))
        return super()._initial_points(model)

    def _posterior_variables(self, feature_names=None):
        """``W`` (hidden, feature), ``U`` (hidden, class), ``c`` (hidden), ``d`` (class): views
        of ``samples_``, so the export holds one copy of the draws."""
        W, U, c, d = self._model.unpack(self.samples_)
        variables = {"W": (W, ["hidden", "feature"]), "U": (U, ["hidden", "class"])}
        if self.fit_intercept:
            variables.update(c=(c, ["hidden"]), d=(d, ["class"]))
        coords = {
            "hidden": np.arange(self.n_hidden),
            "feature": self._feature_names(feature_names),
            "class": [str(k) for k in self.classes_],
        }
        return variables, coords

    def _set_posterior_attributes(self, model):
        W, U, c, d = model.unpack(self._flat_samples())
        self.components_ = self._posterior_mean(W)
        self.class_weights_ = self._posterior_mean(U)
        self.intercept_hidden_ = self._posterior_mean(c)
        self.intercept_class_ = self._posterior_mean(d)
        self._worst_row_log_proba = None
        if self.sample_weight_ is None:  # chains (a multilevel fit's signed draws have no R-hat)
            logp = self._per_draw_row_log_proba(self.samples_)
            loss = self._per_draw_log_loss(self.samples_)
            self.sample_stats_["log_loss"] = loss
            summary = diagnostics.summarize(loss)
            self.diagnostics_.update(
                predictive_rhat=summary["rhat"],
                predictive_ess=summary["ess_bulk"],
                predictive_ess_tail=summary["ess_tail"],
                **row_diagnostics(logp),
            )
            # For summary(): the monitor's rows are training data, which the estimator does not keep.
            self._worst_row_log_proba = logp[..., self.diagnostics_["predictive_rows_worst"]]
        # The monitor holds training rows: the fitted estimator does not keep them.
        self._monitor = self._monitor_cache = None

    def _row_messages(self, floor):
        """What the per-row check of the predictive found (see :func:`row_diagnostics`)."""
        diag, messages = self.diagnostics_, []
        if diag.get("predictive_rows_high", 0):
            messages.append(
                f"the log predictive probabilities of {diag['predictive_rows_high']} of the monitored training "
                f"rows have split R-hat above {RHAT_MAX_ROWS} (worst {diag['predictive_rows_rhat']:.3f}): the "
                "chains predict those rows differently (still burning in, or in different modes). Run longer."
            )
        if diag.get("predictive_rows_ess_median", np.inf) < floor:
            messages.append(
                f"the median bulk ESS of the monitored rows' log predictive probabilities is "
                f"{diag['predictive_rows_ess_median']:.0f}, below {floor}: increase n_iter."
            )
        return messages

    def summary(self, ci=0.9, feature_names=None):
        """Posterior summary: first the predictive's convergence monitors, then every parameter.

        The first row is the per-draw training log loss (``sample_stats_["log_loss"]``), the
        second the log predictive probability of the monitored training row whose chains
        agree least (``diagnostics_["predictive_rows_worst"]`` among the monitored rows):
        the quantities whose R-hat and ESS say whether the DRBM has converged (see Notes);
        the parameters' own R-hat is large under hidden-unit swaps. Parameters as
        :meth:`BaseSGBayes.summary <skbayes_sg.SGBayesLogisticRegression.summary>`.

        Returns
        -------
        summary : skbayes_sg.diagnostics.PosteriorSummary
        """
        params = super().summary(ci, feature_names)
        if getattr(self, "_worst_row_log_proba", None) is None:
            return params
        row = self.diagnostics_["predictive_rows_worst"]
        monitors = diagnostics.posterior_summary(
            np.stack([self.sample_stats_["log_loss"], self._worst_row_log_proba], axis=-1),
            ["predictive: training log loss", f"predictive: log p(y|x), monitored row {row}"],
            ci,
        )
        for key, column in params.items():
            monitors[key] = (
                list(monitors[key]) + list(column) if key == "parameter" else np.concatenate([monitors[key], column])
            )
        return monitors

    def _convergence_messages(self):
        """What the convergence checks found, on the predictive monitor, not on the weights
        (see Notes); the shared ``fit`` issues them as one ``ConvergenceWarning``."""
        diag = self.diagnostics_
        if "predictive_rhat" not in diag:
            return []
        rhat, ess, ess_tail = diag["predictive_rhat"], diag["predictive_ess"], diag["predictive_ess_tail"]
        floor = ESS_MIN_PER_CHAIN * self.samples_.shape[0]
        messages = []
        if not np.isfinite(ess):
            messages.append(
                f"{self.samples_.shape[1]} draw(s) per chain are too few to assess convergence (R-hat and ESS "
                "need at least 4): increase n_iter or max_draws, or lower thin."
            )
        else:
            if rhat > RHAT_MAX:
                messages.append(
                    f"the split R-hat of the per-draw training log loss is {rhat:.3f} > {RHAT_MAX}: the chains "
                    "disagree on the predictive (one may still be burning in or stuck in a worse mode). Run "
                    "longer (a larger n_iter, which lengthens burn-in too)."
                )
            if min(ess, ess_tail) < floor:
                messages.append(
                    f"the bulk and tail ESS of the per-draw training log loss are {ess:.0f} and {ess_tail:.0f}, "
                    f"below {floor} ({ESS_MIN_PER_CHAIN} per chain): the predictive's Monte Carlo error is not "
                    "yet reliable. Increase n_iter."
                )
            messages += self._row_messages(floor)
        if messages and np.isfinite(ess):
            # ESS grows about linearly with the run (the rule of n_iter="auto").
            growth = required_growth(
                {"ess_bulk": [ess], "ess_tail": [ess_tail], "rhat": [rhat]},
                self.samples_.shape[0],
                self._run_length_ess_target,
            )
            suggest = int(np.ceil(self.n_iter_ * max(growth, 1.25) / 1000.0)) * 1000
            messages.append(f"about n_iter={suggest} would reach it.")
        if messages and self.n_iter == "auto" and diag.get("n_iter_blocks", [0])[-1] >= self._run_length_max_iter:
            messages.append(
                f"n_iter='auto' stopped at its ceiling of {diag['n_iter_blocks'][-1]} iterations per chain: the "
                "chains move too slowly for it. Use a larger step size or an explicit, larger n_iter."
            )
        return messages
