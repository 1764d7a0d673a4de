"""Multilevel SGLD's hyperparameters; its set-up (:func:`skbayes_sg.multilevel.estimate`), coupled
paths and Giles' allocation are :mod:`skbayes_sg.multilevel`, and the fit layer
(:mod:`skbayes_sg._fit`) makes it an estimator's strategy (signed-weight draws instead of chains)."""

from numbers import Integral

from ._base import AUTO, POSITIVE, POSITIVE_INT, BaseSampler, _Number


class MLSGLD(BaseSampler):
    """Multilevel stochastic gradient Langevin dynamics (Nagapetyan et al. 2017).

    Not a Markov chain: the estimator fits by :func:`skbayes_sg.multilevel.estimate`, the
    multilevel Monte Carlo driver, with ``g`` the parameter vector. Levels
    ``l = 0..L`` run SGLD at step sizes ``h_l = h_0 2^-l`` over horizons
    ``T_l = m (l + 1) h_0``; fine and coarse paths are coupled (shared Gaussian increments,
    minibatches as in the paper's eq. 8 or antithetic, eq. 10), and the number of samples
    per level and of levels are chosen so that every posterior mean coordinate has RMSE
    at most ``target_rmse`` posterior standard deviations (sd estimated at level 0).

    The estimator stores the coupled states as ``samples_`` with signed weights in
    ``sample_weight_`` (fine states positive, coarse ones negative; level 0's sum to 1,
    every other level's to 0), so that ``coef_``, ``predict`` and ``predict_proba`` are the
    multilevel (telescoping) estimates, unbiased up to the finest level's bias. Because
    weights are signed, a weighted average of probabilities can leave [0, 1] by Monte Carlo
    error; the classifiers clip and renormalise ``predict_proba``. Draws are not samples of
    the posterior: use the weights for every summary (quantiles of ``coef_samples_`` are
    meaningless). ``diagnostics_`` holds ``n_grad_evals`` (data items touched by the paths,
    the paper's cost unit), ``n_grad_evals_setup`` (Hessian and gradient at the start),
    ``levels`` (per level: step size, steps, ``N_l``, mean and variance of ``Delta_l``,
    cost per sample), ``rmse`` (estimated, per parameter), ``converged``, ``weak_rate`` and
    ``variance_rate`` (Giles' ``alpha`` and ``beta``: the fitted decay in ``l`` of
    ``|E Delta_l|`` and ``V_l``, log base 2), and ``n_iter`` (SGLD steps over all paths). The
    estimator's ``n_iter``, ``burn_in``, ``thin``,
    ``n_chains`` and ``warm_start`` do not apply; its ``batch_size`` is the minibatch size
    ``n`` (the paper uses ``ceil(N^(1/3))``) and ``init`` the start and Taylor expansion
    point ``theta_0`` (``"map"``, the default, as in the paper).

    Parameters
    ----------
    target_rmse : float or array-like of shape (q,), default=0.1
        RMSE target of each posterior mean coordinate, in units of its posterior standard
        deviation (for :func:`~skbayes_sg.multilevel.estimate`, of each ``g_j``, in its ``rmse_units``).
    antithetic : bool, default=True
        Antithetic coupling (section 3.2): level variances ``V_l = O(h_l^2)`` and cost
        ``O(eps^-2)``. False: the plain coupling (section 3.1), ``V_l = O(h_l)``.
    taylor : bool or "auto", default="auto"
        Taylor-based stochastic gradient around ``theta_0`` (section 3.4,
        :class:`~skbayes_sg.minibatch.TaylorControlVariateGradient`): exact full-data
        gradient and Hessian at ``theta_0``, only the remainder subsampled; makes the cost
        grow sublinearly in N. Forms the P x P Hessian once, and each step applies it to every
        path (O(P^2) per path-step against O(n P) for the minibatch). ``"auto"`` uses it up to
        ``P = 200`` parameters, where the P x P product stays cheap next to the variance
        reduction it buys (about 100x per level in ``benchmarks/mlsgld.py``).
    averaging : bool, default=False
        Average over the end of each path (section 3.3); keeps more draws.
    step_size : float or "auto", default="auto"
        ``h_0``; ``"auto"`` is ``0.25 / lambda_max`` (largest curvature at ``theta_0``).
    horizon : int or "auto", default="auto"
        ``m`` in ``T_l = m (l + 1) h_0``; ``"auto"`` makes ``T_0`` at least one relaxation
        time ``1 / lambda_min`` (and ``m >= 5``, the paper's value).
    n_initial : int, default=100
        Samples per level in the driver's first round.
    max_levels : int, default=10
        Finest level allowed (at least 2: the estimate starts from levels 0, 1 and 2).
    max_grad_evals : float or None, default=2e8
        Budget of per-example gradient evaluations (the paper's cost unit). Before each
        round of samples the estimate checks what it has spent plus what the round needs;
        over the budget it raises a ``ValueError`` saying how much the target would take,
        instead of running for hours (unscaled features inflate the levels' variance and
        with it the samples ``target_rmse`` needs). 2e8 is about 40 s of paths on tiny data
        (where each step's fixed cost dominates) and 6,000 passes over a9a. None: no budget.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import scale
    >>> from skbayes_sg import SGBayesLogisticRegression
    >>> from skbayes_sg.samplers import MLSGLD
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = SGBayesLogisticRegression(sampler=MLSGLD(target_rmse=0.2), random_state=0)
    """

    #: Largest number of parameters for which ``taylor="auto"`` uses the Taylor gradient.
    TAYLOR_MAX_PARAMS = 200

    _parameter_constraints: dict = {
        "target_rmse": [POSITIVE, "array-like"],
        "antithetic": ["boolean"],
        "taylor": ["boolean", AUTO],
        "averaging": ["boolean"],
        "step_size": [POSITIVE, AUTO],
        "horizon": [POSITIVE_INT, AUTO],
        "n_initial": [POSITIVE_INT],
        # Giles' algorithm starts from levels 0, 1 and 2.
        "max_levels": [_Number(Integral, 2, None, closed="left")],
        "max_grad_evals": [POSITIVE, None],
    }

    def __init__(
        self,
        target_rmse=0.1,
        antithetic=True,
        taylor="auto",
        averaging=False,
        step_size="auto",
        horizon="auto",
        n_initial=100,
        max_levels=10,
        max_grad_evals=2e8,
    ):
        self.target_rmse = target_rmse
        self.antithetic = antithetic
        self.taylor = taylor
        self.averaging = averaging
        self.step_size = step_size
        self.horizon = horizon
        self.n_initial = n_initial
        self.max_levels = max_levels
        self.max_grad_evals = max_grad_evals
