"""The kernel Stein discrepancy of a chain fit's draws, scored while the data are at hand.

The KSD needs the full-data score at the draws, and the fitted estimator keeps no data: the
fit scores a thinned set of its draws once (:func:`skbayes_sg._stein.fit_statistics`), keeps
them for :func:`skbayes_sg.metrics.kernel_stein_discrepancy` with other kernels, and reports
``diagnostics_["ksd"]`` and the bias test's ``diagnostics_["ksd_pvalue"]``.

The bias test asks whether the chains' stationary distribution is off the posterior, as an
SG sampler's is at a finite step; a Metropolis-adjusted sampler's (``requires_full_data``:
HMC, gadMALA) is the posterior by construction, so on its draws the test could only raise a
false alarm or see chains that have not mixed, which R-hat and the ESS already check. Their
fits skip it (its bootstrap cost as much as a fifth of a small exact fit); the KSD itself
is computed for every fit, as ``ksd_scorer`` compares fits by it.
"""

import contextvars
import threading

import numpy as np

from .. import _stein
from .._geometry import Geometry
from ..rows import block_threads, pass_threads


def score_draws(est, chain_model, geometry, n_grad, bias_test=True, speculative=None):
    """Set ``est._stein`` (the thinned draws and their scores), ``diagnostics_["ksd"]`` and,
    with ``bias_test`` (False for a Metropolis-adjusted sampler), ``diagnostics_["ksd_pvalue"]``.

    ``n_grad`` is this call's gradient work, the KSD's budget (a share of it), or None for an
    interrupted fit, which gets no KSD; so do models whose posterior is multimodal by
    construction (``est._ksd_at_fit`` False: the DRBM's hidden-unit permutations).
    ``speculative``: a :class:`SpeculativeKSD` of the run's last block, used when it scored
    these very draws.
    """
    est._stein = None
    if n_grad is None or not est._ksd_at_fit:
        return
    thetas = est._flat_samples()
    affine = est._user_affine()
    if affine is not None:
        thetas = (thetas - affine[1]) / affine[0]
    n_chains = est.samples_.shape[0]
    ready = None if speculative is None else speculative.result(thetas, n_grad)
    ksd_pvalue = None
    if ready is not None:
        est._stein, ksd_pvalue = ready
    else:
        est._stein = _statistics(chain_model, geometry, thetas, n_chains, n_grad)
    if ksd_pvalue is None or bias_test:
        lowest = None
        if bias_test:
            ess = np.asarray(est.diagnostics_.get("ess", np.nan), dtype=float)
            lowest = float(np.min(ess)) if ess.size else np.nan
        ksd_pvalue = _stein.fit_ksd(est._stein["x"], est._stein["s"], lowest, n_chains)
    ksd, p_value = ksd_pvalue
    est.diagnostics_["ksd"] = ksd
    if p_value is not None:
        est.diagnostics_["ksd_pvalue"] = p_value


def _statistics(chain_model, geometry, thetas, n_chains, n_grad):
    """:func:`skbayes_sg._stein.fit_statistics` of the stacked draws ``thetas`` of a fit's chains."""
    return _stein.fit_statistics(
        chain_model, thetas, n_chains, n_grad, geometry.L is not None, lambda t: Geometry.to_chain(chain_model, t)
    )


class SpeculativeKSD:
    """The KSD of a block's draws, computed in a thread while the fit decides whether to stop.

    After each block of ``n_iter="auto"`` the fit summarises the draws to decide whether to
    stop (the ESS and R-hat), and when it stops it scores the same draws for the KSD. Both are
    NumPy work that mostly runs without the interpreter lock, so when the fit has a second
    core (``n_jobs``) the scores, and the KSD itself where no bias test waits on the summary's
    ESS (a Metropolis-adjusted sampler), start in a thread before the summary: on breast cancer
    the summary and the KSD take 13 ms together instead of 21 (one BLAS thread each, medians
    of 15). :func:`score_draws` takes the result only for the very draws it scores (compared
    bit for bit, with the same gradient budget), so the KSD is what it would be without the
    thread. A run that goes on waits for the thread before its next block (which may fork
    worker processes: none may fork while a thread computes) and drops the result.

    Parameters
    ----------
    chain_model, geometry : the plan's chain model and geometry
    draws : ndarray of shape (n_chains, n_draws, P)
        The chains' kept draws after the block.
    n_grad : int
        The chains' gradient work so far (the KSD's budget).
    bias_test : bool
        Whether the fit's KSD has a bias test (then only the scores are computed ahead).
    """

    def __init__(self, chain_model, geometry, draws, n_grad, bias_test):
        self.thetas = draws.reshape(-1, draws.shape[-1])
        self.n_grad = n_grad
        self._result = None
        # In a copy of the fit's context (its NumPy errstate, its pass threads).
        context = contextvars.copy_context()
        args = (chain_model, geometry, draws.shape[0], bias_test)
        self._thread = threading.Thread(target=context.run, args=(self._compute, *args), daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, est, plan, runners, draws, bias_test):
        """A :class:`SpeculativeKSD` of ``draws``, the kept draws of ``runners``, or None where the
        fit's KSD would not score them as they are: no KSD at fit, a continued record, draws
        reported in other units (``_user_affine``), or a fit allowed one core."""
        if not est._ksd_at_fit or plan.progress is not None or est._user_affine() is not None:
            return None
        if pass_threads(est.n_jobs) < 2:
            return None
        n_grad = sum(r.grad_estimator.n_grad_evals for r in runners)
        return cls(plan.chain_model, plan.geometry, draws, n_grad, bias_test)

    def _compute(self, chain_model, geometry, n_chains, bias_test):
        try:
            # Its passes in this thread alone: the thread is the fit's second core already
            # (the pass threads would take the summary's; same results either way).
            with block_threads(1):
                stein = _statistics(chain_model, geometry, self.thetas, n_chains, self.n_grad)
            ksd = None if bias_test else _stein.fit_ksd(stein["x"], stein["s"], None, n_chains)
            self._result = (stein, ksd)
        except Exception:  # the fit computes it again, and raises there if it must
            self._result = None

    def join(self):
        """Wait for the thread."""
        self._thread.join()

    def result(self, thetas, n_grad):
        """``(stein, (ksd, p_value) or None)`` if these were the draws ``thetas`` (S, P) and the
        budget ``n_grad`` scored, else None."""
        self.join()
        same = n_grad == self.n_grad and thetas.shape == self.thetas.shape and np.array_equal(thetas, self.thetas)
        return self._result if same else None
