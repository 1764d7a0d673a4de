"""The stacked minibatch path: control-variate forces and mCCAdL's C step for a group of chains at once.

Each chain's arithmetic is its own rows' (block-diagonal sparse kernels, one BLAS product per
row of a stacked matmul, elementwise maps): the forces, the per-example operators' products
and the C steps must be, bit for bit, what each chain's own estimator and
:func:`~skbayes_sg.samplers._expmv.c_step` compute alone, whatever the chains sharing the group.
"""

import copy

import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg.minibatch import ChainsGradient, GradientSpec, RowDistribution
from skbayes_sg.models import LinearRegressionModel, LogisticModel, PoissonModel, WhitenedModel
from skbayes_sg.models._fused_minibatch import ChainRowsGradients, StackedGLMGradients
from skbayes_sg.models._gradients import TransformedPerExampleGradients
from skbayes_sg.samplers._expmv import c_step
from skbayes_sg.samplers._stacked_c_step import stacked_c_step


def _whitened(model, seed=1):
    rng = np.random.default_rng(seed)
    P = model.n_params
    m = 0.1 * rng.standard_normal(P)
    H = -model.loglik_hessian(m) + np.eye(P)
    return WhitenedModel(model, m, np.linalg.cholesky(np.linalg.inv(H)))


def _one_hot(X):
    """One-hot codes of 8 quantile bins of 5 features: 5 ones in 40 columns, padded rows."""
    cols = []
    for j in range(5):
        edges = np.quantile(X[:, j], np.linspace(0, 1, 9)[1:-1])
        cols.append(np.eye(8)[np.searchsorted(edges, X[:, j])])
    return np.hstack(cols)


def _models(cancer):
    X, y = cancer
    rng = np.random.default_rng(0)
    n = X.shape[0]
    weighted = LogisticModel(X, y, alpha=np.linspace(0.5, 2.0, X.shape[1]), alpha_intercept=0.3)
    weighted.set_sample_weight(rng.uniform(0.2, 3.0, n))
    counts = rng.poisson(np.exp(0.2 * X[:, 0]))
    return {
        "dense": LogisticModel(X, y, alpha=1.0),
        "one-hot": LogisticModel(_one_hot(X), y, alpha=1.0),
        "csr": LogisticModel(sp.csr_matrix(_one_hot(X) * rng.uniform(0.5, 2.0, (n, 1))), y, alpha=1.0),
        "weighted": weighted,
        "poisson-offset": PoissonModel(X[:, :5], counts, alpha=1.0, offset=rng.uniform(-0.5, 0.5, n)),
        "no-intercept": LogisticModel(_one_hot(X), y, alpha=1.0, fit_intercept=False),
        "linreg-fixed-noise": LinearRegressionModel(X[:, :4], X[:, 5], alpha=1.0, noise_precision=2.0),
    }


def _estimators(model, n_chains=3, batch=48, importance=False):
    centre = 0.05 * np.ones(model.n_params)
    probs = None
    if importance:
        p = np.random.default_rng(5).uniform(0.5, 2.0, model.n_samples)
        probs = RowDistribution(p / p.sum())
    spec = GradientSpec(
        batch_size=batch, centre=centre, g_hat=model.log_likelihood_and_grad(centre)[1], row_probabilities=probs
    )
    return [spec.build(model) for _ in range(n_chains)]


