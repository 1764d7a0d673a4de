"""Chains advanced together (stacked states, one batched step per iteration) and the fused
full-data force: the same draws as each chain run alone, whatever the grouping (n_jobs)."""

import multiprocessing
import threading

import numpy as np
import pytest
from joblib import Parallel

import skbayes_sg._chains as chains
import skbayes_sg._pools as _pools
from skbayes_sg import SGBayesLogisticRegression
from skbayes_sg._chains import ChainSpec, _advance, start_chains
from skbayes_sg.minibatch import GradientSpec
from skbayes_sg.models import LinearRegressionModel, LogisticModel, PoissonModel, WhitenedModel
from skbayes_sg.models._fused import fused_force
from skbayes_sg.samplers import SGHMC, SGLD, SGNHT, CCAdL, MCCAdL

#: Tests of forked chain workers: where processes cannot fork (Windows) there are none to test.
needs_fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork here")


def _whitened(model):
    """The model in coordinates whitened at a rough centre (dense, lower-triangular ``L``)."""
    rng = np.random.default_rng(1)
    P = model.n_params
    m = 0.1 * rng.standard_normal(P)
    H = -model.loglik_hessian(m) + np.diag(np.full(P, 1.0))
    L = np.linalg.cholesky(np.linalg.inv(H))
    return WhitenedModel(model, m, L)


def _models(X, y):
    rng = np.random.default_rng(0)
    n, D = X.shape
    w = rng.uniform(0.2, 3.0, n)
    counts = rng.poisson(np.exp(0.2 * X[:, 0]))
    logistic = LogisticModel(X, y, alpha=0.5, fit_intercept=True)
    weighted = LogisticModel(X, y, alpha=np.linspace(0.5, 2.0, D), fit_intercept=True, alpha_intercept=0.3)
    weighted.set_sample_weight(w)
    poisson = PoissonModel(X[:, :5], counts, alpha=1.0, offset=rng.uniform(-0.5, 0.5, n))
    base = LogisticModel(X, y, alpha=1.0, fit_intercept=False)
    diag = WhitenedModel(base, 0.05 * np.ones(D), np.linspace(0.1, 0.3, D))
    linreg = LinearRegressionModel(X[:, :4], X[:, 5], alpha=1.0, noise_precision=2.0)
    return {
        "logistic": logistic,
        "weighted-whitened": _whitened(weighted),
        "poisson-offset-whitened": _whitened(poisson),
        "diagonal-no-intercept": diag,
        "linreg-fixed-noise": linreg,
    }


@pytest.mark.parametrize("name", ["logistic", "weighted-whitened", "poisson-offset-whitened", "diagonal-no-intercept"])
def test_fused_force_is_the_log_posterior_gradient(cancer, name):
    model = _models(*cancer)[name]
    fused = fused_force(model)
    assert fused is not None
    Z = 0.3 * np.random.default_rng(2).standard_normal((3, model.n_params))
    out = fused(Z, np.empty_like(Z))
    for c in range(3):
        expected = model.log_posterior_and_grad(Z[c])[1]
        np.testing.assert_allclose(out[c], expected, rtol=1e-10, atol=1e-10 * np.abs(expected).max())


def test_fused_force_covers_a_fixed_noise_gaussian_and_skips_extra_parameters(cancer):
    X, y = cancer
    model = _models(X, y)["linreg-fixed-noise"]
    Z = 0.3 * np.random.default_rng(2).standard_normal((2, model.n_params))
    out = fused_force(model)(Z, np.empty_like(Z))
    np.testing.assert_allclose(out[1], model.log_posterior_and_grad(Z[1])[1], rtol=1e-10)
    # An estimated noise precision is an extra parameter: those chains keep their estimators.
    assert fused_force(LinearRegressionModel(X[:, :4], X[:, 5], alpha=1.0)) is None


