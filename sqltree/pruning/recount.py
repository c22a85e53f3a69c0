"""Routing rows through a (sub)tree: the counts subtree raising recounts, and the validation
rows reduced-error pruning counts.

Rows move down level by level as in growth (``queries.build_partition``), and one grouped
count per level gives the class weights at the level's nodes; a row whose value is unknown at
a test goes down every branch with the branch's share of the known weight: recomputed from
the rows that reach the test, as J48 does when it raises a subtree, or the share stored in
the tree.

Where the rows are routed and counted is written once here (``Position``, ``level_tests``,
``level_routes``, ``known_routes``, the loop ``recount_levels``). Where the rows are is not:
in the engine, through small loaded tests and routes tables (``_InEngine``), or in numpy
(``algorithms.memory.recount``, which the layers put above this module: it reaches the loop
through ``Levels`` and the router's ``in_memory``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from sqlglot import exp

from .. import dates
from .. import queries as q
from ..criteria import J48_SMALL
from ..dataset import Dataset, Feature, resolve_relation
from ..errors import DataError
from ..fixed_point import training_weight_bits
from ..source_check import check_features, check_target
from ..tree import CONTINUOUS, Node, normalise

__all__ = [
    "Entries",
    "Levels",
    "Position",
    "features_by_name",
    "known_counts",
    "known_routes",
    "level_routes",
    "level_tests",
    "positions",
    "recount_levels",
    "recount_raised",
    "route_counts",
]

NodePath: TypeAlias = Sequence[tuple[Node, int]]
"""(ancestor, branch) from the root down to a place in the tree."""
Entries: TypeAlias = Sequence[tuple[NodePath, Node]]
"""(path, structure) pairs: the structure receives the rows at its path's end."""
Tests: TypeAlias = list[tuple[int, int, float | None]]
"""(position, feature index, threshold or None for nominal): ``queries.TESTS_COLUMNS``."""
Routes: TypeAlias = list[tuple[int, int, int, float]]
"""(position, key, next position, factor): ``queries.ROUTES_COLUMNS``."""
Keyed: TypeAlias = dict[int, dict[int, list[float]]]
"""Class weights per position and key of its test (``queries.build_keyed_counts``)."""

SMALL = J48_SMALL
"""J48 compares weights with ``Utils.SMALL``."""

CHAINED_LEVELS = 16
"""Levels run as one statement at most; a longer chain is stored on the way. sqlglot renders a
statement recursively, about 30 Python frames per chained level: 28 levels rendered and 32
exceeded Python's default recursion limit (1,000), so a deep tree's path needs stops."""


class _Router:
    """Where the training (or validation) rows are, encoded as in the grower's level tables.

    ``materialize``: store the encoded rows in a temporary table on first use (pruning may
    route them many times), or read them inline from the source (a single statement).
    """

    def __init__(self, data: Dataset, materialize: bool = True, in_memory: Any = None) -> None:
        self.data = data
        self.materialize = materialize
        self.queries = 0
        self._table: exp.Table | None = None
        # ``algorithms.memory.recount.RowsInMemory``: the memory plan's training rows, which
        # ``recount_raised`` routes in numpy instead, or where a recount goes on in numpy
        # once its rows are few.
        self.in_memory = in_memory

    def read_rows_if_small(self) -> None:
        """Read the training rows into memory where ``RowsInMemory.read_all_if_small`` says
        so."""
        if self.in_memory is not None and self.in_memory.read_all_if_small():
            self.queries += 1

    @property
    def holds_rows(self) -> bool:
        """Whether every training row is in memory, where recounts need no statement."""
        return self.in_memory is not None and self.in_memory.holds_rows

    @classmethod
    def open(cls, data: Dataset, source: Any = None, materialize: bool = True,
             in_memory: Any = None) -> _Router:
        if source is not None:
            relation = _check_validation(data, resolve_relation(source, data.engine))
            data = dataclasses.replace(data, relation=relation)
            in_memory = None
        return cls(data, materialize, in_memory)

    @property
    def rows(self) -> exp.Expression:
        if not self.materialize:
            return q.build_level0(self.data).subquery("encoded")
        if self._table is None:
            self._table = self.data.engine.materialize("prune_rows", q.build_level0(self.data))
        return self._table

    def close(self) -> None:
        if self.in_memory is not None:
            self.in_memory.release()
        if self._table is not None:
            self.data.engine.drop(self._table)
            self._table = None


