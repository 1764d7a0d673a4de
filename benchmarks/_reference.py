"""Reference posteriors for the accuracy benchmarks: problems and their stored summaries.

Each problem is a Bayesian logistic regression with independent Gaussian priors
``N(0, 1 / alpha)`` on the weights and ``N(0, 1 / alpha_intercept)`` on the intercept, the
posterior that :class:`skbayes_sg.models.LogisticModel` defines. Every problem but
``"a9a_default"`` has the papers' isotropic prior, ``alpha_intercept = alpha`` (an
estimator compared with one passes ``alpha_intercept=alpha``, since its default intercept
prior is weaker); ``"a9a_default"`` has the estimators' default prior, what
``SGBayesLogisticRegression().fit(X, y)`` samples. Its reference summary (mean, sd and
covariance per coordinate) is computed once by full-data HMC in
``benchmarks/reference_posterior.py`` and stored in ``benchmarks/results/reference_<name>.npz``;
benchmarks read it with :func:`load_reference`, and the prior with :func:`problem_prior`.

Parameter layout, as skbayes_sg's: the ``D`` coefficients, then the intercept (``P = D + 1``).

Problems
--------
``"a9a"``
    LIBSVM a9a (UCI Adult), the training split of ``shared/data/a9a.npz``:
    32,560 x 123 binary features, y in {0, 1}; alpha = alpha_intercept = 1.
``"a9a_default"``
    The same data with the estimators' default prior: alpha = 1 on the coefficients,
    alpha_intercept = 0.01 (``N(0, 10^2)``) on the intercept.
``"a9a_unscaled"``
    The same with columns 0, 1 and 2 of X multiplied by 1000, a badly scaled problem
    (their coefficients' posterior sds are ~1000x smaller than the others'); alpha = 1,
    so the prior on those three coefficients is, in the original units, N(0, 1000^2).
``"synth_1e4"``, ``"synth_1e5"``
    Synthetic logistic regression with N = 10,000 / 100,000 rows and D = 20 standard
    normal features: ``rng = np.random.default_rng(20261124)``, then in this order
    ``w = 0.5 * rng.standard_normal(20)``, ``X = rng.standard_normal((N, 20))``,
    ``y = (rng.random(N) < sigmoid(X @ w)).astype(int)`` (true intercept 0); alpha = 1.
    The two sizes share ``w`` but not ``X`` beyond the first draws of the stream.
``"breast_cancer_raw"``
    :func:`sklearn.datasets.load_breast_cancer` (569 x 30) with its raw, unstandardised
    features (scales from ~1e-3 to ~1e3); alpha = 1.

All problems use ``fit_intercept=True``.
"""

from pathlib import Path

import numpy as np

__all__ = ["PROBLEMS", "make_problem", "problem_prior", "prior_precision", "load_reference", "reference_path"]

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
# The benchmark data live beside the repo (shared/ is not part of it).
DATA_DIR = REPO_ROOT.parent / "shared" / "data"
RESULTS_DIR = HERE / "results"

PROBLEMS = ("a9a", "a9a_default", "a9a_unscaled", "synth_1e4", "synth_1e5", "breast_cancer_raw")

#: Prior precisions ``(alpha, alpha_intercept)`` of each problem: the papers' isotropic
#: ``N(0, 1)`` on every coordinate, but for ``a9a_default`` the estimators' defaults
#: (``SGBayesLogisticRegression(alpha=1.0, alpha_intercept=0.01)``).
PRIORS = {name: (1.0, 1.0) for name in PROBLEMS}
PRIORS["a9a_default"] = (1.0, 0.01)

SYNTH_SEED = 20261124
SYNTH_D = 20
UNSCALED_COLUMNS = (0, 1, 2)
UNSCALED_FACTOR = 1000.0


def _a9a():
    data = np.load(DATA_DIR / "a9a.npz")
    # float64 now: the model's products with uint8 X would convert it on every pass.
    return np.ascontiguousarray(data["X_train"], dtype=np.float64), data["y_train"].astype(np.int64)


def _synthetic(n_samples):
    rng = np.random.default_rng(SYNTH_SEED)
    w = 0.5 * rng.standard_normal(SYNTH_D)
    X = rng.standard_normal((n_samples, SYNTH_D))
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    y = (rng.random(n_samples) < p).astype(np.int64)
    return X, y


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    return np.ascontiguousarray(data.data, dtype=np.float64), data.target.astype(np.int64)


