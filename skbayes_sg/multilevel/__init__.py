"""Multilevel SGLD (Nagapetyan, Szpruch, Vollmer, Zygalakis and Giles 2017, :doc:`/maths/mlsgld`).

:class:`CoupledSGLD` (``_coupling.py``) couples fine and coarse SGLD paths, :func:`mlmc`
(``_allocation.py``) allocates samples and levels (Giles' algorithm).
:meth:`MLSGLD.estimate <skbayes_sg.samplers.MLSGLD.estimate>` sets them up from its hyperparameters.
"""

from ._allocation import MultilevelResult, mlmc
from ._coupling import CoupledSGLD, LevelSample

__all__ = ["CoupledSGLD", "LevelSample", "MultilevelResult", "mlmc"]