@pytest.mark.parametrize("importance", [False, True], ids=["uniform", "importance"])
@pytest.mark.parametrize(
    "name", ["dense", "one-hot", "csr", "weighted", "poisson-offset", "no-intercept", "linreg-fixed-noise"]
)
def test_stacked_forces_and_operators_are_each_chains_own(cancer, name, importance):
    model = _whitened(_models(cancer)[name])
    estimators = _estimators(model, importance=importance)
    alone = copy.deepcopy(estimators)
    for e, a in zip(estimators, alone):
        a.model = e.model = model
    group = ChainsGradient(estimators)
    assert group._fused_minibatch is not None
    if name in ("one-hot", "csr", "no-intercept"):  # sparse rows take the padded kernels
        assert isinstance(group._fused_minibatch.features, tuple)
    rng = np.random.default_rng(3)
    P = model.n_params
    for _ in range(3):  # several iterations: each chain's queue advances as alone
        Z = 0.5 * rng.standard_normal((3, P))
        seeds = rng.integers(1 << 30, size=3)
        out = np.empty((3, P))
        ops = group.forces(Z, [np.random.default_rng(s) for s in seeds], out, per_example=True)
        V = rng.standard_normal((3, P))
        stack = StackedGLMGradients.of(ops)
        assert stack is ops[0].stack
        U = stack.matvec(V)
        W = stack.rmatvec(U)
        tss = stack.total_sum_of_squares()
        for c, (a, s) in enumerate(zip(alone, seeds)):
            force, g = a.gradient(Z[c], np.random.default_rng(s))
            np.testing.assert_array_equal(out[c], force)
            np.testing.assert_array_equal(stack.mean()[c], g.mean())
            np.testing.assert_array_equal(U[c], g.matvec(V[c]))
            np.testing.assert_array_equal(W[c], g.rmatvec(U[c]))
            assert tss[c] == g.total_sum_of_squares()
            assert a.n_grad_evals == estimators[c].n_grad_evals
            # The chain's own view, alone or pickled, is the standalone operator.
            own = ops[c].own_operator()
            assert type(own) is TransformedPerExampleGradients
            np.testing.assert_array_equal(own.matvec(V[c]), g.matvec(V[c]))
            restored = copy.deepcopy(ops[c])
            assert type(restored) is TransformedPerExampleGradients
            np.testing.assert_array_equal(restored.rmatvec(U[c]), g.rmatvec(U[c]))


def test_a_stack_rebuilt_from_the_chains_operators_computes_the_same(cancer):
    # A chain continued in another process holds its standalone operator: the stack rebuilt
    # from those (and from ones of another group) gives the same products as the original.
    model = _whitened(_models(cancer)["one-hot"])
    group = ChainsGradient(_estimators(model))
    P = model.n_params
    rng = np.random.default_rng(0)
    ops = group.forces(
        rng.standard_normal((3, P)), [np.random.default_rng(i) for i in range(3)], np.empty((3, P)), True
    )
    rebuilt = StackedGLMGradients.of([copy.deepcopy(op) for op in ops])
    mixed = StackedGLMGradients.of([ops[2], copy.deepcopy(ops[0])])
    assert rebuilt is not ops[0].stack and mixed is not None
    V = rng.standard_normal((3, P))
    np.testing.assert_array_equal(rebuilt.rmatvec(rebuilt.matvec(V)), ops[0].stack.rmatvec(ops[0].stack.matvec(V)))
    np.testing.assert_array_equal(mixed.matvec(V[[2, 0]]), ops[0].stack.matvec(V)[[2, 0]])
    # Operators of other kinds do not stack.
    assert StackedGLMGradients.of([ops[0], object()]) is None


@pytest.mark.parametrize(
    "t, in_series",
    [(0.01, [0, 1, 2]), (0.2, [0, 1, 2]), (0.5, [0, 1]), (40.0, [])],
    ids=["one-term", "several-terms", "mixed", "scaled-or-lanczos"],
)
def test_stacked_c_step_is_each_chains_own(cancer, t, in_series):
    # The chains sit at different distances from the centre, so their noise differs: small to
    # very large steps give the series of one to several terms, and beyond it the chains that
    # c_step takes through a scaled series or Lanczos, left to it one by one (some chains in
    # the series and some not at 0.5). A zero momentum is left to c_step too. Every chain's
    # result and product count are those of c_step alone.
    model = _whitened(_models(cancer)["one-hot"])
    group = ChainsGradient(_estimators(model, n_chains=4))
    P = model.n_params
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((4, P)) * np.array([0.3, 1.0, 4.0, 1.0])[:, None]
    ops = group.forces(Z, [np.random.default_rng(i) for i in range(4)], np.empty((4, P)), True)
    noise_scale = group.noise_scale
    p = rng.standard_normal((4, P))
    p[3] = 0.0
    scale = 0.5 * t
    expected = [
        c_step(p[c], ops[c].own_operator(), noise_scale, t, scale, eigvec=np.zeros(P), cache={}) for c in range(4)
    ]
    out = p.copy()
    n_products, alone = stacked_c_step(out, StackedGLMGradients.of(ops), noise_scale, t, scale, 2.0**-6, "auto")
    assert sorted(set(range(4)) - set(alone)) == in_series
    for c in range(4):
        if c in alone:
            np.testing.assert_array_equal(out[c], p[c])  # untouched: the caller's
            assert n_products[c] == 0
        else:
            np.testing.assert_array_equal(out[c], expected[c][0])
            assert n_products[c] == expected[c][1]
    if t == 0.2:
        assert max(n_products) > 1


