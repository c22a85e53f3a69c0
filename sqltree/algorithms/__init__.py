"""The algorithms, each a plug-in of the one level-wise grower (``sqltree.grower``).

A plug-in is a ``Strategy``: it decides which nodes may split, builds the criteria SQL over the
shared histogram, chooses one split per node from the scored rows and plans its branches. The
histogram, running sums, partition and level table are the grower's, ``queries``'s and
``running_sums``'s, the same for every algorithm; an algorithm's own SQL sits next to it
(the packages ``c45`` for C4.5 and ID3, and ``cart``). The registry is explicit (no
discovery): adding an algorithm is one module, one entry here, and its name and facts in
``sqltree.algorithm_registry``.
Post-pruning is ``sqltree.pruning``'s, after growth: ``grow_and_prune`` runs what the grow
options ask for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..algorithm_registry import C45, CART, CART_REGRESSION, ID3
from ..dataset import Dataset
from ..errors import UnsupportedOptionError
from ..grower import GrowOptions, GrowStats, Progress, Strategy, grow_with
from ..pruning import PruneStats, prune
from ..tree import Node
from .c45.strategy import C45Strategy
from .cart import CARTStrategy
from .cart.regression import RegressionStrategy
from .level_scan import SCAN_STRATEGIES, scan_strategy
from .memory import DEEP_STRATEGIES, MEMORY_STRATEGIES, SCAN, memory_strategy
from .memory.recount import RowsInMemory
from .memory.stages import InMemoryStages

SCAN_REASON = "binned: histograms summed in the engine, splits chosen in Python"

SCAN_REFUSAL = ("plan='scan' grows binned trees (max_bins; CART, C4.5, ID3) on an engine that "
                "stores tables; use plan='tables' or 'auto'")

STRATEGIES: dict[str, type[Strategy]] = {
    C45: C45Strategy,
    ID3: C45Strategy,
    CART: CARTStrategy,
    CART_REGRESSION: RegressionStrategy,
}
"""Algorithm name (``GrowOptions.strategy_name``) -> the strategy that grows it."""


def make_strategy(data: Dataset, options: GrowOptions) -> Strategy:
    """The strategy of ``options.algorithm`` for ``data``."""
    try:
        strategy = STRATEGIES[options.strategy_name]
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


def _cart_pruning(root: Node, data: Dataset, options: GrowOptions) -> PruneStats:
    return prune(
        root,
        data,
        "cost-complexity",
        criterion=options.criterion,
        ccp_alpha=options.ccp_alpha,
        max_leaf_nodes=options.max_leaf_nodes,
    )


POST_PRUNING: dict[str, Callable[[Node, Dataset, GrowOptions], PruneStats]] = {
    CART: _cart_pruning,
    CART_REGRESSION: _cart_pruning,
}
"""Algorithm name -> the pruning its grow options ask for (C4.5's has options of its own,
given to ``sqltree.pruning.prune``)."""


def grow_and_prune(
    data: Dataset, options: GrowOptions, progress: Progress | None = None,
    memory: str | None = None,
    plan: str = "auto",
) -> tuple[Node, GrowStats, PruneStats | None, Any]:
    """Grow a tree with ``options.algorithm``, then prune it as its grow options say (as
    scikit-learn's ``fit`` builds, then ``_prune_tree``): for CART, the ``max_leaf_nodes``
    cut-back and cost-complexity pruning at ``ccp_alpha``. The pruning's statistics are None
    for an algorithm whose grow options ask for none (C4.5's is ``train``'s own step).
    ``memory`` (why): grow on the memory plan where the algorithm has an in-memory scorer
    (``sqltree.algorithms.memory``); ``stats.plan`` says which plan grew the tree. Last, the
    training rows as pruning recounts them: held by the memory plan, else read from the engine
    once a recount's rows are few (``memory.recount.RowsInMemory``)."""
    strategy = memory_strategy(data, options, memory) if memory is not None else None
    if strategy is None and plan in (SCAN, "auto"):
        strategy = scan_strategy(options, data)
        if strategy is not None:
            strategy.plan_reason = "asked for" if plan == SCAN else SCAN_REASON
        elif plan == SCAN:
            raise UnsupportedOptionError(SCAN_REFUSAL)
    if strategy is None and options.strategy_name in DEEP_STRATEGIES:
        strategy = DEEP_STRATEGIES[options.strategy_name](data, options)
    root, stats = grow(data, options, progress, strategy)
    stats.memory_from_level = getattr(strategy, "switched_at", None)
    post_pruning = POST_PRUNING.get(options.strategy_name)
    pruned = post_pruning(root, data, options) if post_pruning is not None else None
    rows = strategy.rows_in_memory if isinstance(strategy, InMemoryStages) else None
    return root, stats, pruned, rows or RowsInMemory(data)


__all__ = [
    "MEMORY_STRATEGIES",
    "POST_PRUNING",
    "SCAN_STRATEGIES",
    "STRATEGIES",
    "C45Strategy",
    "CARTStrategy",
    "RegressionStrategy",
    "grow",
    "grow_and_prune",
    "make_strategy",
]
