"""CART's post-pruning, computed as scikit-learn computes it after growth.

Everything here works on what the tree keeps (no data access): the weighted class counts and,
for a best-first tree, each split's improvement. ``prune_cost_complexity`` runs scikit-learn's
steps after growth: a tree grown best-first (``max_leaf_nodes``) is cut back to the first
``max_leaf_nodes - 1`` splits a best-first builder makes (``cut_back``), then pruned at
``ccp_alpha`` (``prune_ccp``, following ``_cost_complexity_prune`` in scikit-learn's
``_tree.pyx``). Also here: node impurities with scikit-learn's arithmetic, the pruning path
(effective alphas and total leaf impurities, ``cost_complexity_pruning_path``) and
scikit-learn's numbering of a tree's nodes (``node_numbering``), which decides between
subtrees of equal alpha.
"""

from __future__ import annotations

import heapq
import itertools
import math

from ..criteria import TIE_TOLERANCE, impurity
from ..tree import Node
from .c45 import PruneStats, count_leaves

CRITERIA = ("gini", "entropy", "log_loss")
REGRESSION_CRITERIA = ("squared_error", "friedman_mse", "poisson")
"""Regression: a node's impurity is the one kept on it (``Node.impurity``: the variance, or
the half Poisson deviance)."""


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
    r_node = [sum(n.counts) * _impurity_of(n, criterion) / total for n in nodes]
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


def _impurity_of(node: Node, criterion: str) -> float:
    if criterion in REGRESSION_CRITERIA:
        return node.impurity or 0.0
    return impurity(node.counts, criterion)


def cost_complexity_pruning_path(
    root: Node, criterion: str = "gini", nodes: list[Node] | None = None
) -> dict[str, list[float]]:
    """Effective alphas and total leaf impurities of minimal cost-complexity pruning.

    The same sequence as scikit-learn's ``cost_complexity_pruning_path``, from the weighted
    class counts kept in the tree. ``nodes`` gives scikit-learn's node numbering (preorder by
    default), which decides between subtrees of equal alpha.
    """
    order = nodes if nodes is not None else list(root.walk())
    alphas, impurities, _ = _ccp_sequence(order, criterion_of(criterion), None)
    return {"ccp_alphas": alphas, "impurities": impurities}


def prune_ccp(
    root: Node, alpha: float, criterion: str = "gini", nodes: list[Node] | None = None
) -> Node:
    """Prune ``root`` in place to the subtree scikit-learn keeps for ``ccp_alpha=alpha``."""
    _prune_at(root, alpha, criterion, nodes)
    return root


def _prune_at(root: Node, alpha: float, criterion: str, nodes: list[Node] | None) -> int:
    """``prune_ccp``; returns the number of subtrees it made leaves."""
    order = nodes if nodes is not None else list(root.walk())
    _, _, pruned = _ccp_sequence(order, criterion_of(criterion), alpha)
    for i in pruned:
        order[i].make_leaf()
    return _topmost(root, {id(order[i]) for i in pruned})


def _topmost(root: Node, chosen: set[int]) -> int:
    """How many of the nodes ``chosen`` (by ``id``) are in the tree and under none of the
    others."""
    count = 0
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in chosen:
            count += 1
            continue
        stack.extend(node.children)
    return count


def criterion_of(name: str) -> str:
    """The impurity of a scikit-learn criterion name: ``"gini"``, ``"entropy"``, or a
    regression criterion itself."""
    if name in REGRESSION_CRITERIA:
        return name
    if name not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, not {name!r}")
    return "gini" if name == "gini" else "entropy"


# -- after growth, as scikit-learn's ``_prune_tree`` -------------------------------------------
def prune_cost_complexity(
    root: Node,
    criterion: str = "gini",
    ccp_alpha: float = 0.0,
    max_leaf_nodes: int | None = None,
) -> PruneStats:
    """Prune a grown CART tree in place as scikit-learn finishes it: a best-first tree
    (``max_leaf_nodes``) cut back to its first ``max_leaf_nodes - 1`` splits, then pruned
    at ``ccp_alpha`` (nothing for 0)."""
    stats = PruneStats("cost-complexity", leaves_before=count_leaves(root))
    if max_leaf_nodes is not None:
        stats.pruned += cut_back(root, max_leaf_nodes)
    if ccp_alpha > 0:
        # numbered as grown: scikit-learn renumbers the tree only once it is pruned
        order = best_first_numbering(root) if max_leaf_nodes is not None else None
        stats.pruned += _prune_at(root, ccp_alpha, criterion, order)
    stats.leaves_after = count_leaves(root)
    return stats


