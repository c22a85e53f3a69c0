"""Top-down growth, one level of the tree per round of queries.

Each round answers every node of the frontier and every feature at once: one histogram query
and one partition query read the level's rows (two full passes), and a few small queries over
the histogram score the candidates. Python only chooses among a handful of scored rows per node.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import queries as q
from .dataset import Dataset, Feature
from .tree import CONTINUOUS, NOMINAL, Node, Split, argmax, normalise

ALGORITHMS = ("c4.5", "id3")
MISSING = ("fractional", "majority", "drop")


@dataclass
class GrowOptions:
    """Options of growth (pre-pruning included); defaults follow J48 for C4.5."""

    algorithm: str = "c4.5"
    min_cases: float = 2.0
    max_depth: int | None = None
    min_samples_split: float = 0.0
    min_gain: float = 0.0
    missing: str = "fractional"


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
class _Pending:
    node: Node
    depth: int
    used: frozenset[int]
    parent_proba: list[float]


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
    )


def grow(
    data: Dataset, options: GrowOptions, progress: Progress | None = None
) -> tuple[Node, GrowStats]:
    """Grow a tree on ``data`` and return its root and the query counts."""
    if options.algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, not {options.algorithm!r}")
    if options.missing not in MISSING:
        raise ValueError(f"missing must be one of {MISSING}, not {options.missing!r}")
    engine = data.engine
    k = len(data.classes)
    stats = GrowStats()
    start_all = time.perf_counter()
    prior = normalise(list(data.class_weights), [1.0 / k] * k)

    queries_before = engine.stats.queries
    level = engine.materialize("level", q.build_level0(data))
    stats.scans += 1
    root = Node(counts=[0.0] * k, proba=prior, node_id=0)
    frontier: dict[int, _Pending] = {0: _Pending(root, 0, frozenset(), prior)}
    next_id = 1
    values_table = None
    depth = 0
    try:
        while frontier:
            start = time.perf_counter()
            queries_at_start = engine.stats.queries
            can_grow = options.max_depth is None or depth < options.max_depth
            hist_features = data.features if can_grow else []
            hist = engine.materialize("hist", q.build_histogram(level, hist_features, k))
            scans = 1
            if depth == 0 and any(f.kind == CONTINUOUS for f in data.features):
                values_table = engine.materialize(
                    "values", q.build_distinct_values(hist, data.features)
                )
            for node_id, *counts in engine.execute(q.build_node_counts(hist, k)):
                pending = frontier[int(node_id)]
                pending.node.counts = [float(c) for c in counts]
                pending.node.proba = normalise(pending.node.counts, pending.parent_proba)

            splittable = [p for p in frontier.values() if can_grow and _may_split(p, options)]
            choices: dict[int, _Choice] = {}
            if splittable and hist_features:
                rows = engine.execute(
                    q.build_split_scores(hist, hist_features, k, score_options(options))
                )
                by_node: dict[int, list[dict[str, Any]]] = {}
                for row in rows:
                    by_node.setdefault(int(row[0]), []).append(dict(zip(SCORE_COLUMNS, row)))
                for p in splittable:
                    choice = choose_split(
                        by_node.get(p.node.node_id, []), data, options, p.used
                    )
                    if choice is not None:
                        choices[p.node.node_id] = choice

            next_frontier: dict[int, _Pending] = {}
            new_level = None
            if choices:
                _resolve_thresholds(engine, values_table, choices)
                weights = _branch_weights(engine, hist, choices, k)
                tests: list[tuple[int, int, float | None]] = []
                routes: list[tuple[int, int, int, float]] = []
                for node_id, choice in sorted(choices.items()):
                    pending = frontier[node_id]
                    node = pending.node
                    f = choice.feature
                    if f.kind == CONTINUOUS:
                        split = Split(f.name, CONTINUOUS, threshold=choice.threshold)
                        keys_of_branch = [[0], [1]]
                    else:
                        split = Split(f.name, NOMINAL, groups=[[v] for v in f.values])
                        keys_of_branch = [[i] for i in range(len(f.values))]
                    branch_w = [
                        sum(weights.get((node_id, key), 0.0) for key in keys)
                        for keys in keys_of_branch
                    ]
                    known = sum(branch_w)
                    node.split = split
                    node.shares = [w / known if known > 0 else 0.0 for w in branch_w]
                    if options.missing != "fractional":
                        node.unknown_branch = argmax(branch_w)
                    tests.append((node_id, f.index, choice.threshold))
                    used = pending.used | {f.index} if f.kind == NOMINAL else pending.used
                    for branch, keys in enumerate(keys_of_branch):
                        child = Node(counts=[0.0] * k, proba=list(node.proba), node_id=next_id)
                        next_id += 1
                        node.children.append(child)
                        next_frontier[child.node_id] = _Pending(
                            child, depth + 1, used, node.proba
                        )
                        for key in keys:
                            routes.append((node_id, key, child.node_id, 1.0))
                        if options.missing == "fractional" and node.shares[branch] > 0:
                            routes.append(
                                (node_id, q.UNKNOWN_KEY, child.node_id, node.shares[branch])
                            )
                        elif options.missing == "majority" and branch == node.unknown_branch:
                            routes.append((node_id, q.UNKNOWN_KEY, child.node_id, 1.0))
                new_level = engine.materialize(
                    "level", q.build_partition(level, data.features, tests, routes)
                )
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
    finally:
        if level is not None and frontier:
            engine.drop(level)
        if values_table is not None:
            engine.drop(values_table)
    stats.queries = engine.stats.queries - queries_before
    stats.seconds = time.perf_counter() - start_all
    return root, stats


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


def _resolve_thresholds(engine: Any, values_table: Any, choices: dict[int, _Choice]) -> None:
    """Replace each continuous cut by the largest training value not above its midpoint."""
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
    if not wanted:
        return
    for key, threshold in engine.execute(q.build_observed_thresholds(values_table, wanted)):
        choices[int(key)].threshold = float(threshold)


def _branch_weights(
    engine: Any, hist: Any, choices: dict[int, _Choice], n_classes: int
) -> dict[tuple[int, int], float]:
    """Known training weight per (node, key): the branch shares of every chosen split."""
    tests = [(node_id, c.feature.index, c.threshold) for node_id, c in choices.items()]
    rows = engine.execute(q.build_branch_weights(hist, tests, n_classes))
    return {(int(n), int(k)): float(w) for n, k, w in rows}
