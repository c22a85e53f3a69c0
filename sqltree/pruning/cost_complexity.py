"""Minimal cost-complexity pruning, computed as scikit-learn computes it.

Everything here works on the weighted class counts kept in the tree (no data access): node
impurities with scikit-learn's arithmetic, the pruning path (effective alphas and total leaf
impurities, ``cost_complexity_pruning_path``) and pruning at a given ``ccp_alpha``
(``prune_ccp``), following ``_cost_complexity_prune`` in scikit-learn's ``_tree.pyx``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..tree import Node

CRITERIA = ("gini", "entropy", "log_loss")


# -- impurity ----------------------------------------------------------------------------------
def impurity(counts: Sequence[float], criterion: str = "gini") -> float:
    """Gini or entropy (bits) of weighted class counts, computed as scikit-learn does."""
    w = sum(counts)
    if w <= 0:
        return 0.0
    if criterion == "gini":
        sq = 0.0
        for c in counts:
            sq += c * c
        return 1.0 - sq / (w * w)
    out = 0.0
    for c in counts:
        if c > 0:
            p = c / w
            out -= p * (math.log(p) / math.log(2.0))
    return out


# -- cost-complexity pruning -------------------------------------------------------------------
def _ccp_sequence(
    nodes: list[Node], criterion: str, alpha: float | None
) -> tuple[list[float], list[float], set[int]]:
    """scikit-learn's ``_cost_complexity_prune`` over nodes in its numbering.

    Returns the path (alphas, total leaf impurities) and the indices of pruned-to-leaf nodes
    when pruning stops at ``alpha`` (the whole path when ``alpha`` is None).
    """
    index = {id(n): i for i, n in enumerate(nodes)}
    m = len(nodes)
    total = sum(nodes[0].counts)
    parent = [-1] * m
    for i, n in enumerate(nodes):
        for c in n.children:
            parent[index[id(c)]] = i
    r_node = [sum(n.counts) * impurity(n.counts, criterion) / total for n in nodes]
    leaf = [n.is_leaf for n in nodes]
    r_branch = [0.0] * m
    n_leaves = [0] * m
    # Same accumulation order as scikit-learn: leaves by index, each bubbling to the root.
    for i in range(m):
        if not leaf[i]:
            continue
        r_branch[i] = r_node[i]
        j = i
        while j != 0:
            p = parent[j]
            r_branch[p] += r_node[i]
            n_leaves[p] += 1
            j = p
    candidate = [not x for x in leaf]
    in_subtree = [True] * m
    alphas, impurities = [0.0], [r_branch[0]]
    pruned: set[int] = set()
    children = [[index[id(c)] for c in n.children] for n in nodes]
    while candidate[0]:
        effective = 1.7976931348623157e308
        chosen = -1
        for i in range(m):
            if not candidate[i]:
                continue
            a = (r_node[i] - r_branch[i]) / (n_leaves[i] - 1)
            if a < effective:
                effective = a
                chosen = i
        if alpha is not None and alpha < effective:
            break
        stack = [chosen]
        while stack:
            j = stack.pop()
            if not in_subtree[j]:
                continue
            candidate[j] = False
            in_subtree[j] = False
            stack.extend(children[j])
        in_subtree[chosen] = True
        pruned.add(chosen)
        n_pruned = n_leaves[chosen] - 1
        n_leaves[chosen] = 0
        r_diff = r_node[chosen] - r_branch[chosen]
        r_branch[chosen] = r_node[chosen]
        j = parent[chosen]
        while j != -1:
            n_leaves[j] -= n_pruned
            r_branch[j] += r_diff
            j = parent[j]
        alphas.append(effective)
        impurities.append(r_branch[0])
    return alphas, impurities, pruned


def cost_complexity_pruning_path(
    root: Node, criterion: str = "gini", nodes: list[Node] | None = None
) -> dict[str, list[float]]:
    """Effective alphas and total leaf impurities of minimal cost-complexity pruning.

    The same sequence as scikit-learn's ``cost_complexity_pruning_path``, from the weighted
    class counts kept in the tree. ``nodes`` gives scikit-learn's node numbering (preorder by
    default), which decides between subtrees of equal alpha.
    """
    order = nodes if nodes is not None else list(root.walk())
    alphas, impurities, _ = _ccp_sequence(order, _criterion(criterion), None)
    return {"ccp_alphas": alphas, "impurities": impurities}


def prune_ccp(
    root: Node, alpha: float, criterion: str = "gini", nodes: list[Node] | None = None
) -> Node:
    """Prune ``root`` in place to the subtree scikit-learn keeps for ``ccp_alpha=alpha``."""
    order = nodes if nodes is not None else list(root.walk())
    _, _, pruned = _ccp_sequence(order, _criterion(criterion), alpha)
    for i in pruned:
        order[i].make_leaf()
    return root


def _criterion(name: str) -> str:
    if name not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, not {name!r}")
    return "gini" if name == "gini" else "entropy"
