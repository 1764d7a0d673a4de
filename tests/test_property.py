"""Property-based tests (hypothesis) of the estimators' contract on generated inputs (issue 20).

The property: a generated case (data of odd shapes, dtypes, containers and scales;
hyperparameters drawn from each estimator's ``_parameter_constraints``) ends either in a
fit whose predictions are finite and of the right shape, or in a ``ValueError`` whose
message names the problem. Anything else is a failure: another exception type, a
non-finite prediction, a warning that is not the library's (or scikit-learn's) own, or a
C library writing to the terminal (file descriptors 1 and 2 are captured at the OS level).

Runs: CI uses the ``"ci"`` profile, a bounded and derandomized number of examples, so the
suite stays fast and reproducible. ``SKBAYES_SG_FUZZ=<n>`` selects the large run (``n``
random examples per test, say 400), e.g. ``SKBAYES_SG_FUZZ=400 python -m pytest -m fuzz
tests/test_property.py``; ``benchmarks/fuzz_sweep.py`` runs the same cases and counts
outcomes (``benchmarks/results/fuzz_outcomes.json``).
"""

import contextlib
import ctypes
import os
import pickle
import re
import signal
import sys
import tempfile
import threading
import warnings
from numbers import Integral

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import Interval, StrOptions

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from skbayes_sg import SGBayesDRBMClassifier, SGBayesLinearRegression, SGBayesLogisticRegression  # noqa: E402
from skbayes_sg.exceptions import DivergenceError  # noqa: E402
from skbayes_sg.samplers import MLSGLD, SGHMC, SGLD, SGNHT, CCAdL, GadMALA, GadRWM, MCCAdL  # noqa: E402

pytestmark = pytest.mark.fuzz

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    print_blob=True,
    database=None,
    suppress_health_check=_HEALTH,
)
_FUZZ = int(os.environ.get("SKBAYES_SG_FUZZ", "0") or 0)
settings.register_profile(
    "fuzz",
    max_examples=max(_FUZZ, 1),
    deadline=None,
    derandomize=False,
    database=None,
    print_blob=True,
    suppress_health_check=_HEALTH,
)
PROFILE = "fuzz" if _FUZZ else "ci"

ESTIMATORS = {
    "logistic": SGBayesLogisticRegression,
    "linear": SGBayesLinearRegression,
    "drbm": SGBayesDRBMClassifier,
}

# -- data recipes ----------------------------------------------------------------------------

SCALES = [0.0, 1e-300, 1e-150, 1e-8, 1.0, 1.0, 1.0, 1e3, 1e8, 1e20, 1e100, 1e150, 1e300]
DTYPES = ["float64", "float32", "float16", "int64", "int8", "uint8", "bool"]
CONTAINERS = ["ndarray", "ndarray", "fortran", "list", "pandas", "csr", "csc", "coo", "memmap", "readonly", "strided"]