def _run(sampler, model, gradient, batched, n_iter=300, n_chains=3):
    spec = ChainSpec(sampler, model, n_iter, 50, 1, None, gradient)
    seeds = np.random.SeedSequence(7).spawn(n_chains)
    starts = 0.1 * np.random.default_rng(3).standard_normal((n_chains, model.n_params))
    runners = start_chains(spec, list(starts), seeds)
    if batched:
        _advance(runners, model, None)
    else:
        for r in runners:
            _alone(r, model)
    return np.stack([r.kept_draws() for r in runners]), np.stack([r.stats[: r.k] for r in runners])


def _alone(runner, model):
    """The single-chain kernel (``sampler.step``), the chain by itself."""
    runner.grad_estimator.model = model
    runner.advance()


SAMPLERS = [
    MCCAdL(step_size=0.2),
    SGHMC(step_size=0.2),
    SGLD(step_size=0.02),
    SGNHT(step_size=0.2),
    CCAdL(step_size=0.1),
    CCAdL(step_size=0.1, covariance="full"),
]


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda s: type(s).__name__)
def test_batched_full_data_chains_match_each_chain_alone(cancer, sampler):
    # Full data: the fused force sums in another order than the chain's own estimator, and
    # nothing else differs (the same noise from each chain's generator, the same scalars).
    model = _whitened(LogisticModel(*cancer, alpha=1.0))
    draws, stats = _run(sampler, model, None, batched=True)
    alone, alone_stats = _run(sampler, model, None, batched=False)
    assert draws.shape == (3, 250, model.n_params)
    np.testing.assert_allclose(draws, alone, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(stats, alone_stats, rtol=1e-10, atol=1e-12)


MINIBATCH_SAMPLERS = SAMPLERS + [
    MCCAdL(step_size=0.2, sigma_estimate="lagged"),
    MCCAdL(step_size=0.05, sigma_estimate="independent", sigma_refresh=8),
]


@pytest.mark.parametrize("control_variate", [True, False], ids=["cv", "plain"])
@pytest.mark.parametrize("sampler", MINIBATCH_SAMPLERS, ids=lambda s: repr(s))
def test_batched_minibatch_chains_are_bit_identical_to_each_chain_alone(cancer, sampler, control_variate):
    # Minibatches: each chain's force comes from its own estimator, and mCCAdL's C step from
    # its own minibatch, as alone.
    model = _whitened(LogisticModel(*cancer, alpha=1.0))
    centre = np.zeros(model.n_params)
    if control_variate:
        gradient = GradientSpec(batch_size=64, centre=centre, g_hat=model.log_likelihood_and_grad(centre)[1])
    else:
        gradient = GradientSpec(batch_size=64)
    draws, stats = _run(sampler, model, gradient, batched=True)
    alone, alone_stats = _run(sampler, model, gradient, batched=False)
    np.testing.assert_array_equal(draws, alone)
    np.testing.assert_array_equal(stats, alone_stats)


@pytest.mark.parametrize("forks", [True, False], ids=["forked", "loky"])
@pytest.mark.parametrize(
    "kw",
    [{}, dict(sampler="sghmc", batch_size=64), dict(sampler="mccadl", batch_size=64), dict(sampler="sgnht")],
    ids=["default", "sghmc-cv", "mccadl-cv", "sgnht"],
)
def test_draws_are_identical_for_n_jobs_1_and_2(cancer, monkeypatch, kw, forks):
    X, y = cancer
    one = SGBayesLogisticRegression(n_iter=600, n_chains=3, n_jobs=1, random_state=0, **kw).fit(X, y)
    # Start the process pool whatever the work left: the chains then advance in two groups,
    # on forked workers that inherit the model, or on loky's, which receive it.
    monkeypatch.setattr(chains, "PROCESS_START_SECONDS", 0.0)
    if forks and not _pools.forks_workers():
        pytest.skip("worker processes are not forked here")
    monkeypatch.setattr(_pools, "forks_workers", lambda: forks)
    groups, shipped = [], []
    factory = chains._parallel
    monkeypatch.setattr(
        chains, "_parallel", lambda n, forked, **kw: groups.append((n, forked)) or factory(n, forked, **kw)
    )
    round_ = chains._round
    monkeypatch.setattr(chains, "_round", lambda p, r, m, *a: shipped.append(type(m)) or round_(p, r, m, *a))
    two = SGBayesLogisticRegression(n_iter=600, n_chains=3, n_jobs=2, random_state=0, **kw).fit(X, y)
    assert groups == [(2, forks)]
    # Forked workers find the model in their copy of the process: tasks carry its name.
    assert (_pools._Inherited in shipped) == forks
    assert not _pools._INHERITED  # the fit's pool forgot its model
    np.testing.assert_array_equal(one.samples_, two.samples_)
    for key in one.sample_stats_:
        np.testing.assert_array_equal(one.sample_stats_[key], two.sample_stats_[key])


@pytest.mark.parametrize("forks", [True, False], ids=["forked", "loky"])
def test_forked_workers_inherit_the_chains_per_row_arrays(cancer, monkeypatch, forks):
    # The control variate's rows are drawn by their leverages: a row distribution and row scales,
    # O(N) each. Forked workers find them in their copy of the process (tasks carry their
    # names, as for the model); loky's receive them. The draws are one process's either way.
    X, y = cancer
    kw = dict(n_iter=400, n_chains=3, random_state=0, sampler="sghmc", batch_size=64)
    one = SGBayesLogisticRegression(n_jobs=1, **kw).fit(X, y)
    monkeypatch.setattr(chains, "PROCESS_START_SECONDS", 0.0)
    if forks and not _pools.forks_workers():
        pytest.skip("worker processes are not forked here")
    monkeypatch.setattr(_pools, "forks_workers", lambda: forks)
    carried, delayed = [], chains.delayed

    def recorded(f):
        def call(*args):
            carried.extend(args[3])  # _advance's rows, as the task carries them
            return delayed(f)(*args)

        return call

    monkeypatch.setattr(chains, "delayed", recorded)
    two = SGBayesLogisticRegression(n_jobs=2, **kw).fit(X, y)
    np.testing.assert_array_equal(one.samples_, two.samples_)
    held = [a for rows in carried for a in rows]
    assert held and all(a is not None for a in held)
    assert all(isinstance(a, _pools._Inherited) for a in held) == forks
    assert any(isinstance(a, np.ndarray) for a in held) != forks
    assert not _pools._INHERITED  # the fit's pool forgot what its workers inherited


def test_a_short_fit_stays_in_this_process(cancer, monkeypatch):
    # Starting worker processes costs more than a small data set's chains: they run here.
    # The decision is made from the measured speed of the first round (its chains take about
    # 0.05 s on a quiet machine); on a machine loaded enough to make them six times slower,
    # sharing them could pay, so the test judges only the rounds measured below that.
    X, y = cancer
    rounds = []
    go = chains._go_parallel

    def recorded(n_jobs, workers, seconds_left, pool):
        rounds.append((seconds_left, go(n_jobs, workers, seconds_left, pool)))
        return rounds[-1][1]

    monkeypatch.setattr(chains, "_go_parallel", recorded)
    monkeypatch.setattr(chains, "_POOLS_STARTED", set())
    SGBayesLogisticRegression(n_iter=600, n_jobs=2, random_state=0).fit(X, y)
    assert rounds
    judged = [parallel for seconds_left, parallel in rounds if seconds_left < 0.2]
    if not judged:
        pytest.skip(f"the machine is too loaded to judge (chains measured at {rounds[0][0]:.2f} s)")
    assert not any(judged)


def test_a_diverging_batched_chain_names_its_iteration(cancer):
    from skbayes_sg.exceptions import DivergenceError

    X, y = cancer
    with pytest.raises(DivergenceError, match=r"non-finite by iteration \d+.*smaller step_size") as info:
        SGBayesLogisticRegression(sampler=SGLD(step_size=50.0, preconditioner="none"), n_iter=300).fit(X, y)
    assert info.value.iteration is not None


@needs_fork
def test_a_chain_diverging_in_a_forked_worker_names_its_iteration(cancer, monkeypatch):
    # The forked pool raises a task's exception in the fit's process: the same error, with its
    # iteration, as one process gives.
    from skbayes_sg.exceptions import DivergenceError

    X, y = cancer
    kw = dict(sampler=SGLD(step_size=50.0, preconditioner="none"), n_iter=2000, random_state=0)
    with pytest.raises(DivergenceError) as alone:
        SGBayesLogisticRegression(n_jobs=1, **kw).fit(X, y)
    monkeypatch.setattr(chains, "PROCESS_START_SECONDS", 0.0)
    monkeypatch.setattr(_pools, "FORK_START_SECONDS", 0.0)
    monkeypatch.setattr(chains, "_POOLS_STARTED", set())
    with pytest.raises(DivergenceError, match=r"non-finite by iteration \d+") as forked:
        SGBayesLogisticRegression(n_jobs=2, **kw).fit(X, y)
    assert chains._POOLS_STARTED == {2}  # the chains ran on forked workers
    assert forked.value.iteration == alone.value.iteration
    assert not _pools._INHERITED


def test_row_dots_and_scaled_normals_round_as_each_chain_alone():
    # The stacked kernels' shortcuts must give every row exactly what the chain alone computes.
    from skbayes_sg.samplers._batched import ChainsState, ou_coefficients, row_dots
    from skbayes_sg.samplers._state import SamplerState

    rng = np.random.default_rng(4)
    for C, P in [(1, 3), (3, 31), (4, 124), (2, 1000)]:
        p = rng.standard_normal((C, P)) * rng.uniform(0.1, 10.0, (C, 1))
        np.testing.assert_array_equal(row_dots(p), [float(row @ row) for row in p])
    states = [SamplerState(theta=rng.standard_normal(5), step_size=0.1) for _ in range(3)]
    scale = np.array([[0.5], [2.0], [3.0]])
    for predraw in (False, True):
        a, b = ChainsState(states, ("theta",)), ChainsState(states, ("theta",))
        rngs_a = [np.random.default_rng(s) for s in range(3)]
        rngs_b = [np.random.default_rng(s) for s in range(3)]
        if predraw:
            a.predraw(rngs_a, 2)
            b.predraw(rngs_b, 2)
        for _ in range(3):  # past the predrawn block too
            expected = a.normals(rngs_a, np.empty((3, 5))) * scale
            np.testing.assert_array_equal(b.scaled_normals(rngs_b, scale, np.empty((3, 5))), expected)
    # The coefficients kept for the next O step are those of its own friction, step and diffusion.
    chains = ChainsState(states, ("theta",))
    first = ou_coefficients(np.array([0.0, 1.0, 2.0]), 1.0, 0.1, chains)
    fresh = ou_coefficients(np.array([0.0, 1.0, 2.5]), 1.0, 0.1)
    again = ou_coefficients(np.array([0.0, 1.0, 2.5]), 1.0, 0.1, chains)
    np.testing.assert_array_equal(again[0], fresh[0])
    np.testing.assert_array_equal(again[1], fresh[1])
    assert first[0][2, 0] != again[0][2, 0]
    other_step = ou_coefficients(np.array([0.0, 1.0, 2.5]), 1.0, 0.2, chains)
    assert other_step[0][1, 0] == np.exp(-0.2) and other_step[1][0, 0] == np.sqrt(0.4)


def test_a_round_ships_no_row_arrays_and_no_empty_draw_buffer(cancer):
    # What a round pickles per chain: neither the row distribution and importance weights (O(N),
    # shared, shipped once per task beside the chains) nor a draw buffer that holds no draw yet.
    import pickle

    from skbayes_sg.minibatch import RowDistribution

    model = _whitened(LogisticModel(*cancer, alpha=1.0))
    N = model.n_samples
    dist = RowDistribution(np.random.default_rng(0).uniform(0.5, 1.5, N))
    spec = ChainSpec(
        MCCAdL(step_size=0.2), model, 4000, 0, 1, None, GradientSpec(batch_size=64, row_probabilities=dist)
    )
    runners = start_chains(spec, [np.zeros(model.n_params)] * 2, np.random.SeedSequence(0).spawn(2))
    # The importance weights are computed once for all the chains.
    assert runners[0].grad_estimator._row_scale is runners[1].grad_estimator._row_scale
    r = runners[0]
    with_rows = len(pickle.dumps(r))
    held = chains._detach_rows(r)
    without = len(pickle.dumps(r))
    assert with_rows - without > 3.5 * N * 8
    draws = r.detach_draws(4000)
    assert r.draws.nbytes > 4000 * 8
    shipped = pickle.loads(pickle.dumps(r))
    assert len(pickle.dumps(r)) < 0.5 * r.draws.nbytes
    assert shipped.draws.shape == r.draws.shape and shipped.stats.shape == r.stats.shape
    assert shipped.draws.flags.writeable
    chains._attach_rows(r, held)
    r.attach_draws(draws)
    # A buffer holding draws travels whole.
    _advance([r], model, 10)
    assert pickle.loads(pickle.dumps(r)).kept_draws().shape == (10, model.n_params)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(r)).kept_draws(), r.kept_draws())


