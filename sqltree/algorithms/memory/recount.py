"""Subtree raising's recount (``pruning.recount.recount_raised``) and its bound
(``known_counts``) over rows in numpy.

J48's pruning recounts a raised branch under all of its node's rows. In the engine that is a
few statements per level of the raised branches. The memory plan's level-0 rows are already in
numpy; on the SQL plans the training rows are read once before pruning where they are few
enough (``READ_FOR_PRUNING_MAX_CELLS``), else a recount whose rows have become few reads them
and goes on here. The recount is ``pruning.recount``'s: the same positions, routes and loop
(``recount_levels``); here only a level's rows move with the grower's partition and its class
weights per (position, key) are summed (``keyed_counts``), in the fixed point
``build_keyed_counts`` picks, so every count is the one the engine returns. What this module
adds is where a recount's rows start: snapshots, the last path's levels, threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlglot import exp

from ... import parallel
from ... import queries as q
from ...dataset import Dataset
from ...pruning.recount import (
    Entries,
    Keyed,
    Levels,
    NodePath,
    Position,
    Routes,
    Tests,
    features_by_name,
    known_routes,
    positions,
    recount_levels,
)
from ...tree import Node
from .level import Level, exact_parts, read_level0, sum_exactly
from .routes import partition, test_keys


def keyed_counts(level: Level, tests: Sequence[tuple[int, int, float | None]], n_classes: int,
                 bits: int) -> Keyed:
    """``queries.build_keyed_counts``: class weights per (node, key of its test), key -1 for
    an unknown value and for the rows of a node without a test; nodes and keys ascending;
    summed in the fixed point of ``bits`` fractional bits."""
    key = np.full(len(level.node), float(q.UNKNOWN_KEY))
    rows, tested = test_keys(level, tests)
    key[rows] = tested
    unit = 2.0**bits
    fixed = np.floor(level.w * unit + 0.5).astype(np.int64)
    span = int(key.max(initial=0.0)) + 2  # keys from -1 up
    pairs, group = np.unique(level.node * span + (key.astype(np.int64) + 1),
                             return_inverse=True)
    sums = sum_exactly(group * n_classes + level.y, exact_parts(fixed, True),
                       len(pairs) * n_classes).reshape(len(pairs), n_classes)
    weights = (sums.astype(np.float64) / unit).tolist()
    out: Keyed = {}
    for pair, counts in zip(pairs.tolist(), weights, strict=True):
        out.setdefault(pair // span, {})[pair % span - 1] = counts
    return out


RECOUNT_MEMORY_MAX_CELLS = 3_200_000
"""On the SQL plans, a recount goes on in numpy from the first level whose rows, estimated from
their weight, times the features are at most this many, if the training rows were more (as
``c45.DEEP_MEMORY_MAX_CELLS`` for growth); 0: never."""

READ_FOR_PRUNING_MAX_CELLS = 32_000_000
"""Pruning reads the training rows into memory once if they, times the features, are at most
this many (256 MB of float64), and bounds and recounts every round's raised branches in numpy.
The engine routes every row of a round through every level of its branches; numpy drops a row
at its leaf. The default tree of the 1M-row benchmark file (16M cells) on DuckDB: 42.2 s of
pruning in 77 statements, 21.9 s after one read; of its 200,000-row file on PostgreSQL:
97.7 s in 387 statements, 4.5 s. 0: never."""

PATH_LEVELS_KEPT = 8
"""Levels of the last recount's path kept for the next one (``RowsInMemory.recount``)."""

SNAPSHOT_EVERY = 4
"""Pruning keeps the rows that reach every node of depth 4, 8, 12... (``RowsInMemory``'s
snapshots), so that a round's bounds and recounts start there instead of routing every row
from the root down a path of ten levels, twice a round. A row of a snapshot is 16 bytes; the
no-option tree of the 1M-row benchmark file takes three (1.14M, 1.05M and 0.18M rows: 38 MB)
and prunes in 5.6 s instead of 8.3."""

SNAPSHOT_MAX_DEPTH = 32
"""No snapshot deeper than this: rows reaching such depths are few."""


