"""The fit layer: how an estimator's draws are made.

:func:`fit_model` chooses the strategy from the sampler: Markov chains of its transition
(:func:`~._chain_fit.fit_chains`: the fit plan of ``_plan.py``, fresh, ``warm_start`` or
``partial_fit``; the runs of ``_run.py``; the draws' bookkeeping of ``_draws.py``) or, for
:class:`~skbayes_sg.samplers.MLSGLD`, multilevel paths (:func:`~._multilevel.fit_multilevel`).
The warnings' texts are in ``_messages.py``. A sampler never sees the estimator: this layer
reads its hyperparameters and hands it a gradient estimator and a context.
"""

from ..samplers import MLSGLD
from ._chain_fit import fit_chains
from ._multilevel import fit_multilevel


def fit_model(est, sampler, X, y, model, batch_size, streaming=False):
    """Fit ``est`` on ``model`` (built from validated ``X`` and encoded ``y``) with ``sampler``.

    ``batch_size`` is the estimator's resolved minibatch size, ``streaming`` True for
    ``partial_fit``. Returns ``est``.
    """
    if isinstance(sampler, MLSGLD):
        return fit_multilevel(est, sampler, model, batch_size, streaming)
    return fit_chains(est, sampler, X, y, model, batch_size, streaming)


__all__ = ["fit_model", "fit_chains", "fit_multilevel"]
