"""Post-pruning: C4.5's error-based pruning (as J48), pessimistic pruning, reduced-error pruning.

Every method keeps each node's ``counts`` exact: the (fractional) class weights of the
training rows that reach it. Error-based and pessimistic pruning read only those counts,
except for C4.5's *subtree raising*: replacing a node by its largest branch sends all of the
node's rows down that branch, so the counts of every node of the raised subtree change. They
are recounted in the engine by :func:`route_counts`, a few statements per tree level, with
C4.5's fractional routing of unknown values (each node's branch shares recomputed from the
rows that now reach it, as J48 does). Reduced-error pruning needs the class weights of
validation rows at every node, counted the same way over the validation source.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import progress as reporting
from ..algorithm_registry import C45_PRUNING
from ..compiler import collector_paused
from ..criteria import J48_SMALL, add_errs
from ..dataset import Dataset
from ..options import PRUNING
from ..tree import Node
from .recount import _apply_counts, _Router, known_counts, recount_raised, route_counts

__all__ = [
    "PruneStats",
    "add_errs",
    "collapse",
    "estimated_errors",
    "prune_c45",
    "prune_pessimistic",
    "prune_reduced_error",
    "route_counts",
]

SMALL = J48_SMALL
"""J48 compares weights and error estimates with ``Utils.SMALL``."""

METHODS = PRUNING


@dataclass
class PruneStats:
    """What a pruning pass did."""

    method: str
    leaves_before: int = 0
    leaves_after: int = 0
    collapsed: int = 0  # subtrees replaced by a leaf because they fixed no training error
    pruned: int = 0  # subtrees replaced by a leaf by the pruning criterion
    raised: int = 0  # nodes replaced by their largest branch (subtree raising)
    queries: int = 0


# -- C4.5's error estimate (``add_errs`` lives in ``criteria``, shared with rule sets) ------
def _incorrect(counts: Sequence[float]) -> float:
    """Weight a leaf with these counts misclassifies (J48's Distribution.numIncorrect)."""
    best = 0.0
    for c in counts:
        if c - best > SMALL:
            best = c
    return float(sum(counts)) - best


def estimated_errors(counts: Sequence[float], cf: float = 0.25) -> float:
    """C4.5's pessimistic error count of a leaf holding ``counts``."""
    total = float(sum(counts))
    if abs(total) < SMALL:
        return 0.0
    e = _incorrect(counts)
    return e + add_errs(total, e, cf)


class _Estimates:
    """C4.5's estimated errors of subtrees, summed over children as J48 does.

    A node kept by pruning remembers its sum, so that deciding its parent costs one term per
    child instead of a walk over every leaf below (a million-row tree of depth 10 has 227,000
    leaves). Nodes are decided bottom up, and a raise re-decides its whole subtree, so a kept
    node's sum is always that of its current subtree.
    """

    def __init__(self, cf: float) -> None:
        self.cf = cf
        self._kept: dict[int, float] = {}
        # A grown tree's leaves repeat a few small counts (424,545 of the 1M file's 709,560
        # leaves hold less than 2 rows): each distinct one is estimated once.
        self._leaves: dict[tuple[float, ...], float] = {}
        # the subtree sums of the nodes being decided (a round's, or the last one visited),
        # so that keeping one does not sum its children again
        self._deciding: dict[int, float] = {}

    def leaf(self, counts: Sequence[float]) -> float:
        key = tuple(counts)
        found = self._leaves.get(key)
        if found is None:
            found = self._leaves[key] = estimated_errors(counts, self.cf)
        return found

    def subtree(self, node: Node) -> float:
        if node.is_leaf:
            return self.leaf(node.counts)
        errors = 0.0
        kept = self._kept
        for child in node.children:
            if child.split is None:  # a leaf now, even if it was kept before a raise
                errors += self.leaf(child.counts)
                continue
            known = kept.get(id(child))
            errors += known if known is not None else self.subtree(child)
        return errors

    def tree(self, node: Node) -> float:
        """:meth:`subtree` of a node being decided, remembered until it is decided."""
        errors = self._deciding[id(node)] = self.subtree(node)
        return errors

    def decided(self, node: Node, kept: bool) -> None:
        """``node`` is decided: kept with its subtree's sum, or changed (a leaf, raised)."""
        errors = self._deciding.pop(id(node), None)
        if kept:
            self._kept[id(node)] = self.subtree(node) if errors is None else errors


def _training_errors(root: Node) -> tuple[list[Node], dict[int, float]]:
    """Every internal node, parents first, and the training errors of every internal node's
    subtree, summed over children as J48 does (a plain loop: a grown tree has a million
    nodes)."""
    order: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.split is not None:
            order.append(node)
            stack.extend(node.children)
    errors: dict[int, float] = {}
    get = errors.get
    for node in reversed(order):  # children before their parent
        total = 0.0
        for child in node.children:
            below = get(id(child))
            total += _incorrect(child.counts) if below is None else below
        errors[id(node)] = total
    return order, errors


def _leaf(node: Node) -> None:
    node.make_leaf()


def count_leaves(root: Node) -> int:
    """Leaves of the tree (a plain loop: grown trees have hundreds of thousands)."""
    n = 0
    stack = [root]
    while stack:
        children = stack.pop().children
        if children:
            stack.extend(children)
        else:
            n += 1
    return n


# -- collapse ----------------------------------------------------------------------------------
def collapse(root: Node) -> int:
    """Replace every subtree whose leaves misclassify no less training weight than the subtree's
    root would on its own (less 1e-3) by a leaf, top down; J48 does this before pruning, and
    also when it does not prune (-U). Returns the number of subtrees collapsed.
    """
    return _collapse(root)[0]


def _collapse(root: Node) -> tuple[int, int]:
    """:func:`collapse`, and the number of leaves the tree lost."""
    order, errors = _training_errors(root)
    gone: set[int] = set()  # nodes below a collapsed one: no longer in the tree
    collapsed = lost = 0
    for node in order:  # parents before their children
        below = id(node) in gone
        if below or errors[id(node)] >= _incorrect(node.counts) - 1e-3:
            for child in node.children:
                gone.add(id(child))
                lost += child.split is None
            if not below:
                _leaf(node)
                collapsed += 1
                lost -= 1  # the node is a leaf now
    return collapsed, lost


# -- C4.5 error-based pruning ------------------------------------------------------------------
def _max_bag(node: Node) -> int:
    """Index of the heaviest branch; ties go to the last one, as in J48's Distribution.maxBag."""
    best, index = 0.0, -1
    for i, child in enumerate(node.children):
        if child.weight - best > -SMALL:
            best, index = child.weight, i
    return max(index, 0)


def prune_c45(
    root: Node,
    data: Dataset | None = None,
    cf: float = 0.25,
    subtree_raising: bool = True,
    *,
    collapse_first: bool = True,
    batch: bool = True,
    rows: Any = None,
    leaves: int | None = None,
) -> PruneStats:
    """Prune ``root`` in place as J48 does (``-C cf``; ``-S`` is ``subtree_raising=False``).

    First :func:`collapse`, then bottom up: a node becomes a leaf when its estimated errors
    as a leaf (observed plus :func:`add_errs`) are at most those of its subtree, and of its
    largest branch, plus 0.1; otherwise, with subtree raising, the node is replaced by its
    largest branch when that branch, receiving all of the node's rows, is estimated to err
    no more than the subtree (plus 0.1), and the node is pruned again. Raising needs
    ``data``: the largest branch's counts under all of the node's rows are recounted in the
    engine (:func:`route_counts`).

    ``batch``: J48 visits nodes one at a time, but nodes whose subtrees are disjoint do not
    affect each other, so all nodes whose children are final are decided together, with one
    recount statement per round (about one per level of the tree instead of one per node).
    The resulting tree is the same. ``rows``: the training rows where the memory plan holds
    them, recounted there instead of in the engine. ``leaves``: the tree's leaves, where the
    caller has counted them.
    """
    # A grown tree is millions of objects the cycle collector tracks (a 1M-row fit: 4.1
    # million, from growth), enough that its first full pass would fall in pruning (1.6 s
    # on a quiet machine, to collect 1,676 objects). Paused, with the young generations
    # collected after each round (the statements' expressions), that pass comes after
    # pruning has freed most of the tree (its nodes hold no cycles: reference counts free
    # them).
    with collector_paused():
        return _prune_c45_paused(root, data, cf, subtree_raising, collapse_first, batch, rows,
                                 count_leaves(root) if leaves is None else leaves)


def _prune_c45_paused(
    root: Node, data: Dataset | None, cf: float, subtree_raising: bool, collapse_first: bool,
    batch: bool, rows: Any, leaves: int,
) -> PruneStats:
    stats = PruneStats(C45_PRUNING, leaves_before=leaves)
    if collapse_first:
        started = time.perf_counter()
        stats.collapsed, lost = _collapse(root)
        if stats.collapsed:  # a walk over every node of the grown tree: seconds at 1M rows
            reporting.step(
                "prune",
                f"collapsed {reporting.count(stats.collapsed, 'subtree')} that fix no "
                f"training error: {stats.leaves_before - lost:,} leaves, "
                f"{time.perf_counter() - started:.2f} s",
                collapsed=stats.collapsed,
            )
    router = None
    if subtree_raising and not root.is_leaf:
        if data is None:
            raise ValueError("subtree raising recounts rows in the engine: pass the dataset")
        router = _Router.open(data, in_memory=rows)
    try:
        estimates = _Estimates(cf)
        if router is not None and batch:
            _prune_c45_rounds(root, estimates, router, stats)
        else:
            _prune_c45(root, [], estimates, router, stats)
    finally:
        if router is not None:
            stats.queries = router.queries
            router.close()
    stats.leaves_after = count_leaves(root)
    return stats


def _prune_c45(
    node: Node,
    path: list[tuple[Node, int]],
    estimates: _Estimates,
    router: _Router | None,
    stats: PruneStats,
) -> None:
    """J48's ``prune()``: the children first, then the node."""
    if node.is_leaf:
        return
    for i, child in enumerate(node.children):
        _prune_c45(child, [*path, (node, i)], estimates, router, stats)
    raised = None
    branch = node.children[_max_bag(node)]
    if router is not None and not branch.is_leaf:
        raised = route_counts(router, path, branch)
    _decide(node, path, estimates, router, stats, raised)


def _outcome(node: Node, estimates: _Estimates, errors_largest: float) -> str:
    """J48's choice for a node whose children are pruned: ``"leaf"``, ``"raise"`` (its
    largest branch, estimated at ``errors_largest`` with all of the node's rows) or
    ``"keep"``."""
    errors_leaf = estimates.leaf(node.counts)
    errors_tree = estimates.tree(node)
    if errors_leaf - (errors_tree + 0.1) < SMALL and errors_leaf - (errors_largest + 0.1) < SMALL:
        return "leaf"
    if errors_largest - (errors_tree + 0.1) < SMALL:
        return "raise"
    return "keep"


def _decide(
    node: Node,
    path: list[tuple[Node, int]],
    estimates: _Estimates,
    router: _Router | None,
    stats: PruneStats,
    raised: dict[int, list[float]] | None,
) -> None:
    """Leaf, raised largest branch, or unchanged, for a node whose children are pruned.

    ``raised`` holds the largest branch's recounted class weights when that branch is not a
    leaf and raising is on.
    """
    branch = node.children[_max_bag(node)]
    if router is None:
        errors_largest = math.inf
    elif branch.is_leaf:  # the branch as a leaf holding all of the node's rows
        errors_largest = estimates.leaf(node.counts)
    else:
        assert raised is not None
        errors_largest = sum(
            estimates.leaf(raised.get(id(leaf), [0.0] * len(node.counts)))
            for leaf in branch.leaves()
        )
    _carry_out(node, path, estimates, router, stats, raised,
               _outcome(node, estimates, errors_largest))


def _carry_out(
    node: Node,
    path: list[tuple[Node, int]],
    estimates: _Estimates,
    router: _Router | None,
    stats: PruneStats,
    raised: dict[int, list[float]] | None,
    outcome: str,
) -> None:
    """Make ``node`` a leaf, raise its largest branch (whose recounted weights ``raised``
    holds) and prune it again, or keep it."""
    estimates.decided(node, outcome == "keep")
    if outcome == "leaf":
        _leaf(node)
        stats.pruned += 1
        return
    if outcome == "raise":
        assert raised is not None
        branch = node.children[_max_bag(node)]
        parent_proba = path[-1][0].proba if path else node.proba
        counts = dict(raised)
        counts[id(branch)] = list(node.counts)  # the branch now holds all of the node's rows
        _apply_counts(branch, counts, parent_proba)
        node.split = branch.split
        node.children = branch.children
        node.shares = branch.shares
        node.unknown_branch = branch.unknown_branch
        node.counts = branch.counts
        node.proba = branch.proba
        stats.raised += 1
        _prune_c45(node, path, estimates, router, stats)  # J48 prunes the raised subtree again
        return


def _settled(node: Node, branch: Node, estimates: _Estimates, known: dict[int, list[float]]
             ) -> str | None:
    """J48's choice for ``node``, if the lower bound of its raised ``branch``'s estimate from
    ``known`` (``recount.known_counts``) settles it without the branch's recount, else None.

    Each leaf's recounted weights are the known ones plus more, and C4.5's estimate of a leaf,
    ``e + add_errs(n, e)``, grows with both its weight ``n`` and its errors ``e`` (which never
    fall when weights are added: the largest class takes at most what is added), so the sum
    over the known weights is at most the branch's estimate. A node that would be kept or
    made a leaf with that bound is kept or made a leaf with any larger estimate: only a raise
    needs the recount. ``margin`` covers the bound's rounding (DOUBLE sums in any order, J48's
    SMALL in each leaf's errors).
    """
    leaves = list(branch.leaves())
    bound = sum(estimates.leaf(known.get(id(leaf), [])) for leaf in leaves)
    margin = 1e-8 * node.weight + 4 * SMALL * (len(leaves) + 1)
    outcome = _outcome(node, estimates, bound - margin)
    return None if outcome == "raise" else outcome


def _prune_c45_rounds(
    root: Node, estimates: _Estimates, router: _Router, stats: PruneStats
) -> None:
    """J48's bottom-up pruning, decided in rounds of nodes whose children are all final.

    The nodes of a round head disjoint subtrees, and a decision changes only the subtree of
    its node (a raise recounts it; its ancestors' counts and shares stay the same), so each
    node sees exactly the tree J48's one-at-a-time visit shows it. A node's children are all
    final once every internal one has been decided, whatever the decision, so round ``r``
    holds the nodes of height ``r``, known before the first round; and the ancestors of an
    undecided node are undecided, so its path is the one the tree had then.
    """
    started = time.perf_counter()
    rounds, parents = _by_height(root)
    reporting.statement(  # a walk of every node: seconds for a million-row tree
        time.perf_counter() - started,
        f"{sum(map(len, rounds)):,} nodes ordered into {len(rounds)} rounds by height",
    )
    router.read_rows_if_small()
    # the bound's statement is a chain of levels, which only DuckDB runs well
    bounded = router.holds_rows or router.data.engine.VECTORIZED
    for number, nodes in enumerate(rounds, 1):
        started, before = time.perf_counter(), (stats.pruned, stats.raised)
        # (node, path, largest branch) of the nodes that raising might change: only they
        # need their path (round 1, 54,161 nodes of the 1M tree, has none)
        raising: list[tuple[Node, list[tuple[Node, int]], Node]] = []
        for node in nodes:
            branch = node.children[_max_bag(node)]
            if branch.split is None:  # raising the leaf is making the node a leaf
                outcome = _outcome(node, estimates, estimates.leaf(node.counts))
                _carry_out(node, [], estimates, router, stats, None, outcome)
            else:
                raising.append((node, _path(node, parents), branch))
        settled: dict[int, str] = {}
        if raising and bounded:
            known = known_counts(router, [(path, branch) for _, path, branch in raising])
            for node, _, branch in raising:
                outcome = _settled(node, branch, estimates, known)
                if outcome is not None:
                    settled[id(node)] = outcome
        entries = [(path, branch) for node, path, branch in raising if id(node) not in settled]
        raised = recount_raised(router, entries) if entries else {}
        for node, path, branch in raising:
            if id(node) in settled:
                _carry_out(node, path, estimates, router, stats, None, settled[id(node)])
                continue
            own = {id(n): raised[id(n)] for n in branch.walk() if id(n) in raised}
            _decide(node, path, estimates, router, stats, own)
        _report_round(number, len(nodes), stats, before, time.perf_counter() - started,
                      len(raising) - len(entries), len(entries))
        if not router.holds_rows:
            # the round's statements' expressions (prune_c45 pauses the collector); on the
            # memory plan there are none, and growth left its whole tree to the young
            # generations: a pass over it (0.5 s at 1M rows) would collect nothing
            gc.collect(1)


def _by_height(root: Node) -> tuple[list[list[Node]], dict[int, tuple[Node, int]]]:
    """The internal nodes by height (a node whose children are leaves has height 1), and the
    parent and branch of every internal node but the root, in one walk."""
    parents: dict[int, tuple[Node, int]] = {}
    order: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_leaf:
            continue
        order.append(node)
        for i, child in enumerate(node.children):
            if not child.is_leaf:
                parents[id(child)] = (node, i)
                stack.append(child)
    height: dict[int, int] = {}
    rounds: list[list[Node]] = []
    for node in reversed(order):  # every child before its parent
        h = 1 + max((height.get(id(c), 0) for c in node.children), default=0)
        height[id(node)] = h
        if h > len(rounds):
            rounds.append([])
        rounds[h - 1].append(node)
    return rounds, parents


def _path(node: Node, parents: dict[int, tuple[Node, int]]) -> list[tuple[Node, int]]:
    """(ancestor, branch) pairs from the root down to ``node``."""
    path = []
    at = parents.get(id(node))
    while at is not None:
        path.append(at)
        at = parents.get(id(at[0]))
    path.reverse()
    return path


def _report_round(
    number: int, nodes: int, stats: PruneStats, before: tuple[int, int], seconds: float,
    bounded: int, recounted: int,
) -> None:
    pruned, raised = stats.pruned - before[0], stats.raised - before[1]
    reporting.step(
        "prune",
        f"pruning round {number}: {reporting.count(nodes, 'node')} decided, {pruned:,} pruned, "
        f"{raised:,} raised, {seconds:.2f} s",
        round=number, nodes=nodes, pruned=pruned, raised=raised, seconds=seconds,
        settled_by_bound=bounded, recounted=recounted,
    )


# -- pessimistic pruning (Quinlan 1987) --------------------------------------------------------
def pessimistic_decision(leaf_errors: float, subtree_errors: float, n: float) -> bool:
    """Quinlan's pessimistic test: prune when the leaf's corrected errors (observed + 0.5) are
    within one standard error of the subtree's corrected errors (observed + 0.5 per leaf)."""
    se = math.sqrt(subtree_errors * (n - subtree_errors) / n) if 0 < subtree_errors < n else 0.0
    return leaf_errors + 0.5 <= subtree_errors + se + 1e-12


def prune_pessimistic(root: Node) -> PruneStats:
    """Pessimistic error pruning (Quinlan 1987), top down: a subtree with leaves L and N
    training cases is replaced by a leaf when ``e(node) + 1/2 <= E + SE(E)``, with
    ``E = sum over L of (e(l) + 1/2)`` and ``SE(E) = sqrt(E (N - E) / N)``. A pruned subtree's
    descendants are not examined. Needs no data: the counts are all it reads.
    """
    stats = PruneStats("pessimistic", leaves_before=count_leaves(root))

    def visit(node: Node) -> None:
        if node.is_leaf:
            return
        leaves = list(node.leaves())
        corrected = sum(_incorrect(leaf.counts) + 0.5 for leaf in leaves)
        if pessimistic_decision(_incorrect(node.counts), corrected, node.weight):
            _leaf(node)
            stats.pruned += 1
            return
        for child in node.children:
            visit(child)

    visit(root)
    stats.leaves_after = count_leaves(root)
    return stats


# -- reduced-error pruning ---------------------------------------------------------------------
def prune_reduced_error(root: Node, data: Dataset, validation: Any) -> PruneStats:
    """Reduced-error pruning (Quinlan 1987) with a validation source.

    The validation rows are routed through the tree (unknown values spread by the tree's
    stored shares), giving their class weights at every node. Then, bottom up, a
    subtree becomes a leaf when the leaf (predicting the node's training class) misclassifies
    no more validation weight than the pruned subtree does. Training counts are unchanged.
    """
    stats = PruneStats("reduced-error", leaves_before=count_leaves(root))
    router = _Router.open(data, validation, materialize=False)
    try:
        counts = route_counts(router, [], root, recompute_shares=False)
    finally:
        stats.queries = router.queries
        router.close()
    k = len(root.counts)

    def wrong(node: Node) -> float:
        c = counts.get(id(node), [0.0] * k)
        return float(sum(c)) - c[node.label]

    def visit(node: Node) -> float:
        """Validation errors of the (pruned) subtree at ``node``."""
        if node.is_leaf:
            return wrong(node)
        subtree = sum(visit(child) for child in node.children)
        as_leaf = wrong(node)
        if as_leaf <= subtree + 1e-9:
            _leaf(node)
            stats.pruned += 1
            return as_leaf
        return subtree

    visit(root)
    stats.leaves_after = count_leaves(root)
    return stats


# -- one entry point ---------------------------------------------------------------------------
