"""mCCAdL's C step for a stack of chains: one product with every chain's noise covariance at once.

The C step ``p <- exp(h Sigma~) p`` (Wei & Shang 2026, eq. 17) of each chain is the shifted,
truncated Taylor series of :func:`~._expmv.expmv` (Al-Mohy & Higham 2011, Algorithm 3.2),
each chain with its own minibatch's ``Sigma``, degree ``m`` and early termination. Chain by
chain, each of its 2-3 products is a dozen numpy calls on a few hundred rows; here one product
serves every chain of the group (:class:`~skbayes_sg.models._fused_minibatch.StackedGLMGradients`),
and the series runs until the last chain stops, a chain's terms no longer added once its own
test has stopped it.

Each chain's decisions are those of :func:`~._expmv.c_step` from its own trace, norms and
terms, the same formulas in the same order, and the stacked products are the chain's own
kernels: its C step is ``c_step``'s bit for bit (``tests/test_fused_minibatch.py``). Where
that function leaves the single-step Taylor series (a scaling ``s > 1``
with its power iteration, Lanczos, a trace or norm that is zero, infinite or NaN), the chain
takes it instead, alone, from its own state: every chain's path depends on its own numbers
only, so its draws do not depend on which chains share its group.
"""

import math
from contextlib import nullcontext

import numpy as np

from ._batched import row_dots
from ._expmv import LANCZOS_FROM, covariance_trace, growth_limit, select_degree, trace_norm_bound


class StackedNoiseCovariance:
    """``coef * Sigma`` of each chain's minibatch as one operator on ``(C, P)`` stacks
    (:class:`~._expmv.NoiseCovariance` row by row: ``Sigma = noise_scale V``, ``V`` the
    per-example gradients' unbiased covariance)."""

    def __init__(self, grads, noise_scale, coef):
        self.grads = grads
        n = self.n = grads.n_batch
        self.factor = coef * noise_scale / (n - 1) if n > 1 else 0.0

    def traces(self):
        """``tr(coef * Sigma)`` of every chain, a list of floats (NoiseCovariance.trace's formula)."""
        ss = self.grads.total_sum_of_squares()
        gg = row_dots(self.grads.mean())
        return [covariance_trace(self.factor, float(a), self.n, float(b)) for a, b in zip(ss, gg)]

    def matvec(self, V):
        """``coef * Sigma_c v_c`` for every row of ``V`` (C, P)."""
        u = self.grads.matvec(V)
        u -= (np.add.reduce(u, axis=1) / u.shape[1])[:, None]
        out = self.grads.rmatvec(u)
        out *= self.factor
        return out


def stacked_c_step(p, grads, noise_scale, t, scale, tol, method):
    """The C step of every row of ``p`` (C, P) in place where the stacked series serves it.

    ``grads`` is the chains' :class:`~skbayes_sg.models._fused_minibatch.StackedGLMGradients`,
    ``Sigma~ = -scale Sigma`` with ``Sigma = noise_scale V``, ``t = h``.

    Returns
    -------
    n_products : list of int
        Products spent on each chain (those of the chains left to the caller: 0).
    alone : list of int
        The chains whose C step the caller must take chain by chain (:func:`~._expmv.c_step`),
        their rows of ``p`` untouched.
    """
    C, P = p.shape
    cov = StackedNoiseCovariance(grads, noise_scale, -scale)
    t = float(t)
    n_products, alone, plan = [0] * C, [], {}
    traces = cov.traces()
    # A non-finite trace means non-finite gradients: the stacked products then meet NaN in
    # that chain's rows (its own, left alone), whose warnings are silenced.
    quiet = np.errstate(invalid="ignore", over="ignore") if not all(map(math.isfinite, traces)) else nullcontext()
    for c, trace in enumerate(traces):
        tr = -trace  # tr(scale * Sigma) >= 0
        if not math.isfinite(tr) or tr == 0.0 or t == 0.0:
            alone.append(c)
            continue
        norm = trace_norm_bound(tr, P)
        m, s = select_degree(abs(t) * norm, tol)
        if s > 1 or method == "lanczos" or (method == "auto" and m * s > LANCZOS_FROM):
            alone.append(c)
            continue
        # expmv's first attempt, norm = norm_bound: the growth check ends the series, no restart.
        plan[c] = (m, -tr / P, growth_limit(t, norm, s))
    if not plan:
        return n_products, alone
    # The series, each chain's tests in a loop of plain floats (a few chains: cheaper than
    # arrays of them), each row's arithmetic that of _taylor_steps. Chains outside the series
    # keep zero terms.
    f = p.copy()
    term = np.zeros_like(p)
    mu = np.zeros((C, 1))
    sq = row_dots(p)
    prev, scaled = {}, []
    for c in list(plan):
        size_sq = float(sq[c])
        if not 0.0 < size_sq < math.inf:  # a zero or overflowing momentum: c_step's own handling
            del plan[c]
            alone.append(c)
            continue
        prev[c] = math.sqrt(size_sq)
        term[c] = p[c]
        mu[c, 0] = plan[c][1]
    k = 0
    while plan:
        k += 1
        with quiet:
            Ab = cov.matvec(term)
        Ab -= mu * term
        Ab *= t / k
        term = Ab
        sq = row_dots(term)
        added, running = [], list(plan)
        for c, (_m, _mu_c, limit) in list(plan.items()):
            size_sq = float(sq[c])
            if not 0.0 < size_sq < math.inf:
                # A zero or non-finite term: left to c_step, which handles both.
                del plan[c]
                alone.append(c)
                continue
            size = math.sqrt(size_sq)
            n_products[c] = k
            if k * size > limit * prev[c]:
                # The norm underestimated: with it at its bound, expmv returns the sum so far.
                p[c] = f[c]
                del plan[c]
                continue
            f[c] += term[c]
            added.append((c, size))
        if added:
            fsq = row_dots(f)
            for c, size in added:
                f_sq = float(fsq[c])
                if not 0.0 < f_sq < math.inf:
                    del plan[c]
                    alone.append(c)
                elif prev[c] + size <= tol * math.sqrt(f_sq) or k == plan[c][0]:
                    scaled.append((c, plan.pop(c)[1]))
                else:
                    prev[c] = size
        for c in running:
            if c not in plan:  # out of the series: its terms no longer computed
                term[c] = 0.0
    for c, mu_c in scaled:
        # expmv's factor exp(t mu / s), s = 1.
        f[c] *= math.exp(t * mu_c / 1)
        p[c] = f[c]
    for c in alone:
        n_products[c] = 0
    return n_products, sorted(alone)