def _check_validation(data: Dataset, relation: exp.Expression) -> exp.Expression:
    """Refuse a validation source without a column training read, or holding another type
    family there, before any query reads its rows; the relation pruning reads (with the date
    features computed from their columns, ``dates.for_scoring``)."""
    engine = data.engine
    relation, schema = dates.for_scoring(data.features, [f.name for f in data.features],
                                         relation, engine.columns(relation), engine.dialect)
    types = dict(schema)
    needed = [data.target, *([data.weight] if data.weight else []),
              *(f.name for f in data.features)]
    missing = [c for c in needed if c not in types]
    if missing:
        raise DataError(f"the validation source lacks columns the training source has: "
                        f"{missing}; columns: {list(types)}")
    flag = engine.BOOLEANS_AS_INTEGERS
    check_features(data.features, [f.name for f in data.features], types, engine.dialect,
                   integer_booleans=flag)
    check_target(data.target, data.classes, not data.classes, types, engine.dialect,
                 integer_booleans=flag)
    return relation


def route_counts(
    router: _Router,
    path: NodePath,
    structure: Node,
    *,
    recompute_shares: bool = True,
) -> dict[int, list[float]]:
    """Class weights at every node of ``structure`` when the rows at the end of ``path`` enter
    it, keyed by ``id()`` of each node that weight reached.

    ``path`` lists (ancestor, branch) from the root to the place where ``structure`` is (or
    would be) attached; the rows there carry their fractional weights. Inside ``structure``
    a row whose value is unknown at a test goes down every branch with the branch's share of
    the known weight: recomputed from the rows that reach the test (``recompute_shares``, as
    C4.5 does when it raises a subtree), or the shares stored in the tree (scoring rows that
    trained nothing, such as validation rows). See :func:`recount_raised`.
    """
    return recount_raised(router, [(path, structure)], recompute_shares=recompute_shares)


def recount_raised(
    router: _Router,
    entries: Entries,
    *,
    recompute_shares: bool = True,
) -> dict[int, list[float]]:
    """Class weights at every node of each structure receiving the rows at its path's end.

    :func:`route_counts` for several (path, structure) pairs at once; the structures must be
    distinct subtrees (no node in two of them). Level by level like the grower, the rows move
    down the tree through loaded tests and routes tables (``queries.build_partition``), and
    one grouped count per level gives the structures' class weights and the known weight of
    each branch, from which the next level's shares come (:func:`recount_levels`). Each
    statement stays small whatever the tree's size, and rows are read once per level, not
    once per entry. A nominal value that no branch lists is unknown at that test. Keyed by
    ``id()`` of the structures' nodes that weight reached.
    """
    if router.holds_rows:
        return dict(router.in_memory.recount(entries, recompute_shares))
    counts: dict[int, list[float]] = {}
    levels = _InEngine(router)
    try:
        recount_levels(levels, {0: positions(entries)}, 1, router.data, counts,
                       recompute_shares)
    finally:
        levels.drop()
    return counts


def known_counts(router: _Router, entries: Entries) -> dict[int, list[float]]:
    """Class weights at every leaf of each structure from the rows whose values are known
    and listed at every test of the structure on their way to it; keyed by ``id()``.

    The rows at each path's end are those :func:`recount_raised` routes in, and every one of
    them that this counts reaches the same leaf there with its whole weight; the rows that
    meet an unknown value inside a structure, left out here, add weight to the leaves there.
    So each count is at most the recounted one, class by class, and needs no shares: one
    statement routes the rows to every leaf (the rows of a leaf reached early pass on to the
    last level under the unknown key, which no test of a leaf gives a value), without a
    count per level. The engine must run a chain of levels well (``VECTORIZED``), unless the
    rows are in memory (``RowsInMemory.known_counts``).
    """
    if router.holds_rows:
        return router.in_memory.known_counts(entries)
    features = features_by_name(router.data)
    frontier = {0: positions(entries)}
    levels = _InEngine(router)
    next_id = 1
    try:
        while any(at.children for at in frontier.values()):
            tests, routes, below = known_routes(frontier, features, next_id)
            next_id += len(below)
            levels.move(tests, routes, chain=True)
            frontier = below
        return levels.class_weights(frontier)
    finally:
        levels.drop()


