"""Tests for skbayes_sg.diagnostics.

Two kinds of checks:

* agreement with ArviZ (test-only dependency) on many random cases, with a
  relative tolerance of 1e-8. Observed differences are ~1e-14: they come
  from summation order (numpy reduces over a different axis layout than
  ArviZ's per-parameter 2-D arrays) and from batched vs single FFTs;
* ArviZ-free checks against closed-form results, so that the maths is
  tested even where ArviZ is not installed.
"""

import logging
import warnings

import numpy as np
import pytest
from scipy import signal
from scipy.stats import norm, rankdata

from skbayes_sg.diagnostics import (
    _mean_autocov,
    ess_bulk,
    ess_tail,
    mcse_mean,
    split_rhat,
    summarize,
)

RTOL = 1e-8
PHIS = (0.0, 0.5, 0.9, 0.99, -0.3)


def ar1(rng, n_chains, n_draws, n_params, phi):
    """Stationary Gaussian AR(1) chains with unit marginal variance."""
    eps = rng.normal(size=(n_chains, n_draws, n_params))
    eps[:, 0] /= np.sqrt(1.0 - phi**2)  # start in the stationary law
    x = signal.lfilter([1.0], [1.0, -phi], eps, axis=1)
    return x * np.sqrt(1.0 - phi**2)


def make_case(rng, n_chains, n_draws, phi):
    """Five parameters exercising different code paths."""
    x = ar1(rng, n_chains, n_draws, 5, phi)
    x[..., 1] = 2.5  # constant parameter
    x[0, :, 2] += 3.0  # one chain shifted -> large R-hat
    x[..., 3] = np.round(2.0 * x[..., 3])  # many ties in the ranks
    x[..., 4] = np.exp(3.0 * x[..., 4])  # heavy right tail, huge scale
    return x


def arviz_reference(az, x):
    """ArviZ diagnostics computed one parameter at a time."""
    cols = range(x.shape[2])
    return {
        "ess_bulk": np.array([az.ess(x[..., j], method="bulk") for j in cols], float),
        "ess_tail": np.array([az.ess(x[..., j], method="tail") for j in cols], float),
        "rhat": np.array([az.rhat(x[..., j], method="rank") for j in cols], float),
        "mcse_mean": np.array([az.mcse(x[..., j], method="mean") for j in cols], float),
    }


FUNCS = {
    "ess_bulk": ess_bulk,
    "ess_tail": ess_tail,
    "rhat": split_rhat,
    "mcse_mean": mcse_mean,
}


@pytest.fixture
def az():
    az = pytest.importorskip("arviz")
    # ArviZ logs a warning for each invalid shape / NaN and numpy warns on
    # its 0/0 R-hat for constant parameters; both are expected here.
    logging.getLogger("arviz").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield az


# ---------------------------------------------------------------------------
# Agreement with ArviZ
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("n_draws", [7, 100, 1001])
@pytest.mark.parametrize("n_chains", [1, 2, 3, 4])
@pytest.mark.parametrize("phi", PHIS)
def test_matches_arviz(az, phi, n_chains, n_draws):
    rng = np.random.default_rng([int(1000 * phi) % 997, n_chains, n_draws])
    x = make_case(rng, n_chains, n_draws, phi)
    ref = arviz_reference(az, x)
    summ = summarize(x)
    for key, func in FUNCS.items():
        got = func(x)
        assert got.shape == (5,)
        np.testing.assert_allclose(got, ref[key], rtol=RTOL, atol=0, err_msg=key)
        # summarize shares intermediates but must give the same numbers.
        np.testing.assert_array_equal(summ[key], got, err_msg=key)
    if n_chains >= 2 and n_draws >= 100:
        assert split_rhat(x)[2] > 1.1


@pytest.mark.parametrize("n_draws", [4, 5, 6])
@pytest.mark.parametrize("n_chains", [1, 2])
def test_matches_arviz_minimal_draws(az, n_chains, n_draws):
    rng = np.random.default_rng([n_chains, n_draws])
    x = make_case(rng, n_chains, n_draws, 0.5)
    ref = arviz_reference(az, x)
    for key, func in FUNCS.items():
        np.testing.assert_allclose(func(x), ref[key], rtol=RTOL, atol=0, err_msg=key)


