"""ID3 and C4.5 (as J48 builds it): gain or gain ratio, multiway nominal tests, fractional
unknown values. The level loop, histogram, partition and running sums are shared
(``sqltree.grower``, ``sqltree.queries``, ``sqltree.running_sums``); this module holds what only
these algorithms decide, and their SQL is in ``criteria`` (gain, split info),
``cuts`` (the best cut per node) and ``scores`` (the scoring query).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from ... import queries as q
from ...algorithm_registry import facts
from ...bounded_search import SEARCH_BINS
from ...criteria import J48_SMALL, TIE_TOLERANCE
from ...dataset import Dataset, Feature
from ...fixed_point import entropy_bound, fixed_point_bits, training_weight_bits
from ...grower import (
    DENSE_VALUES,
    Branching,
    GrowOptions,
    Pending,
    RouteRow,
    Strategy,
    TestRow,
    load_rows,
)
from ...quantiles import bin_edges
from ...tree import CONTINUOUS, NOMINAL, Node, Split, argmax
from .bounded import (
    MAX_C45_BOUND_CLASSES,
    MIN_GROUP_VALUES,
    CloseValues,
    build_close_values,
    close_features,
    count_known,
)
from .criteria import ScoreOptions
from .cuts import CHOSEN_COLUMNS, build_distinct_values, build_observed_thresholds
from .scores import C45ScoreRow, build_branch_counts, build_split_scores

MISSING = ("fractional", "majority", "drop")


class C45Strategy(Strategy):
    """ID3 and C4.5: gain or gain ratio, multiway nominal tests, fractional unknown values."""

    score_row = C45ScoreRow

    def __init__(self, data: Dataset, options: GrowOptions) -> None:
        super().__init__(data, options)
        self.values_table: exp.Table | None = None
        self.branch_counts: dict[int, dict[int, list[float]]] = {}
        self.loaded: list[exp.Table] = []
        # Continuous cuts whose printed threshold is still the value below the cut.
        self.unresolved: list[tuple[int, int, float, float]] = []
        self._keys_by_feature: dict[int, list[list[int]]] = {}
        self._splits_by_feature: dict[int, Split] = {}
        # Whether the level's rows may carry fractional weights (set for good once a
        # partition spreads unknown values over branches).
        self.fractional = data.weight is not None
        self.bits = training_weight_bits(data)
        self.entropy_bits = fixed_point_bits(
            entropy_bound(sum(data.class_weights), self.n_classes, data.n_rows)
        )
        self.candidates = SplitCandidates.of(data)

    def weight_bits(self) -> int | None:
        return self.bits if self.fractional else None

    def on_scores(self, by_node: dict[int, list[C45ScoreRow]]) -> None:
        """Density from the scores: cuts per unit of known weight (no query of its own)."""
        if self.bins or not self.data.engine.SUPPORTS_ORDERED_SCAN:
            return
        continuous = {f.index for f in self.data.features if f.kind == CONTINUOUS}
        cuts: dict[int, float] = {}
        weight: dict[int, float] = {}
        for rows in by_node.values():
            for row in rows:
                attr = int(row.attr)
                if attr in continuous and row.candidates is not None:
                    cuts[attr] = cuts.get(attr, 0.0) + float(row.candidates) + 1
                    weight[attr] = weight.get(attr, 0.0) + float(row.w_known or 0.0)
        self.dense = frozenset(
            attr for attr, n in cuts.items()
            if weight[attr] > 0 and n >= DENSE_VALUES * weight[attr]
        )

    close_values: CloseValues | None = None
    """The bounded features with values not more than J48's cut gap apart, and those values
    (``bounded.build_close_values``), found at level 0."""

    def build_level0(self) -> exp.Expression:
        options = self.options
        if options.max_bins:
            # J48 never cuts between values closer than its 1e-5, so neither do bin edges.
            gap = score_options(options).cut_gap
            self.bins = bin_edges(self.data, options.max_bins, gap)
        elif (options.threshold_search == "bounded"
              and self.n_classes <= MAX_C45_BOUND_CLASSES
              # the bounded query reads its CTEs several times: inlined (Spark), they are
              # planned and computed again at each reference
              and self.data.engine.SUPPORTS_MATERIALIZED_CTE):
            self.search_edges = bin_edges(self.data, SEARCH_BINS)
        return q.build_level0(self.data, self.bins, lookup=self.data.engine.VECTORIZED)

    bounded_level = False
    """Whether this level's continuous cuts are searched bound-pruned."""
    _nodes = 1

    def build_histogram(
        self, level: exp.Table, features: list[Feature], nodes: int = 1
    ) -> exp.Expression:
        """The shared histogram (with the bounded search's bins); notes the level's nodes."""
        self._nodes = nodes
        return super().build_histogram(level, features, nodes)

    def _choose_search(self, engine: Any, hist: exp.Table) -> None:
        """Bound this level only where its (node, feature) groups hold many more values than
        bins: in small groups the bins' aggregate and bounds cost more than the scan they
        save. Groups only shrink with depth, so a level that scans fully ends the binning."""
        self.bounded_level = False
        if not self.search_edges:
            return
        (rows,), = engine.execute(count_known(hist, sorted(self.search_edges)))
        groups = self._nodes * len(self.search_edges)
        self.bounded_level = int(rows or 0) >= MIN_GROUP_VALUES * groups
        if not self.bounded_level:
            self.search_edges = None

    def on_histogram(self, engine: Any, hist: exp.Table, depth: int) -> None:
        if self.bins:  # thresholds are bin edges, observed values already
            return
        if depth == 0 and any(f.kind == CONTINUOUS for f in self.data.features):
            self.values_table = engine.materialize(
                "values", build_distinct_values(hist, self.data.features)
            )
            gap = score_options(self.options).cut_gap
            if self.search_edges and gap > 0:
                self._find_close_values(engine, gap)
        self._choose_search(engine, hist)

    def _find_close_values(self, engine: Any, gap: float) -> None:
        """Store the values of the bounded features that can be close to a neighbour in some
        node; keep the table only where a feature has any."""
        assert self.values_table is not None and self.search_edges
        table = engine.materialize("close", build_close_values(
            self.values_table, sorted(self.search_edges), gap))
        attrs = tuple(sorted(int(a) for a, in engine.execute(close_features(table))))
        if attrs:
            self.close_values = CloseValues(table, attrs)
        else:
            engine.drop(table)

    def level_search(self) -> str:
        return "bounded" if self.bounded_level else super().level_search()

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
        edges = self.search_edges if self.bounded_level else None
        return build_split_scores(hist, features, self.n_classes, options, edges,
                                  self.close_values)

    def choose(self, rows: list[C45ScoreRow], p: Pending) -> _Choice | None:
        return choose_split(rows, self.candidates, self.options, p.used)

    def branchings(
        self, engine: Any, hist: exp.Table, choices: dict[int, Any], frontier: dict[int, Pending]
    ) -> dict[int, Branching]:
        options = self.options
        self._drop_loaded(engine)
        if not self.bins:
            self.unresolved += _cut_midpoints(choices)
        tests = sorted((node_id, c.feature.index, c.threshold) for node_id, c in choices.items())
        self.branch_counts = self.read_branch_counts(engine, hist, tests)
        branchings: dict[int, Branching] = {}
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
                split = self._value_split(f)
                keys_of_branch = self._value_keys(f)
            branch_w = [
                sum((sum(by_key[key]) for key in keys if key in by_key), 0.0)
                for keys in keys_of_branch
            ]
            known = sum(branch_w)
            branchings[node_id] = Branching(
                split=split,
                test_threshold=choice.threshold,
                keys_of_branch=keys_of_branch,
                shares=[w / known if known > 0 else 0.0 for w in branch_w],
                unknown_branch=None if options.missing == "fractional" else argmax(branch_w),
                route_unknown=options.missing != "drop",
                consumes_feature=f.kind == NOMINAL,
            )
        return branchings

    def read_branch_counts(
        self, engine: Any, hist: Any, tests: list[TestRow]
    ) -> dict[int, dict[int, list[float]]]:
        """Class counts per node and key of its chosen test (key -1: unknown values)."""
        tests_table = load_rows(engine, "tests", q.TESTS_COLUMNS, tests)
        self.loaded.append(tests_table)
        return _branch_counts(engine, hist, tests_table, self.n_classes, self.hist_bits)

    def _value_split(self, f: Feature) -> Split:
        """A nominal feature's test, a branch per value: one object for every node that
        splits on ``f`` (tests are replaced, never changed in place; a grown tree of a million
        rows has hundreds of thousands of them)."""
        split = self._splits_by_feature.get(f.index)
        if split is None:
            split = self._splits_by_feature[f.index] = Split(
                f.name, NOMINAL, groups=[[v] for v in f.values])
        return split

    def _value_keys(self, f: Feature) -> list[list[int]]:
        """Keys of a nominal test's branches, a value each (shared by every branching on ``f``)."""
        keys = self._keys_by_feature.get(f.index)
        if keys is None:
            keys = self._keys_by_feature[f.index] = [[i] for i in range(len(f.values))]
        return keys

    def child_counts(self, node_id: int, branching: Branching, branch: int) -> list[float]:
        k = self.n_classes
        zero = [0.0] * k
        by_key = self.branch_counts.get(node_id, {})
        counts = zero
        for key in branching.keys_of_branch[branch]:
            found = by_key.get(key)
            if found is not None:
                counts = [a + b for a, b in zip(counts, found)]
        factor = 0.0
        if branching.route_unknown:
            if branching.unknown_branch is None:
                factor = branching.shares[branch]
            elif branch == branching.unknown_branch:
                factor = 1.0
        if factor > 0:
            unknown = by_key.get(q.UNKNOWN_KEY, zero)
            counts = [counts[c] + factor * unknown[c] for c in range(k)]
        return counts

    def build_partition(
        self, level: exp.Table, features: list[Feature], tests: list[TestRow],
        routes: list[RouteRow],
    ) -> exp.Expression:
        """``queries.build_partition`` over loaded tests and routes tables (no SQL literals)."""
        if any(factor not in (0.0, 1.0) for *_, factor in routes):
            self.fractional = True
        engine = self.data.engine
        tests_table = load_rows(engine, "tests", q.TESTS_COLUMNS, tests)
        routes_table = load_rows(engine, "routes", q.ROUTES_COLUMNS, routes)
        self.loaded += [tests_table, routes_table]
        return q.build_partition(level, features, tests_table, routes_table)

    def finish(self, root: Node) -> Node:
        """Every continuous test's threshold: the largest training value not above its
        midpoint, found for all levels at once.

        Growth partitions by the value below each cut instead: within the node no value
        lies between it and the midpoint, so both send every row the same way.
        """
        if self.unresolved:
            thresholds = self.observed_thresholds(self.unresolved)
            for node in root.walk():
                if node.node_id in thresholds and node.split is not None:
                    node.split = replace(node.split, threshold=thresholds[node.node_id])
            self.unresolved = []
        return root

    def observed_thresholds(
        self, unresolved: list[tuple[int, int, float, float]]
    ) -> dict[int, float]:
        """Per cut (node, feature, value below, midpoint): the largest training value of the
        feature not above the midpoint, by node."""
        engine = self.data.engine
        chosen = load_rows(engine, "chosen", CHOSEN_COLUMNS, unresolved)
        self.loaded.append(chosen)
        query = build_observed_thresholds(
            self.values_table, chosen, asof=engine.SUPPORTS_ASOF_JOIN
        )
        return {int(key): float(t) for key, t in engine.execute(query)}

    def _drop_loaded(self, engine: Any) -> None:
        for table in self.loaded:
            engine.drop(table)
        self.loaded = []

    def close(self, engine: Any) -> None:
        self._drop_loaded(engine)
        for table in (self.values_table, self.close_values and self.close_values.table):
            if table is not None:
                engine.drop(table)
        self.values_table = self.close_values = None


