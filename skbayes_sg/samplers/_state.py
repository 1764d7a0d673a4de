"""The state of one chain."""

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SamplerState:
    """State of one chain between iterations.

    Attributes
    ----------
    theta : ndarray of shape (P,)
        Position (the parameters).
    step_size : float
        The step size ``h`` in use (resolved from ``"auto"`` when asked).
    p : ndarray of shape (P,) or None
        Momentum, for the second-order (Langevin-family) samplers; mass ``M = I``.
    xi : float or None
        Thermostat variable of the Nose-Hoover samplers (SGNHT, CCAdL, mCCAdL).
    force : ndarray of shape (P,) or None
        The noisy force ``-grad U~(theta)`` at ``theta``, kept by schemes that reuse the
        force of one iteration at the start of the next (mCCAdL's BAODCDOAB).
    grads : PerExampleGradients or None
        Per-example gradients of the latest force evaluation.
    extra : dict
        Sampler-specific variables (covariance estimates, adaptation state, counters).
    """

    theta: np.ndarray
    step_size: float
    p: np.ndarray = None
    xi: float = None
    force: np.ndarray = None
    grads: object = None
    extra: dict = field(default_factory=dict)