def test_matches_arviz_degenerate_sequences(az):
    rng = np.random.default_rng(7)
    # Perfect alternation drives the lag-1 autocorrelation below -1, so
    # Geyer's sequence stops before its first pair and tau hits its floor.
    alternating = np.tile([1.0, -1.0], (3, 50))
    # Binary draws: almost everything is a tie.
    binary = (rng.random((3, 100)) < 0.1).astype(float)
    # Chains that are each constant but at different levels: zero
    # within-chain variance, infinite R-hat.
    levels = np.repeat(np.arange(3.0)[:, None], 40, axis=1)
    for x in (alternating, binary, levels):
        x3 = x[:, :, None]
        ref = arviz_reference(az, x3)
        for key, func in FUNCS.items():
            np.testing.assert_allclose(func(x3), ref[key], rtol=RTOL, atol=0, err_msg=key)
    assert ess_bulk(alternating) == pytest.approx(300 * np.log10(300))


def test_matches_arviz_summary(az):
    rng = np.random.default_rng(11)
    x = make_case(rng, 4, 250, 0.9)
    df = az.summary(az.convert_to_dataset({"b": x}), round_to="none")
    ours = summarize(x)
    for key, col in [
        ("mean", "mean"),
        ("sd", "sd"),
        ("mcse_mean", "mcse_mean"),
        ("ess_bulk", "ess_bulk"),
        ("ess_tail", "ess_tail"),
        ("rhat", "r_hat"),
    ]:
        np.testing.assert_allclose(ours[key], df[col].to_numpy(), rtol=RTOL, err_msg=key)


def test_constant_parameter_matches_arviz(az):
    x = np.full((3, 101), -1.25)
    # After splitting, 3 chains x 2 halves x 50 draws.
    assert ess_bulk(x) == az.ess(x, method="bulk") == 300
    assert ess_tail(x) == az.ess(x, method="tail") == 300
    assert mcse_mean(x) == az.mcse(x, method="mean") == 0.0
    assert np.isnan(split_rhat(x)) and np.isnan(az.rhat(x))


# ---------------------------------------------------------------------------
# ArviZ-free checks of the maths
# ---------------------------------------------------------------------------
@pytest.mark.statistical
def test_ess_iid_close_to_number_of_draws():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 2000, 20))
    n = x.shape[0] * x.shape[1]
    # For i.i.d. draws the relative sd of one Geyer ESS estimate is ~5% at
    # this length (tail ESS, a minimum of two noisy indicator ESSs, is
    # noisier and biased low). Bounds were checked over 20 seeds with margin
    # and still rule out e.g. a missing factor of 2 in tau.
    for func, per_param, average in ((ess_bulk, 0.2, 0.05), (ess_tail, 0.3, 0.1)):
        ess = func(x)
        assert np.all(np.abs(ess / n - 1) < per_param), func.__name__
        assert abs(ess.mean() / n - 1) < average, func.__name__
    # The ESS of the mean enters mcse: sd/sqrt(N) for i.i.d. draws.
    np.testing.assert_allclose(mcse_mean(x), x.std(axis=(0, 1), ddof=1) / np.sqrt(n), rtol=0.1)


@pytest.mark.statistical
@pytest.mark.parametrize("phi", [0.9, 0.5, -0.3])
def test_ess_ar1_matches_theory(phi):
    rng = np.random.default_rng(1)
    x = ar1(rng, 4, 20_000, 4, phi)
    n = x.shape[0] * x.shape[1]
    # Integrated autocorrelation time of AR(1): (1 + phi) / (1 - phi).
    # Rank normalisation of Gaussian draws is close to the identity, so the
    # bulk ESS targets the same value; with phi < 0 it exceeds n.
    theory = n * (1 - phi) / (1 + phi)
    # Over 30 seeds the worst parameter was 14% off and the worst average
    # of 4 parameters 5% off (phi = 0.9, the noisiest case).
    ess = ess_bulk(x)
    assert np.all(np.abs(ess / theory - 1) < 0.2)
    assert abs(ess.mean() / theory - 1) < 0.1
    np.testing.assert_allclose(mcse_mean(x), np.sqrt((1 + phi) / (1 - phi) / n), rtol=0.15)