@dataclass
class Position:
    """A place in the tree that rows are routed to while recounting raised branches.

    ``node`` is the tree node whose test routes the rows on (or a leaf); inside a raised
    branch (``raised``) unknown values are spread by shares recomputed from the rows that
    reach the test, as J48 does when it raises a subtree, and class weights are counted;
    on the path down to a branch the tree's stored shares apply.
    """

    node: Node
    raised: bool
    children: dict[int, Position] = dataclasses.field(default_factory=dict)


def positions(entries: Entries) -> Position:
    """The routing tree: every entry's path from the root, ending in its raised structure."""

    def raised(node: Node) -> Position:
        return Position(node, True, {b: raised(c) for b, c in enumerate(node.children)})

    root: Position | None = None
    for path, structure in entries:
        if not path:
            return raised(structure)  # raising at the root: the only entry of its round
        if root is None:
            root = Position(path[0][0], False)
        at = root
        for depth, (ancestor, branch) in enumerate(path):
            assert at.node is ancestor and not at.raised
            if depth + 1 < len(path):
                at = at.children.setdefault(branch, Position(path[depth + 1][0], False))
            else:
                at.children[branch] = raised(structure)
    assert root is not None
    return root


def features_by_name(data: Dataset) -> dict[str, Feature]:
    """The features a test names, by name."""
    return {f.name: f for f in data.features}


class Levels(Protocol):
    """Where a recount's rows are, one level at a time: the engine (``_InEngine``) or memory
    (``algorithms.memory.recount``). Only how a level's keyed class weights are summed and how
    its rows move down differ; what a level's tests and routes are is decided once, here."""

    def keyed_counts(self, tests: Tests, n_classes: int, bits: int) -> Keyed:
        """``queries.build_keyed_counts``' class weights per (position, key of its test)."""
        ...

    def descend(self, tests: Tests, routes: Routes, below: dict[int, Position],
                keyed: Keyed) -> Levels:
        """Where the rows are once ``routes`` have moved them to ``below`` (``keyed``: this
        level's counts, empty where nothing was counted)."""
        ...


def recount_levels(
    levels: Levels,
    frontier: dict[int, Position],
    next_id: int,
    data: Dataset,
    counts: dict[int, list[float]],
    recompute_shares: bool,
) -> None:
    """:func:`recount_raised`'s loop from the rows ``levels`` holds at ``frontier``, the next
    positions numbered from ``next_id``: the class weights of each raised position, into
    ``counts``, and the routes of its rows from the known weight of each branch."""
    k = len(data.classes)
    features = features_by_name(data)
    # one fixed point for every statement, in the engine or in memory: counts must not depend
    # on which candidates a statement recounts together (the bound settles some first), nor
    # on where the level was summed
    bits = training_weight_bits(data)
    while frontier:
        tests = level_tests(frontier, features)
        # On the way down to the structures, rows go by the tree's stored shares: their
        # counts would decide nothing.
        counted = any(at.raised for at in frontier.values())
        keyed = levels.keyed_counts(tests, k, bits) if counted else {}
        for local, at in frontier.items():
            if at.raised:
                by_key = keyed.get(local, {})
                # 0.0, not 0: a node no row reaches keeps float counts in the model file
                counts[id(at.node)] = [sum((w[c] for w in by_key.values()), 0.0)
                                       for c in range(k)]
        routes, below = level_routes(frontier, keyed, features, recompute_shares, next_id)
        next_id += len(below)
        if not routes:
            break
        levels = levels.descend(tests, routes, below, keyed)
        frontier = below


def level_tests(frontier: dict[int, Position], features: dict[str, Feature]) -> Tests:
    """The tests that route a level's rows on: (position, feature index, threshold), ascending
    by position, one for each position with branches to follow."""
    tests: Tests = []
    for local, at in sorted(frontier.items()):
        if at.children:
            split = at.node.split
            assert split is not None
            tests.append((local, features[split.feature].index, split.threshold))
    return tests


