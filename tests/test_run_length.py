"""``n_iter="auto"``: the run-length rule and the extension of running chains."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skbayes_sg import SGBayesLinearRegression, _run_length
from skbayes_sg._chains import ChainRunner, ChainSpec, draw_schedule
from skbayes_sg._run_length import Schedule, next_schedule, required_growth
from skbayes_sg.models import LinearRegressionModel
from skbayes_sg.samplers import SGLD


def _summary(ess_bulk, ess_tail=None, rhat=None, P=3):
    ess_bulk = np.full(P, float(ess_bulk))
    return {
        "ess_bulk": ess_bulk,
        "ess_tail": ess_bulk if ess_tail is None else np.full(P, float(ess_tail)),
        "rhat": np.full(P, 1.001 if rhat is None else rhat),
    }


def _data(n=300, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, X @ rng.standard_normal(d) + rng.standard_normal(n)


def test_stops_when_every_target_is_met():
    met = _summary(1000, 400, 1.009)
    assert required_growth(met, 4) <= 1
    assert next_schedule(Schedule(1000, 200, 1), met, 0.2, 1000, 4) is None
    # Each target alone keeps it running.
    for summary in (_summary(999, 400, 1.0), _summary(2000, 399, 1.0), _summary(2000, 2000, 1.0101)):
        assert next_schedule(Schedule(1000, 200, 1), summary, 0.2, 1000, 4) is not None


def test_growth_follows_the_predicted_ess():
    # ESS 500 after 800 kept draws: 1,600 kept draws predicted to reach 1,000, plus the margin.
    nxt = next_schedule(Schedule(1000, 200, 1), _summary(500), 0.2, None, 4)
    assert nxt.n_iter == int(np.ceil(800 * 2 * _run_length.MARGIN / 0.8))
    assert nxt.n_burn == round(0.2 * nxt.n_iter) and nxt.eff_thin == 1
    # Growth is bounded: a tiny ESS asks for at most MAX_GROWTH, a nearly met one for MIN_GROWTH.
    assert next_schedule(Schedule(1000, 200, 1), _summary(10), 0.2, None, 4).n_iter == 4000
    assert next_schedule(Schedule(1000, 200, 1), _summary(990), 0.2, None, 4).n_iter == 1250
    # A failing R-hat alone: R-hat - 1 falls as 1 / n, so the kept draws grow by the predicted
    # factor with the margin (1.015: 1.5 x 1.1), a just failing one by MIN_GROWTH, a far failing
    # or infinite one at most double; a count of burn-in stays put.
    for rhat, growth in (
        (1.015, 1.5 * _run_length.MARGIN),
        (1.0102, _run_length.MIN_GROWTH),
        (1.05, 2.0),
        (np.inf, 2.0),
    ):
        nxt = next_schedule(Schedule(1000, 100, 1), _summary(5000, rhat=rhat), 100, None, 4)
        assert (nxt.n_iter, nxt.n_burn) == (100 + int(np.ceil(900 * growth - 1e-9)), 100), rhat
    # One chain has no R-hat: its ESS alone decides.
    assert required_growth(_summary(5000, rhat=np.nan), 1) <= 1
    # At the ceiling it stops, met or not.
    assert next_schedule(Schedule(5000, 1000, 1), _summary(10), 0.2, None, 4, max_iter=5000) is None


def test_thinning_doubles_and_the_stored_grid_is_kept():
    old = Schedule(1000, 200, 1)
    nxt = next_schedule(old, _summary(100), 0.2, 1000, 4)
    assert nxt.n_draws <= 1000 and nxt.eff_thin in (2, 4)
    # The new burn-in lies on the old grid modulo the new thinning, so that every
    # stored draw the new schedule keeps is on its grid.
    assert (nxt.n_burn - old.n_burn) % nxt.eff_thin == 0


def test_extended_chain_equals_one_run_of_the_final_schedule():
    X, y = _data()
    model = LinearRegressionModel(X, y, alpha=1.0, fit_intercept=True, noise_precision=1.0)
    seed = np.random.SeedSequence(7)
    start = np.zeros(model.n_params)
    sampler = SGLD(step_size=0.002, preconditioner="none")
    a = ChainRunner(ChainSpec(sampler, model, 300, 60, 1, 100), start, seed)
    a.advance()
    assert a.eff_thin == draw_schedule(300, 60, 1, 100)[0] == 3
    nxt = next_schedule(Schedule(300, 60, 3), _summary(50), 0.2, 100, 1)
    assert nxt.eff_thin % 3 == 0 and nxt.n_burn > 60
    a.extend(nxt.n_iter, nxt.n_burn, nxt.eff_thin).advance()
    b = ChainRunner(ChainSpec(sampler, model, nxt.n_iter, nxt.n_burn, nxt.eff_thin), start, seed)
    b.advance()
    assert a.draws.shape == b.draws.shape == (nxt.n_draws, model.n_params)
    np.testing.assert_array_equal(a.draws, b.draws)


def test_extend_refuses_a_schedule_off_the_grid():
    X, y = _data()
    model = LinearRegressionModel(X, y, alpha=1.0, fit_intercept=True, noise_precision=1.0)
    spec = ChainSpec(SGLD(step_size=0.002, preconditioner="none"), model, 100, 20, 2)
    runner = ChainRunner(spec, np.zeros(model.n_params), np.random.SeedSequence(0))
    with pytest.raises(ValueError, match="cannot extend"):
        runner.extend(200, 21, 2)
    with pytest.raises(ValueError, match="cannot extend"):
        runner.extend(200, 40, 3)


def test_auto_fit_meets_its_targets_and_equals_a_fixed_fit_of_its_length():
    X, y = _data()
    kw = dict(sampler="sgld", burn_in=100, max_draws=None, n_chains=4, random_state=3, noise_precision=1.0)
    auto = SGBayesLinearRegression(n_iter="auto", **kw).fit(X, y)
    blocks = auto.diagnostics_["n_iter_blocks"]
    assert len(blocks) >= 2 and blocks[0] == 100 + 800, blocks  # the first block alone was too short
    assert auto.n_iter_ == blocks[-1]
    assert auto.diagnostics_["ess"].min() >= _run_length.ESS_TARGET
    assert auto.diagnostics_["rhat"].max() < _run_length.RHAT_MAX
    fixed = SGBayesLinearRegression(n_iter=auto.n_iter_, **kw).fit(X, y)
    np.testing.assert_array_equal(auto.samples_, fixed.samples_)


def test_auto_warns_at_its_ceiling(monkeypatch):
    monkeypatch.setattr(_run_length, "MAX_ITER", 1500)
    monkeypatch.setattr(_run_length, "ESS_TARGET", 10**9)
    X, y = _data()
    est = SGBayesLinearRegression(sampler="sgld", n_chains=2, random_state=0, noise_precision=1.0)
    with pytest.warns(ConvergenceWarning, match="ceiling of 1500 iterations"):
        est.fit(X, y)
    assert est.n_iter_ == 1500


def test_warm_start_auto_continues_until_the_new_draws_meet_the_targets():
    X, y = _data()
    est = SGBayesLinearRegression(n_iter=400, warm_start=True, max_draws=None, random_state=0, noise_precision=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    first = est.samples_.shape[1]
    est.set_params(n_iter="auto").fit(X, y)
    new = est.samples_[:, first:]
    from skbayes_sg import diagnostics

    assert diagnostics.ess_bulk(new).min() >= _run_length.ESS_TARGET
    assert est.n_iter_ == 400 + est.diagnostics_["n_iter_blocks"][-1]


def test_adaptive_samplers_first_block_covers_their_adaptation():
    assert _run_length.first_n_iter("auto", 0.2) == _run_length.FIRST_BLOCK
    assert _run_length.first_n_iter("auto", 0.2, 1000) == 5000
    assert _run_length.first_n_iter("auto", 0.0, 1000) == _run_length.FIRST_BLOCK
    assert _run_length.first_n_iter(300, 0.2, 1000) == 300
    X, y = _data(n=150)
    y = (y > 0).astype(int)
    from skbayes_sg import SGBayesLogisticRegression

    # From Laplace draws (init="map", the default) the proposal starts optimally scaled and
    # adapts for 250 iterations, 5% of the first block; from elsewhere, for 1,000 (20%).
    est = SGBayesLogisticRegression(sampler="gadmala", batch_size=None, n_chains=2, random_state=0).fit(X, y)
    assert est.diagnostics_["n_iter_blocks"][0] == 5000
    assert est.diagnostics_["n_adapt_steps"] == 2 * 250
    est.set_params(init="zeros").fit(X, y)
    assert est.diagnostics_["n_iter_blocks"][0] == 5000
    assert est.diagnostics_["n_adapt_steps"] == 2 * 1000


def test_n_iter_must_be_a_positive_int_or_auto():
    X, y = _data()
    with pytest.raises(ValueError, match="n_iter"):
        SGBayesLinearRegression(n_iter="long").fit(X, y)


def test_a_schedule_that_keeps_no_draw_is_a_clear_error():
    # Issue 20: thin=50 on n_iter=20 raised ZeroDivisionError from the diagnostics.
    X, y = _data(n=20)
    with pytest.raises(ValueError, match="no draw would be kept"):
        SGBayesLinearRegression(n_iter=20, thin=50, noise_precision=1.0).fit(X, y)


def test_too_few_draws_warn_that_convergence_cannot_be_assessed():
    X, y = _data(n=20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SGBayesLinearRegression(n_iter=20, n_chains=1, max_draws=1, noise_precision=1.0).fit(X, y)
    messages = [str(w.message) for w in caught]
    assert all(issubclass(w.category, ConvergenceWarning) for w in caught), messages
    assert any("too few to assess convergence" in m for m in messages), messages


def test_dense_map_mccadl_chains_start_with_the_samplers_first_block():
    # mCCAdL's chains whitened densely at the MAP, at the automatic step and burn-in, reach the
    # ESS target at about 2,000 iterations: their first block is that long. Any other setting
    # starts with FIRST_BLOCK.
    from skbayes_sg import SGBayesLogisticRegression
    from skbayes_sg._fit._plan import first_schedule
    from skbayes_sg.samplers import MCCAdL

    def first(sampler, **kw):
        return first_schedule(SGBayesLogisticRegression(**kw), sampler, 124, False)[2].n_iter

    assert first(MCCAdL()) == MCCAdL._dense_map_first_block
    assert first(MCCAdL(step_size=0.1)) == _run_length.FIRST_BLOCK
    assert first(MCCAdL(), burn_in=0.2) == _run_length.FIRST_BLOCK
    assert first(MCCAdL(), init="zeros") == _run_length.FIRST_BLOCK
    assert first(MCCAdL(preconditioner="diag")) == _run_length.FIRST_BLOCK
    assert first(MCCAdL(), n_iter=300) == 300