@needs_fork
def test_workers_fork_only_where_nothing_else_was_asked_for(monkeypatch):
    import multiprocessing
    import multiprocessing.pool
    import threading

    from joblib import parallel_config

    monkeypatch.setattr(_pools.joblib.parallel, "DEFAULT_MP_CONTEXT", multiprocessing.get_context("fork"))
    pool = _pools.WorkerPool(2, object(), None)  # a model of no rows: no shipping cost
    assert _pools.forks_workers() and pool.forks
    assert pool.start_seconds(1.5) == _pools.FORK_START_SECONDS
    # A backend the user chose is kept, loky included, and so is dask's or threads'.
    for backend in ("loky", "threading"):
        with parallel_config(backend=backend):
            assert not _pools.forks_workers() and not pool.forks
            assert pool.start_seconds(1.5) == 1.5
    # Only n_jobs configured: still joblib's default backend, so forked.
    with parallel_config(n_jobs=2):
        assert _pools.forks_workers()
    # Not from a thread (joblib would run a process backend there on one job).
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_pools.forks_workers()))
    thread.start()
    thread.join()
    assert seen == [False]
    # Not once Ray's joblib backend has rebased joblib's pool on its actors' (its workers are
    # no forks of this process).
    import joblib.pool

    class ActorPool(multiprocessing.pool.Pool):
        pass

    bases = joblib.pool.PicklingPool.__bases__
    joblib.pool.PicklingPool.__bases__ = (ActorPool,)
    try:
        assert not _pools.forks_workers()
    finally:
        joblib.pool.PicklingPool.__bases__ = bases
    assert _pools.forks_workers()
    # Not where the start method is another (macOS, Python 3.14's forkserver).
    monkeypatch.setattr(_pools.joblib.parallel, "DEFAULT_MP_CONTEXT", multiprocessing.get_context("spawn"))
    assert not _pools.forks_workers()