def cut_back(root: Node, max_leaf_nodes: int) -> int:
    """Keep the first ``max_leaf_nodes - 1`` splits a best-first builder makes of ``root``
    (grown level-wise, speculatively: see ``sqltree.algorithms.cart``); the nodes it would
    not split become leaves. Returns how many subtrees were cut.

    scikit-learn's heap orders equal improvements arbitrarily, so nodes whose turn ties with
    another's (within ``TIE_TOLERANCE``) across the budget's edge, or among the kept ones,
    are marked ``tied``: another tree is as right as this one.
    """
    if max_leaf_nodes < 2:
        raise ValueError(f"max_leaf_nodes must be at least 2, not {max_leaf_nodes}")
    budget = max_leaf_nodes - 1
    keys = _path_keys(root)
    order = best_first_order(root, keys)
    by_key = sorted(range(len(order)), key=lambda i: keys[id(order[i])])
    tied = []
    for a, b in itertools.pairwise(by_key):
        ka, kb = keys[id(order[a])], keys[id(order[b])]
        if abs(ka - kb) <= TIE_TOLERANCE and (a < budget or b < budget):
            tied += [order[a], order[b]]
    cut = {id(node) for node in order[budget:]}
    count = _topmost(root, cut)
    for node in order[budget:]:
        node.make_leaf()
    for node in tied:
        node.tied = True
    return count


def _path_keys(root: Node) -> dict[int, float]:
    """Per split node (by ``id``): the lowest improvement on its path from the root, the
    priority a best-first builder gives it."""
    keys: dict[int, float] = {}
    stack: list[tuple[Node, float]] = [(root, math.inf)]
    while stack:
        node, above = stack.pop()
        if node.is_leaf:
            continue
        if node.improvement is None:
            raise ValueError(
                f"node {node.node_id} has no improvement: best-first order needs a CART tree "
                "as grown"
            )
        keys[id(node)] = key = min(above, node.improvement)
        stack.extend((child, key) for child in node.children)
    return keys


def best_first_order(root: Node, keys: dict[int, float] | None = None) -> list[Node]:
    """The split nodes in the order a best-first builder pops them.

    The builder pops by improvement from a heap that a node enters when its parent is split,
    which is the order of the path minimum of improvements (``_path_keys``) and, among equal
    minima, of the node's own improvement (a child better than its parent is popped right
    after it); remaining ties go to the shallower node, then the one grown first.
    """
    keys = _path_keys(root) if keys is None else keys
    heap: list[tuple[float, float, int, int, Node]] = []
    out: list[Node] = []

    def push(node: Node, depth: int) -> None:
        own = node.improvement if node.improvement is not None else -math.inf
        heapq.heappush(heap, (-keys.get(id(node), -math.inf), -own, depth, node.node_id, node))

    push(root, 0)
    while heap:
        *_, depth, _, node = heapq.heappop(heap)
        if node.is_leaf:
            continue
        out.append(node)
        for child in node.children:
            push(child, depth + 1)
    return out


def best_first_numbering(root: Node) -> list[Node]:
    """Nodes in the order a best-first builder creates them: root, then children as popped."""
    out = [root]
    for node in best_first_order(root):
        out.extend(node.children)
    return out


def node_numbering(
    root: Node, max_leaf_nodes: int | None = None, ccp_alpha: float = 0.0
) -> list[Node]:
    """Nodes in scikit-learn's numbering of a finished tree: preorder, but creation order for
    a best-first tree (``max_leaf_nodes``) that cost-complexity pruning did not renumber."""
    if max_leaf_nodes is not None and ccp_alpha == 0:
        return best_first_numbering(root)
    return list(root.walk())
