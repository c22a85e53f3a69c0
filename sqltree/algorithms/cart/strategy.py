"""CART's strategy: scikit-learn's stopping rules, split choice and best-first selection on
the shared level loop (``sqltree.grower``), and ``split_scores`` to inspect the root's
candidates."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from ... import queries as q
from ...bounded_search import (
    MAX_BOUND_CLASSES,
    MIN_GROUP_VALUES,
    SEARCH_BINS,
)
from ...criteria import TIE_TOLERANCE
from ...dataset import Dataset, Feature
from ...errors import DataError
from ...fixed_point import fixed_point_bits
from ...grower import DENSE_VALUES, Branching, GrowOptions, Pending, Strategy
from ...pruning.cost_complexity import CRITERIA, criterion_of, impurity
from ...quantiles import bin_edges
from ...sqlexpr import col
from ...tree import CONTINUOUS, NOMINAL, Node, Split
from .scores import (
    FEATURE_THRESHOLD,
    KNOWN_LEFT,
    REGRESSION,
    CARTScoreRow,
    build_cart_scores,
    left_codes,
)
from .subsets import read_nominal_ranks, subset_masks

EPSILON = 2.220446049250313e-16
"""``np.finfo(float).eps``: impurity at most this is pure; improvement tolerance."""

INFINITE_THRESHOLD = 1.7976931348623157e308
"""Stands for scikit-learn's ``inf`` threshold (all known values left, unknown right): SQL has
no infinite literal and every finite value is at most this."""


# -- the strategy ------------------------------------------------------------------------------
@dataclass
class NodeInfo:
    """What growth learns of a node beyond its class counts; ``finish`` copies all but the
    best-first key onto the tree's nodes."""

    n_samples: int = 0
    impurity: float = 0.0
    improvement: float = 0.0
    tied: bool = False
    key: float = math.inf  # best-first priority: the lowest improvement on the path


@dataclass
class CARTChoice:
    feature: Feature
    row: CARTScoreRow
    improvement: float
    tied: bool


@dataclass
class ResolvedOptions:
    """scikit-learn's growth parameters turned into the numbers its builder compares with."""

    max_depth: int | None
    min_samples_split: int
    min_samples_leaf: int
    min_weight_leaf: float
    min_impurity_decrease: float
    max_leaf_nodes: int | None