@needs_fork
def test_a_forking_pool_freezes_the_gc_while_it_forks_and_only_then(monkeypatch):
    # The parent's objects are frozen while the workers fork, so that the workers' collections
    # leave their pages shared, and unfrozen as soon as the workers run, whether they started
    # or not.
    import gc
    import multiprocessing

    monkeypatch.setattr(_pools.joblib.parallel, "DEFAULT_MP_CONTEXT", multiprocessing.get_context("fork"))
    frozen = []

    class Recorded(_pools.ForkedWorkers):
        def __enter__(self):
            frozen.append(gc.get_freeze_count())
            return super().__enter__()

    def factory(n, forked):
        assert forked
        return Recorded(n)

    pool = _pools.WorkerPool(2, object(), factory)
    assert pool.forks
    try:
        pool.start()
        assert pool.parallel(_pools.joblib.delayed(abs)(-i) for i in range(2)) == [0, 1]
    finally:
        pool.close()
    assert frozen and frozen[0] > 0 and gc.get_freeze_count() == 0

    class Broken:
        def __enter__(self):
            assert gc.get_freeze_count() > 0
            raise OSError("no processes left")

    with pytest.raises(OSError, match="no processes left"):
        _pools.WorkerPool(2, object(), lambda n, forked: Broken()).start()
    assert gc.get_freeze_count() == 0
    # A pool that does not fork (loky's fresh interpreters) has nothing to share: no freeze.
    seen = []

    def counted(n, forked):
        assert not forked
        seen.append(gc.get_freeze_count())
        return Parallel(n_jobs=1)

    with _pools.joblib.parallel_config(backend="loky"):
        unforked = _pools.WorkerPool(2, object(), counted)
        unforked.start()
        unforked.close()
    assert seen == [0]
    # What the process froze itself stays frozen.
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        pool = _pools.WorkerPool(2, object(), lambda n, forked: _pools.ForkedWorkers(n))
        pool.start()
        pool.close()
        assert before > 0 and gc.get_freeze_count() > 0  # (a few frozen objects may have died)
    finally:
        gc.unfreeze()