@pytest.mark.statistical
def test_rhat_detects_shifted_chains():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 1000, 3))
    x[0, :, 1] += 2.0  # one chain off by two posterior sds
    x[:2, :, 2] *= 3.0  # same centre, different scale: only the tail R-hat sees it
    rhat = split_rhat(x)
    assert abs(rhat[0] - 1.0) < 0.01
    assert rhat[1] > 1.1
    assert rhat[2] > 1.1
    # Chains stuck apart: the between-chain variance makes every lag look
    # correlated, so the ESS collapses far below the number of draws.
    assert ess_bulk(x)[1] < 0.1 * x.shape[0] * x.shape[1]
    assert ess_bulk(x)[0] > 0.8 * x.shape[0] * x.shape[1]
    # Non-stationarity within a chain is what splitting is for.
    trend = rng.normal(size=(4, 1000)) + np.linspace(0, 3, 1000)
    assert split_rhat(trend) > 1.1


def _reference_split(x):
    half = x.shape[1] // 2
    return np.vstack([x[:, :half], x[:, x.shape[1] - half :]])


def _reference_z(x):
    ranks = rankdata(x, method="average").reshape(x.shape)
    return norm.ppf((ranks - 3 / 8) / (x.size + 1 / 4))


def _reference_ess(chains):
    """Geyer's estimator for one parameter, written pair by pair.

    Independent of the module: direct O(N^2) autocovariance, a plain loop
    over pairs Gamma_k = rho_2k + rho_2k+1 and a running minimum for the
    monotone sequence, with ArviZ's conventions for where to stop.
    """
    m, n = chains.shape
    if np.ptp(chains) < np.finfo(float).resolution:
        return float(m * n)
    centred = chains - chains.mean(axis=1, keepdims=True)
    acov = np.array([(centred[:, : n - k] * centred[:, k:]).sum(axis=1).mean() / n for k in range(n)])
    w = acov[0] * n / (n - 1)
    var_plus = w * (n - 1) / n + chains.mean(axis=1).var(ddof=1)
    rho = 1 - (w - acov) / var_plus
    rho[0] = 1.0
    # Initial positive sequence: add pairs until one has a non-positive sum
    # (ArviZ only looks at lags up to n - 2).
    pairs = [rho[0] + rho[1]]
    while 2 * len(pairs) - 1 < n - 3 and pairs[-1] > 0:
        k = len(pairs)
        pairs.append(rho[2 * k] + rho[2 * k + 1])
    last = len(pairs) - 1
    # Initial monotone sequence over the pairs before the last one.
    full = np.minimum.accumulate(pairs[:last]) if last else np.zeros(0)
    # Of the last pair only its even lag counts, if positive or if the
    # pair itself was non-negative.
    even = rho[2 * last]
    tail = even if (even > 0 or pairs[last] >= 0) else 0.0
    tau = -1 + 2 * full.sum() + tail
    return m * n / max(tau, 1 / np.log10(m * n))


@pytest.mark.parametrize("phi", PHIS + (-0.9,))
@pytest.mark.parametrize("n_chains, n_draws", [(1, 7), (2, 8), (4, 60), (3, 201)])
def test_ess_matches_scalar_reference(phi, n_chains, n_draws):
    rng = np.random.default_rng([n_chains, n_draws, int(100 * phi) % 97])
    x = ar1(rng, n_chains, n_draws, 2, phi)
    x[:, :, 1] = np.tile([1.0, -1.0], n_draws)[:n_draws]  # stops at pair 0
    for j in range(2):
        xj = x[:, :, j]
        split = _reference_split(xj)
        bulk = _reference_ess(_reference_z(split))
        assert ess_bulk(xj) == pytest.approx(bulk, rel=1e-9)
        sd = xj.std(ddof=1)
        assert mcse_mean(xj) == pytest.approx(sd / np.sqrt(_reference_ess(split)), rel=1e-9)
        tails = [_reference_ess(_reference_split((xj <= np.quantile(xj, q)).astype(float))) for q in (0.05, 0.95)]
        assert ess_tail(xj) == pytest.approx(min(tails), rel=1e-9)