class CARTStrategy(Strategy):
    """CART as scikit-learn's ``DecisionTreeClassifier(splitter="best")`` grows it."""

    score_row = CARTScoreRow

    masks: exp.Table | None = None
    """The stored partitions of nominal values (``subset_masks``), from level 0 on."""

    def __init__(self, data: Dataset, options: GrowOptions) -> None:
        super().__init__(data, options)
        if options.criterion not in CRITERIA:
            raise ValueError(f"criterion must be one of {CRITERIA}, not {options.criterion!r}")
        if data.infinite:
            # Its "known values left, unknown right" test compares with the largest double.
            raise DataError(
                f"columns holding +infinity: {data.infinite}; CART (like scikit-learn) needs "
                "finite values: replace them, or use C4.5, which takes infinity as a value"
            )
        self.criterion = "gini" if options.criterion == "gini" else "entropy"
        self.info: dict[int, NodeInfo] = {}
        self.resolved: ResolvedOptions | None = None
        self.root_weight = 0.0
        self._class_weight = class_weights(data, options.class_weight)
        self.tie_tolerance = TIE_TOLERANCE
        self.nominal_orders: list[int] | None = None  # the subsets' default
        # Class or sample weights make counts fractional: histograms then hold them in fixed
        # point, scaled for the largest sum, the root's weight.
        self.hist_bits = None
        if self._class_weight is not None or data.weight is not None:
            self.hist_bits = fixed_point_bits(sum(self._weighted_class_totals()))

    def _weighted_class_totals(self) -> list[float]:
        weights = list(self.data.class_weights)
        if self._class_weight is not None:
            weights = [w * cw for w, cw in zip(weights, self._class_weight, strict=True)]
        return weights

    def prior(self) -> list[float]:
        k = self.n_classes
        weights = self._weighted_class_totals()
        total = sum(weights)
        return [w / total for w in weights] if total > 0 else [1.0 / k] * k

    search_edges: dict[int, list[float]] | None = None
    """Bin edges of the bound-pruned threshold search (``threshold_search="bounded"``)."""

    def _bounded_search(self) -> bool:
        """Whether continuous cuts are searched bound-pruned: asked for, or ``"auto"`` on an
        engine with the ordered scan (DuckDB), where it was measured faster at scale (0.54x the
        full scan's time at 1M rows, benchmarks/README.md); ``"auto"`` also leaves it, for
        good, at the first level too small to pay (``_measure_density``)."""
        search = self.options.threshold_search
        if self.plan_name == "memory":  # the memory plan scans every value, in numpy
            return False
        return search == "bounded" or (
            search == "auto" and self.data.engine.SUPPORTS_ORDERED_SCAN)

    def level_search(self) -> str:
        return "bounded" if self.search_edges else super().level_search()

    def build_level0(self) -> exp.Expression:
        if self.options.max_bins:
            # scikit-learn never cuts between values closer than FEATURE_THRESHOLD
            self.bins = bin_edges(self.data, self.options.max_bins, FEATURE_THRESHOLD)
        elif self._bounded_search() and self.n_classes <= MAX_BOUND_CLASSES:
            self.search_edges = bin_edges(self.data, SEARCH_BINS)
        return q.build_level0(
            self.data,
            self.bins,
            lookup=self.data.engine.VECTORIZED,
            class_weight=self._class_weight,
        )

    def build_histogram(
        self, level: exp.Table, features: list[Feature], nodes: int = 1
    ) -> exp.Expression:
        """The shared histogram with row counts (scikit-learn's ``min_samples_*`` count rows),
        and the bounded search's bins."""
        return q.build_histogram(
            level,
            features,
            self.n_classes,
            self.summed_by_class(features, nodes),
            self.rowwise(features),
            self.hist_bits,
            counts=True,
            one_pass=self.data.engine.ONE_PASS_HISTOGRAM,
            search_bins=self.search_edges,
            lookup=self.data.engine.VECTORIZED,
        )

    def _measure_density(self, engine: Any, hist: exp.Table) -> None:
        """Density from the histogram: its rows per feature against the level's rows."""
        if self.bins or not engine.SUPPORTS_ORDERED_SCAN:
            return
        rows = engine.execute(
            exp.select(
                col("attr"),
                exp.func("COUNT", exp.Star()),
                exp.func("SUM", col("n")),
            )
            .from_(hist.copy(), copy=False)
            .group_by(col("attr"), copy=False)
        )
        level_rows = sum(float(n) for attr, _, n in rows if attr == -1)
        continuous = {f.index for f in self.data.features if f.kind == CONTINUOUS}
        self.dense = frozenset(
            int(attr) for attr, groups, _ in rows
            if attr in continuous and level_rows > 0 and groups >= DENSE_VALUES * level_rows
        )
        if self.search_edges and self.options.threshold_search == "auto":
            nodes = sum(int(groups) for attr, groups, _ in rows if attr == -1)
            binned = sum(int(groups) for attr, groups, _ in rows if attr in self.search_edges)
            # groups only shrink with depth: a level too small to pay ends the binning
            if binned < MIN_GROUP_VALUES * nodes * len(self.search_edges):
                self.search_edges = None

    def read_counts(self, engine: Any, hist: exp.Table) -> dict[int, list[float]]:
        return self.take_counts(
            engine.execute(q.build_node_counts(hist, self.n_classes, self.hist_bits, counts=True))
        )

    def take_counts(self, rows: Any) -> dict[int, list[float]]:
        """Each node's class counts from rows ``(node, n, count per class...)``; its row count
        and impurity kept aside, and at the root the options resolved against the data."""
        out: dict[int, list[float]] = {}
        for node_id, n, *counts in rows:
            counts_f = [float(c) for c in counts]
            out[int(node_id)] = counts_f
            info = self.info.setdefault(int(node_id), NodeInfo())
            info.n_samples = int(n)
            info.impurity = impurity(counts_f, self.criterion)
        if self.resolved is None:  # the root level: resolve fractions against the data size
            n_root = sum(self.info[i].n_samples for i in out)
            self.root_weight = sum(sum(c) for c in out.values())
            self.resolved = resolve_options(self.options, n_root, self.root_weight)
        return out

    def may_split(self, p: Pending) -> bool:
        r = self.resolved
        assert r is not None
        info = self.info[p.node.node_id]
        weight = sum(p.node.counts)
        if r.max_depth is not None and p.depth >= r.max_depth:
            return False
        if info.n_samples < r.min_samples_split or info.n_samples < 2 * r.min_samples_leaf:
            return False
        if weight < 2 * r.min_weight_leaf:
            return False
        return info.impurity > EPSILON

    def build_scores(self, hist: exp.Table, features: list[Feature]) -> exp.Expression:
        r = self.resolved
        assert r is not None
        return build_cart_scores(
            hist,
            features,
            self.n_classes,
            criterion=self.criterion,
            min_samples_leaf=r.min_samples_leaf,
            min_weight_leaf=r.min_weight_leaf,
            ordered_scan=self.data.engine.SUPPORTS_ORDERED_SCAN,
            fractional=self.hist_bits is not None,
            bits=self.hist_bits,
            search_edges=self.search_edges,
            masks=self.masks,
        )

    def choose(self, rows: list[CARTScoreRow], p: Pending) -> CARTChoice | None:
        r = self.resolved
        assert r is not None
        rows = [row for row in rows if row.gain is not None]
        if not rows:
            return None
        rows.sort(key=lambda row: int(row.attr))
        best = max(float(row.gain) for row in rows)
        near = [row for row in rows if float(row.gain) >= best - self.tie_tolerance]
        row = near[0]
        weight = sum(p.node.counts)
        info = self.info[p.node.node_id]
        improvement = self.improvement_of(weight, float(row.gain))
        if improvement + EPSILON < r.min_impurity_decrease:
            return None
        info.improvement = improvement
        info.tied = len(near) > 1 or int(row.n_near) > 1
        features = {f.index: f for f in self.data.features}
        return CARTChoice(features[int(row.attr)], row, improvement, info.tied)

    def improvement_of(self, weight: float, gain: float) -> float:
        """scikit-learn's improvement of a split: the impurity decrease per unit weight
        weighted by the node's share of the root's weight."""
        return (weight / self.root_weight) * gain

    def select(self, choices: dict[int, Any], frontier: dict[int, Pending]) -> dict[int, Any]:
        """Best-first growth: carry out only the splits a best-first builder may still make.

        scikit-learn pops nodes by improvement, so a node is split before another when the
        lowest improvement on its path (its *key*) is higher. With ``B = max_leaf_nodes - 1``
        splits to make, a node that already has ``B`` known nodes ranked above it can never be
        split; every other node is split now, speculatively, and after growth
        ``pruning.cost_complexity.cut_back`` keeps the first ``B`` by key.
        """
        r = self.resolved
        assert r is not None
        parent_key = self._parent_keys
        for node_id, choice in choices.items():
            info = self.info[node_id]
            info.key = min(parent_key.get(node_id, math.inf), choice.improvement)
        if r.max_leaf_nodes is None:
            return choices
        budget = r.max_leaf_nodes - 1
        self._keyed.extend((-self.info[n].key, frontier[n].depth, n) for n in choices)
        # Nodes of equal keys pop in the order of their own improvements (a child better than
        # its parent is popped right after it), so only a strictly higher key ranks above.
        keys = sorted(k for k, _, _ in self._keyed)
        keep_set = {n for k, _, n in self._keyed if bisect.bisect_left(keys, k) < budget}
        self._keyed = [e for e in self._keyed if e[2] in keep_set]
        return {n: c for n, c in choices.items() if n in keep_set}

    _parent_keys: dict[int, float]
    _keyed: list[tuple[float, int, int]]

    def on_histogram(self, engine: Any, hist: exp.Table, depth: int) -> None:
        if depth == 0:
            self._parent_keys = {}
            self._keyed = []
            # Every level's subsets read the same partitions: stored once, not written into
            # each statement.
            nominal = any(f.kind == NOMINAL for f in self.data.features)
            subsets = self.n_classes > 2 and self.criterion not in REGRESSION
            # only the scoring query reads them (the memory plan and the level scan score
            # in numpy)
            if nominal and subsets and self.masks is None and self.plan_name is None:
                self.masks = engine.materialize("masks", exp.select("*").from_(
                    subset_masks(self.data.features, "m"), copy=False))
        self._measure_density(engine, hist)

    def close(self, engine: Any) -> None:
        super().close(engine)
        if self.masks is not None:
            engine.drop(self.masks)
            self.masks = None

    def on_child(self, parent: Pending, branch: int, child: Node) -> None:
        self._parent_keys[child.node_id] = self.info[parent.node.node_id].key

    def branchings(
        self, engine: Any, hist: exp.Table, choices: dict[int, Any], frontier: dict[int, Pending]
    ) -> dict[int, Branching]:
        nominal_pairs = [
            (n, c.feature.index) for n, c in choices.items() if c.feature.kind == NOMINAL
        ]
        ranks = self.nominal_ranks(engine, hist, nominal_pairs)
        branchings: dict[int, Branching] = {}
        for node_id, choice in choices.items():
            row = choice.row
            f = choice.feature
            side = int(row.side)
            kind = int(row.kind)
            n_left, n_right = float(row.n_left), float(row.n_right)
            if float(row.n_unknown) > 0:
                unknown_branch = 0 if side == 1 else 1
            else:
                # scikit-learn: no unknown value seen here, so they go where most rows went
                unknown_branch = 0 if n_left > n_right else 1
            if f.kind == CONTINUOUS:
                if kind == KNOWN_LEFT:
                    threshold = INFINITE_THRESHOLD
                    test: float | None = threshold
                elif self.bins:
                    # the level table holds bin indexes; the tree cuts at the left bin's top
                    # edge, a training value, as Spark and MADlib cut at bin boundaries
                    test = float(row.threshold)
                    threshold = self.bins[f.index][int(test)]
                else:
                    threshold = midpoint(float(row.threshold), float(row.next_value))
                    test = threshold
                split = Split(f.name, CONTINUOUS, threshold=threshold)
                keys: list[list[int]] = [[0], [1]]
            else:
                values = ranks.get((node_id, f.index), [])
                codes = sorted({v for v, _, _, _ in values})
                left = left_codes(row, values)
                right = [c for c in codes if c not in left]
                keys = [sorted(left), right]
                split = Split(f.name, NOMINAL, groups=[[f.values[c] for c in g] for g in keys])
                test = None
            w_left, w_right = float(row.w_left), float(row.w_right)
            branchings[node_id] = Branching(
                split=split,
                test_threshold=test,
                keys_of_branch=keys,
                shares=[w_left / (w_left + w_right), w_right / (w_left + w_right)],
                unknown_branch=unknown_branch,
            )
        return branchings

    def nominal_ranks(
        self, engine: Any, hist: Any, pairs: list[tuple[int, int]]
    ) -> dict[tuple[int, int], list[tuple[int, int, int, int]]]:
        """Per chosen (node, nominal feature): its values' (code, rank by code, order, rank in
        the order), which name the values a nominal candidate sends left (``left_codes``)."""
        return read_nominal_ranks(
            engine, hist, pairs, self.n_classes, self.hist_bits, self.nominal_orders
        )

    def finish(self, root: Node) -> Node:
        """Keep on every node what scikit-learn's tree arrays hold (row count, impurity) and on
        every split its improvement and whether it tied; pruning comes after
        (``sqltree.pruning.cost_complexity``)."""
        for node in root.walk():
            info = self.info.get(node.node_id)
            if info is None:
                continue
            node.n_samples = info.n_samples
            node.impurity = info.impurity
            if not node.is_leaf:
                node.improvement = info.improvement
                node.tied = info.tied
        return root