def _end(path: NodePath) -> Node:
    """The node at the end of a (non-empty) path."""
    parent, branch = path[-1]
    return parent.children[branch]


def _route_key(node: Node, branch: int) -> tuple[Any, ...]:
    """What sends a path's rows from ``node`` down ``branch``: the node, its test and shares
    (replaced, never changed in place, when pruning raises or recounts), its branch for
    unknown values and ``branch``; see ``_routed_alike``."""
    return (node, node.split, node.shares, node.unknown_branch, branch)


def _routed_alike(a: Sequence[tuple[Any, ...]], b: Sequence[tuple[Any, ...]]) -> bool:
    """Whether two paths' route keys are the same objects (nodes and tests are dataclasses:
    ``==`` would compare whole subtrees) and the same branches."""
    return len(a) == len(b) and all(
        x[0] is y[0] and x[1] is y[1] and x[2] is y[2] and x[3:] == y[3:]
        for x, y in zip(a, b, strict=True)
    )


@dataclass
class _Snapshot:
    """The rows at every internal node of one depth (``RowsInMemory._snapshot``), compactly:
    a row's ``base`` (its row of level 0), ``node`` (the place of its node in ``nodes``) and
    weight ``w``."""

    base: np.ndarray
    node: np.ndarray
    w: np.ndarray
    nodes: list[Node]
    place: dict[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self.place = {id(node): i for i, node in enumerate(self.nodes)}

    @classmethod
    def of(cls, level: Level, nodes: list[Node]) -> _Snapshot:
        base = level.base if level.base is not None else np.arange(len(level.node))
        small = np.int32 if base.max(initial=0) < 2**31 else np.int64
        return cls(base.astype(small), level.node.astype(np.int32), level.w, nodes)

    def holds(self, node: Node) -> bool:
        """Whether ``node`` was at this depth when the rows were routed."""
        return id(node) in self.place

    def rows_at(self, level0: Level, nodes: Sequence[Node], first_label: int = 0) -> Level:
        """The rows at ``nodes``, labelled ``first_label`` up in their order, as a level of
        ``level0``'s rows."""
        label = np.full(len(self.nodes), -1, dtype=np.int64)
        for i, node in enumerate(nodes):
            label[self.place[id(node)]] = first_label + i
        labels = label[self.node]
        keep = np.flatnonzero(labels >= 0)
        base = self.base[keep].astype(np.int64)
        return dataclasses.replace(level0, node=labels[keep], w=self.w[keep],
                                   y=level0.y[base], base=base)


class RowsInMemory:
    """Where subtree raising's recount (``recount_raised``) runs in numpy: over the memory
    plan's training rows (``level0``), or, on the SQL plans, from the level where the rows
    left are few (``few``), read once from the engine (``go_on``)."""

    def __init__(self, data: Dataset, level0: Level | None = None) -> None:
        self.data = data
        self.level0 = level0
        # threads for a round's disjoint subtrees, as for growth's scorers
        self.workers = parallel.engine_workers(data.engine)
        # The rows at the deepest levels of the last recount's path (one entry), by depth,
        # with what routed them there (``_route_key``): J48 decides the nodes of a chain from
        # the bottom up, and prunes a raised branch again from the top down, so the next
        # recount's path mostly shares them.
        self._path_levels: dict[int, tuple[list[tuple[Any, ...]], Level]] = {}
        # depth -> the rows at every internal node of that depth, labelled by the node's
        # place in the list beside them (``_snapshot``)
        self._snapshots: dict[int, _Snapshot] = {}

    def release(self) -> None:
        """Forget what the last pruning pass kept (its path's levels, its snapshots): the
        next pass prunes another tree."""
        self._path_levels = {}
        self._snapshots = {}

    @property
    def holds_rows(self) -> bool:
        """Whether every training row is here (the memory plan), so no recount reads any."""
        return self.level0 is not None

    def recount(self, entries: Entries, recompute_shares: bool = True
                ) -> dict[int, list[float]]:
        """``recount_raised``'s class weights, keyed by ``id()`` of the nodes they reach."""
        assert self.level0 is not None
        self.take_snapshots(entries)
        if len(entries) != 1:
            return self._in_parts(lambda part: self._recount_all(part, recompute_shares),
                                  entries)
        counts: dict[int, list[float]] = {}
        root = positions(entries)
        # One path: its levels hold one position each, numbered by depth, so the rows a
        # recount left at a depth are this one's, where the path above is routed alike.
        path = entries[0][0]
        keys = [_route_key(node, branch) for node, branch in path]
        depth = next((d for d in sorted(self._path_levels, reverse=True) if d <= len(keys)
                      and _routed_alike(self._path_levels[d][0], keys[:d])), 0)
        at, level = root, self.level0
        deepest, top = self._start(path)
        if deepest > depth:  # labelled by their depth, as the path's levels
            depth = deepest
            level = self._snapshots[depth].rows_at(self.level0, [top], first_label=depth)
        elif depth:
            level = self._path_levels[depth][1]
        for _, branch in path[:depth]:
            at = at.children[branch]
        self._path_levels = {
            d: stored for d, stored in self._path_levels.items() if d <= depth}
        self._recount_from(level, {depth: at}, depth + 1, counts, recompute_shares,
                           keys=keys, depth=depth)
        return counts

    def _recount_all(self, entries: Entries, recompute_shares: bool) -> dict[int, list[float]]:
        counts: dict[int, list[float]] = {}
        for level, frontier in self._starts(entries):
            self._recount_from(level, frontier, len(frontier), counts, recompute_shares)
        return counts

    def _snapshot_depth(self, depth: int) -> int:
        """The deepest snapshot's depth at most ``depth`` (0: none, the level-0 rows)."""
        return min(depth, SNAPSHOT_MAX_DEPTH) // SNAPSHOT_EVERY * SNAPSHOT_EVERY

    def take_snapshots(self, entries: Entries) -> None:
        """Make the snapshots that ``entries`` start from (before their work is dealt to
        threads, which only read them)."""
        deepest = max((self._snapshot_depth(len(path)) for path, _ in entries), default=0)
        if deepest:
            self._snapshot(entries[0][0][0][0], deepest)

    def _snapshot(self, root: Node, depth: int) -> _Snapshot:
        """The rows at every internal node of ``depth`` (a multiple of ``SNAPSHOT_EVERY``),
        routed from the snapshot above by the tree's stored shares, as a recount routes rows
        on the way down to a raised branch: the same rows, in the same order, with the same
        weights as a route down one path keeps of them (it drops the others' rows and keeps
        the rest in order). They stay the rows of a node found at that depth: pruning changes
        how rows reach a node only by changing an ancestor, which it makes a leaf (the node
        leaves the tree) or replaces by a branch (every node below moves up a depth); a node
        a snapshot no longer holds (J48 prunes a raised branch again) starts
        from a snapshot above (``_start``). The snapshots last one pruning pass
        (``release``) and keep their nodes, whose ``id()`` no other node takes."""
        found = self._snapshots.get(depth)
        if found is not None:
            return found
        assert self.level0 is not None
        above = depth - SNAPSHOT_EVERY
        if above:
            snapshot = self._snapshot(root, above)
            level, nodes = snapshot.rows_at(self.level0, snapshot.nodes), snapshot.nodes
        else:
            level, nodes = self.level0, [root]
        features = features_by_name(self.data)
        for _ in range(SNAPSHOT_EVERY):
            frontier: dict[int, Position] = {}
            for local, node in enumerate(nodes):
                inner = {b: Position(c, False) for b, c in enumerate(node.children)
                         if c.split is not None}
                if inner:  # the rows of a node whose branches are leaves stop here
                    frontier[local] = Position(node, False, inner)
            # a snapshot is taken for a node at its depth or below: the nodes above it have
            # internal branches
            tests, routes, below = known_routes(frontier, features, 0)
            level = partition(level, tests, routes)
            nodes = [below[label].node for label in range(len(below))]
        self._snapshots[depth] = snapshot = _Snapshot.of(level, nodes)
        return snapshot

    def _starts(self, entries: Entries) -> list[tuple[Level, dict[int, Position]]]:
        """Where the rows of ``entries`` start: the rows of the deepest snapshot above each
        entry's structure that holds its path (``_start``), else the level-0 rows at
        the root; and the positions of those rows, numbered from 0."""
        assert self.level0 is not None
        by_depth: dict[int, dict[int, tuple[Node, list[Any]]]] = {}
        for path, structure in entries:
            depth, top = self._start(path)
            by_depth.setdefault(depth, {}).setdefault(id(top), (top, []))[1].append(
                (path[depth:], structure))
        starts = []
        for depth, groups in sorted(by_depth.items()):
            tops = list(groups.values())
            level = self._snapshots[depth].rows_at(self.level0, [top for top, _ in tops]) \
                if depth else self.level0
            starts.append((level, {i: positions(group) for i, (_, group) in enumerate(tops)}))
        return starts

    def _start(self, path: NodePath) -> tuple[int, Any]:
        """The depth of the deepest snapshot that holds ``path``'s node at that depth, and
        that node; 0 and the root (None for an empty path) if none does."""
        depth = self._snapshot_depth(len(path))
        while depth:
            snapshot = self._snapshots.get(depth)
            top = path[depth][0] if len(path) > depth else _end(path)
            if snapshot is not None and snapshot.holds(top):
                return depth, top
            depth -= SNAPSHOT_EVERY
        return 0, path[0][0] if path else None

    def _in_parts(self, work: Callable[[Entries], dict[int, list[float]]], entries: Entries
                  ) -> dict[int, list[float]]:
        """``work(entries)``, the entries dealt into a part per thread (``parallel``): in the
        order of their paths, so that each part's rows soon leave the other's, cut where the
        parts' weights (the rows each routes) are about even. Each entry's counts are those of
        its own rows, which keep their order in any part: the counts do not depend on the
        parts, to the last bit."""
        assert self.level0 is not None
        n = min(self.workers or parallel.cores(), len(entries))
        rows = len(self.level0.node)
        if n <= 1 or rows < parallel.PARALLEL_MIN_ROWS:
            return work(entries)
        ordered = sorted(entries, key=lambda entry: [branch for _, branch in entry[0]])
        weights = [_end(path).weight if path else branch.weight
                   for path, branch in ordered]
        total, parts, part, acc = sum(weights), [], [], 0.0
        for entry, weight in zip(ordered, weights, strict=True):
            part.append(entry)
            acc += weight
            if acc >= total * (len(parts) + 1) / n and len(parts) < n - 1:
                parts.append(part)
                part = []
        if part:
            parts.append(part)
        out: dict[int, list[float]] = {}
        for counts in parallel.side_by_side(work, parts, rows, self.workers):
            out.update(counts)
        return out

    def known_counts(self, entries: Entries) -> dict[int, list[float]]:
        """``pruning.recount.known_counts`` in numpy: the class weights at every leaf of each
        structure from the rows known and listed at every test on their way there, keyed by
        ``id()``. The rows move down the same positions and routes (``known_routes``); a row
        that reaches a leaf is counted there and goes no further. Summed in DOUBLE, in another
        order than the engine's: the bound's margin covers that (``pruning.c45._settled``).
        A round's entries are counted side by side (``_in_parts``)."""
        self.take_snapshots(entries)
        return self._in_parts(self._known_counts, entries)

    def _known_counts(self, entries: Entries) -> dict[int, list[float]]:
        counts: dict[int, list[float]] = {}
        for level, frontier in self._starts(entries):
            self._known_from(level, frontier, counts)
        return counts

    def _known_from(self, level: Level, frontier: dict[int, Position],
                    counts: dict[int, list[float]]) -> None:
        k = len(self.data.classes)
        features = features_by_name(self.data)
        next_id = len(frontier)
        while frontier:
            leaves = [local for local, at in frontier.items() if not at.children]
            if leaves:
                size = max(frontier) + 1
                sums = np.bincount(level.node * k + level.y, weights=level.w,
                                   minlength=size * k).reshape(-1, k)
                for local in leaves:
                    counts[id(frontier[local].node)] = sums[local].tolist()
            inner = {local: at for local, at in frontier.items() if at.children}
            if not inner:
                break
            tests, routes, below = known_routes(inner, features, next_id)
            next_id += len(below)
            level = partition(level, tests, routes)  # rows at leaves have no test: left out
            frontier = below

    def read_all_if_small(self) -> bool:
        """Read every training row now (one statement; True) if they are at most
        ``READ_FOR_PRUNING_MAX_CELLS``: pruning's bounds and recounts then run here, as on the
        memory plan."""
        data = self.data
        cells = data.n_rows * len(data.features)
        if self.level0 is not None or cells > READ_FOR_PRUNING_MAX_CELLS:
            return False
        self.level0 = read_level0(data, q.build_level0(data), False)
        return True

    def few(self, weight: float) -> bool:
        """Whether a recount's level of this ``weight`` goes on in numpy: its rows, estimated
        from the weight (a row weighs on average the training weight per row), are few
        (``RECOUNT_MEMORY_MAX_CELLS``), and the training rows were not (data within
        ``READ_FOR_PRUNING_MAX_CELLS`` is read whole before pruning: ``read_all_if_small``)."""
        data = self.data
        total = sum(data.class_weights)
        rows = weight * data.n_rows / total if total > 0 else float(data.n_rows)
        return self._large and rows * len(data.features) <= RECOUNT_MEMORY_MAX_CELLS

    @property
    def _large(self) -> bool:
        return self.data.n_rows * len(self.data.features) > RECOUNT_MEMORY_MAX_CELLS

    def go_on(self, rows: exp.Expression, tests: Tests, routes: Routes,
              below: dict[int, Position]) -> Levels:
        """Read a recount's level (``rows``, a stored level table or the level-0 rows) with
        one statement and route it by ``tests`` and ``routes`` to ``below``, where the recount
        goes on in numpy. The levels hold the engine's rows, so every count is the one the
        engine would return."""
        data = self.data
        columns = ["node", "w", "y", *[f.column for f in data.features]]
        level = read_level0(data, exp.select(*columns).from_(rows), False)
        return _InMemory(partition(level, tests, routes))

    def _recount_from(self, level: Level, frontier: dict[int, Position], next_id: int,
                      counts: dict[int, list[float]], recompute_shares: bool, *,
                      keys: Sequence[tuple[Any, ...]] = (), depth: int = 0) -> None:
        """``recount_levels`` from ``level``'s rows at ``frontier``; ``keys``: the route keys
        of the one entry's path, whose levels below ``depth`` are kept for the next recount
        (the deepest ``PATH_LEVELS_KEPT``)."""
        levels = _InMemory(level, self._path_levels, keys, depth)
        recount_levels(levels, frontier, next_id, self.data, counts, recompute_shares)


@dataclass
class _InMemory:
    """A recount's level in numpy (``pruning.recount.Levels``): ``level``'s rows, at
    ``depth`` of the one entry's path whose route keys are ``keys`` (none: several entries),
    each level of which down to the path's end is kept in ``path_levels``."""

    level: Level
    path_levels: dict[int, tuple[list[tuple[Any, ...]], Level]] = field(default_factory=dict)
    keys: Sequence[tuple[Any, ...]] = ()
    depth: int = 0

    def keyed_counts(self, tests: Tests, n_classes: int, bits: int) -> Keyed:
        return keyed_counts(self.level, tests, n_classes, bits)

    def descend(self, tests: Tests, routes: Routes, below: dict[int, Position],
                keyed: Keyed) -> Levels:
        self.level = partition(self.level, tests, routes)
        self.depth += 1
        if self.depth <= len(self.keys):
            self.path_levels[self.depth] = (list(self.keys[:self.depth]), self.level)
            self.path_levels.pop(self.depth - PATH_LEVELS_KEPT, None)
        return self