def level_routes(
    frontier: dict[int, Position],
    keyed: Keyed,
    features: dict[str, Feature],
    recompute_shares: bool,
    next_id: int,
) -> tuple[Routes, dict[int, Position]]:
    """The routes of a level's rows into the next level, and the next level's positions,
    numbered from ``next_id``; ``keyed`` holds the class weights per (position, key)."""
    routes: Routes = []
    below: dict[int, Position] = {}
    for local, at in sorted(frontier.items()):
        if not at.children:
            continue
        by_key = keyed.get(local, {})
        feature = features[at.node.split.feature]
        keys_of_branch = _keys_of_branches(at.node, feature)
        known = [sum(sum(by_key.get(key, [0.0])) for key in keys) for keys in keys_of_branch]
        recompute = recompute_shares and at.raised
        unknown_keys = [q.UNKNOWN_KEY, *_unlisted_codes(feature, keys_of_branch)]
        for branch, child in sorted(at.children.items()):
            below[next_id] = child
            for key in keys_of_branch[branch]:
                routes.append((local, key, next_id, 1.0))
            factor = _unknown_share(at.node, branch, known, recompute)
            if factor > (SMALL if recompute else 0.0):
                routes += [(local, key, next_id, factor) for key in unknown_keys]
            next_id += 1
    return routes, below


def known_routes(
    frontier: dict[int, Position], features: dict[str, Feature], next_id: int
) -> tuple[Tests, Routes, dict[int, Position]]:
    """:func:`known_counts`' tests and routes of a level, and the next level's positions
    numbered from ``next_id``: a structure's leaf passes its rows on under the unknown key."""
    tests: Tests = []
    routes: Routes = []
    below: dict[int, Position] = {}
    for local, at in sorted(frontier.items()):
        if not at.children:  # a structure's leaf: its rows wait for the last level
            tests.append((local, -1, None))
            routes.append((local, q.UNKNOWN_KEY, next_id, 1.0))
            below[next_id] = at
            next_id += 1
            continue
        split = at.node.split
        assert split is not None
        feature = features[split.feature]
        tests.append((local, feature.index, split.threshold))
        keys_of_branch = _keys_of_branches(at.node, feature)
        unknown_keys = [q.UNKNOWN_KEY, *_unlisted_codes(feature, keys_of_branch)]
        for branch, child in sorted(at.children.items()):
            routes += [(local, key, next_id, 1.0) for key in keys_of_branch[branch]]
            factor = 0.0 if at.raised else _unknown_share(at.node, branch, [], False)
            if factor > 0.0:  # on the way down: the tree's stored shares
                routes += [(local, key, next_id, factor) for key in unknown_keys]
            below[next_id] = child
            next_id += 1
    return tests, routes, below


def _keys_of_branches(node: Node, feature: Feature) -> list[list[int]]:
    """Partition keys (``queries.build_partition``) that each branch of ``node``'s test takes."""
    split = node.split
    assert split is not None
    if split.kind == CONTINUOUS:
        return [[0], [1]]
    assert split.groups is not None
    code = {v: i for i, v in enumerate(feature.values)}
    return [[code[v] for v in group if v in code] for group in split.groups]


def _unlisted_codes(feature: Feature, keys_of_branch: list[list[int]]) -> list[int]:
    """Codes of a nominal feature's values that no branch of a test lists."""
    if feature.kind == CONTINUOUS:
        return []
    listed = {key for keys in keys_of_branch for key in keys}
    return [code for code in range(len(feature.values)) if code not in listed]


def _unknown_share(node: Node, branch: int, known: list[float], recompute: bool) -> float:
    """The fraction of a row with an unknown value that ``branch`` of ``node``'s test receives:
    from the known weight of each branch (``recompute``), or the share stored in the tree."""
    if node.unknown_branch is not None:
        return 1.0 if branch == node.unknown_branch else 0.0
    if recompute:
        total = sum(known)
        return known[branch] / total if total > 0 else 1.0 / len(node.children)
    return float(node.shares[branch]) if node.shares else 1.0 / len(node.children)