@needs_fork
def test_forked_workers_run_tasks_in_order_raise_their_errors_and_start_no_other_process(monkeypatch):
    # The forked pool is the standard library's: results in the order of the calls, a task's
    # exception raised in the caller, and no process beside the workers (joblib's backend spawned
    # its resource tracker, a fresh interpreter whose start took the workers' CPU).
    import multiprocessing

    from joblib import delayed

    before = set(multiprocessing.active_children())
    with _pools.ForkedWorkers(2) as workers:
        assert workers(delayed(pow)(i, 2) for i in range(5)) == [0, 1, 4, 9, 16]
        with pytest.raises(ZeroDivisionError):
            workers(delayed(divmod)(1, i) for i in (1, 0))
        children = set(multiprocessing.active_children()) - before
        assert len(children) == 2
        assert all(child._popen.method == "fork" for child in children)
        assert workers(delayed(abs)(-3) for _ in range(1)) == [3]  # still running after an error
    assert not set(multiprocessing.active_children()) - before


@needs_fork
def test_a_pool_that_will_not_stop_is_killed_and_the_fit_goes_on(monkeypatch):
    # Pool.terminate once blocked for ever in this suite: its _help_stuff_finish waits for the
    # task queue's lock, which a worker that stopped while holding it never gives back. The
    # forked pool waits for the stop at most STOP_SECONDS, then kills its workers and goes on.
    import multiprocessing.pool
    import time

    from joblib import delayed

    release = threading.Event()
    stuck = threading.Event()

    def held_lock(inqueue, task_handler, size):
        stuck.set()
        release.wait()

    monkeypatch.setattr(multiprocessing.pool.Pool, "_help_stuff_finish", staticmethod(held_lock))
    monkeypatch.setattr(_pools.ForkedWorkers, "STOP_SECONDS", 0.3)
    before = set(multiprocessing.active_children())
    with _pools.ForkedWorkers(2) as workers:
        assert workers(delayed(abs)(-i) for i in range(2)) == [0, 1]
        children = set(multiprocessing.active_children()) - before
        # Leaving the block stops the pool: in a thread of the test's, so that a stop that
        # blocks fails the test instead of hanging the suite.
        leave = threading.Thread(target=workers.__exit__, args=(None, None, None), daemon=True)
        start = time.monotonic()
        leave.start()
        leave.join(5.0)
        elapsed = time.monotonic() - start
        release.set()
        assert not leave.is_alive() and elapsed < 3.0
    assert stuck.is_set() and len(children) == 2
    for child in children:  # none left running (stopped by the pool's sentinel, or killed)
        child.join(5.0)
        assert child.exitcode is not None


