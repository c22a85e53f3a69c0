"""Post-pruning, after growth: the grower knows nothing of it (as scikit-learn's builder and
``_prune_tree``).

- ``c45``: J48's error-based pruning with subtree raising (which recounts rows through the
  grower's own partition stage), Quinlan's pessimistic pruning, reduced-error pruning against
  a validation source, and J48 ``-U``'s collapse;
- ``cost_complexity``: CART's, as scikit-learn finishes a tree: the ``max_leaf_nodes`` cut-back
  of a tree grown best-first, minimal cost-complexity pruning (``ccp_alpha``) and its path.
"""

from __future__ import annotations

from typing import Any

from .. import progress as reporting
from ..algorithm_registry import C45_PRUNING
from ..dataset import Dataset
from ..tree import Node
from .c45 import (
    METHODS,
    PruneStats,
    add_errs,
    collapse,
    count_leaves,
    estimated_errors,
    pessimistic_decision,
    prune_c45,
    prune_pessimistic,
    prune_reduced_error,
)
from .cost_complexity import (
    best_first_numbering,
    cost_complexity_pruning_path,
    cut_back,
    node_numbering,
    prune_ccp,
    prune_cost_complexity,
)
from .recount import _Router, known_counts, recount_raised, route_counts


def prune(
    root: Node,
    data: Dataset | None = None,
    method: str | None = C45_PRUNING,
    *,
    cf: float = 0.25,
    subtree_raising: bool = True,
    validation: Any = None,
    criterion: str = "gini",
    ccp_alpha: float = 0.0,
    max_leaf_nodes: int | None = None,
    rows: Any = None,
) -> PruneStats:
    """Prune with ``method``: ``"c4.5"`` (J48's default), ``"pessimistic"``,
    ``"reduced-error"`` (needs ``validation``), or None (J48 -U: only :func:`collapse`);
    ``"cost-complexity"`` for CART (``criterion``, ``ccp_alpha`` and ``max_leaf_nodes`` as
    the tree was grown with: :func:`prune_cost_complexity`).

    ``rows``: the memory plan's training rows, where C4.5's subtree raising recounts.

    Reported to ``sqltree.progress`` as the phase ``"prune"`` (C4.5's rounds as its steps)."""
    leaves = count_leaves(root)  # a walk of a grown tree's million nodes: once
    start = (f"pruning {reporting.count(leaves, 'leaf', 'leaves')} "
             f"({method or 'collapse only'})")
    with reporting.phase("prune", start) as phase:
        if method == "cost-complexity":
            stats = prune_cost_complexity(root, criterion, ccp_alpha, max_leaf_nodes)
        else:
            stats = _prune(root, data, method, cf=cf, subtree_raising=subtree_raising,
                           validation=validation, rows=rows, leaves=leaves)
        phase.done(
            f"pruned: {stats.leaves_before:,} -> "
            f"{reporting.count(stats.leaves_after, 'leaf', 'leaves')}, "
            f"{phase.seconds:.2f} s", **vars(stats),
        )
    return stats


def _prune(
    root: Node,
    data: Dataset | None,
    method: str | None,
    *,
    cf: float,
    subtree_raising: bool,
    validation: Any,
    rows: Any = None,
    leaves: int | None = None,
) -> PruneStats:
    if method is None:
        stats = PruneStats("none", leaves_before=count_leaves(root))
        stats.collapsed = collapse(root)
        stats.leaves_after = count_leaves(root)
        return stats
    if method == C45_PRUNING:
        return prune_c45(root, data, cf, subtree_raising, rows=rows, leaves=leaves)
    if method == "pessimistic":
        return prune_pessimistic(root)
    if method == "reduced-error":
        if data is None or validation is None:
            raise ValueError("reduced-error pruning needs the dataset and a validation source")
        return prune_reduced_error(root, data, validation)
    raise ValueError(
        f"pruning must be one of {(*METHODS, 'cost-complexity')} or None, not {method!r}"
    )


__all__ = [
    "METHODS",
    "PruneStats",
    "_Router",
    "add_errs",
    "best_first_numbering",
    "collapse",
    "cost_complexity_pruning_path",
    "cut_back",
    "estimated_errors",
    "known_counts",
    "node_numbering",
    "pessimistic_decision",
    "prune",
    "prune_c45",
    "prune_ccp",
    "prune_cost_complexity",
    "prune_pessimistic",
    "prune_reduced_error",
    "recount_raised",
    "route_counts",
]
