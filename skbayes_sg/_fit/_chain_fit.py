"""The Markov-chain strategy: plan the chains (fresh or continued), run them, keep their draws
and set the fitted attributes, then warn about what the checks found."""

from ..exceptions import DivergenceError
from ._draws import chain_record, set_chain_draws
from ._ksd import score_draws
from ._messages import explain_divergence, warn_fit, warn_interrupted
from ._plan import can_resume, first_schedule, plan_fresh, plan_resume
from ._run import run_blocks


def fit_chains(est, sampler, X, y, model, batch_size, streaming):
    """Run, or continue, ``est``'s chains of ``sampler`` on ``model`` and set its fitted attributes.

    ``streaming`` (``partial_fit``): continue the chains, when there are any, on the data seen so
    far and keep only this call's draws; ``warm_start``: continue them exactly, the record then
    spanning both fits.
    """
    resume = (est.warm_start or streaming) and can_resume(est, sampler, model)
    burn_in, max_draws, first = first_schedule(est, sampler, model.n_params, resume)
    est._fit_map = None
    if resume:
        plan = plan_resume(est, sampler, model, batch_size, streaming)
    else:
        plan = plan_fresh(est, sampler, model, batch_size)
    est._fit_map = None
    try:
        runs = run_blocks(est, sampler, plan, first, burn_in, max_draws)
    except DivergenceError as exc:
        raise explain_divergence(exc, est) from None
    try:
        return _finish(est, sampler, X, y, model, runs, plan, max_draws, resume, streaming)
    finally:
        if runs.ksd is not None:  # no thread outlives the fit (a later fit may fork workers)
            runs.ksd.join()


def _finish(est, sampler, X, y, model, runs, plan, max_draws, resume, streaming):
    """Set ``est``'s fitted attributes from ``runs`` (see :func:`fit_chains`)."""
    # What the step-size rule measured (lambda_max, the noise eigenvalue, the predicted noise
    # error), as the sampler resolved it.
    context = plan.context
    info = {} if context is None or context.step is None else dict(context.step[1])
    info.update(gradient=plan.geometry.gradient, preconditioner=plan.geometry.preconditioner)
    interrupted = runs.interrupted
    if interrupted is not None and interrupted["n_draws"] == 0 and not (resume and not streaming):
        # Still in burn-in (or before the first kept draw): nothing to be fitted on, so the
        # estimator stays as it was, as after any interrupt.
        raise interrupted["exception"]
    if est.n_iter == "auto":
        info["n_iter_blocks"] = [b.n_iter for b in runs.blocks]
    est._geometry = plan.geometry
    record = chain_record(est, runs, info, max_draws, resume, streaming, plan.progress)
    exact = resume and not streaming and plan.progress is not None
    set_chain_draws(est, sampler, model, y, runs, record, plan, exact)
    # The KSD's budget is this call's gradient work, not the running total of a partial_fit
    # stream or a continued fit (each call pays a bounded share).
    this_call = sum(r.n_grad_evals for r in runs.results)
    n_grad = this_call if interrupted is None else None
    bias_test = not sampler.requires_full_data
    score_draws(est, plan.chain_model, plan.geometry, n_grad, bias_test=bias_test, speculative=runs.ksd)
    warn_fit(est, sampler, X)
    if interrupted is not None:
        warn_interrupted(est, interrupted)
        raise interrupted["exception"]
    return est
