"""Sub-steps of the Langevin family, named as in the mCCAdL paper (Wei & Shang 2026, eq. 23).

The CCAdL / mCCAdL system splits into

- A: ``d theta = M^-1 p dt``                              (position drift)
- B: ``d p = F~(theta) dt``                               (force kick, noisy force F~)
- C: ``d p = -(h/2) beta Sigma(theta) p dt``              (covariance control; in mccadl)
- O: ``d p = -xi p dt + sqrt(2 A beta^-1) M^(1/2) dW_A``   (friction and noise)
- D: ``d xi = mu^-1 [p' M^-1 p - N_d k_B T] dt``          (thermostat)

A scheme is a composition of these. With ``M = I`` throughout (as in both papers'
experiments), ``k_B T = 1 / beta = temperature``. The first-order schemes of the SGHMC,
SGNHT and CCAdL papers use the Euler-Maruyama form of O (:func:`ou_euler`); the
symmetric splittings use its exact solution (:func:`ou_exact`). All functions update
their array arguments in place and return them.
"""

import math

import numpy as np


def drift(theta, p, delta):
    """A: ``theta <- theta + delta p``."""
    theta += delta * p
    return theta


def kick(p, force, delta):
    """B: ``p <- p + delta F~(theta)``."""
    p += delta * force
    return p


def ou_exact(p, friction, diffusion, delta, rng):
    """O, solved exactly: ``dp = -friction p dt + sqrt(2 diffusion) dW`` over ``delta``.

    ``p <- e^(-friction delta) p + sqrt(diffusion (1 - e^(-2 friction delta)) / friction) R``
    with ``R ~ N(0, I)`` (mCCAdL paper Algorithm 1, lines 6-10, where
    ``diffusion = A / beta``); for ``friction = 0`` the limit
    ``p <- p + sqrt(2 diffusion delta) R``. ``friction`` may be negative (a thermostat
    below its target); the formula stays valid.
    """
    noise = rng.standard_normal(p.shape)
    # Scalars through math, not numpy (a microsecond per call, called twice per iteration),
    # and the noise scaled in place.
    if friction == 0.0:
        noise *= math.sqrt(2.0 * diffusion * delta)
        p += noise
        return p
    try:
        decay = math.exp(-friction * delta)
        # expm1 keeps (1 - e^(-2 x)) / x accurate for small x.
        var = diffusion * -math.expm1(-2.0 * friction * delta) / friction
    except OverflowError:
        # A thermostat run away below -709 / delta: math raises where numpy gives inf.
        # Infinite momenta make the chain's finiteness check raise DivergenceError, which
        # names the step size and the fix; an OverflowError from here named neither.
        decay = var = math.inf
    p *= decay
    noise *= math.sqrt(var)
    p += noise
    return p


def ou_euler(p, friction, diffusion, delta, rng):
    """O, one Euler-Maruyama step: ``p <- p - delta friction p + sqrt(2 diffusion delta) R``.

    The friction and noise of the first-order schemes: SGHMC (CCAdL paper eq. 14) and
    SGNHT / CCAdL (CCAdL paper Algorithm 1, line 6). ``diffusion`` may be a vector (the
    per-coordinate ``A T - B^`` of SGHMC with a noise estimate).
    """
    noise = rng.standard_normal(p.shape)
    p *= 1.0 - delta * friction
    # A scalar diffusion through math (a numpy scalar operation costs a microsecond, a
    # few percent of an SGLD/SGHMC step); the same correctly rounded square root.
    noise *= math.sqrt(2.0 * diffusion * delta) if isinstance(diffusion, float) else np.sqrt(2.0 * diffusion * delta)
    p += noise
    return p


def thermostat(xi, p, delta, thermal_mass, temperature, pp=None):
    """D: ``xi <- xi + delta mu^-1 (p'p - N_d T)``, returned (``xi`` is a scalar).

    ``pp``: ``p'p`` when the caller has computed it already (mCCAdL records it).
    """
    if pp is None:
        pp = float(p @ p)
    return xi + delta * (pp - p.size * temperature) / thermal_mass


def langevin_step(theta, force, h, noise, temperature=1.0, out=None):
    """SGLD's Euler-Maruyama step ``theta <- theta + h F~ + sqrt(2 h T) noise``, in place.

    Multilevel SGLD paper (Nagapetyan et al. 2017), eq. 2, at temperature ``T``. Works on
    one chain's ``theta`` (P,) as on a stack of paths (M, P), with ``force`` and ``noise``
    of the same shape. The increment is formed in ``out`` (a fresh array if None): the
    single chain passes its fresh noise, saving two temporaries, while coupled paths keep
    their Brownian increments, which the coarse path reuses.
    """
    incr = np.multiply(noise, math.sqrt(2.0 * h * temperature), out=out)
    incr += h * force
    theta += incr
    return theta
