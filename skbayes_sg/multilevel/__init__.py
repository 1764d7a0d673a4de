"""Multilevel SGLD (Nagapetyan, Szpruch, Vollmer, Zygalakis and Giles 2017, :doc:`/maths/mlsgld`).

:class:`CoupledSGLD` (``_coupling.py``) couples fine and coarse SGLD paths, :func:`mlmc`
(``_allocation.py``) allocates samples and levels (Giles' algorithm), and :func:`estimate`
(``_estimate.py``) sets them up from an :class:`~skbayes_sg.samplers.MLSGLD`'s hyperparameters.
"""

from ._allocation import MultilevelResult, mlmc
from ._coupling import CoupledSGLD, LevelSample
from ._estimate import estimate

__all__ = ["CoupledSGLD", "LevelSample", "MultilevelResult", "estimate", "mlmc"]