def midpoint(a: float, b: float) -> float:
    """scikit-learn's threshold between adjacent values: ``a/2 + b/2``, or ``a`` if that is b."""
    t = a / 2.0 + b / 2.0
    if t == b or math.isinf(t):
        return a
    return t


def class_weights(data: Dataset, class_weight: Any) -> list[float] | None:
    """Weight per class in ``data.classes`` order; "balanced" is n / (k * row count)."""
    if class_weight is None:
        return None
    k = len(data.classes)
    if class_weight == "balanced":
        counts = _class_row_counts(data)
        n = sum(counts)
        return [n / (k * c) if c > 0 else 1.0 for c in counts]
    if isinstance(class_weight, Mapping):
        known = {*data.classes, *(str(c) for c in data.classes)}
        unknown = [key for key in class_weight if key not in known]
        if unknown:  # scikit-learn refuses them too: a misspelt label would weigh nothing
            raise DataError(f"class_weight names classes the target does not hold: {unknown}; "
                            f"the classes are {list(data.classes)}")
        out = []
        for c in data.classes:
            w = class_weight.get(c, class_weight.get(str(c), 1.0))
            out.append(float(w))
        return out
    raise ValueError(f"class_weight must be None, 'balanced' or a dict, not {class_weight!r}")


def _class_row_counts(data: Dataset) -> list[float]:
    if data.weight is None:
        return list(data.class_weights)
    target = exp.column(data.target, quoted=True)
    rows = data.engine.execute(
        exp.select(target, exp.func("COUNT", exp.Star()))
        .from_(data.relation.copy(), copy=False)
        .where(target.is_(exp.null()).not_(), copy=False)
        .group_by(target, copy=False)
    )
    by_class = {v: float(n) for v, n in rows}
    return [by_class.get(c, 0.0) for c in data.classes]