def make_problem(name):
    """The data and prior of a reference problem.

    Parameters
    ----------
    name : str
        One of :data:`PROBLEMS`: ``"a9a"``, ``"a9a_unscaled"``, ``"synth_1e4"``,
        ``"synth_1e5"``, ``"breast_cancer_raw"`` (see the module docstring).

    Returns
    -------
    X : ndarray of shape (N, D), float64, C-contiguous
    y : ndarray of shape (N,), int64 with values in {0, 1}
    alpha : float
        Prior precision of every coefficient (of the intercept too but for ``"a9a_default"``;
        see :func:`problem_prior` for both).
    fit_intercept : bool
        Always True: the intercept is the last of the ``P = D + 1`` parameters.

    Examples
    --------
    >>> X, y, alpha, fit_intercept = make_problem("synth_1e4")
    >>> X.shape, alpha, fit_intercept
    ((10000, 20), 1.0, True)
    """
    if name in ("a9a", "a9a_default"):
        X, y = _a9a()
    elif name == "a9a_unscaled":
        X, y = _a9a()
        X[:, list(UNSCALED_COLUMNS)] *= UNSCALED_FACTOR
    elif name == "synth_1e4":
        X, y = _synthetic(10_000)
    elif name == "synth_1e5":
        X, y = _synthetic(100_000)
    elif name == "breast_cancer_raw":
        X, y = _breast_cancer()
    else:
        raise ValueError(f"unknown reference problem {name!r}; expected one of {PROBLEMS}")
    return X, y, PRIORS[name][0], True


def problem_prior(name):
    """``(alpha, alpha_intercept)``: the prior precisions of problem ``name``'s coefficients and
    intercept, as :class:`skbayes_sg.models.LogisticModel` and the estimators take them.

    Examples
    --------
    >>> problem_prior("a9a"), problem_prior("a9a_default")
    ((1.0, 1.0), (1.0, 0.01))
    """
    if name not in PRIORS:
        raise ValueError(f"unknown reference problem {name!r}; expected one of {PROBLEMS}")
    return PRIORS[name]


def prior_precision(name, n_features):
    """The prior precision of each of the ``P = n_features + 1`` coordinates of problem ``name``
    (coefficients, then the intercept): a float when they all share one (the papers' prior,
    whose arithmetic then stays that of a scalar), an array of shape (P,) otherwise."""
    alpha, alpha_intercept = problem_prior(name)
    if alpha == alpha_intercept:
        return float(alpha)
    return np.append(np.full(n_features, float(alpha)), float(alpha_intercept))


def reference_path(name):
    """Path of the stored reference summary of problem ``name`` (it may not exist yet)."""
    return RESULTS_DIR / f"reference_{name}.npz"


def load_reference(name):
    """The stored HMC reference posterior summary of problem ``name``.

    Parameters
    ----------
    name : str
        One of :data:`PROBLEMS`.

    Returns
    -------
    ref : dict
        ``mean``, ``sd`` (P,) and ``cov`` (P, P): posterior mean, standard deviation and
        covariance, coefficients first and the intercept last;
        ``map`` (P,) and ``laplace_sd`` (P,): the MAP point and ``sqrt(diag(H^-1))``;
        ``hessian`` (P, P): Hessian of the negative log posterior at the MAP;
        ``ess_bulk``, ``ess_tail``, ``rhat``, ``mcse_mean`` (P,): per-coordinate diagnostics;
        scalars ``ess_bulk_min``, ``ess_tail_min``, ``rhat_max``, ``n_draws`` (pooled kept
        draws), ``n_chains``, ``step_size``, ``accept_rate``, ``seconds``, ``seed``,
        ``alpha`` (coefficients), ``alpha_intercept``, ``fit_intercept``, ``n_samples``,
        ``n_features``; ``prior_precision`` (P,) (references computed before
        ``alpha_intercept`` was stored have the papers' prior: ``alpha_intercept = alpha``);
        ``laplace_mean_dev_max`` (max ``|map - mean| / sd``) and ``laplace_sd_dev_max``
        (max ``|laplace_sd / sd - 1|``).

    Raises
    ------
    FileNotFoundError
        If the reference has not been computed; the message gives the command that does.
    """
    path = reference_path(name)
    if not path.exists():
        raise FileNotFoundError(
            f"no reference posterior for {name!r} at {path}; compute it with "
            f"`python benchmarks/reference_posterior.py {name}` from the repo root"
        )
    with np.load(path) as data:
        ref = {key: data[key] for key in data.files}
    # 0-d arrays as Python scalars, so that callers can format and compare them directly.
    ref = {key: (value.item() if value.ndim == 0 else value) for key, value in ref.items()}
    # References saved before the prior was stored per coordinate have the papers' prior.
    ref.setdefault("alpha_intercept", ref["alpha"])
    ref.setdefault(
        "prior_precision",
        np.append(np.full(int(ref["n_features"]), float(ref["alpha"])), float(ref["alpha_intercept"])),
    )
    return ref