@pytest.mark.parametrize("forks", [True, False], ids=["forked", "loky"])
def test_a_pool_starts_no_more_workers_than_chains(monkeypatch, forks):
    # A round has one task per group of chains: n_jobs=8 with three chains starts three workers
    # (n_jobs=-1 on a many-core machine would otherwise fork, or spawn, one per core).
    import multiprocessing
    from types import SimpleNamespace

    if forks and not _pools.forks_workers():
        pytest.skip("worker processes are not forked here")
    monkeypatch.setattr(_pools, "forks_workers", lambda: forks)
    before = set(multiprocessing.active_children())
    pool = chains.worker_pool(SimpleNamespace(n_samples=10), 8, 3)
    try:
        parallel = pool.start()
        if forks:
            assert len(set(multiprocessing.active_children()) - before) == 3
        else:
            assert parallel.n_jobs == 3
    finally:
        pool.close()
    # Without the chains' count, n_jobs as given.
    assert chains.worker_pool(SimpleNamespace(n_samples=10), 8)._factory(8, False).n_jobs == 8


def _threaded_pass(n):
    from skbayes_sg.rows._source import block_threads, ordered_map

    with block_threads(2):
        return list(ordered_map(lambda i: i * i, range(n)))


@needs_fork
def test_a_forked_worker_runs_passes_without_its_parents_threads():
    # The parent's pass threads exist (a pass ran), a forked child has none of them: its pass
    # must not hand work to the pool it inherited, which no thread would ever run.
    import multiprocessing

    assert _threaded_pass(8) == [i * i for i in range(8)]
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_threaded_pass, (8,)).get(timeout=60) == [i * i for i in range(8)]


