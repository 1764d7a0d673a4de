"""Multilevel SGLD (Nagapetyan, Szpruch, Vollmer, Zygalakis and Giles 2017, :doc:`/maths/mlsgld`).

:class:`CoupledSGLD` (``_coupling.py``) couples fine and coarse SGLD paths, :func:`mlmc`
(``_allocation.py``) allocates samples and levels (Giles' algorithm). The strategy that sets
them up (``_estimate.py``), :func:`estimate`, serves :class:`~skbayes_sg.samplers.MLSGLD` and
standalone use; :func:`find_map` (from :mod:`skbayes_sg.models`) is the estimators' MAP with its cost counted.
"""

from ._allocation import MultilevelResult, mlmc
from ._coupling import CoupledSGLD, LevelSample
from ._estimate import estimate, find_map  # find_map: re-exported from models

__all__ = ["CoupledSGLD", "LevelSample", "MultilevelResult", "estimate", "find_map", "mlmc"]
