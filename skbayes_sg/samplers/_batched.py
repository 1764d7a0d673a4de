"""Chains advanced together: their states stacked as (C, P) arrays, each chain's noise from its own generator.

A sampler with a batched kernel (``step_batch``) advances a group of ``C`` chains in one call
per iteration, so the interpreter's overhead is paid once per iteration rather than once per
chain. Every operation acts on each chain's row alone, in the order the single-chain
:meth:`~._base.BaseSampler.step` uses (the same scalar formulas through :mod:`math`, one dot
product per row, each chain's normals drawn from its own generator): a chain's draws do not
depend on which chains share its group, so the same ``random_state`` gives the same draws
whatever ``n_jobs`` is, and equal the single-chain kernel's but for the force's rounding.
"""

import math

import numpy as np


class ChainsState:
    """The states of ``C`` chains stacked: ``fields`` as arrays with a leading chain axis.

    Attributes
    ----------
    step_size : float
        Shared by the chains.
    states : list of SamplerState
        The chains' own states, for what a kernel keeps per chain outside ``fields``.
    noise : ndarray of shape (C, P)
        Work array of the chains' normals.
    """

    def __init__(self, states, fields):
        self.fields, self.states = fields, states
        self.step_size = states[0].step_size
        for name in fields:
            setattr(self, name, np.array([getattr(s, name) for s in states], dtype=float))
        self.noise = np.empty_like(self.theta)
        self._block, self._next = None, 0

    def predraw(self, rngs, n):
        """Draw each chain's next ``n`` normal vectors now, in one call per chain (the same
        numbers, in the same order, as ``n`` draws of one vector): for kernels whose gradients
        draw nothing from the chains' generators (full data), whose every draw is a normal."""
        C, P = self.theta.shape
        block = np.empty((n, C, P))
        for c, rng in enumerate(rngs):
            block[:, c] = rng.standard_normal((n, P))
        self._block, self._next = block, 0

    def normals(self, rngs, out):
        """Fill row ``c`` of ``out`` with the next standard normals of chain ``c``; return ``out``."""
        block = self._block
        if block is not None and self._next < block.shape[0]:
            out[...] = block[self._next]
            self._next += 1
            return out
        return normals(rngs, out)

    def write_back(self, states):
        """Copy each chain's row of the fields back into its own state."""
        for name in self.fields:
            stack = getattr(self, name)
            for c, s in enumerate(states):
                old = getattr(s, name)
                setattr(s, name, stack[c].copy() if stack.ndim > 1 else type(old)(stack[c]))

    def is_finite(self):
        """Per chain: whether its fields are all finite, shape (C,)."""
        ok = np.ones(self.theta.shape[0], dtype=bool)
        if all(np.isfinite(getattr(self, name)).all() for name in self.fields):
            return ok
        for name in self.fields:
            a = getattr(self, name)
            ok &= np.isfinite(a).reshape(a.shape[0], -1).all(axis=1)
        return ok


def normals(rngs, out):
    """Fill row ``c`` of ``out`` with standard normals from ``rngs[c]``; return ``out``."""
    for rng, row in zip(rngs, out):
        rng.standard_normal(out=row)
    return out


def row_dots(p):
    """``p[c] @ p[c]`` of every row, shape (C,): one dot product per row, as one chain computes it."""
    return np.array([float(row @ row) for row in p])


def ou_exact_rows(p, friction, diffusion, delta, chains, rngs):
    """:func:`~._substeps.ou_exact` on every row of ``p``, row ``c`` with ``friction[c]``, the
    normals from ``chains`` (:meth:`ChainsState.normals`)."""
    decay, scale = np.empty(len(p)), np.empty(len(p))
    for c, f in enumerate(friction):
        f = float(f)
        if f == 0.0:
            decay[c], scale[c] = 1.0, math.sqrt(2.0 * diffusion * delta)
            continue
        try:
            decay[c] = math.exp(-f * delta)
            scale[c] = math.sqrt(diffusion * -math.expm1(-2.0 * f * delta) / f)
        except OverflowError:
            decay[c] = scale[c] = math.inf
    noise = chains.normals(rngs, chains.noise)
    p *= decay[:, None]
    noise *= scale[:, None]
    p += noise
    return p


def ou_euler_rows(p, friction, diffusion, delta, chains, rngs):
    """:func:`~._substeps.ou_euler` on every row of ``p`` with a scalar ``diffusion``; ``friction``
    a scalar or one per row; the normals from ``chains`` (:meth:`ChainsState.normals`)."""
    noise = chains.normals(rngs, chains.noise)
    if np.ndim(friction):
        p *= (1.0 - delta * friction)[:, None]
    else:
        p *= 1.0 - delta * friction
    noise *= math.sqrt(2.0 * diffusion * delta)
    p += noise
    return p
