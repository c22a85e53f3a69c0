"""The algorithms, each a plug-in of the one level-wise grower (``sqltree.grower``).

A plug-in is a ``Strategy``: it decides which nodes may split, builds the criteria SQL over the
shared histogram, chooses one split per node from the scored rows and plans its branches. The
histogram, running sums, partition and level table are the grower's, ``queries``'s and
``running_sums``'s, the same for every algorithm; an algorithm's own SQL sits next to it
(``c45_criteria``, ``c45_cuts``, ``c45_scores`` for C4.5 and ID3). The registry is explicit
(no discovery): adding an algorithm is one module and one entry here.
"""

from __future__ import annotations

from ..dataset import Dataset
from ..grower import GrowOptions, GrowStats, Progress, Strategy, grow_with
from ..tree import Node
from .c45 import C45Strategy
from .cart import CARTStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    "c4.5": C45Strategy,
    "id3": C45Strategy,
    "cart": CARTStrategy,
}
"""Algorithm name -> the strategy that grows it."""


def make_strategy(data: Dataset, options: GrowOptions) -> Strategy:
    """The strategy of ``options.algorithm`` for ``data``."""
    try:
        strategy = STRATEGIES[options.algorithm]
    except KeyError:
        raise ValueError(
            f"algorithm must be one of {tuple(STRATEGIES)}, not {options.algorithm!r}"
        ) from None
    return strategy(data, options)


def grow(
    data: Dataset,
    options: GrowOptions,
    progress: Progress | None = None,
    strategy: Strategy | None = None,
) -> tuple[Node, GrowStats]:
    """Grow a tree on ``data`` with the algorithm ``options`` name (or a strategy given)."""
    return grow_with(strategy or make_strategy(data, options), progress)


__all__ = ["STRATEGIES", "C45Strategy", "CARTStrategy", "grow", "make_strategy"]
