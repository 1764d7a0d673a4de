"""Stochastic gradient Langevin dynamics (Welling & Teh 2011) at a fixed step size."""

import math

import numpy as np
from sklearn.utils._param_validation import StrOptions

from ..preconditioning import PRECONDITIONERS
from ._base import AUTO, POSITIVE, BaseSampler
from ._state import NoInfo
from ._substeps import langevin_step

_NO_INFO = NoInfo()


class SGLD(BaseSampler):
    """Stochastic gradient Langevin dynamics.

    One iteration (multilevel SGLD paper, Nagapetyan et al. 2017, eq. 2, at temperature T):

    ``theta <- theta + h grad log pi~(theta) + sqrt(2 h T) xi,  xi ~ N(0, I)``

    where ``grad log pi~`` is the minibatch estimate of the log posterior gradient.
    SGLD has no momentum: it is the first-order member of the family, cheap and robust,
    but its fixed-``h`` bias grows with ``h`` and with the gradient noise.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        The step size ``h``. ``"auto"`` sets ``h = c / lambda_max`` with ``lambda_max`` the
        largest curvature of the negative log posterior at the initial point and
        ``c = 0.05``: Euler-Langevin is stable below ``2 / lambda_max``, and the
        discretisation inflates the stiffest direction's variance by ``1 / (1 - c / 2)``
        for a Gaussian, 2.6% at ``c = 0.05``. Whitened at the MAP every direction is the
        stiffest, so at the former ``c = 0.1`` every sd was 2.5-4% wide and, through the
        residuals, a sampled noise precision 0.09 sd off (``benchmarks/posterior_accuracy.py``,
        N = 1,000, D = 100); under ``n_iter="auto"`` the smaller step costs run length, not
        accuracy. Gradient
        noise adds a factor of about ``1 + h Sigma_max / (2 T)``, roughly ``c N / (2 n)``
        for a batch of ``n`` of ``N`` rows: lower ``step_size`` when that matters.
    temperature : float, default=1.0
        ``T = 1 / beta``; 1 samples the posterior.
    preconditioner : {"auto", "dense", "centred", "diag", "none"}, default="auto"
        Coordinates the scheme runs in. ``"dense"``: ``theta = theta_hat + L z`` with
        ``L L'`` the inverse Hessian of the negative log posterior at the MAP
        ``theta_hat``; ``"diag"``: its diagonal; ``"centred"``: for a GLM with
        intercepts, the diagonal after centring the predictors for the intercepts, with
        a Lanczos correction of the few directions it leaves far from unit curvature, O(P)
        to apply (the diagonal for other models); ``"none"``: ``theta`` itself. The scheme
        above is applied unchanged to ``z`` (equivalently, in ``theta`` with the constant
        mass matrix ``H``), where a near-Gaussian posterior is near ``N(0, I)``, so one
        step size fits every direction however the features are scaled.
        ``"auto"``: dense up to 1,000 parameters, centred beyond (see
        :mod:`skbayes_sg.preconditioning`) with ``step_size="auto"``; ``"none"`` with an
        explicit ``step_size``, which is in the units of ``theta``. Used by the
        estimators, which find the MAP.

    Examples
    --------
    >>> from skbayes_sg import SGBayesLinearRegression
    >>> from skbayes_sg.samplers import SGLD
    >>> reg = SGBayesLinearRegression(sampler=SGLD(step_size=1e-4))
    """

    _step_size_order = 1
    _auto_step_constant = 0.05

    _parameter_constraints: dict = {
        "step_size": [POSITIVE, AUTO],
        "temperature": [POSITIVE],
        "preconditioner": [StrOptions(set(PRECONDITIONERS))],
    }

    def __init__(self, step_size="auto", temperature=1.0, preconditioner="auto"):
        self.preconditioner = preconditioner
        self.step_size = step_size
        self.temperature = temperature

    _normals_per_step = 1
    _batch_fields = ("theta",)

    def step_batch(self, chains, grads, rngs):
        h = chains.step_size
        force = chains.noise
        grads.forces(chains.theta, rngs, force)
        noise = chains.normals(rngs, np.empty_like(force))
        noise *= math.sqrt(2.0 * h * self.temperature)
        noise += h * force
        chains.theta += noise
        return np.empty((len(rngs), 0))

    def step(self, state, grad_estimator, rng):
        h = state.step_size
        force, _ = grad_estimator.gradient(state.theta, rng)
        noise = rng.standard_normal(state.theta.shape)
        langevin_step(state.theta, force, h, noise, self.temperature, out=noise)
        return state, _NO_INFO
