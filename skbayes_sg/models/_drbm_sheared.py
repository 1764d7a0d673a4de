"""The DRBM in sheared coordinates: the chains' parametrisation of the DRBM's default fit.

The DRBM's stiffest directions are two couplings the parametrisation builds in. With inputs
of non-zero mean ``xbar``, moving a hidden unit's weights ``W_j`` moves every pre-activation
``o_jy(x) = c_j + U_jy + W_j . x`` by ``W_j . xbar`` on average, as its bias ``c_j`` does. And
moving class ``y``'s weights ``U_jy`` by ``t`` for every hidden unit moves its free energy
``F_y`` by ``t sum_j sigmoid(o_jy)``, about ``t H / 2``, as the class bias ``d_y`` does by
``t H / 2``. Centring both, as the GLMs' centred preconditioner centres the predictors for the
intercept, the chains run in

    z = (W, U, c~, d~),    c~ = c + W xbar,    d~_y = d_y + s sum_j U_jy,

with ``s = 1/2`` (the sigmoid at zero). The map is linear with unit Jacobian, so the
posterior in ``z`` is the same posterior and the chains' draws are mapped back to ``theta``
exactly; the likelihood in ``z`` is the DRBM's on the centred rows ``x - xbar`` with
``d = d~ - s sum_j U_j``, and its per-example gradients keep the DRBM's structure (``U``'s are
``A - s r``, see :meth:`~skbayes_sg.models.DRBMModel._batch`), so mCCAdL's row-space C step
runs on them unchanged.

Measured on digits (1,257 x 64 in [0, 1], 50 hidden units, 10 classes;
``benchmarks/drbm_sheared.py``): the largest eigenvalue of the empirical Fisher information
plus the prior at posterior draws falls from 550-555 to 140-165 (to 350-365 with the inputs'
shear alone). A shear by each unit's own mean activation at the current point would reach
65-100, but a map that follows the point is no longer linear; the constant ``s`` does not
depend on which of the permutation modes a chain is in.

Sparse inputs keep ``xbar = 0`` (centring would densify them); the class shear applies.
"""

import numpy as np
import scipy.sparse as sp

from ._base import Model
from .drbm import _max_abs

#: ``s`` of ``d~ = d + s sum_j U_j``: the hidden units' mean activation, sigmoid(0).
CLASS_SHIFT = 0.5
#: Largest ``|xbar_k|`` that the inputs' shear takes (features scaled as the DRBM asks have
#: ``|xbar_k| <= 1``; digits' raw 0-16 pixels about 10).
X_SHIFT_MAX = 1e3


class DRBMShear:
    """The shear of a fit, fixed once (a continued fit keeps it): ``xbar`` and ``s``.

    Parameters
    ----------
    x_shift : ndarray of shape (n_features,) or None
    u_shift : float
    """

    def __init__(self, x_shift, u_shift=CLASS_SHIFT):
        self.x_shift, self.u_shift = x_shift, u_shift

    @classmethod
    def of(cls, drbm):
        """The shear of ``drbm``'s data: ``xbar`` the column means of dense inputs, weighted by
        the rows' likelihood weights (so that a row of weight 2 and the row twice give the
        same coordinates, hence the same draws), None for sparse inputs; ``s = CLASS_SHIFT``.
        None for a model without intercepts."""
        if not drbm.fit_intercept:
            return None
        X = drbm.X
        if sp.issparse(X):
            return cls(None)
        xbar = np.average(np.asarray(X, dtype=float), axis=0, weights=drbm.sample_weight)
        # Far outside the scale the DRBM asks for (fit warns), c~ = c + W xbar would hold a
        # value of the features' size and give c back only through cancellation.
        return cls(xbar if _max_abs(xbar) <= X_SHIFT_MAX else None)

    def chain_model(self, drbm):
        """``drbm`` in these coordinates."""
        return ShearedDRBM(drbm, self.x_shift, self.u_shift)


