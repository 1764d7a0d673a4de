"""Exceptions and warnings of skbayes_sg."""

from sklearn.exceptions import ConvergenceWarning


class GradientNoiseWarning(ConvergenceWarning):
    """The chains ran hotter (or colder) than the target temperature.

    Issued after ``fit`` when the mean kinetic temperature ``p'p / P`` of a momentum
    sampler differs from ``T`` beyond Monte Carlo error, when the step's predicted
    gradient-noise error is well above the sampler's tolerance, or when the kernel Stein
    discrepancy of the draws is significantly above that of exact draws of the same
    effective size (``diagnostics_["ksd_pvalue"]``, see :mod:`skbayes_sg.metrics`). At stationarity the
    kinetic temperature must equal ``T`` (equipartition). Above ``T`` it measures the
    minibatch gradient noise that the friction did not dissipate (the posterior is too
    wide by about that factor in variance); below, usually chains that have not
    equilibrated.

    A subclass of scikit-learn's ``ConvergenceWarning`` (so of ``UserWarning``): in both
    cases the draws do not represent the posterior, and filtering ``ConvergenceWarning``
    filters it too. ``fit`` issues at most one warning; when the chains also failed the
    convergence checks, that warning says so as well.
    """


class DivergenceError(RuntimeError):
    """A chain's state became non-finite.

    Raised instead of returning draws (and so NaN predictions). The message names the
    sampler, the step size and the iteration, and suggests a fix.

    Attributes
    ----------
    sampler : str
        Class name of the sampler.
    step_size : float
        The step size ``h`` in use.
    iteration : int
        The (1-based) iteration at which the non-finite state was found.
    """

    def __init__(self, message, *, sampler=None, step_size=None, iteration=None):
        super().__init__(message)
        self.sampler = sampler
        self.step_size = step_size
        self.iteration = iteration

    def __reduce__(self):
        # Keep the keyword attributes when the error crosses a joblib process boundary.
        return (_rebuild, (self.args[0], self.sampler, self.step_size, self.iteration))


def _rebuild(message, sampler, step_size, iteration):
    return DivergenceError(message, sampler=sampler, step_size=step_size, iteration=iteration)


class FitInterruptedWarning(UserWarning):
    """A fit was interrupted (``KeyboardInterrupt``, Ctrl-C) after its burn-in.

    Issued just before the interrupt propagates: the estimator is fitted on the draws the
    chains had kept so far (diagnostics computed on them, ``diagnostics_["interrupted"]``
    set), so a notebook keeps a usable model while a script still stops. The message
    gives the iteration reached and whether ``warm_start=True`` can continue the chains.
    """
