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
    noise, work : ndarray of shape (C, P)
        Work arrays: the chains' normals, and a kernel's scratch.
    """

    def __init__(self, states, fields):
        self.fields, self.states = fields, states
        self.step_size = states[0].step_size
        for name in fields:
            setattr(self, name, np.array([getattr(s, name) for s in states], dtype=float))
        self.noise = np.empty_like(self.theta)
        self.work = np.empty_like(self.theta)
        self._block, self._next = None, 0
        self._ou_cache = None

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

    def scaled_normals(self, rngs, scale, out):
        """``out`` filled with the next normals of every chain times ``scale`` (broadcast), the
        same numbers as :meth:`normals` then ``out *= scale``, without copying a predrawn block."""
        block = self._block
        if block is not None and self._next < block.shape[0]:
            np.multiply(block[self._next], scale, out=out)
            self._next += 1
            return out
        normals(rngs, out)
        out *= scale
        return out

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
    """``p[c] @ p[c]`` of every row, shape (C,): one dot product per row, as one chain computes it.

    One stacked ``matmul`` of ``(C, 1, P) @ (C, P, 1)``: numpy loops over the stack calling the
    same BLAS dot product as ``p[c] @ p[c]``, so every row rounds as it does alone.
    """
    return np.matmul(p[:, None, :], p[:, :, None]).reshape(len(p))


def ou_exact_rows(p, friction, diffusion, delta, chains, rngs):
    """:func:`~._substeps.ou_exact` on every row of ``p``, row ``c`` with ``friction[c]``, the
    normals from ``chains`` (:meth:`ChainsState.normals`)."""
    decay, scale = ou_coefficients(friction, diffusion, delta, chains)
    noise = chains.scaled_normals(rngs, scale, chains.noise)
    p *= decay
    p += noise
    return p


def ou_coefficients(friction, diffusion, delta, chains=None):
    """The decay ``exp(-f delta)`` and noise scale of :func:`~._substeps.ou_exact` for each
    friction ``f`` of ``friction`` (C,), as columns (C, 1), by the scalar formulas of one chain.

    Kept on ``chains`` for the next call: mCCAdL's first O step of an iteration has the
    friction, step and diffusion of the previous iteration's last one.
    """
    key = (friction.tolist(), diffusion, delta)
    cached = getattr(chains, "_ou_cache", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    decay, scale = [], []
    for f in key[0]:
        if f == 0.0:
            decay.append(1.0)
            scale.append(math.sqrt(2.0 * diffusion * delta))
            continue
        try:
            d = math.exp(-f * delta)
            s = math.sqrt(diffusion * -math.expm1(-2.0 * f * delta) / f)
        except OverflowError:
            d = s = math.inf
        decay.append(d)
        scale.append(s)
    out = (np.array(decay)[:, None], np.array(scale)[:, None])
    if chains is not None:
        chains._ou_cache = (key, out)
    return out


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
