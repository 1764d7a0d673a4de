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

import numpy as np

from .. import _stein
from .._geometry import Geometry


def score_draws(est, chain_model, geometry, n_grad, bias_test=True):
    """Set ``est._stein`` (the thinned draws and their scores), ``diagnostics_["ksd"]`` and,
    with ``bias_test`` (False for a Metropolis-adjusted sampler), ``diagnostics_["ksd_pvalue"]``.

    ``n_grad`` is this call's gradient work, the KSD's budget (a share of it), or None for an
    interrupted fit, which gets no KSD; so do models whose posterior is multimodal by
    construction (``est._ksd_at_fit`` False: the DRBM's hidden-unit permutations).
    """
    est._stein = None
    if n_grad is None or not est._ksd_at_fit:
        return
    thetas = est._flat_samples()
    affine = est._user_affine()
    if affine is not None:
        thetas = (thetas - affine[1]) / affine[0]
    est._stein = _stein.fit_statistics(
        chain_model,
        thetas,
        est.samples_.shape[0],
        n_grad,
        geometry.L is not None,
        lambda t: Geometry.to_chain(chain_model, t),
    )
    lowest = None
    if bias_test:
        ess = np.asarray(est.diagnostics_.get("ess", np.nan), dtype=float)
        lowest = float(np.min(ess)) if ess.size else np.nan
    ksd, p_value = _stein.fit_ksd(est._stein["x"], est._stein["s"], lowest, est.samples_.shape[0])
    est.diagnostics_["ksd"] = ksd
    if p_value is not None:
        est.diagnostics_["ksd_pvalue"] = p_value