def resolve_options(options: GrowOptions, n_samples: int, total_weight: float) -> ResolvedOptions:
    """scikit-learn's ``fit`` arithmetic: fractions to counts, split >= 2 x leaf, weights
    (``ccp_alpha`` is checked here too, before growth goes on; pruning applies it)."""
    msl = options.min_samples_leaf
    # scikit-learn: a float is a fraction of the rows, an int a count
    min_samples_leaf = math.ceil(msl * n_samples) if isinstance(msl, float) else int(msl)
    if min_samples_leaf < 1:
        raise ValueError("min_samples_leaf must be at least 1 (or a fraction in (0, 1))")
    mss = options.min_samples_split
    if not mss:
        min_samples_split = 2
    elif isinstance(mss, float) and mss <= 1.0:
        min_samples_split = max(2, math.ceil(mss * n_samples))
    else:
        min_samples_split = int(mss)
    min_samples_split = max(min_samples_split, 2 * min_samples_leaf)
    if options.max_leaf_nodes is not None and options.max_leaf_nodes < 2:
        raise ValueError("max_leaf_nodes must be at least 2")
    if options.ccp_alpha < 0:
        raise ValueError("ccp_alpha must be non-negative")
    return ResolvedOptions(
        max_depth=options.max_depth,
        min_samples_split=min_samples_split,
        min_samples_leaf=min_samples_leaf,
        min_weight_leaf=options.min_weight_fraction_leaf * total_weight,
        min_impurity_decrease=options.min_impurity_decrease,
        max_leaf_nodes=options.max_leaf_nodes,
    )


