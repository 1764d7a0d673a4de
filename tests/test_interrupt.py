"""Interrupting a fit (Ctrl-C): the estimator keeps the draws so far, then the interrupt propagates."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import NotFittedError
from sklearn.preprocessing import StandardScaler

import skbayes_sg._chains as chains
from skbayes_sg import FitInterruptedWarning, SGBayesLogisticRegression
from skbayes_sg.samplers import SGLD

ROOT = Path(__file__).resolve().parents[1]

# The child fits a long run with a progress bar; the parent waits until the bar shows the
# chains well past their burn-in, then sends SIGINT as Ctrl-C would.
CHILD = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler
    from skbayes_sg import FitInterruptedWarning, SGBayesLogisticRegression
    import skbayes_sg._chains as chains
    chains.ROUND_SECONDS = 0.05  # short rounds, so that the bar moves often
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    kw = dict(sampler="sgld", batch_size=32, burn_in=100, max_draws=None, n_chains=2, n_jobs=int(sys.argv[1]),
              random_state=0)
    est = SGBayesLogisticRegression(n_iter=1_000_000, verbose=1, **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            est.fit(X, y)
            outcome = "finished"
        except KeyboardInterrupt:
            outcome = "KeyboardInterrupt"
    k = est.samples_.shape[1] if hasattr(est, "samples_") else 0
    # The draws kept are those of a fit that stopped there: nothing lost, nothing altered
    # (in this process: the same draws whatever n_jobs).
    kw["n_jobs"] = 1
    short = SGBayesLogisticRegression(n_iter=100 + k, **kw).fit(X, y) if k else None
    print(json.dumps({
        "outcome": outcome, "n_draws": k, "n_iter_": getattr(est, "n_iter_", None),
        "interrupted": bool(getattr(est, "diagnostics_", {}).get("interrupted")),
        "warnings": [str(w.message) for w in caught if issubclass(w.category, FitInterruptedWarning)],
        "same_as_short_fit": bool(short is not None and np.array_equal(short.samples_, est.samples_)),
        "rhat_finite": bool(k and np.isfinite(est.diagnostics_["rhat"]).all()),
        "predict_ok": bool(k and np.isfinite(est.predict_proba(X)).all()),
    }))
""")


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_sigint_after_burn_in_keeps_the_draws_and_reaches_the_caller(n_jobs):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # A session of its own, so that the SIGINT goes to the whole group (the joblib workers
    # too), as a terminal's Ctrl-C does.
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(n_jobs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    err, done, deadline = b"", 0, time.monotonic() + 120
    try:
        while done < 2 * 600 and time.monotonic() < deadline:
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                break
            err += chunk
            counts = re.findall(rb"(\d+)/\d+ iterations", err)
            done = int(counts[-1]) if counts else 0
        assert done >= 2 * 600, err.decode(errors="replace")[-2000:]
        os.killpg(proc.pid, signal.SIGINT)
        out, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, (err + rest).decode(errors="replace")[-3000:]
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["outcome"] == "KeyboardInterrupt"
    assert report["interrupted"] and report["n_draws"] >= 600 - 100 - 64
    assert report["n_iter_"] >= 100 + report["n_draws"]
    assert len(report["warnings"]) == 1
    assert re.search(r"interrupted at iteration \d+ of 1000000 per chain", report["warnings"][0])
    assert f"the {report['n_draws']} draws per chain" in report["warnings"][0]
    assert report["same_as_short_fit"] and report["rhat_finite"] and report["predict_ok"]


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _interrupt(at, method="step"):
    """An SGLD step (``"step"``: one chain's; ``"step_batch"``: every chain's at once) that
    raises KeyboardInterrupt in the ``at``-th call of the process, part-way through an
    iteration, as a Ctrl-C arriving in this process does."""
    calls = [0]
    original = _SGLD_STEP if method == "step" else _SGLD_STEP_BATCH

    def step(sampler, *args):
        calls[0] += 1
        if calls[0] == at:
            raise KeyboardInterrupt
        return original(sampler, *args)

    return step


_SGLD_STEP = SGLD.step
_SGLD_STEP_BATCH = SGLD.step_batch
KW = dict(sampler="sgld", batch_size=32, burn_in=100, n_chains=2, n_jobs=1, random_state=0)


def _patch_kernel(monkeypatch, batched, at):
    """Interrupt SGLD's batched kernel (chains advancing together) or, without it, its
    single-chain one (chains advancing one after the other) at the ``at``-th iteration."""
    if batched:
        monkeypatch.setattr(SGLD, "step_batch", _interrupt(at, "step_batch"))
    else:
        monkeypatch.setattr(SGLD, "_batch_fields", None)
        monkeypatch.setattr(SGLD, "step", _interrupt(at))


@pytest.mark.parametrize("batched", [False, True])
def test_interrupt_mid_iteration_keeps_the_common_draws(cancer, monkeypatch, batched):
    X, y = cancer
    # One round: one chain after the other, the first finishes its 600 iterations and the
    # second is interrupted in its 301st; or both together, interrupted in their 301st. The
    # chains share 200 draws past the burn-in.
    monkeypatch.setattr(chains, "ROUND_SECONDS", np.inf)
    _patch_kernel(monkeypatch, batched, 301 if batched else 600 + 301)
    est = SGBayesLogisticRegression(n_iter=600, **KW)
    with pytest.warns(FitInterruptedWarning, match="interrupted at iteration 300 of 600.*starts afresh"):
        with pytest.raises(KeyboardInterrupt):
            est.fit(X, y)
    monkeypatch.undo()
    short = SGBayesLogisticRegression(n_iter=300, **KW).fit(X, y)
    np.testing.assert_array_equal(est.samples_, short.samples_)
    np.testing.assert_array_equal(est.diagnostics_["rhat"], short.diagnostics_["rhat"])
    assert est.diagnostics_["interrupted"] and est.predict(X).shape == y.shape
    # A chain stopped part-way through an iteration cannot be continued: a warm start runs
    # afresh rather than from a half-updated state.
    assert est._chain_states is None
    est.set_params(warm_start=True).fit(X, y)
    np.testing.assert_array_equal(est.samples_, SGBayesLogisticRegression(n_iter=600, **KW).fit(X, y).samples_)


@pytest.mark.parametrize("batched", [False, True])
def test_interrupt_during_burn_in_leaves_the_estimator_unfitted(cancer, monkeypatch, batched):
    X, y = cancer
    _patch_kernel(monkeypatch, batched, 50)
    est = SGBayesLogisticRegression(n_iter=600, **KW)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    with pytest.raises(NotFittedError):
        est.predict(X)


def test_interrupted_continuation_keeps_the_first_fit_and_the_new_draws(cancer, monkeypatch):
    X, y = cancer
    monkeypatch.setattr(chains, "ROUND_SECONDS", np.inf)
    est = SGBayesLogisticRegression(n_iter=300, warm_start=True, **KW).fit(X, y)
    first = est.samples_.copy()
    # The continuation of 300, one chain after the other, is interrupted in the first chain's
    # 51st iteration: no chain has new draws in common, and the first fit's 200 remain.
    _patch_kernel(monkeypatch, False, 51)
    with pytest.warns(FitInterruptedWarning, match="interrupted at iteration 300 of 600"):
        with pytest.raises(KeyboardInterrupt):
            est.fit(X, y)
    np.testing.assert_array_equal(est.samples_, first)


@pytest.mark.parametrize("round_seconds", [0.0, np.inf])
def test_rounds_never_change_the_draws(cancer, monkeypatch, round_seconds):
    # 0: rounds of the fewest iterations (64, so 600 iterations take 10 rounds whose draw
    # buffers are detached and re-attached); inf: one round.
    X, y = cancer
    kw = dict(KW, sampler="sghmc", n_iter=600, thin=7)
    reference = SGBayesLogisticRegression(**kw).fit(X, y)
    monkeypatch.setattr(chains, "ROUND_SECONDS", round_seconds)
    calls = []
    advance = chains.advance_group
    monkeypatch.setattr(chains, "advance_group", lambda runners, n=None: calls.append(n) or advance(runners, n))
    est = SGBayesLogisticRegression(**kw).fit(X, y)
    # The two chains advance together, in this process: one call a round.
    assert len(calls) == (10 if round_seconds == 0 else 1)
    np.testing.assert_array_equal(est.samples_, reference.samples_)
    np.testing.assert_array_equal(
        est.sample_stats_["kinetic_temperature"], reference.sample_stats_["kinetic_temperature"]
    )
