"""Multilevel SGLD (Nagapetyan, Szpruch, Vollmer, Zygalakis and Giles 2017, :doc:`/maths/mlsgld`).

:class:`CoupledSGLD` (``_coupling.py``) couples fine and coarse SGLD paths, :func:`mlmc`
(``_allocation.py``) allocates samples and levels (Giles' algorithm). The strategy that sets
them up, :class:`~skbayes_sg.samplers.MLSGLD` for the estimators and :func:`estimate`
standalone, is in ``samplers/mlsgld.py``; :func:`find_map` is the estimators' MAP.
"""

from .._estimator import find_map
from ..samplers.mlsgld import estimate
from ._allocation import MultilevelResult, mlmc
from ._coupling import CoupledSGLD, LevelSample

__all__ = ["CoupledSGLD", "LevelSample", "MultilevelResult", "estimate", "find_map", "mlmc"]
