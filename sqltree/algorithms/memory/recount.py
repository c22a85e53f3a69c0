"""Subtree raising's recount (``pruning.recount.recount_raised``) over the memory plan's rows.

J48's pruning recounts a raised branch under all of its node's rows. On the SQL plans that is
a few statements per round; on the memory plan the level-0 rows are already in numpy, so the
rows move down the same positions (``_positions``, ``_level_routes``) with the grower's
partition, and each level's class weights per (position, key) are summed in the fixed point
``build_keyed_counts`` picks, so every count is the one the engine returns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ... import queries as q
from ...dataset import Dataset
from ...fixed_point import FIXED_POINT_HEADROOM, FIXED_POINT_MAX_BITS
from ...pruning.recount import _level_routes, _positions
from ...tree import Node
from ..c45_criteria import LN2
from .level import Level, partition, test_keys

Entries = Sequence[tuple[Sequence[tuple[Node, int]], Node]]


def _unit(w: np.ndarray) -> float:
    """``queries._fixed_point_unit``: a power of two keeping the level's largest weight
    times its row count below ``2**FIXED_POINT_HEADROOM``."""
    if len(w) == 0:
        return 1.0
    bound = float(np.max(w)) * float(len(w))
    if not bound > 0:
        return 1.0
    bits = FIXED_POINT_HEADROOM - math.ceil(math.log(bound) / LN2 + 0.25)
    return 2.0 ** max(-FIXED_POINT_MAX_BITS, min(FIXED_POINT_MAX_BITS, bits))


def keyed_counts(level: Level, tests: Sequence[tuple[int, int, float | None]], n_classes: int
                 ) -> dict[int, dict[int, list[float]]]:
    """``queries.build_keyed_counts``: class weights per (node, key of its test), key -1 for
    an unknown value and for the rows of a node without a test; nodes and keys ascending."""
    key = np.full(len(level.node), float(q.UNKNOWN_KEY))
    rows, tested = test_keys(level, tests)
    key[rows] = tested
    unit = _unit(level.w)
    fixed = np.floor(level.w * unit + 0.5).astype(np.int64)
    order = np.lexsort((key, level.node))
    node, key, fixed, y = level.node[order], key[order], fixed[order], level.y[order]
    change = np.ones(len(node), dtype=bool)
    change[1:] = (node[1:] != node[:-1]) | (key[1:] != key[:-1])
    starts = np.flatnonzero(change)
    group = np.cumsum(change) - 1
    sums = np.zeros((len(starts), n_classes), dtype=np.int64)
    np.add.at(sums, (group, y), fixed)
    weights = (sums.astype(np.float64) / unit).tolist()
    out: dict[int, dict[int, list[float]]] = {}
    for i, start in enumerate(starts.tolist()):
        out.setdefault(int(node[start]), {})[int(key[start])] = weights[i]
    return out


class RowsInMemory:
    """The training rows of the memory plan, where pruning recounts raised subtrees."""

    def __init__(self, data: Dataset, level0: Level) -> None:
        self.data = data
        self.level0 = level0

    def recount(self, entries: Entries, recompute_shares: bool = True
                ) -> dict[int, list[float]]:
        """``recount_raised``'s class weights, keyed by ``id()`` of the nodes they reach."""
        k = len(self.data.classes)
        features = {f.name: f for f in self.data.features}
        counts: dict[int, list[float]] = {}
        frontier = {0: _positions(entries)}
        level = self.level0
        next_id = 1
        while frontier:
            tests = [(local, features[at.node.split.feature].index, at.node.split.threshold)
                     for local, at in sorted(frontier.items())
                     if at.children and at.node.split is not None]
            keyed = keyed_counts(level, tests, k) if any(
                at.raised for at in frontier.values()) else {}
            for local, at in frontier.items():
                if at.raised:
                    by_key = keyed.get(local, {})
                    counts[id(at.node)] = [sum((w[c] for w in by_key.values()), 0.0)
                                           for c in range(k)]
            routes, below = _level_routes(frontier, keyed, features, recompute_shares, next_id)
            next_id += len(below)
            if not routes:
                break
            level = partition(level, tests, routes)
            frontier = below
        return counts