_KILLED_WORKER = """
import os, signal, sys, time
from joblib import delayed
from joblib.externals.loky.process_executor import TerminatedWorkerError
from skbayes_sg._pools import ForkedWorkers

def task(i):
    if i == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as the system's out-of-memory killer would
    time.sleep(0.2)
    return i

with ForkedWorkers(2) as workers:
    assert workers(delayed(abs)(-i) for i in range(2)) == [0, 1]
    try:
        workers(delayed(task)(i) for i in range(2))
    except TerminatedWorkerError as exc:
        assert "n_jobs=1" in str(exc)
    else:
        sys.exit("no error")
"""


@needs_fork
def test_a_worker_killed_in_a_task_raises_instead_of_waiting_for_ever():
    # A multiprocessing pool waits for a dead worker's result for ever; the forked workers
    # notice the death and raise loky's error, which names the way out. In a fresh process
    # with a time limit, since the failure is a hang.
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _KILLED_WORKER], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-500:]


_LARGE_FIT = """
import sys
import numpy as np
import skbayes_sg._chains as chains
import skbayes_sg._pools as _pools
from skbayes_sg import SGBayesLogisticRegression
rng = np.random.default_rng(0)
X = rng.standard_normal((100_000, 28))
y = (rng.random(100_000) < 1.0 / (1.0 + np.exp(-(X @ (0.5 * rng.standard_normal(28)) + 0.3)))).astype(int)
one = SGBayesLogisticRegression(n_jobs=1, random_state=0).fit(X, y)
assert _pools.forks_workers() and not chains._POOLS_STARTED
# Workers from the first round on, whatever this machine's speed.
chains.PROCESS_START_SECONDS = _pools.FORK_START_SECONDS = 0.0
two = SGBayesLogisticRegression(n_jobs=2, random_state=0).fit(X, y)
assert chains._POOLS_STARTED, "the chains ran in one process"
np.testing.assert_array_equal(one.samples_, two.samples_)
"""