@st.composite
def features(draw, n_samples):
    """``(X, description)``: a feature matrix recipe, before its container."""
    n_features = draw(st.integers(0, 4) if draw(st.integers(0, 19)) == 0 else st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    kind = draw(st.sampled_from(["normal", "integers", "binary", "lognormal"]))
    if kind == "normal":
        X = rng.standard_normal((n_samples, n_features))
    elif kind == "integers":
        X = rng.integers(-5, 6, (n_samples, n_features)).astype(float)
    elif kind == "binary":
        X = rng.integers(0, 2, (n_samples, n_features)).astype(float)
    else:
        X = rng.lognormal(0.0, 3.0, (n_samples, n_features))
    scale = draw(st.sampled_from(SCALES))
    X = X * scale
    edits = draw(st.lists(st.sampled_from(["constant", "duplicate", "zero", "outlier", "none"]), max_size=2))
    if draw(st.integers(0, 7)) == 0:  # non-finite entries: a rarer recipe, always a ValueError
        edits.append(draw(st.sampled_from(["nan", "inf"])))
    for edit in edits:
        if n_features == 0 or n_samples == 0:
            break
        j = draw(st.integers(0, n_features - 1))
        if edit == "constant":
            X[:, j] = X[0, j]
        elif edit == "duplicate":
            X[:, j] = X[:, 0]
        elif edit == "zero":
            X[:, j] = 0.0
        elif edit == "outlier":
            X[draw(st.integers(0, n_samples - 1)), j] = draw(st.sampled_from([1e6, -1e12, 1e200]))
        elif edit == "nan":
            X[draw(st.integers(0, n_samples - 1)), j] = np.nan
        elif edit == "inf":
            X[draw(st.integers(0, n_samples - 1)), j] = draw(st.sampled_from([np.inf, -np.inf]))
    dtype = draw(st.sampled_from(DTYPES))
    with np.errstate(all="ignore"):
        if dtype.startswith("float"):
            X = X.astype(dtype)
        elif np.all(np.isfinite(X)) and np.all(np.abs(X) < 100):
            X = np.round(X).astype(dtype) if dtype != "bool" else X > 0
    return X, f"{kind} x{scale:g} {'+'.join(edits) or 'plain'} {X.dtype}"


def to_container(X, container, tmpdir):
    """``X`` in one of the containers a user may pass."""
    if container == "fortran":
        return np.asfortranarray(X)
    if container == "list":
        return X.tolist()
    if container == "pandas":
        pd = pytest.importorskip("pandas")
        return pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    if container in ("csr", "csc", "coo"):
        if X.dtype == np.float16 or X.dtype == bool:
            X = X.astype(np.float32)
        return getattr(sp, f"{container}_matrix")(X)
    if container == "memmap":
        fd, path = tempfile.mkstemp(suffix=".dat", dir=tmpdir)
        os.close(fd)
        mm = np.memmap(path, dtype=X.dtype, mode="w+", shape=X.shape)
        mm[:] = X
        mm.flush()
        return np.memmap(path, dtype=X.dtype, mode="r", shape=X.shape)
    if container == "readonly":
        X = X.copy()
        X.flags.writeable = False
        return X
    if container == "strided":
        wide = np.repeat(X, 2, axis=1) if X.shape[1] else X
        return wide[:, ::2]
    return X


@st.composite
def classification_targets(draw, n_samples):
    n_classes = draw(st.integers(1, 4) if draw(st.integers(0, 9)) == 0 else st.integers(2, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if draw(st.booleans()):
        y = np.arange(n_samples) % n_classes  # every class, one row each when n_samples == n_classes
    else:
        y = rng.integers(0, n_classes, n_samples)
    kind = draw(st.sampled_from(["int", "str", "float", "bool", "negative"]))
    if kind == "str":
        return np.array(["cat", "dog", "emu", "gnu"])[y]
    if kind == "float":
        return y.astype(float)
    if kind == "bool" and n_classes <= 2:
        return y.astype(bool)
    if kind == "negative":
        return -3 * y
    return y


@st.composite
def regression_targets(draw, X):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n = X.shape[0]
    kind = draw(st.sampled_from(["linear", "constant", "noise", "nan"]))
    scale = draw(st.sampled_from([1e-8, 1.0, 1.0, 1e3, 1e8, 1e150]))
    with np.errstate(all="ignore"):
        Xf = np.nan_to_num(np.asarray(X, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
        w = rng.standard_normal(X.shape[1])
        sx = np.abs(Xf).max() if Xf.size else 1.0
        y = (Xf / (sx if sx > 0 else 1.0)) @ w + rng.standard_normal(n)
    if kind == "constant":
        y = np.full(n, 2.5)
    elif kind == "noise":
        y = rng.standard_normal(n)
    y = y * scale
    if kind == "nan" and n:
        y[draw(st.integers(0, n - 1))] = np.nan
    return y


# -- hyperparameters from the estimators' constraints ------------------------------------------

SAMPLER_NAMES = ["sgld", "sghmc", "sgnht", "ccadl", "mccadl", "gadmala", "gadrwm"]
SAMPLER_CLASSES = {
    "sgld": SGLD,
    "sghmc": SGHMC,
    "sgnht": SGNHT,
    "ccadl": CCAdL,
    "mccadl": MCCAdL,
    "gadmala": GadMALA,
    "gadrwm": GadRWM,
}

#: Cost-bounded strategies for parameters whose full range would make a case slow (a tiny
#: fit keeps hundreds of cases within minutes); every other constraint is drawn generically.
OVERRIDES = {
    "n_iter": st.integers(1, 30),
    "burn_in": st.one_of(st.sampled_from(["auto", 0, 0.0, 0.5, 0.99]), st.integers(0, 12)),
    "thin": st.integers(1, 8),
    "batch_size": st.one_of(st.none(), st.just("auto"), st.integers(1, 15)),
    "n_chains": st.integers(1, 3),
    "n_jobs": st.sampled_from([None, 1]),
    "random_state": st.integers(0, 2**31 - 1),
    "max_draws": st.one_of(st.none(), st.just("auto"), st.integers(1, 5)),
    "verbose": st.just(0),
    "n_hidden": st.integers(1, 3),
    "warm_start": st.booleans(),
}

_POSITIVE_REALS = [1e-12, 1e-6, 1e-2, 1.0, 3.0, 1e3, 1e8]


def from_constraint(constraints):
    """A strategy for any value satisfying one of sklearn's parameter ``constraints``."""
    options = []
    for c in constraints:
        if c is None:
            options.append(st.none())
        elif c == "boolean":
            options.append(st.booleans())
        elif isinstance(c, StrOptions):
            options.append(st.sampled_from(sorted(c.options)))
        elif isinstance(c, Interval):
            if c.type is Integral or c.type is int:
                lo = 0 if c.left is None else int(c.left) + (c.closed in ("right", "neither"))
                options.append(st.integers(lo, lo + 5))
            else:
                lo = -np.inf if c.left is None else c.left
                hi = np.inf if c.right is None else c.right
                ok = [
                    v
                    for v in _POSITIVE_REALS + [0.0, 0.3, 0.9]
                    if (v > lo or (v == lo and c.closed in ("left", "both")))
                    and (v < hi or (v == hi and c.closed in ("right", "both")))
                ]
                options.append(st.sampled_from(ok))
        elif c == "random_state":
            options.append(st.integers(0, 2**31 - 1))
    return st.one_of(options) if options else None


@st.composite
def samplers(draw, allow_multilevel=False, valid=False):
    """A sampler name or instance; ``valid`` leaves out the invalid settings drawn to test errors."""
    name = draw(st.sampled_from(SAMPLER_NAMES + (["mlsgld"] if allow_multilevel else [])))
    if name == "mlsgld":
        # Multilevel cost follows the posterior's condition number, not n_iter (ill-
        # conditioned tiny posteriors take minutes by design; past MAX_AUTO_HORIZON
        # steps a path is a ValueError): bounded explicitly, as for the chains' n_iter.
        return MLSGLD(
            target_rmse=draw(st.sampled_from([0.3, 1.0])),
            n_initial=draw(st.integers(5, 20)),
            max_levels=draw(st.integers(1, 3)),
            horizon=draw(st.sampled_from([5, 20, 50])),
            step_size=draw(st.sampled_from(["auto", 1e-3])),
        )
    if name not in SAMPLER_CLASSES or draw(st.integers(0, 2)):
        return name
    cls = SAMPLER_CLASSES[name]
    kwargs = {}
    if "step_size" in cls().get_params():
        kwargs["step_size"] = draw(st.sampled_from(["auto", 1e-8, 1e-4, 1e-2, 1.0]))
    if "friction" in cls().get_params():
        kwargs["friction"] = draw(st.sampled_from([0.1, 1.0, 10.0]))
    if "preconditioner" in cls().get_params():
        kwargs["preconditioner"] = draw(
            st.sampled_from(["auto", "none", "diag", "dense", "auto"] + ([] if valid else ["full?"]))
        )
    if "cholesky" in cls().get_params():
        kwargs["cholesky"] = draw(st.sampled_from(["full", "diag"]))
    return cls(**kwargs)


@st.composite
def hyperparameters(draw, Estimator):
    params = {}
    for name, constraints in Estimator._parameter_constraints.items():
        if name == "sampler":
            params[name] = draw(samplers(allow_multilevel=True))
        elif name in OVERRIDES:
            params[name] = draw(OVERRIDES[name])
        else:
            strategy = from_constraint(constraints)
            assert strategy is not None, f"no strategy for {Estimator.__name__}.{name}: {constraints}"
            params[name] = draw(strategy)
    if draw(st.integers(0, 3)) == 0:
        # Metropolis-adjusted samplers with the full-data batch the issue names.
        params["sampler"], params["batch_size"] = draw(st.sampled_from(["gadmala", "gadrwm"])), None
    return params


@st.composite
def cases(draw, kind=None):
    """One generated case: ``(kind, params, X, y, description)``."""
    kind = kind or draw(st.sampled_from(sorted(ESTIMATORS)))
    n_samples = draw(st.integers(0, 12) if draw(st.integers(0, 24)) == 0 else st.integers(1, 12))
    X, what = draw(features(n_samples))
    if kind == "linear":
        y = draw(regression_targets(X))
    else:
        y = draw(classification_targets(n_samples))
    container = draw(st.sampled_from(CONTAINERS))
    params = draw(hyperparameters(ESTIMATORS[kind]))
    return kind, params, X, y, f"{what} {container}", container


# -- the outcome rule --------------------------------------------------------------------------

_libc = ctypes.CDLL(None) if sys.platform != "win32" else None


@contextlib.contextmanager
def captured_fds():
    """Everything written to file descriptors 1 and 2 inside the block, C libraries included.

    Yields a list that holds the captured text once the block exits.
    """
    out = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            if _libc is not None:
                _libc.fflush(None)  # C stdio buffers (LAPACK's xerbla prints with printf)
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))


def _own_warning(w):
    """Whether a warning is one the library (or scikit-learn's validation) means to give."""
    from sklearn import exceptions as skexc

    from skbayes_sg import exceptions as own

    categories = tuple(getattr(skexc, n) for n in dir(skexc) if n.endswith("Warning"))
    categories += tuple(getattr(own, n) for n in dir(own) if n.endswith("Warning"))
    # Plain UserWarning is what the library raises for its own advice (batch_size clipped...);
    # scipy's and numpy's warnings are RuntimeWarning or their own UserWarning subclasses.
    return issubclass(w.category, categories) or w.category is UserWarning


#: ValueError messages by the problem they name (the first pattern that matches).
ERROR_CLASSES = [
    # scikit-learn's InvalidParameterError, raised for estimators' and samplers' constraints
    # (before the non-finite pattern: "the range (0.0, inf)" would match it).
    ("parameter_constraint", r"The '\w+' parameter of \w+ must be"),
    ("non_finite_input", r"NaN|infinity|inf\b"),
    ("one_class", r"only one class|at least 2 classes"),
    ("too_few_samples", r"minimum of \d+ is required|n_samples=\d"),
    ("no_features", r"0 feature\(s\)"),
    ("ill_conditioned", r"ill-conditioned"),
    ("overflow_scale", r"overflow|Standardise"),
    ("schedule_keeps_no_draw", r"no draw would be kept|leaving no draws"),
    ("sampler_setting", r"batch_size|step_size|preconditioner|cholesky"),
    ("target_type", r"Unknown label type|continuous|classification"),
    ("dtype", r"dtype|could not convert|convert"),
    ("init", r"\binit\b"),
]


def classify_error(message):
    for name, pattern in ERROR_CLASSES:
        if re.search(pattern, message):
            return name
    return "other"


class CaseTimeout(Exception):
    """A case ran past its time budget: a tiny fit that does not finish is a hang."""


#: Seconds a tiny case may take (a fit here takes tens of milliseconds; the budget allows
#: for a loaded machine).
CASE_BUDGET = float(os.environ.get("SKBAYES_SG_FUZZ_BUDGET", "60"))


@contextlib.contextmanager
def time_budget(seconds):
    """Raise :class:`CaseTimeout` in the main thread after ``seconds`` (Unix; no-op elsewhere)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise CaseTimeout(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_case(kind, params, X, y, container, tmpdir):
    """Fit and predict one case; return ``(outcome, detail, n_own_warnings)``.

    ``outcome`` is ``"fit"``, ``"ValueError:<class>"`` or ``"bad:<reason>"``.
    """
    Estimator = ESTIMATORS[kind]
    Xc = to_container(X, container, tmpdir)
    detail = ""
    with captured_fds() as printed, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with time_budget(CASE_BUDGET):
                est = Estimator(**params)
                est.fit(Xc, y)
                if params.get("warm_start"):
                    est.fit(Xc, y)
                n_out = X.shape[0]
                if kind == "linear":
                    mean, std = est.predict(Xc, return_std=True)
                    preds = [(mean, (n_out,)), (std, (n_out,)), (est.predict(Xc), (n_out,))]
                    if not np.all(std >= 0):
                        preds.append((np.nan, ()))
                else:
                    proba = est.predict_proba(Xc)
                    K = est.classes_.size
                    preds = [(proba, (n_out, K))]
                    labels = est.predict(Xc)
                    if not np.all(np.isin(labels, est.classes_)) or labels.shape != (n_out,):
                        preds.append((np.nan, ()))
                    if n_out and not np.allclose(proba.sum(axis=1), 1.0):
                        preds.append((np.nan, ()))
                outcome = "fit"
                for values, shape in preds:
                    values = np.asarray(values, dtype=float)
                    if values.shape != shape or not np.all(np.isfinite(values)):
                        outcome, detail = (
                            "bad:prediction",
                            f"shape {values.shape} vs {shape}, finite {np.isfinite(values).all()}",
                        )
        except (ValueError, NotFittedError) as exc:
            message = str(exc)
            outcome, detail = f"ValueError:{classify_error(message)}", message
            if len(message) < 20:
                outcome = "bad:terse_error"
        except DivergenceError as exc:
            # The library's own clear error (it names the step size and the fix), for a
            # step size the user chose, or for the DRBM on unscaled features (it has no
            # preconditioner, by design, and its docs ask for scaled features). Otherwise
            # the automatic step size must be stable.
            # Also for a nearly flat prior in the features' units (alpha / max|X|^2 below
            # 1e-6): on separable rows the posterior is then nearly improper, and the
            # Euler-thermostat samplers (SGNHT, CCAdL) diverge on it (a finding the sweep
            # counts separately); below alpha = 1e-3 the message names the prior.
            explicit = not isinstance(getattr(params["sampler"], "step_size", "auto"), str)
            with np.errstate(all="ignore"):
                scale = np.nanmax(np.abs(np.asarray(X, dtype=float)), initial=0.0)
                flat = params.get("alpha", 1.0) < 1e-6 * max(scale, 1.0) ** 2 or "The prior is nearly flat" in str(exc)
            # A start the user put far out (the DRBM's init_scale), named by the message.
            far_start = "use a smaller init_scale" in str(exc)
            if explicit:
                outcome = "DivergenceError:explicit_step"
            elif kind == "drbm" and scale > 1e4 and "standardise the features" in str(exc):
                outcome = "DivergenceError:unscaled_drbm"
            elif kind == "linear" and np.nanmax(np.abs(y), initial=0.0) > 1e100 and "standardise" in str(exc):
                # Targets of 1e150 leave no float64 room for the products of residuals in
                # the noise-controlling samplers' covariance (the message says "features").
                outcome = "DivergenceError:unscaled_targets"
            elif flat:
                outcome = "DivergenceError:near_flat_prior"
            elif far_start:
                outcome = "DivergenceError:far_start"
            else:
                outcome = "bad:divergence"
            detail = str(exc)
        except CaseTimeout as exc:
            outcome, detail = "bad:timeout", str(exc)
        except Exception as exc:  # noqa: BLE001 - any other exception is the finding
            outcome, detail = f"bad:{type(exc).__name__}", str(exc)[:300]
    foreign = [w for w in caught if not _own_warning(w)]
    if foreign and not outcome.startswith("bad"):
        outcome = "bad:foreign_warning"
        detail = "; ".join(f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in foreign[:3])
    if printed[0].strip() and not outcome.startswith("bad"):
        outcome, detail = "bad:printed", printed[0][:300]
    return outcome, detail, len(caught) - len(foreign)


def _check(case, tmp_path):
    kind, params, X, y, what, container = case
    outcome, detail, _ = run_case(kind, params, X, y, container, str(tmp_path))
    assert not outcome.startswith("bad"), f"{outcome}: {detail}\n{kind} {what}\nparams={params}"


# -- the properties ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(ESTIMATORS))
def test_generated_inputs_fit_or_raise_a_clear_value_error(kind, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")

    @settings(settings.get_profile(PROFILE))
    @given(cases(kind))
    def check(case):
        _check(case, tmp)

    check()


@st.composite
def good_cases(draw):
    """Well-scaled data and hyperparameters that fit, for the reproducibility properties."""
    kind = draw(st.sampled_from(sorted(ESTIMATORS)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n, d = draw(st.integers(6, 15)), draw(st.integers(1, 3))
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + rng.standard_normal(n)
    if kind != "linear":
        y = np.arange(n) % draw(st.integers(2, 3))
    params = {
        "n_iter": draw(st.integers(8, 25)),
        "n_chains": draw(st.integers(2, 3)),
        "random_state": draw(st.integers(0, 2**31 - 1)),
        "sampler": draw(samplers(valid=True)),
        "batch_size": draw(st.sampled_from([None, "auto", 4])),
    }
    if isinstance(params["sampler"], (GadMALA, GadRWM)) or params["sampler"] in ("gadmala", "gadrwm"):
        params["batch_size"] = None
    if kind == "drbm":
        params["n_hidden"] = draw(st.integers(1, 3))
    return kind, params, X, y


def _fit_quietly(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


@settings(settings.get_profile(PROFILE), max_examples=max(3, settings.get_profile(PROFILE).max_examples // 8))
@given(good_cases())
def test_draws_are_bit_identical_whatever_n_jobs(case):
    kind, params, X, y = case
    one = _fit_quietly(ESTIMATORS[kind](n_jobs=1, **params), X, y)
    two = _fit_quietly(ESTIMATORS[kind](n_jobs=2, **params), X, y)
    np.testing.assert_array_equal(one.samples_, two.samples_)


@settings(settings.get_profile(PROFILE), max_examples=max(5, settings.get_profile(PROFILE).max_examples // 3))
@given(good_cases())
def test_clone_and_pickle_round_trips_predict_identically(case):
    kind, params, X, y = case
    est = ESTIMATORS[kind](**params)
    twin = clone(est)
    assert twin.get_params() == est.get_params() or repr(twin.get_params()) == repr(est.get_params())
    _fit_quietly(est, X, y)
    _fit_quietly(twin, X, y)
    np.testing.assert_array_equal(est.samples_, twin.samples_)
    restored = pickle.loads(pickle.dumps(est))
    predict = (lambda m: m.predict(X, return_std=True)) if kind == "linear" else (lambda m: m.predict_proba(X))
    for a, b in zip(np.atleast_2d(predict(est)), np.atleast_2d(predict(restored))):
        np.testing.assert_array_equal(a, b)
