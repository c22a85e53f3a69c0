"""Top-down growth, one level of the tree per round of queries.

Each round answers every node of the frontier and every feature at once: one histogram query
and one partition query read the level's rows (two full passes), and a few small queries over
the histogram score the candidates. Python only chooses among a handful of scored rows per node.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from . import queries as q
from .compiler import collector_paused
from .dataset import Dataset, Feature
from .tree import CONTINUOUS, NOMINAL, Node, Split, argmax, normalise

ROWS_PER_CLASS_GROUP = 16
"""Rows per (node, value, class) group from which a histogram is summed per class first."""
DENSE_VALUES = 0.8
"""Distinct (node, value) pairs per level row from which a continuous feature's histogram is
not grouped (C4.5 estimates them by cuts per unit of known weight).

Level 8 of the 1M-row benchmark, histogram and scores: 5.4 s grouped, 4.6 s with the five
features above 0.9 distinct (node, value) pairs per row ungrouped, 5.2 s with all ten.
"""

ALGORITHMS = ("c4.5", "id3")
"""Algorithms grown by ``C45Strategy``; ``"cart"`` is ``sqltree.cart.CARTStrategy``."""
MISSING = ("fractional", "majority", "drop")


@dataclass
class GrowOptions:
    """Options of growth (pre-pruning included).

    The first group applies to every algorithm (defaults follow J48 for C4.5); the second is
    CART's, with scikit-learn's names and meanings (see ``sqltree.cart``).
    """

    algorithm: str = "c4.5"
    min_cases: float = 2.0
    max_depth: int | None = None
    min_samples_split: float = 0.0
    min_gain: float = 0.0
    missing: str = "fractional"
    max_bins: int | None = None  # continuous features cut into quantile bins
    # CART only
    criterion: str = "gini"
    min_samples_leaf: float = 1
    min_weight_fraction_leaf: float = 0.0
    min_impurity_decrease: float = 0.0
    max_leaf_nodes: int | None = None
    class_weight: Any = None
    ccp_alpha: float = 0.0


@dataclass
class LevelStats:
    depth: int
    nodes: int
    splits: int
    queries: int
    scans: int
    seconds: float


@dataclass
class GrowStats:
    levels: list[LevelStats] = field(default_factory=list)
    queries: int = 0
    scans: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "scans": self.scans,
            "seconds": round(self.seconds, 6),
            "levels": [vars(level) for level in self.levels],
        }


@dataclass
class Pending:
    """A frontier node waiting for its split: the node, its depth and what its path used."""

    node: Node
    depth: int
    used: frozenset[int]
    parent_proba: list[float]


_Pending = Pending


@dataclass
class Plan:
    """How a chosen split becomes branches and routes.

    Attributes
    ----------
    split : Split
    test_threshold : float, optional
        The threshold the partition query compares with (None for a nominal test, whose key is
        the value's code).
    keys_of_branch : list of list of int
        Partition keys that each branch receives (see ``queries.build_partition``).
    shares : list of float
        Fraction of the known weight per branch.
    unknown_branch : int, optional
        Branch that unknown values take; None spreads them over every branch by ``shares``.
    route_unknown : bool
        Whether training rows with an unknown value go on (False drops them).
    consumes_feature : bool
        Whether the feature may not be tested again below (ID3's nominal features).
    """

    split: Split
    test_threshold: float | None
    keys_of_branch: list[list[int]]
    shares: list[float]
    unknown_branch: int | None
    route_unknown: bool = True
    consumes_feature: bool = False


class Strategy:
    """What an algorithm decides; the level loop in ``grow`` does the rest.

    Per level the grower materialises ``build_histogram``, reads node counts with
    ``read_counts``, asks ``may_split`` per node, runs ``build_scores`` once for the level,
    calls ``choose`` per node, lets ``select`` veto choices (best-first growth), turns choices
    into branches with ``plan`` and moves the rows. ``finish`` post-processes the grown tree.
    """

    def __init__(self, data: Dataset, options: GrowOptions) -> None:
        self.data = data
        self.options = options
        self.n_classes = len(data.classes)

    @property
    def max_depth(self) -> int | None:
        return self.options.max_depth

    def prior(self) -> list[float]:
        k = self.n_classes
        return normalise(list(self.data.class_weights), [1.0 / k] * k)

    def build_level0(self) -> exp.Expression:
        return q.build_level0(self.data)

    bins: dict[int, list[float]] | None = None
    """Bin edges per continuous feature index in binned mode (set by ``build_level0``)."""

    def build_histogram(
        self, level: exp.Table, features: list[Feature], nodes: int = 1
    ) -> exp.Expression:
        self.hist_bits = self.weight_bits()
        return q.build_histogram(
            level,
            features,
            self.n_classes,
            self.summed_by_class(features, nodes),
            self.rowwise(features),
            self.hist_bits,
        )

    hist_bits: int | None = None
    """The level histogram's fixed-point bits (``queries.build_histogram``), None for DOUBLE
    weights; every reader of the histogram takes the same."""

    def weight_bits(self) -> int | None:
        """Fixed-point bits for the next histogram: None while every weight of the level is a
        whole number (their DOUBLE sums are exact in any order)."""
        return None

    dense: frozenset[int] = frozenset()
    """Continuous features nearly all of whose (node, value) pairs were distinct at the last
    level; each strategy measures it its own way, on engines with the ordered scan only."""

    def rowwise(self, features: list[Feature]) -> list[int]:
        """Continuous features whose histogram holds a row per level row, not per value.

        Splitting only makes (node, value) pairs rarer, so a dense feature stays dense below.
        Only the ordered scan reads such a histogram (it cuts between distinct values only).
        """
        return [f.index for f in features if f.index in self.dense]

    def summed_by_class(self, features: list[Feature], nodes: int) -> list[int]:
        """Features whose histogram is summed per class first (``queries.build_histogram``).

        Those with a known domain (nominal, or binned) whose (node, value, class) groups number
        at most ``1 / ROWS_PER_CLASS_GROUP`` of the rows, on engines that evaluate a batch at a
        time (measured on DuckDB only).
        """
        if not self.data.engine.VECTORIZED:
            return []
        out = []
        for f in features:
            if f.kind != CONTINUOUS:
                size: int | None = len(f.values)
            else:
                size = len(self.bins[f.index]) if self.bins and f.index in self.bins else None
            groups = None if size is None else nodes * (size + 1) * self.n_classes
            if groups is not None and groups * ROWS_PER_CLASS_GROUP <= self.data.n_rows:
                out.append(f.index)
        return out

    def read_counts(self, engine: Any, hist: exp.Table) -> dict[int, list[float]]:
        query = q.build_node_counts(hist, self.n_classes, self.hist_bits)
        return {
            int(node_id): [float(c) for c in counts] for node_id, *counts in engine.execute(query)
        }

    def on_histogram(self, engine: Any, hist: exp.Table, depth: int) -> None:
        """Called once per level after the histogram exists."""

    def may_split(self, p: Pending) -> bool:
        raise NotImplementedError

    def on_scores(self, by_node: dict[int, list[dict[str, Any]]]) -> None:
        """Called once per level with every scored row, by node."""

    def build_scores(self, hist: exp.Table, features: list[Feature]) -> exp.Expression:
        raise NotImplementedError

    score_columns: tuple[str, ...] = ()

    def choose(self, rows: list[dict[str, Any]], p: Pending) -> Any:
        raise NotImplementedError

    def select(self, choices: dict[int, Any], frontier: dict[int, Pending]) -> dict[int, Any]:
        """Which chosen splits to carry out now (all of them, unless growth is best-first)."""
        return choices

    def plan(
        self, engine: Any, hist: exp.Table, choices: dict[int, Any], frontier: dict[int, Pending]
    ) -> dict[int, Plan]:
        raise NotImplementedError

    def build_partition(
        self,
        level: exp.Table,
        features: list[Feature],
        tests: list[tuple[int, int, float | None]],
        routes: list[tuple[int, int, int, float]],
    ) -> exp.Expression:
        """The next level's rows (``queries.build_partition``)."""
        return q.build_partition(level, features, tests, routes)

    def on_child(self, parent: Pending, branch: int, child: Node) -> None:
        """Called for every child made, before it joins the frontier."""

    def child_counts(self, node_id: int, plan: Plan, branch: int) -> list[float] | None:
        """A child's class counts from the parent's histogram, if the strategy knows them.

        Known counts let the grower finish children that cannot split (pure, too small, at
        max_depth) at once: their rows leave the level table and no histogram is built for
        them. None: the counts are read from the next level's histogram.
        """
        return None

    def finish(self, root: Node) -> Node:
        """Post-process the grown tree (pruning, numbering), before ``close``; returns the root."""
        return root

    def close(self, engine: Any) -> None:
        """Drop whatever the strategy materialised."""


class C45Strategy(Strategy):
    """ID3 and C4.5: gain or gain ratio, multiway nominal tests, fractional unknown values."""

    score_columns: tuple[str, ...] = ()

    def __init__(self, data: Dataset, options: GrowOptions) -> None:
        super().__init__(data, options)
        self.score_columns = SCORE_COLUMNS
        self.values_table: exp.Table | None = None
        self.branch_counts: dict[int, dict[int, list[float]]] = {}
        self.loaded: list[exp.Table] = []
        # Continuous cuts whose printed threshold is still the value below the cut.
        self.unresolved: list[tuple[int, int, float, float]] = []
        self._keys_by_feature: dict[int, list[list[int]]] = {}
        # Whether the level's rows may carry fractional weights (set for good once a
        # partition spreads unknown values over branches).
        self.fractional = data.weight is not None
        # Every sum of a level's weights is at most the training weight (unknown values are
        # spread by shares that add up to one).
        total_weight = sum(data.class_weights)
        self.bits = q.fixed_point_bits(total_weight)
        self.entropy_bits = q.fixed_point_bits(
            q.entropy_bound(total_weight, self.n_classes, data.n_rows)
        )

    def weight_bits(self) -> int | None:
        return self.bits if self.fractional else None

    def on_scores(self, by_node: dict[int, list[dict[str, Any]]]) -> None:
        """Density from the scores: cuts per unit of known weight (no query of its own)."""
        if self.bins or not self.data.engine.SUPPORTS_ORDERED_SCAN:
            return
        continuous = {f.index for f in self.data.features if f.kind == CONTINUOUS}
        cuts: dict[int, float] = {}
        weight: dict[int, float] = {}
        for rows in by_node.values():
            for row in rows:
                attr = int(row["attr"])
                if attr in continuous and row["candidates"] is not None:
                    cuts[attr] = cuts.get(attr, 0.0) + float(row["candidates"]) + 1
                    weight[attr] = weight.get(attr, 0.0) + float(row["w_known"] or 0.0)
        self.dense = frozenset(
            attr for attr, n in cuts.items()
            if weight[attr] > 0 and n >= DENSE_VALUES * weight[attr]
        )

    def build_level0(self) -> exp.Expression:
        options = self.options
        if options.max_bins:
            # J48 never cuts between values closer than its 1e-5, so neither do bin edges.
            gap = score_options(options).cut_gap
            self.bins = bin_edges(self.data, options.max_bins, gap)
        return q.build_level0(self.data, self.bins, lookup=self.data.engine.VECTORIZED)

    def on_histogram(self, engine: Any, hist: exp.Table, depth: int) -> None:
        if self.bins:  # thresholds are bin edges, observed values already
            return
        if depth == 0 and any(f.kind == CONTINUOUS for f in self.data.features):
            self.values_table = engine.materialize(
                "values", q.build_distinct_values(hist, self.data.features)
            )

    def may_split(self, p: Pending) -> bool:
        return _may_split(p, self.options)

    def build_scores(self, hist: exp.Table, features: list[Feature]) -> exp.Expression:
        options = replace(
            score_options(self.options),
            ordered_scan=self.data.engine.SUPPORTS_ORDERED_SCAN,
            fractional=self.hist_bits is not None,
            bits=self.hist_bits,
            entropy_bits=self.entropy_bits,
        )
        return q.build_split_scores(hist, features, self.n_classes, options)

    def choose(self, rows: list[dict[str, Any]], p: Pending) -> _Choice | None:
        return choose_split(rows, self.data, self.options, p.used)

    def plan(
        self, engine: Any, hist: exp.Table, choices: dict[int, Any], frontier: dict[int, Pending]
    ) -> dict[int, Plan]:
        options = self.options
        self._drop_loaded(engine)
        if not self.bins:
            self.unresolved += _cut_midpoints(choices)
        tests = sorted((node_id, c.feature.index, c.threshold) for node_id, c in choices.items())
        tests_table = _load(engine, "tests", q.TESTS_COLUMNS, tests)
        self.loaded.append(tests_table)
        self.branch_counts = _branch_counts(
            engine, hist, tests_table, self.n_classes, self.hist_bits
        )
        plans: dict[int, Plan] = {}
        for node_id, choice in choices.items():
            by_key = self.branch_counts.get(node_id, {})
            f = choice.feature
            if f.kind == CONTINUOUS:
                threshold = choice.threshold
                if self.bins:  # the level table holds bin indexes; the tree, the edge value
                    threshold = self.bins[f.index][int(choice.threshold)]
                split = Split(f.name, CONTINUOUS, threshold=threshold)
                keys_of_branch = [[0], [1]]
            else:
                split = Split(f.name, NOMINAL, groups=[[v] for v in f.values])
                keys_of_branch = self._value_keys(f)
            branch_w = [
                sum((sum(by_key[key]) for key in keys if key in by_key), 0.0)
                for keys in keys_of_branch
            ]
            known = sum(branch_w)
            plans[node_id] = Plan(
                split=split,
                test_threshold=choice.threshold,
                keys_of_branch=keys_of_branch,
                shares=[w / known if known > 0 else 0.0 for w in branch_w],
                unknown_branch=None if options.missing == "fractional" else argmax(branch_w),
                route_unknown=options.missing != "drop",
                consumes_feature=f.kind == NOMINAL,
            )
        return plans

    def _value_keys(self, f: Feature) -> list[list[int]]:
        """Keys of a nominal test's branches, a value each (shared by every plan on ``f``)."""
        keys = self._keys_by_feature.get(f.index)
        if keys is None:
            keys = self._keys_by_feature[f.index] = [[i] for i in range(len(f.values))]
        return keys

    def child_counts(self, node_id: int, plan: Plan, branch: int) -> list[float]:
        k = self.n_classes
        zero = [0.0] * k
        by_key = self.branch_counts.get(node_id, {})
        counts = zero
        for key in plan.keys_of_branch[branch]:
            found = by_key.get(key)
            if found is not None:
                counts = [a + b for a, b in zip(counts, found)]
        factor = 0.0
        if plan.route_unknown:
            if plan.unknown_branch is None:
                factor = plan.shares[branch]
            elif branch == plan.unknown_branch:
                factor = 1.0
        if factor > 0:
            unknown = by_key.get(q.UNKNOWN_KEY, zero)
            counts = [counts[c] + factor * unknown[c] for c in range(k)]
        return counts

    def build_partition(
        self,
        level: exp.Table,
        features: list[Feature],
        tests: list[tuple[int, int, float | None]],
        routes: list[tuple[int, int, int, float]],
    ) -> exp.Expression:
        """``queries.build_partition`` over loaded tests and routes tables (no SQL literals)."""
        if any(factor not in (0.0, 1.0) for *_, factor in routes):
            self.fractional = True
        engine = self.data.engine
        tests_table = _load(engine, "tests", q.TESTS_COLUMNS, tests)
        routes_table = _load(engine, "routes", q.ROUTES_COLUMNS, routes)
        self.loaded += [tests_table, routes_table]
        return q.build_partition(level, features, tests_table, routes_table)

    def finish(self, root: Node) -> Node:
        """Every continuous test's threshold: the largest training value not above its
        midpoint, found for all levels at once.

        Growth partitions by the value below each cut instead: within the node no value
        lies between it and the midpoint, so both send every row the same way.
        """
        if self.unresolved:
            engine = self.data.engine
            chosen = _load(engine, "chosen", q.CHOSEN_COLUMNS, self.unresolved)
            self.loaded.append(chosen)
            query = q.build_observed_thresholds(
                self.values_table, chosen, asof=engine.SUPPORTS_ASOF_JOIN
            )
            thresholds = {int(key): float(t) for key, t in engine.execute(query)}
            for node in root.walk():
                if node.node_id in thresholds and node.split is not None:
                    node.split = replace(node.split, threshold=thresholds[node.node_id])
            self.unresolved = []
        return root

    def _drop_loaded(self, engine: Any) -> None:
        for table in self.loaded:
            engine.drop(table)
        self.loaded = []

    def close(self, engine: Any) -> None:
        self._drop_loaded(engine)
        if self.values_table is not None:
            engine.drop(self.values_table)
            self.values_table = None


@dataclass
class _Choice:
    feature: Feature
    threshold: float | None
    next_value: float | None
    row: dict[str, Any]


Progress = Callable[[LevelStats], None]


def print_progress(level: LevelStats) -> None:
    """A progress callback that writes one line per level to standard error."""
    print(
        f"level {level.depth}: {level.nodes} nodes, {level.splits} split, "
        f"{level.queries} queries, {level.seconds:.2f} s",
        file=sys.stderr,
        flush=True,
    )


def score_options(options: GrowOptions, all_thresholds: bool = False) -> q.ScoreOptions:
    c45 = options.algorithm == "c4.5"
    return q.ScoreOptions(
        min_cases=options.min_cases,
        j48_min_split=c45,
        mdl=c45,
        all_thresholds=all_thresholds,
        unknown="drop" if options.missing == "drop" else "fractional",
        cut_gap=1e-5 if c45 else 0.0,
        # J48 replaces its best cut only by one whose gain is higher by more than 1e-6
        threshold_tie=q.J48_SMALL if c45 else q.TIE_TOLERANCE,
    )


def make_strategy(data: Dataset, options: GrowOptions) -> Strategy:
    """The strategy of ``options.algorithm``."""
    if options.algorithm == "cart":
        from .cart import CARTStrategy

        return CARTStrategy(data, options)
    if options.algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, not {options.algorithm!r}")
    if options.missing not in MISSING:
        raise ValueError(f"missing must be one of {MISSING}, not {options.missing!r}")
    return C45Strategy(data, options)


def grow(
    data: Dataset,
    options: GrowOptions,
    progress: Progress | None = None,
    strategy: Strategy | None = None,
) -> tuple[Node, GrowStats]:
    """Grow a tree on ``data`` and return its root and the query counts."""
    # A level makes hundreds of thousands of objects that live on (the tree's nodes) and
    # query expressions, whose parent links are cycles. Automatic collections kept walking the
    # growing tree (22 full collections, 3-4 s of an 18 s growth of a million rows); instead
    # ``_grow`` collects the young generations once per level, which frees the level's
    # expressions and moves the nodes out of the way of later collections.
    with collector_paused():
        return _grow(data, options, progress, strategy)


def _choose(
    strategy: Strategy,
    hist: exp.Table,
    features: list[Feature],
    splittable: list[Pending],
    frontier: dict[int, Pending],
) -> dict[int, Any]:
    """Score the level's splits and let the strategy choose one per splittable node."""
    by_node: dict[int, list[dict[str, Any]]] = {}
    for row in strategy.data.engine.execute(strategy.build_scores(hist, features)):
        by_node.setdefault(int(row[0]), []).append(
            dict(zip(strategy.score_columns, row, strict=True))
        )
    strategy.on_scores(by_node)
    choices: dict[int, Any] = {}
    for p in splittable:
        choice = strategy.choose(by_node.get(p.node.node_id, []), p)
        if choice is not None:
            choices[p.node.node_id] = choice
    return strategy.select(choices, frontier)


def _grow(
    data: Dataset,
    options: GrowOptions,
    progress: Progress | None,
    strategy: Strategy | None,
) -> tuple[Node, GrowStats]:
    if strategy is None:
        strategy = make_strategy(data, options)
    engine = data.engine
    k = len(data.classes)
    stats = GrowStats()
    start_all = time.perf_counter()
    prior = strategy.prior()
    clustering = _Clustering()

    queries_before = engine.stats.queries
    level: exp.Table | None = engine.materialize("level", strategy.build_level0())
    stats.scans += 1
    root = Node(counts=[0.0] * k, proba=prior, node_id=0)
    frontier: dict[int, Pending] = {0: Pending(root, 0, frozenset(), prior)}
    next_id = 1
    depth = 0
    try:
        while frontier:
            assert level is not None
            start = time.perf_counter()
            queries_at_start = engine.stats.queries
            max_depth = strategy.max_depth
            can_grow = max_depth is None or depth < max_depth
            hist_features = data.features if can_grow else []
            hist = engine.materialize(
                "hist", strategy.build_histogram(level, hist_features, len(frontier))
            )
            scans = 1
            strategy.on_histogram(engine, hist, depth)
            for node_id, counts in strategy.read_counts(engine, hist).items():
                pending = frontier[node_id]
                pending.node.counts = counts
                pending.node.proba = normalise(counts, pending.parent_proba)

            splittable = [p for p in frontier.values() if can_grow and strategy.may_split(p)]
            choices: dict[int, Any] = {}
            if splittable and hist_features:
                choices = _choose(strategy, hist, hist_features, splittable, frontier)

            next_frontier: dict[int, Pending] = {}
            new_level = None
            if choices:
                plans = strategy.plan(engine, hist, choices, frontier)
                features = {f.name: f for f in data.features}
                tests: list[tuple[int, int, float | None]] = []
                routes: list[tuple[int, int, int, float]] = []
                child_depth = depth + 1
                children_can_grow = max_depth is None or child_depth < max_depth
                for node_id, plan in sorted(plans.items()):
                    pending = frontier[node_id]
                    node = pending.node
                    f = features[plan.split.feature]
                    node.split = plan.split
                    node.shares = plan.shares
                    node.unknown_branch = plan.unknown_branch
                    tests.append((node_id, f.index, plan.test_threshold))
                    used = pending.used | {f.index} if plan.consumes_feature else pending.used
                    for branch, keys in enumerate(plan.keys_of_branch):
                        counts = strategy.child_counts(node_id, plan, branch)
                        if counts is None:
                            child = Node([0.0] * k, list(node.proba), node_id=next_id)
                        else:
                            child = Node(counts, normalise(counts, node.proba), node_id=next_id)
                        next_id += 1
                        node.children.append(child)
                        strategy.on_child(pending, branch, child)
                        if counts is not None and not children_can_grow:
                            continue  # a leaf already: its rows go no further
                        child_pending = Pending(child, child_depth, used, node.proba)
                        if counts is not None and not strategy.may_split(child_pending):
                            continue
                        next_frontier[child.node_id] = child_pending
                        for key in keys:
                            routes.append((node_id, key, child.node_id, 1.0))
                        if not plan.route_unknown:
                            continue
                        if plan.unknown_branch is None:
                            if node.shares[branch] > 0:
                                routes.append(
                                    (node_id, q.UNKNOWN_KEY, child.node_id, node.shares[branch])
                                )
                        elif branch == plan.unknown_branch:
                            routes.append((node_id, q.UNKNOWN_KEY, child.node_id, 1.0))
                if routes:
                    partition = strategy.build_partition(level, data.features, tests, routes)
                    if clustering.wants(engine, len(next_frontier)):
                        partition = q.ordered_by_node(partition)
                    new_level = engine.materialize("level", partition)
                    scans += 1
            engine.drop(hist)
            engine.drop(level)
            level_stats = LevelStats(
                depth=depth,
                nodes=len(frontier),
                splits=len(choices),
                queries=engine.stats.queries - queries_at_start,
                scans=scans,
                seconds=round(time.perf_counter() - start, 6),
            )
            stats.levels.append(level_stats)
            stats.scans += scans
            if progress is not None:
                progress(level_stats)
            frontier = next_frontier
            level = new_level
            depth += 1
            gc.collect(1)
        root = strategy.finish(root)
    finally:
        if level is not None and frontier:
            engine.drop(level)
        strategy.close(engine)
    stats.queries = engine.stats.queries - queries_before
    stats.seconds = time.perf_counter() - start_all
    return root, stats


class _Clustering:
    """When to store a level's rows sorted by node.

    A histogram's hash aggregate is much faster on rows clustered by node: at 13.4M rows and
    2,085 nodes, 2.3 s instead of 4.0 s on DuckDB. Partitions keep their input's order, so
    rows stay clustered by their ancestor at the sorted level and a sort pays off only when
    the frontier has grown by ``GROWTH`` since the last one.
    """

    FIRST = 256
    GROWTH = 8

    def __init__(self) -> None:
        self.sorted_at = 0

    def wants(self, engine: Any, nodes: int) -> bool:
        if not engine.KEEPS_ROW_ORDER or nodes < max(self.FIRST, self.GROWTH * self.sorted_at):
            return False
        self.sorted_at = nodes
        return True


SCORE_COLUMNS = (
    "node", "attr", "threshold", "next_value", "gain", "mdl_gain", "split_info", "gain_ratio",
    "candidates", "w_known", "w_all", "big_branches",
)


def _may_split(p: _Pending, options: GrowOptions) -> bool:
    counts = p.node.counts
    weight = sum(counts)
    if weight < 2 * options.min_cases - q.J48_SMALL:
        return False
    if weight < options.min_samples_split - q.J48_SMALL:
        return False
    return max(counts) < weight - q.J48_SMALL  # not pure


def choose_split(
    rows: list[dict[str, Any]],
    data: Dataset,
    options: GrowOptions,
    used: frozenset[int],
) -> _Choice | None:
    """Pick the split of one node from its scored candidates, or None for a leaf.

    C4.5 (as J48): among valid candidates whose gain is at least the average gain of the
    valid candidates (less 1e-3), the highest gain ratio, near-ties (Utils.SMALL) to the
    feature listed first. ID3: the highest gain, each nominal feature once per path; gains
    within ``TIE_TOLERANCE`` tie and go to the feature listed first.
    """
    features = {f.index: f for f in data.features}
    valid: list[tuple[Feature, dict[str, Any]]] = []
    for row in sorted(rows, key=lambda r: r["attr"]):
        f = features[int(row["attr"])]
        if f.kind == NOMINAL:
            if f.index in used and options.algorithm == "id3":
                continue
            if row["big_branches"] < 2 or row["gain"] is None:
                continue
        else:
            if row["threshold"] is None or row["mdl_gain"] is None:
                continue
            if row["mdl_gain"] < q.J48_SMALL:
                continue
        valid.append((f, row))
    if not valid:
        return None

    if options.algorithm == "c4.5":
        many_valued = all(
            f.kind == NOMINAL and len(f.values) >= 0.3 * data.n_rows for f in data.features
        )
        averaged = [
            r["mdl_gain"]
            for f, r in valid
            if f.kind == CONTINUOUS or many_valued or len(f.values) < 0.3 * data.n_rows
        ]
        # J48 averages over the candidates it counts (many-valued nominals are left out).
        if not averaged:
            return None
        average = sum(averaged) / len(averaged)
        # J48 scans attributes in order and takes one only when its gain ratio beats the best
        # so far by more than Utils.SMALL, so near-ties go to the earlier attribute.
        chosen = None
        best_ratio = 0.0
        for f, r in valid:
            ratio = float(r["gain_ratio"] or 0.0)
            if (
                r["mdl_gain"] >= average - 1e-3
                and r["mdl_gain"] >= options.min_gain
                and ratio - best_ratio > q.J48_SMALL
            ):
                chosen, best_ratio = (f, r), ratio
        if chosen is None:
            return None
        f, r = chosen
        return _Choice(f, r["threshold"], r["next_value"], r)

    pool = [
        (f, r) for f, r in valid if r["gain"] > q.J48_SMALL and r["mdl_gain"] >= options.min_gain
    ]
    if not pool:
        return None
    best = max(float(r["gain"]) for _, r in pool)
    f, r = next((f, r) for f, r in pool if float(r["gain"]) >= best - q.TIE_TOLERANCE)
    return _Choice(f, r["threshold"], r["next_value"], r)


def _cut_midpoints(choices: dict[int, _Choice]) -> list[tuple[int, int, float, float]]:
    """(node, feature, value below, midpoint) of each continuous cut, J48's way."""
    wanted = []
    for node_id, c in choices.items():
        if c.feature.kind == CONTINUOUS:
            assert c.threshold is not None and c.next_value is not None
            mid = (c.threshold + c.next_value) / 2
            if mid >= c.next_value:  # no double between the two values
                mid = c.threshold
            # J48 (C45Split.setSplitPoint) takes the largest value v with v - mid < SMALL, so a
            # value a rounding error above the midpoint still counts: (0.557 + 0.565) / 2 is
            # 0.56099999..., and J48 splits at 0.561.
            if mid + q.J48_SMALL < c.next_value:
                mid = mid + q.J48_SMALL * (1 - 1e-9)
            wanted.append((node_id, c.feature.index, c.threshold, mid))
    return wanted


BIN_SAMPLE_ROWS = 200_000
"""Rows sampled for quantile bin edges on engines that sample rows (about 800 per bin at 256)."""


def bin_edges(
    data: Dataset, max_bins: int, min_gap: float = 0.0
) -> dict[int, list[float]] | None:
    """Quantile bin edges of every continuous feature, from one query over the source.

    An edge within ``min_gap`` of the next one is dropped (its bin joins the next): the
    scoring query compares bin indexes, not values, and cannot see such gaps.
    """
    if max_bins < 2:
        raise ValueError(f"max_bins must be at least 2, not {max_bins}")
    continuous = [f for f in data.features if f.kind == CONTINUOUS]
    if not continuous:
        return None
    sample = BIN_SAMPLE_ROWS if data.engine.SUPPORTS_ROW_SAMPLE else None
    if sample is not None and data.n_rows <= 4 * sample:
        sample = None  # small data: exact quantiles are cheap
    (row,) = data.engine.execute(q.build_bin_edges(data, max_bins, sample))
    edges: dict[int, list[float]] = {}
    for i, f in enumerate(continuous):
        quantiles, top = row[2 * i], row[2 * i + 1]
        values = {float(v) for v in quantiles or [] if v is not None}
        if top is not None:
            values.add(float(top))
        kept: list[float] = []
        for v in sorted(values):
            if kept and v - kept[-1] <= min_gap:
                kept[-1] = v  # the earlier edge goes; the maximum always stays
            else:
                kept.append(v)
        if kept:
            edges[f.index] = kept
    return edges


def _load(
    engine: Any,
    hint: str,
    columns: tuple[tuple[str, str], ...],
    rows: Sequence[Sequence[Any]],
) -> Any:
    return engine.load_rows(hint, [c for c, _ in columns], [t for _, t in columns], rows)


def _branch_counts(
    engine: Any, hist: Any, tests_table: Any, n_classes: int, bits: int | None
) -> dict[int, dict[int, list[float]]]:
    """Class counts per node and key of its chosen test (key -1: unknown values)."""
    rows = engine.execute(q.build_branch_counts(hist, tests_table, n_classes, bits))
    out: dict[int, dict[int, list[float]]] = {}
    for node, key, *counts in rows:
        out.setdefault(int(node), {})[int(key)] = [float(c) for c in counts]
    return out
