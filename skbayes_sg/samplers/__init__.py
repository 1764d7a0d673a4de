"""Samplers: one Markov transition of one chain each, one module per algorithm.

Every sampler is a small scikit-learn ``BaseEstimator`` holding hyperparameters only, with
``init_state(theta0, grad_estimator, rng, context)``, which resolves the step size from the
fit's :class:`FitContext` and returns the algorithm's typed state, and
``step(state, grad_estimator, rng)``, which returns ``(state, info)``, ``info`` a
``NamedTuple`` of the iteration's statistics (the sampler's ``info_type``).
Estimators accept an instance or its lower-case class name (``sampler="sgnht"``).
"""

from sklearn.base import clone

from ._base import BaseSampler
from ._state import (
    CCAdLState,
    GadState,
    MCCAdLState,
    MetropolisInfo,
    MomentumInfo,
    MomentumState,
    NoInfo,
    SamplerState,
    SGHMCState,
    ThermostatInfo,
    ThermostatState,
)
from ._step_size import FitContext
from .ccadl import CCAdL
from .gadmala import GadMALA, GadRWM
from .hmc import HMC, HMCInfo, HMCState
from .mccadl import MCCAdL
from .mlsgld import MLSGLD
from .sghmc import SGHMC
from .sgld import SGLD
from .sgnht import SGNHT

__all__ = [
    "BaseSampler",
    "FitContext",
    "SamplerState",
    "MomentumState",
    "SGHMCState",
    "ThermostatState",
    "CCAdLState",
    "MCCAdLState",
    "GadState",
    "HMCState",
    "NoInfo",
    "MomentumInfo",
    "ThermostatInfo",
    "MetropolisInfo",
    "HMCInfo",
    "SGLD",
    "SGHMC",
    "SGNHT",
    "CCAdL",
    "MCCAdL",
    "GadMALA",
    "GadRWM",
    "HMC",
    "MLSGLD",
    "get_sampler",
    "register",
    "SAMPLERS",
]

#: Sampler classes by the name an estimator's ``sampler`` parameter accepts.
SAMPLERS = {cls.__name__.lower(): cls for cls in (SGLD, SGHMC, SGNHT, CCAdL, MCCAdL, GadMALA, GadRWM, MLSGLD, HMC)}


def register(cls):
    """Make a sampler class available to estimators under ``cls.__name__.lower()``.

    For samplers defined outside the package; returns ``cls`` so it can decorate.
    """
    SAMPLERS[cls.__name__.lower()] = cls
    return cls


def get_sampler(sampler):
    """A fresh, validated sampler from a name or an instance (the instance is cloned).

    Raises
    ------
    ValueError
        For an unknown name, listing the known ones, or a bad hyperparameter.
    TypeError
        For anything that is neither a string nor a :class:`BaseSampler`.
    """
    if isinstance(sampler, str):
        key = sampler.lower()
        if key not in SAMPLERS:
            raise ValueError(
                f"Unknown sampler {sampler!r}. Use one of {sorted(SAMPLERS)} or a sampler instance "
                "from skbayes_sg.samplers."
            )
        instance = SAMPLERS[key]()
    elif isinstance(sampler, BaseSampler):
        instance = clone(sampler)
    else:
        raise TypeError(
            "sampler must be a sampler name such as 'sghmc' or an instance from skbayes_sg.samplers; "
            f"got {type(sampler).__name__}."
        )
    instance.validate()
    return instance