def test_autocovariance_matches_direct_formula():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 17, 2))  # (C, N, P) as the user passes it
    centred = x - x.mean(axis=1, keepdims=True)
    n = x.shape[1]
    direct = np.array([(centred[:, : n - k] * centred[:, k:]).sum(axis=1).mean(axis=0) / n for k in range(n)])
    internal = np.ascontiguousarray(np.moveaxis(x, 2, 0))  # (P, C, N)
    np.testing.assert_allclose(_mean_autocov(internal), direct, rtol=1e-12, atol=1e-14)


def test_vectorised_equals_per_parameter():
    rng = np.random.default_rng(4)
    # Mixing autocorrelations makes parameters leave Geyer's sequences at
    # very different lags inside one call.
    x = np.concatenate([ar1(rng, 3, 301, 3, phi) for phi in PHIS], axis=2)
    x[..., 0] = 1.0
    x[1, 5, 4] = np.nan
    summ = summarize(x)
    for key, func in FUNCS.items():
        vec = func(x)
        per = np.array([func(x[..., j]) for j in range(x.shape[2])])
        # Not bit-identical: batched and single FFTs round differently.
        np.testing.assert_allclose(vec, per, rtol=1e-12, atol=0, err_msg=key)
        np.testing.assert_allclose(summ[key], per, rtol=1e-12, atol=0, err_msg=key)
    np.testing.assert_allclose(summ["mean"], x.mean(axis=(0, 1)))
    np.testing.assert_allclose(summ["sd"], x.std(axis=(0, 1), ddof=1))


# ---------------------------------------------------------------------------
# Edge cases and input handling
# ---------------------------------------------------------------------------
def test_too_few_draws_or_chains_give_nan():
    rng = np.random.default_rng(5)
    short = rng.normal(size=(4, 3, 2))
    for func in FUNCS.values():
        assert np.all(np.isnan(func(short)))
    one_chain = rng.normal(size=(1, 100, 2))
    assert np.all(np.isnan(split_rhat(one_chain)))
    assert np.all(np.isfinite(ess_bulk(one_chain)))
    summ = summarize(short)
    assert np.all(np.isnan(summ["ess_bulk"])) and np.all(np.isfinite(summ["mean"]))


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_non_finite_parameter_gives_nan_only_there(bad_value):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 50, 3))
    x[1, 7, 1] = bad_value
    before = x.copy()
    for func in FUNCS.values():
        out = func(x)
        assert np.isnan(out[1])
        assert np.all(np.isfinite(out[[0, 2]]))
    summ = summarize(x)
    assert np.isnan(summ["rhat"][1]) and np.isfinite(summ["rhat"][0])
    np.testing.assert_array_equal(x, before)  # input untouched
    single = x[:, :, 1].copy()
    for func in FUNCS.values():
        assert np.isnan(func(single))
    np.testing.assert_array_equal(single, before[:, :, 1])


def test_output_types_and_shapes():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(2, 40, 3))
    for func in FUNCS.values():
        assert func(x).shape == (3,)
        scalar = func(x[..., 0])
        assert isinstance(scalar, float)
        assert scalar == pytest.approx(func(x)[0], rel=1e-12)
    summ = summarize(x[..., 0])
    assert set(summ) == {"mean", "sd", "ess_bulk", "ess_tail", "rhat", "mcse_mean"}
    assert all(isinstance(v, float) for v in summ.values())
    for bad in (np.zeros(10), np.zeros((1, 2, 3, 4))):
        with pytest.raises(ValueError):
            ess_bulk(bad)


def test_average_ranks_match_scipy_with_ties():
    from scipy import stats

    from skbayes_sg.diagnostics import _average_ranks

    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 501))
    x[1, :40] = 0.0  # a run of ties
    x[2] = np.round(x[2])  # many runs
    x[3] = 2.0  # constant
    x[4] = np.abs(x[4] - np.median(x[4]))  # folded draws tie at the median
    x[5, -2:] = np.inf
    np.testing.assert_array_equal(_average_ranks(x), stats.rankdata(x, method="average", axis=1))


def test_summarize_of_a_single_draw_is_nan_without_numpy_warnings():
    # Issue 20: max_draws=1 with one chain leaked numpy's "Degrees of freedom <= 0".
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = summarize(np.ones((1, 1, 3)))
    assert np.all(np.isnan(out["sd"])) and np.all(np.isnan(out["rhat"]))
    np.testing.assert_array_equal(out["mean"], 1.0)