class ShearedDRBM(Model):
    """A :class:`~skbayes_sg.models.DRBMModel` in the sheared coordinates ``z`` (module docs).

    The chains run on this model; their draws are stored in ``theta`` (:meth:`to_theta`), so
    predictions, attributes and the convergence monitor use the DRBM as it is.

    Parameters
    ----------
    drbm : DRBMModel
        The model, with intercepts (``c`` and ``d`` are what the shear moves).
    x_shift : ndarray of shape (n_features,) or None
        ``xbar``; None for no input shear (sparse inputs).
    u_shift : float, default=CLASS_SHIFT
        ``s``.
    """

    def __init__(self, drbm, x_shift=None, u_shift=CLASS_SHIFT):
        if not drbm.fit_intercept:
            raise ValueError("The sheared coordinates move the intercepts c and d: fit_intercept must be True.")
        self.drbm = drbm
        self.x_shift = None if x_shift is None else np.asarray(x_shift, dtype=float)
        self.u_shift = float(u_shift)
        self.n_samples, self.n_params = drbm.n_samples, drbm.n_params
        H, D, C = drbm.n_hidden, drbm.n_features, drbm.n_classes
        self._W, self._U = slice(0, H * D), slice(H * D, H * D + H * C)
        self._c, self._d = slice(H * D + H * C, H * D + H * C + H), slice(H * D + H * C + H, self.n_params)

    @property
    def sample_weight(self):
        return self.drbm.sample_weight

    # -- coordinates ------------------------------------------------------------------
    def _parts(self, v):
        """Views ``(W, U, c, d)`` of ``v`` (..., P): (..., H, D), (..., H, C), (..., H), (..., C)."""
        m = self.drbm
        lead = v.shape[:-1]
        return (
            v[..., self._W].reshape(*lead, m.n_hidden, m.n_features),
            v[..., self._U].reshape(*lead, m.n_hidden, m.n_classes),
            v[..., self._c],
            v[..., self._d],
        )

    def _shear(self, v, sign):
        """``v`` with ``c += sign W xbar`` and ``d += sign s sum_j U_j``, a new array."""
        out = np.array(v, dtype=float)
        W, U, c, d = self._parts(out)
        if self.x_shift is not None:
            c += sign * (W @ self.x_shift)
        d += (sign * self.u_shift) * U.sum(axis=-2)
        return out

    def to_theta(self, z):
        """``theta`` of ``z`` (P,) or a stack (..., P): ``c = c~ - W xbar``, ``d = d~ - s sum_j U_j``."""
        return self._shear(z, -1.0)

    def from_theta(self, theta):
        """``z`` of ``theta`` (P,) or a stack (..., P)."""
        return self._shear(theta, 1.0)

    def _kernel_point(self, z):
        """The DRBM's parameters for its kernel on centred rows: ``c~`` in place of ``c`` (the
        rows carry ``- W xbar``) and ``d`` in place of ``d~``."""
        out = np.array(z, dtype=float)
        _, U, _, d = self._parts(out)
        d -= self.u_shift * U.sum(axis=0)
        return out

    def _centred(self, block):
        """A gathered block ``(X, y, w, extra)`` with its rows ``x - xbar``."""
        if self.x_shift is None:
            return block
        X, *rest = block
        return (np.asarray(X, dtype=float) - self.x_shift, *rest)

    # -- likelihood and prior ----------------------------------------------------------
    def per_example_gradients(self, z, idx):
        """The per-example gradients in ``z``: the DRBM's on the centred rows, ``U``'s ``A - s r``."""
        drbm = self.drbm
        return drbm._operator(self._kernel_point(z), self._centred(drbm.rows.gather(idx)), self.u_shift)

    def log_likelihood_and_grad(self, z, idx=None):
        return self.drbm._log_likelihood_and_grad(self._kernel_point(z), idx, self._centred, self.u_shift)

    def log_prior_and_grad(self, z):
        """The DRBM's prior at ``theta(z)``, its gradient pulled back: ``J' g`` for ``theta = J z``."""
        lp, g = self.drbm.log_prior_and_grad(self.to_theta(z))
        W, U, c, d = self._parts(g)
        if self.x_shift is not None:
            W -= np.outer(c, self.x_shift)
        U -= self.u_shift * d
        return lp, g

    def predict_draws(self, thetas, X):
        """The DRBM's class probabilities under draws in ``theta`` (what the chains store)."""
        return self.drbm.predict_draws(thetas, X)