def test_stacked_c_step_changes_nothing_where_the_trace_is_zero(cancer):
    model = _whitened(_models(cancer)["dense"])
    group = ChainsGradient(_estimators(model, n_chains=2))
    P = model.n_params
    ops = group.forces(np.zeros((2, P)), [np.random.default_rng(i) for i in range(2)], np.empty((2, P)), True)
    stack = StackedGLMGradients.of(ops)
    stack.d[0] = 0.0  # no noise in chain 0's minibatch: c_step returns p as it is
    stack._mean = stack._mean.copy()
    stack._mean[0] = 0.0
    p = np.ones((2, P))
    n_products, alone = stacked_c_step(p, stack, group.noise_scale, 0.2, 0.1, 2.0**-6, "auto")
    assert alone == [0] and n_products[0] == 0
    np.testing.assert_array_equal(p[0], 1.0)
    assert isinstance(ops[0], ChainRowsGradients)


def test_only_the_default_estimators_stack(cancer):
    X, y = cancer
    model = _whitened(LogisticModel(X, y, alpha=1.0))
    spec = GradientSpec(batch_size=48)  # plain minibatch gradients: each chain its own
    assert ChainsGradient([spec.build(model) for _ in range(2)])._fused_minibatch is None
    diag = WhitenedModel(LogisticModel(X, y, alpha=1.0), np.zeros(X.shape[1] + 1), np.full(X.shape[1] + 1, 0.2))
    assert ChainsGradient(_estimators(diag, n_chains=2))._fused_minibatch is None
    estimated = LinearRegressionModel(X[:, :4], X[:, 5], alpha=1.0)  # an extra parameter
    whitened = WhitenedModel(estimated, np.zeros(6), 0.3 * np.eye(6))
    assert ChainsGradient(_estimators(whitened, n_chains=2))._fused_minibatch is None


def test_sparse_rows_in_padded_form():
    # A CSR matrix's rows in padded form hold its entries (values where not all ones), the
    # phantom column D for padding; rows too uneven or too dense have none.
    from skbayes_sg.rows._array import ell_from_sparse

    rng = np.random.default_rng(0)
    dense = (rng.random((50, 80)) < 0.08) * rng.uniform(0.5, 2.0, (50, 80))
    dense[:, 0] = 1.0  # every row has an entry
    cols, vals = ell_from_sparse(sp.csr_matrix(dense))
    back = np.zeros((50, 81))
    np.add.at(back, (np.arange(50)[:, None], cols), vals)
    np.testing.assert_array_equal(back[:, :80], dense)
    assert ell_from_sparse(sp.csr_matrix((dense > 0).astype(float)))[1] is None  # all ones
    uneven = np.zeros((50, 400))
    uneven[:, 0] = 1.0
    uneven[0, :90] = 1.0  # one row of 90 entries, the others 1: padding 50 x 90 > 2 x 139
    assert ell_from_sparse(sp.csr_matrix(uneven)) is False
    assert ell_from_sparse(sp.csr_matrix(np.ones((5, 8)))) is False  # more than a quarter stored
    assert ell_from_sparse(dense) is False  # not sparse