def test_summarize_is_scale_free_and_quiet_for_huge_draws():
    # Chains run far out under a near-flat prior (the property suite found draws near 1e160):
    # the autocovariances' squares overflowed and numpy's warnings reached the user. ESS and
    # R-hat are scale-free, so draws x 1e200 must give the same values, silently.
    import warnings

    x = np.random.default_rng(3).normal(size=(4, 200, 2)).cumsum(axis=1)
    base = summarize(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        huge = summarize(x * 2.0**664)  # a power of two: the values scale exactly
    for key in ("ess_bulk", "ess_tail", "rhat"):
        np.testing.assert_array_equal(huge[key], base[key])
    np.testing.assert_allclose(huge["mcse_mean"], base["mcse_mean"] * 2.0**664, rtol=1e-12)


def _reference_rhat_core(chains):
    n = chains.shape[1]
    between = n * chains.mean(axis=1).var(ddof=1)
    within = chains.var(axis=1, ddof=1).mean()
    return np.sqrt((between / within + n - 1) / n)


def test_summarize_at_run_length_sizes_equals_scalar_reference():
    """What ``n_iter="auto"`` computes after every block, for chains of the size it sees (the
    FFTs in cache-sized blocks, the chains' spectra averaged before the inverse transform,
    ranks from one sort per parameter, every ESS in one batch): equal to the plain one-parameter
    formulas to rounding, ties and an odd number of draws included."""
    rng = np.random.default_rng(31)
    for n_draws in (1201, 1200):
        x = ar1(rng, 4, n_draws, 3, 0.8)
        x[..., 1] = np.round(2.0 * x[..., 1])  # many ties
        x[0, :, 2] += 0.3  # one chain apart
        summ = summarize(x)
        for j in range(3):
            xj = x[:, :, j]
            split = _reference_split(xj)
            z = _reference_z(split)
            folded = np.abs(split - np.median(split))
            tails = [_reference_ess(_reference_split((xj <= np.quantile(xj, q)).astype(float))) for q in (0.05, 0.95)]
            ref = {
                "ess_bulk": _reference_ess(z),
                "ess_tail": min(tails),
                "mcse_mean": xj.std(ddof=1) / np.sqrt(_reference_ess(split)),
                "rhat": max(_reference_rhat_core(z), _reference_rhat_core(_reference_z(folded))),
            }
            for key, value in ref.items():
                assert summ[key][j] == pytest.approx(value, rel=1e-12), (n_draws, j, key)


def test_summarize_on_threads_is_summarize():
    # The parameters shared among threads give each its own numbers: ties, a constant and a
    # non-finite parameter included, and groups of unequal size.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 300, 61)).cumsum(axis=1) * 0.1 + rng.standard_normal((4, 300, 61))
    x[:, :, 3] = np.round(x[:, :, 3])
    x[:, :, 7] = 2.0
    x[1, 5, 11] = np.nan
    one = summarize(x)
    for n_threads in (2, 3):
        threaded = summarize(x, n_threads=n_threads)
        assert threaded.keys() == one.keys()
        for key in one:
            np.testing.assert_array_equal(threaded[key], one[key])


def test_z_scale_with_ties_in_every_row_matches_rankdata():
    # Rank normalisation scores every parameter's runs of tied draws at once (an exact
    # sampler's rejections repeat draws): each parameter's scores must be the per-parameter
    # rankdata reference, runs at the rows' ends and a constant parameter included.
    from skbayes_sg.diagnostics import _z_scale

    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4, 120))
    repeat = rng.random(x.shape) < 0.3
    for k in range(1, x.shape[2]):
        x[:, :, k] = np.where(repeat[:, :, k], x[:, :, k - 1], x[:, :, k])
    x[1] = np.round(x[1])  # long runs
    x[2] = 1.5  # constant: one run over the whole row
    x[3, :, -5:] = x[3].max() + 1.0  # a run at the end of the sorted row
    x[4, 0, :7] = x[4].min() - 1.0  # and at its start
    z = _z_scale(x)
    for i in range(x.shape[0]):
        np.testing.assert_array_equal(z[i], _reference_z(x[i]))