class _InEngine:
    """A recount's level in the engine: a chain of partitions that stays one statement where
    the engine runs it well and fewer than ``CHAINED_LEVELS`` are chained, else a stored
    table. The small tests and routes tables and the stored levels are dropped by ``drop``."""

    def __init__(self, router: _Router) -> None:
        self.router = router
        self.level: exp.Expression = router.rows
        self.pending = 0  # how many levels ``level`` chains that are not stored yet
        self.owned: list[exp.Table] = []
        self._tests: exp.Table | None = None  # this level's, once loaded
        # PostgreSQL's estimates of chained joins fall to one row (see the select plan), so
        # only DuckDB runs the levels above the structures in one statement.
        self.chained = router.data.engine.VECTORIZED

    def keyed_counts(self, tests: Tests, n_classes: int, bits: int) -> Keyed:
        data = self.router.data
        tests_table = self._tests_table(tests)
        if self.pending:  # read twice (here and by the partition): stored first
            self.level = self._store(self.level.this)
        query = q.build_keyed_counts(self.level, data.features, tests_table, n_classes, bits)
        keyed: Keyed = {}
        for node, key, *weights in data.engine.execute(query):
            keyed.setdefault(int(node), {})[int(key)] = [float(w or 0.0) for w in weights]
        self.router.queries += 1
        return keyed

    def descend(self, tests: Tests, routes: Routes, below: dict[int, Position],
                keyed: Keyed) -> Levels:
        in_memory = self.router.in_memory
        weight = sum(sum(w) for by_key in keyed.values() for w in by_key.values())
        if keyed and in_memory is not None and in_memory.few(weight):
            self.router.queries += 1
            self._tests = None
            return in_memory.go_on(self.level, tests, routes, below)
        # Not stored: the path's levels run as one statement, which DuckDB pipelines.
        self.move(tests, routes, self.chained and not any(at.raised for at in below.values()))
        return self

    def move(self, tests: Tests, routes: Routes, chain: bool) -> None:
        """Partition the level by ``tests`` and ``routes``: chained onto the statement where
        ``chain`` allows and fewer than ``CHAINED_LEVELS`` are, else stored."""
        tests_table = self._tests_table(tests)
        self._tests = None
        routes_table = self._load("routes", q.ROUTES_COLUMNS, routes)
        partition = q.build_partition(self.level, self.router.data.features, tests_table,
                                      routes_table, copy=not self.pending)
        if chain and self.pending < CHAINED_LEVELS:
            self.level, self.pending = exp.Subquery(this=partition), self.pending + 1
        else:
            self.level = self._store(partition)

    def class_weights(self, frontier: dict[int, Position]) -> dict[int, list[float]]:
        """The class weights of the level's rows at each position of ``frontier``, keyed by
        ``id()`` of its node (zeros where no row is)."""
        k = len(self.router.data.classes)
        query = q.build_class_weights(self.level, k, copy=not self.pending)
        counts: dict[int, list[float]] = {}
        for local, *weights in self.router.data.engine.execute(query):
            counts[id(frontier[int(local)].node)] = [float(w or 0.0) for w in weights]
        self.router.queries += 1
        for at in frontier.values():
            counts.setdefault(id(at.node), [0.0] * k)
        return counts

    def drop(self) -> None:
        for table in self.owned:
            self.router.data.engine.drop(table)
        self.owned = []

    def _tests_table(self, tests: Tests) -> exp.Table:
        if self._tests is None:
            self._tests = self._load("tests", q.TESTS_COLUMNS, tests)
        return self._tests

    def _store(self, query: exp.Expression) -> exp.Table:
        stored = self.router.data.engine.materialize("raise", query)
        self.owned.append(stored)
        self.pending = 0
        self.router.queries += 1
        return stored

    def _load(self, hint: str, columns: tuple[tuple[str, str], ...],
              rows: Sequence[Sequence[Any]]) -> exp.Table:
        table = self.router.data.engine.load_rows(hint, [c for c, _ in columns],
                                                  [t for _, t in columns], rows)
        self.owned.append(table)
        return table


def _apply_counts(structure: Node, counts: dict[int, list[float]], parent_proba: list[float]
                  ) -> None:
    """Store recounted class weights in ``structure``'s nodes; shares follow the new weights."""
    k = len(structure.counts)

    def visit(node: Node, fallback: list[float]) -> None:
        node.counts = counts.get(id(node), [0.0] * k)
        node.proba = normalise(node.counts, fallback)
        if node.is_leaf:
            return
        for child in node.children:
            visit(child, node.proba)
        total = node.weight
        n = len(node.children)
        # A branch's share of a node's rows equals its share of the known weight (unknown
        # rows were spread in that proportion), or uniform when no known weight arrived.
        # (Nodes with an unknown_branch route by it; their shares are then approximate.)
        known = [c.weight for c in node.children]
        s = sum(known)
        node.shares = [w / s for w in known] if s > SMALL and total > SMALL else [1.0 / n] * n

    visit(structure, parent_proba)