@needs_fork
def test_forked_workers_of_a_default_fit_on_large_data_give_the_draws_of_one_process():
    # A default fit past the exact sampler's bound (minibatch chains over many blocks of rows,
    # the set-up's passes on threads, the workers forked after them): the draws of one process,
    # and no worker waits on a thread it does not have. In a fresh process, with a time limit,
    # since a worker that waits does so for ever.
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _LARGE_FIT], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_chains_on_a_dask_clusters_rows_never_fork():
    # A forked copy of this process could not use its dask client: pools of models reading
    # DaskRows (wrapped or not) keep joblib's own backend.
    from types import SimpleNamespace

    from skbayes_sg.rows import DaskRows

    remote = SimpleNamespace(rows=DaskRows.__new__(DaskRows))
    for model in (remote, SimpleNamespace(model=remote)):
        pool = chains.worker_pool(model, 2)
        assert not pool.forkable and pool.start_seconds(1.5) == 1.5
    local = SimpleNamespace(model=SimpleNamespace(rows=object()))
    assert chains.worker_pool(local, 2).forkable


@needs_fork
def test_a_forked_pool_pays_its_start_however_many_fits_came_before(monkeypatch):
    # joblib keeps loky's workers between fits (a later pool costs little), forked workers are
    # new for every pool: a fit after others still weighs their start, and only that (they
    # inherit the rows, which loky's receive in their first round).
    from types import SimpleNamespace

    monkeypatch.setattr(_pools.joblib.parallel, "DEFAULT_MP_CONTEXT", multiprocessing.get_context("fork"))
    monkeypatch.setattr(chains, "_POOLS_STARTED", {2})
    pool = chains.worker_pool(SimpleNamespace(n_samples=4_000_000), 2)
    assert pool.forks and pool.start_seconds(1.5) == _pools.FORK_START_SECONDS
    saved = 1.0 - 1.0 / (2 * _pools.PARALLEL_EFFICIENCY)  # of the work left
    assert not chains._go_parallel(2, 2, 0.9 * _pools.FORK_START_SECONDS / saved, pool)
    assert chains._go_parallel(2, 2, 1.1 * _pools.FORK_START_SECONDS / saved, pool)
    with _pools.joblib.parallel_config(backend="loky"):
        loky = chains.worker_pool(SimpleNamespace(n_samples=4_000_000), 2)
        assert not loky.forks and loky.start_seconds(1.5) == pytest.approx(1.5 + 0.4)


def test_the_first_round_on_workers_is_sized_from_the_round_before(cancer, monkeypatch):
    # The first round runs here to measure the chains' speed; the workers' first round is then
    # sized from it (about ROUND_SECONDS at that speed, however many times the first round's
    # length: the workers are faster), not the first round's 64 again, nor 4 times it: each
    # round trip to the workers costs tens of ms. The draws are those of one process.
    X, y = cancer
    kw = dict(sampler="sghmc", batch_size=64, n_iter=1500, n_chains=2, random_state=0)
    one = SGBayesLogisticRegression(n_jobs=1, **kw).fit(X, y)
    monkeypatch.setattr(chains, "_go_parallel", lambda *a: True)
    steps = []
    round_ = chains._round
    monkeypatch.setattr(
        chains, "_round", lambda p, r, m, n, *a: steps.append((p is not None, n)) or round_(p, r, m, n, *a)
    )
    two = SGBayesLogisticRegression(n_jobs=2, **kw).fit(X, y)
    assert steps[0] == (False, chains._FIRST_ROUND)
    # 64 iterations of two chains on 569 rows take milliseconds: the rest of the run is one round.
    assert steps[1][0] and steps[1][1] >= kw["n_iter"] - chains._FIRST_ROUND
    assert len(steps) == 2
    np.testing.assert_array_equal(one.samples_, two.samples_)