@dataclass
class _Choice:
    feature: Feature
    threshold: float | None
    next_value: float | None
    row: C45ScoreRow


def score_options(options: GrowOptions, all_thresholds: bool = False) -> ScoreOptions:
    j48 = facts(options.algorithm).gain_ratio
    return ScoreOptions(
        min_cases=options.min_cases,
        j48_min_split=j48,
        mdl=j48,
        all_thresholds=all_thresholds,
        unknown="drop" if options.missing == "drop" else "fractional",
        cut_gap=1e-5 if j48 else 0.0,
        # J48 replaces its best cut only by one whose gain is higher by more than 1e-6
        threshold_tie=J48_SMALL if j48 else TIE_TOLERANCE,
    )


def _may_split(p: Pending, options: GrowOptions) -> bool:
    counts = p.node.counts
    weight = sum(counts)
    if weight < 2 * options.min_cases - J48_SMALL:
        return False
    if weight < options.min_samples_split - J48_SMALL:
        return False
    return max(counts) < weight - J48_SMALL  # not pure


@dataclass(frozen=True)
class SplitCandidates:
    """What ``choose_split`` needs of the dataset, worked out once per fit: the features by
    index, and those whose gain counts in J48's average (it leaves out nominal features with
    at least 0.3 x the rows values, unless every feature is one)."""

    features: dict[int, Feature]
    averaged: frozenset[int]

    @classmethod
    def of(cls, data: Dataset) -> SplitCandidates:
        many = {f.index for f in data.features
                if f.kind == NOMINAL and len(f.values) >= 0.3 * data.n_rows}
        everyone = len(many) == len(data.features)
        return cls({f.index: f for f in data.features},
                   frozenset(f.index for f in data.features if everyone or f.index not in many))