# -- inspection --------------------------------------------------------------------------------
def split_scores(
    data: Dataset,
    *,
    criterion: str = "gini",
    exhaustive: bool = False,
    class_weight: Any = None,
) -> list[dict[str, Any]]:
    """Every valid binary split of the whole data set, scored in SQL.

    One dict per candidate: ``feature``, ``threshold`` (continuous) or ``left``/``right``
    value lists (nominal), ``unknown_left``, ``n_left``/``n_right``, ``w_left``/``w_right``,
    ``impurity_after`` (the weighted impurity of the two children) and ``gain``.
    ``exhaustive`` lists every two-way partition of nominal features with at most
    ``EXACT_SUBSETS_MAX`` values, not only those the ordered scan visits.

    Examples
    --------
    >>> from sqltree.engines.duckdb import DuckDBEngine
    >>> from sqltree.dataset import describe
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"x": ["a", "b", "c", "a"], "y": [0, 1, 1, 0]})
    >>> rows = split_scores(describe(frame, DuckDBEngine(), "y"))
    >>> [(r["left"], r["right"], r["impurity_after"]) for r in rows]
    [(['a'], ['b', 'c'], 0.0), (['a', 'b'], ['c'], 0.3333333333333333)]
    """
    engine = data.engine
    k = len(data.classes)
    crit = criterion_of(criterion)
    level = engine.materialize(
        "level", q.build_level0(data, class_weight=class_weights(data, class_weight))
    )
    hist = engine.materialize("hist", q.build_histogram(
        level, data.features, k, counts=True, one_pass=engine.ONE_PASS_HISTOGRAM))
    try:
        scores = build_cart_scores(hist, data.features, k, criterion=crit, all_candidates=True,
                                   exhaustive=exhaustive)
        rows = [CARTScoreRow._make(r) for r in engine.execute(scores)]
        nominal = [(0, f.index) for f in data.features if f.kind == NOMINAL]
        ranks = read_nominal_ranks(engine, hist, nominal, k)
    finally:
        engine.drop(hist)
        engine.drop(level)
    return candidates_of(rows, ranks, data)


def candidates_of(
    rows: list[CARTScoreRow],
    ranks: Mapping[tuple[int, int], list[tuple[int, int, int, int]]],
    data: Dataset,
) -> list[dict[str, Any]]:
    """``split_scores``' dicts of the root's scored candidates (``CARTScoreRow``) and
    its nominal values' ranks (``read_nominal_ranks``)."""
    features = {f.index: f for f in data.features}
    out = []
    for row in rows:
        f = features[int(row.attr)]
        item: dict[str, Any] = {"feature": f.name}
        kind = int(row.kind)
        if f.kind == CONTINUOUS:
            item["threshold"] = (
                math.inf
                if kind == KNOWN_LEFT
                else midpoint(float(row.threshold), float(row.next_value))
            )
        else:
            values = ranks.get((0, f.index), [])
            codes = sorted({v for v, _, _, _ in values})
            left = left_codes(row, values)
            item["left"] = [f.values[c] for c in codes if c in left]
            item["right"] = [f.values[c] for c in codes if c not in left]
        item["unknown_left"] = int(row.side) == 1
        for key in ("n_left", "n_right", "w_left", "w_right", "impurity_after", "gain"):
            item[key] = float(getattr(row, key))
        out.append(item)
    return out
