"""Multilevel SGLD's hyperparameters and set-up, and its estimation strategy (signed-weight draws
instead of chains); the coupled paths and Giles' allocation are :mod:`skbayes_sg.multilevel`."""

import math
from numbers import Integral

import numpy as np

from ..models import find_map
from ._base import AUTO, POSITIVE, POSITIVE_INT, BaseSampler, _Number
from ._step_size import multilevel_step_and_horizon


class MLSGLD(BaseSampler):
    """Multilevel stochastic gradient Langevin dynamics (Nagapetyan et al. 2017).

    Not a Markov chain: the estimator fits by :meth:`estimate`, the multilevel Monte Carlo
    driver of :mod:`skbayes_sg.multilevel`, with ``g`` the parameter vector. Levels
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
        deviation (for :meth:`estimate`, of each ``g_j``, in its ``rmse_units``).
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

    def estimate(
        self,
        model,
        g=None,
        *,
        theta0=None,
        rmse_units="posterior_sd",
        batch_size="auto",
        n_jobs=None,
        random_state=None,
        keep_draws=False,
        verbose=0,
    ):
        """Multilevel SGLD estimate of the posterior expectation ``E[g(theta)]`` to RMSE ``target_rmse``.

        Sets up :class:`~skbayes_sg.multilevel.CoupledSGLD` levels from ``theta0``, at this
        sampler's ``h_0`` and ``m`` (resolved here from the curvature at ``theta0``, as a chain
        sampler resolves its ``h`` in ``init_state``), and runs Giles' driver
        :func:`~skbayes_sg.multilevel.mlmc` on them.

        Parameters
        ----------
        model : Model
            For instance ``LogisticModel(X, y)`` from :mod:`skbayes_sg.models`.
        g : callable or None, default=None
            Maps states (M, P) to (M,) or (M, q). None estimates the posterior mean.
        theta0 : ndarray of shape (P,), optional
            Start of every path and Taylor expansion point; by default the estimators' MAP
            (:func:`~skbayes_sg.models.find_map`).
        rmse_units : {"posterior_sd", "absolute"}, default="posterior_sd"
            ``target_rmse`` in units of each ``g_j``'s sd at level 0, or as given (then it may
            also be an array of shape (q,)).
        batch_size : int, "auto" or None, default="auto"
            ``n``; ``"auto"``: the paper's ``ceil(N^(1/3))``; None: the full data.
        n_jobs, random_state, keep_draws, verbose
            As in :func:`~skbayes_sg.multilevel.mlmc` (``random_state`` its ``seed``).

        Returns
        -------
        MultilevelResult
            Its ``n_grad_evals_setup`` counts the data items the set-up touched (MAP and
            Hessians); ``settings`` holds ``theta0``, ``step_size``, ``horizon``,
            ``batch_size``, ``taylor``, ``lambda_max`` and ``lambda_min``.

        Examples
        --------
        >>> import numpy as np
        >>> from skbayes_sg.models import LogisticModel
        >>> from skbayes_sg.samplers import MLSGLD
        >>> rng = np.random.default_rng(0)
        >>> X = rng.standard_normal((1000, 2))
        >>> y = (rng.random(1000) < 1 / (1 + np.exp(-X @ [1.0, -0.5]))).astype(float)
        >>> res = MLSGLD(target_rmse=0.2).estimate(LogisticModel(X, y), random_state=0)
        >>> res.estimate.shape
        (3,)
        """
        # The mechanism sits above the samplers (it steps the shared SGLD transition in the chain
        # driver's rounds), so it is imported where it is used.
        from ..multilevel import CoupledSGLD, mlmc

        self.validate()
        N, setup = model.n_samples, 0
        if theta0 is None:
            theta0, passes = find_map(model)
            setup += passes * N
        theta0 = np.asarray(theta0, dtype=float)
        if theta0.shape != (model.n_params,):
            raise ValueError(
                f"theta0 must have shape ({model.n_params},), one value per parameter; got {theta0.shape}."
            )
        if batch_size == "auto":
            batch_size = math.ceil(N ** (1.0 / 3.0) - 1e-9)
        elif batch_size is not None and (not isinstance(batch_size, Integral) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int, 'auto' or None; got {batch_size!r}.")
        taylor = model.n_params <= self.TAYLOR_MAX_PARAMS if self.taylor == "auto" else self.taylor
        H_post = model.posterior_hessian(theta0)
        h0, m, lam_max, lam_min = multilevel_step_and_horizon(H_post, self.step_size, self.horizon)
        coupled = CoupledSGLD(
            model, theta0, h0, m, batch_size, antithetic=self.antithetic, taylor=taylor, averaging=self.averaging
        )
        result = mlmc(
            coupled,
            g,
            self,
            rmse_units=rmse_units,
            seed=random_state,
            n_jobs=n_jobs,
            keep_draws=keep_draws,
            verbose=verbose,
        )
        # The posterior Hessian, and the Taylor gradient's full-data Hessian and gradient at theta0.
        result.n_grad_evals_setup = int(setup + (3 if coupled.taylor else 1) * N)
        result.settings = {
            "theta0": theta0,
            "step_size": h0,
            "horizon": m,
            "batch_size": coupled.batch_size,
            "taylor": coupled.taylor,
            "lambda_max": lam_max,
            "lambda_min": lam_min,
        }
        return result

    def fit_estimator(self, estimator, X, y, model, batch_size, streaming=False):
        """The multilevel strategy: :meth:`estimate` of the posterior mean.

        Starts every path at, and expands the Taylor gradient around, the estimator's start
        (its MAP with ``init="map"``), and stores the coupled states with signed weights
        (:meth:`~skbayes_sg._estimator.BaseSGBayes._set_weighted_draws`).
        """
        if not estimator._supports_multilevel:
            raise ValueError(
                f"{type(estimator).__name__} does not support multilevel samplers ({type(self).__name__}): their "
                "coupled paths evaluate this model's gradients one path at a time, minutes even on small data. "
                "Use a chain sampler, such as the default sampler='mccadl'."
            )
        if streaming:
            raise ValueError("partial_fit does not support multilevel samplers; use fit.")
        res = self.estimate(
            model,
            theta0=estimator._initial_points(model)[0],
            # "auto" goes through unresolved: the paper's n = ceil(N^(1/3)).
            batch_size="auto" if estimator.batch_size == "auto" else batch_size,
            n_jobs=estimator.n_jobs,
            random_state=estimator._seeds(0)[0],
            keep_draws=True,
            verbose=estimator.verbose,
        )
        keys = ("n_grad_evals", "n_grad_evals_setup", "n_iter", "levels", "rmse", "target_rmse", "converged")
        diag = {k: getattr(res, k) for k in keys + ("weak_rate", "variance_rate")}
        # The start is the estimator's own (its init), so it is not repeated among the settings.
        diag.update({k: v for k, v in res.settings.items() if k != "theta0"}, n_levels=len(res.levels))
        return estimator._set_weighted_draws(self, model, res.draws, res.weights, diag)