def choose_split(
    rows: list[C45ScoreRow],
    candidates: SplitCandidates,
    options: GrowOptions,
    used: frozenset[int],
) -> _Choice | None:
    """Pick the split of one node from its scored candidates, or None for a leaf.

    C4.5 (as J48): among valid candidates whose gain is at least the average gain of the
    valid candidates (less 1e-3), the highest gain ratio, near-ties (Utils.SMALL) to the
    feature listed first. ID3: the highest gain, each nominal feature once per path; gains
    within ``TIE_TOLERANCE`` tie and go to the feature listed first.
    """
    features = candidates.features
    algorithm = facts(options.algorithm)
    valid: list[tuple[Feature, C45ScoreRow]] = []
    for row in sorted(rows, key=lambda r: r.attr):
        f = features[int(row.attr)]
        if f.kind == NOMINAL:
            if f.index in used and algorithm.nominal_once:
                continue
            if row.big_branches < 2 or row.gain is None:
                continue
        else:
            if row.threshold is None or row.mdl_gain is None:
                continue
            if row.mdl_gain < J48_SMALL:
                continue
        valid.append((f, row))
    if not valid:
        return None

    if algorithm.gain_ratio:
        averaged = [r.mdl_gain for f, r in valid if f.index in candidates.averaged]
        # J48 averages over the candidates it counts (many-valued nominals are left out).
        if not averaged:
            return None
        average = sum(averaged) / len(averaged)
        # J48 scans attributes in order and takes one only when its gain ratio beats the best
        # so far by more than Utils.SMALL, so near-ties go to the earlier attribute.
        chosen = None
        best_ratio = 0.0
        for f, r in valid:
            ratio = float(r.gain_ratio or 0.0)
            if (
                r.mdl_gain >= average - 1e-3
                and r.mdl_gain >= options.min_gain
                and ratio - best_ratio > J48_SMALL
            ):
                chosen, best_ratio = (f, r), ratio
        if chosen is None:
            return None
        f, r = chosen
        return _Choice(f, r.threshold, r.next_value, r)

    pool = [(f, r) for f, r in valid if r.gain > J48_SMALL and r.mdl_gain >= options.min_gain]
    if not pool:
        return None
    best = max(float(r.gain) for _, r in pool)
    f, r = next((f, r) for f, r in pool if float(r.gain) >= best - TIE_TOLERANCE)
    return _Choice(f, r.threshold, r.next_value, r)


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
            if mid + J48_SMALL < c.next_value:
                mid = mid + J48_SMALL * (1 - 1e-9)
            wanted.append((node_id, c.feature.index, c.threshold, mid))
    return wanted


def _branch_counts(
    engine: Any, hist: Any, tests_table: Any, n_classes: int, bits: int | None
) -> dict[int, dict[int, list[float]]]:
    """Class counts per node and key of its chosen test (key -1: unknown values)."""
    rows = engine.execute(build_branch_counts(hist, tests_table, n_classes, bits))
    out: dict[int, dict[int, list[float]]] = {}
    for node, key, *counts in rows:
        out.setdefault(int(node), {})[int(key)] = [float(c) for c in counts]
    return out
