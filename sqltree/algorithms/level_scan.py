"""The level scan: CART grown from histograms summed in the engine, split in numpy.

The tables plan stores every level's rows with every feature column and scores candidates in
SQL: on PostgreSQL and Spark each level was several statements over the whole level (Spark:
about 30 jobs a level). The level scan keeps the engine for what only it can do cheaply,
reading the rows, and Python for the rest:

- level 0 stores each row once as small integer codes (a bin index or a nominal value's
  code, 0 for unknown), its class and, for weighted rows, its weight as an integer count of
  ``2**-bits`` (the histogram's fixed point), beside its node;
- a level is those rows of its open nodes (``learner.backends.SqlBackend``, wide), moved
  down by one statement as the engine runs best (``Engine.SCAN_ROUTING``): on DuckDB an
  ``UPDATE`` of each row's node and scan flag joined to the level's splits (a few hundred
  rows); on Spark one that joins them and rewrites the rows; on PostgreSQL, which writes
  every tuple whole, one that stores only the rows the next histogram reads, from level 0's
  rows (never rewritten), each row's node computed from its codes by the splits so far. No
  statement joins the rows to anything large (a narrow (row, node) table joined back to the
  codes took 9.8 s against 6.1 s on DuckDB, 1M rows, depth 10);
- per level one ``GROUP BY`` sums every (node, feature, code, class) in the form the engine
  runs best (``Engine.HISTOGRAM_FORM``); a node whose sibling was read is its parent's
  histogram less its sibling's (LightGBM's subtraction), so each split reads only its
  smaller child;
- the histogram, a few thousand rows, is scored by the memory plan's scorer
  (``memory.cart_scores``), the tables plan's scoring query in numpy.

Every sum is a whole number, so the engine's histogram is the memory plan's to the last bit
and the tree is the same on every plan and engine (sums of fixed-point weights and of a
regression tree's moments pass 2^53: they are read in two exact parts,
``SqlBackend(wide=True)``). It takes binned CART, classification and regression
(``max_bins``): exact thresholds need a histogram per distinct value.

Binned C4.5 and ID3 take it too (``LevelScanC45Stages``), on the tables plan's level rows and
partition, which spread a row of unknown value over the branches with fractional weights:
their histogram statement is read into numpy rather than stored and scored by the memory
plan's scorer (``memory.c45_scores``), which also counts the chosen tests' branches, so no
scoring query runs (benchmarks/README.md has the figures).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sqlglot import exp

from .. import queries as q
from ..algorithm_registry import C45, CART, CART_REGRESSION, ID3
from ..dataset import Feature
from ..engines.select_plan import TABLES
from ..grower import RouteRow, Strategy, TestRow
from ..learner.backends import Route, SqlBackend, Start, joined_limbs, limbs
from ..learner.rows import Sampling
from ..learner.splitter import FeatureCodes, Layout
from ..parallel import engine_workers
from ..queries import UNKNOWN_KEY
from ..sqlexpr import alias, num
from ..tree import CONTINUOUS
from .c45.strategy import score_options
from .cart.regression import RegressionStrategy
from .cart.strategy import INFINITE_THRESHOLD, CARTStrategy
from .cart.subsets import orders
from .memory import MEMORY_MAX_CELLS, SCAN, c45_scores, cart_scores
from .memory.c45 import ENGINE_ONLY_MAX_CELLS, DeepC45Strategy
from .memory.level import Groups, Level, as_weight

ROWS_PER_HISTOGRAM_ROW = 2
"""C4.5's levels move to memory once a level's histogram has at least half as many rows as
the level (a histogram row is read as dearly as a row of codes, and the next level's
histogram is larger): at 200,000 rows of the benchmark table (64 bins) its deep levels'
histograms had 2-5 rows per row."""

KEPT_PARENT_BYTES = 256 * 2**20
"""Parents' histograms kept for the next level's subtraction, at most; past it both children
of a split are read."""


@dataclass
class _Rows:
    """What the scorer reads of a level besides its histogram: how many rows it has (to
    choose whether to score features in threads)."""

    node: range


@dataclass
class ScanHistogram:
    """A level's histogram from the engine as the memory plan's scorer reads one: per
    feature, groups of known codes sorted by (node, value); per node its totals.

    ``node``, ``code``: the long rows' keys (sorted), ``sums``: their row count then each
    class's weight, or a regression tree's moments (``moments``), whole numbers (counts, or
    counts of ``2**-bits``)."""

    node: np.ndarray
    code: np.ndarray
    sums: np.ndarray
    layout: Layout
    position: dict[int, int]
    n_classes: int
    bits: int | None
    moments: bool = False
    poisson: bool = False

    def __post_init__(self) -> None:
        _, n, _ = self.totals()
        self.level = _Rows(range(int(n.sum())))

    def _feature_rows(self, position: int) -> np.ndarray:
        offset = self.layout.offsets[position]
        size = self.layout.features[position].n_codes
        return np.flatnonzero((self.code >= offset) & (self.code < offset + size))

    def totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node (ascending): its id, row count and class sums (every row has one code of
        the first feature, its unknown code included)."""
        if not len(self.layout.features):
            return (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                    np.zeros((0, self.n_classes), dtype=np.int64))
        rows = self._feature_rows(0)
        ids, at = np.unique(self.node[rows], return_inverse=True)
        summed = np.zeros((len(ids), self.sums.shape[1]), dtype=np.int64)
        np.add.at(summed, at, self.sums[rows])
        return ids, summed[:, 0], summed[:, 1:]

    def groups(self, f: Feature) -> Groups:
        position = self.position[f.index]
        offset = self.layout.offsets[position]
        rows = self._feature_rows(position)
        rows = rows[(self.code[rows] > offset) & (self.sums[rows, 0] > 0)]
        return Groups(node=self.node[rows], v=(self.code[rows] - offset - 1).astype(np.float64),
                      n=self.sums[rows, 0], sums=self.sums[rows, 1:])

    def node_chunks(self) -> list[np.ndarray | None]:
        return [None]

    exact = False
    """C4.5's scorer bands a large node's rows and counts branches a block of rows at a time
    where sums are exact; a histogram has no rows to band or block."""

    def ranks(self, f: Feature) -> Feature:
        """C4.5's scorer asks a feature's ranks, then its groups (``grouped``): here the
        feature itself stands for them."""
        return f

    def grouped(self, f: Feature, rows: None = None) -> Groups:
        return self.groups(f)

    def branch_counts(self, tests: list[TestRow]) -> dict[int, dict[int, list[float]]]:
        """``c45_scores.branch_counts`` from the histogram: per tested node, the class weights
        of each key its rows reach (0/1 at or below and above a cut's bin, a nominal value's
        code; ``UNKNOWN_KEY`` for unknown values), in ascending order with the unknown last."""
        out: dict[int, dict[int, list[float]]] = {node: {} for node, _, _ in tests}
        if not tests:
            return out
        tested = np.array([node for node, _, _ in tests], dtype=np.int64)
        by_node = np.argsort(tested)
        tested = tested[by_node]
        position = np.array([self.position[i] for _, i, _ in tests], dtype=np.int64)[by_node]
        offset = np.array(self.layout.offsets, dtype=np.int64)[position]
        size = np.array([f.n_codes for f in self.layout.features], dtype=np.int64)[position]
        cut = np.array([np.nan if t is None else t for _, _, t in tests])[by_node]
        # each histogram row of a tested node's tested feature, and the key of its code
        at = np.searchsorted(tested, self.node).clip(0, len(tested) - 1)
        mine = tested[at] == self.node
        mine &= (self.code >= offset[at]) & (self.code < offset[at] + size[at])
        rows = np.flatnonzero(mine)
        at = at[rows]
        value = self.code[rows] - offset[at] - 1  # -1: unknown
        key = np.where(np.isnan(cut[at]), value, np.where(value <= cut[at], 0, 1))
        key = np.where(value < 0, UNKNOWN_KEY, key)
        # unknown last among a node's keys, the others ascending
        order = np.lexsort((key, key == UNKNOWN_KEY, at))
        at, key, sums = at[order], key[order], self.sums[rows[order]]
        first = np.flatnonzero(np.r_[True, (at[1:] != at[:-1]) | (key[1:] != key[:-1])])
        summed = np.add.reduceat(sums, first, axis=0) if len(first) else sums[:0]
        weights = as_weight(summed[:, 1:], self.bits).tolist()
        for g, w, n in zip(first.tolist(), weights, summed[:, 0].tolist(), strict=True):
            if n > 0:
                out[int(tested[at[g]])][int(key[g])] = w
        return out

    def of_node(self, node: int) -> np.ndarray:
        """One node's histogram as a dense (codes x sums) array."""
        lo, hi = np.searchsorted(self.node, [node, node + 1])
        out = np.zeros((self.layout.width, self.sums.shape[1]), dtype=np.int64)
        out[self.code[lo:hi]] = self.sums[lo:hi]
        return out


def with_derived(hist: ScanHistogram, kept: dict[int, np.ndarray],
                 derived: dict[int, tuple[int, tuple[int, ...]]]) -> ScanHistogram:
    """``hist`` with the children that were not read: each its parent's histogram (``kept``,
    dense) less its siblings' (``derived``: child -> (parent, siblings), every sibling read)."""
    children = sorted(derived)
    dense = np.stack([kept[derived[c][0]][: hist.layout.width] for c in children])
    # every derived child at once: its parent's dense histogram (the last level reads the
    # first feature only) less its siblings' long rows, scattered by (child, code)
    # a child's k-th siblings at once: within such a round no (derived child, code) repeats,
    # so a plain subtraction takes them all (``np.subtract.at`` took 0.07 s at level 8 of the
    # 1M-row benchmark)
    for k in range(max(len(derived[c][1]) for c in children)):
        sibling_of = {derived[c][1][k]: i for i, c in enumerate(children)
                      if len(derived[c][1]) > k}
        siblings = np.array(sorted(sibling_of), dtype=np.int64)
        at_sibling = np.array([sibling_of[s] for s in siblings.tolist()], dtype=np.int64)
        read = np.isin(hist.node, siblings)
        at = at_sibling[np.searchsorted(siblings, hist.node[read])]
        dense[at, hist.code[read]] -= hist.sums[read]
    child_at, codes = np.nonzero(dense[:, :, 0] > 0)
    node = np.concatenate([hist.node, np.array(children, dtype=np.int64)[child_at]])
    code = np.concatenate([hist.code, codes.astype(np.int64)])
    sums = np.concatenate([hist.sums, dense[child_at, codes]])
    order = np.lexsort((code, node))
    return ScanHistogram(node[order], code[order], sums[order], hist.layout, hist.position,
                         hist.n_classes, hist.bits, hist.moments, hist.poisson)


class _ScanStages:
    """What the level scan's stages share: the plan's name, and the layout of the codes."""

    plan_name = SCAN
    plan_reason = "asked for"
    data: Any
    bins: dict[int, list[float]] | None
    hist_bits: int | None
    n_classes: int

    _layout: Layout | None = None
    _position: dict[int, int]

    @property
    def workers(self) -> int | None:
        return engine_workers(self.data.engine)

    def _codes_layout(self) -> Layout:
        """Each feature's codes (0 for unknown, then a bin or a value each), in source order."""
        if self._layout is None:
            bins = self.bins or {}
            features = self.data.features
            self._position = {f.index: i for i, f in enumerate(features)}
            self._layout = Layout(tuple(
                FeatureCodes(i, f.kind, 1 + (len(bins[f.index]) if f.kind == CONTINUOUS
                                             else len(f.values)))
                for i, f in enumerate(features)))
        return self._layout


class LevelScanStages(_ScanStages):
    """CART's stages on the level scan (mixed in before the strategy): the codes and pairs in
    the engine, the histogram read into numpy and scored there."""

    build_level0: Any
    backend: SqlBackend | None = None
    _layout: Layout
    _kept: dict[int, np.ndarray]
    _derived: dict[int, tuple[int, tuple[int, ...]]]

    @property
    def _moments(self) -> bool:
        """Whether the histogram sums a regression tree's moments, not class weights."""
        return not self.data.classes

    def materialize_level0(self) -> Any:
        engine = self.data.engine
        level0 = self.build_level0()
        features = self.data.features
        self._layout = self._codes_layout()
        w = exp.column("w", quoted=True)
        # the first level's rows as codes, never stored apart nor numbered: the pairs carry
        # them (no statement joins them back)
        count = exp.column("cnt", table="a", quoted=True)
        stats: list[exp.Expression] = [count]
        columns: list[exp.Expression] = []
        if self._moments:  # each row's moments in fixed point (``RegressionStrategy``)
            for j, term in enumerate(self.moment_terms()):
                columns.append(alias(term, f"v_m{j}"))
                stats.append(count.copy() * exp.column(f"v_m{j}", table="a", quoted=True))
        else:
            columns.append(alias(exp.column("y", quoted=True), "y"))
        if self.hist_bits is not None and not self._moments:
            fixed = exp.func("FLOOR", exp.paren(w * num(float(2**self.hist_bits))) + num(0.5))
            columns.append(alias(exp.cast(fixed, "BIGINT"), "v_w"))
            stats.append(count.copy() * exp.column("v_w", table="a", quoted=True))
        for i, f in enumerate(features):
            code = exp.func("COALESCE", exp.column(f.column, quoted=True) + num(1), num(0))
            # narrow rows: every level rewrites them (PostgreSQL writes each tuple whole)
            narrow = self._layout.features[i].n_codes < 2**15
            columns.append(alias(exp.cast(code, "SMALLINT" if narrow else "INT"), f"c{i}"))
        codes = exp.select(*columns).from_(level0.subquery("l0", copy=False), copy=False)
        self.backend = SqlBackend(engine, codes, self._layout, stats, np.ones(len(stats)),
                                  n_classes=0 if self._moments else self.n_classes,
                                  carried=[c.alias for c in columns], row_ids=False,
                                  wide=self.hist_bits is not None)
        self.backend.start([Start(0, None)], Sampling(bootstrap=False, fraction=1.0))
        self._kept, self._derived = {}, {}
        return self.backend.pairs

    def materialize_histogram(self, level: Any, features: list[Feature], nodes: int
                              ) -> ScanHistogram:
        assert self.backend is not None
        node, code, sums = self.backend.long_histograms(None if features else 1)
        hist = ScanHistogram(node, code, sums, self._layout if features else Layout(()),
                             self._position, self.n_classes, self.hist_bits, self._moments,
                             self.criterion == "poisson")  # type: ignore[attr-defined]
        if not features:  # the last level: its counts only (the first feature's codes)
            hist.layout = Layout(self._layout.features[:1])
        if self._derived:
            hist = with_derived(hist, self._kept, self._derived)
            self._kept, self._derived = {}, {}
        return hist

    def read_counts(self, engine: Any, hist: ScanHistogram) -> dict[int, list[float]]:
        nodes, n, sums = hist.totals()
        weights = as_weight(sums, self.hist_bits)
        return self.take_counts(  # type: ignore[attr-defined]
            (int(i), int(c), *row) for i, c, row in zip(nodes.tolist(), n.tolist(),
                                                        weights.tolist(), strict=True))

    def score_rows(self, hist: ScanHistogram, features: list[Feature]) -> list[Any]:
        r = self.resolved  # type: ignore[attr-defined]
        rules = cart_scores.Rules(self.criterion, r.min_samples_leaf,  # type: ignore[attr-defined]
                                  r.min_weight_leaf, self.tie_tolerance)  # type: ignore[attr-defined]
        return cart_scores.score(hist, features, hist.totals(), rules, self.workers)  # type: ignore[arg-type]

    def nominal_ranks(self, engine: Any, hist: ScanHistogram, pairs: list[tuple[int, int]]
                      ) -> dict[tuple[int, int], list[tuple[int, int, int, int]]]:
        by = self.nominal_orders  # type: ignore[attr-defined]
        features = {f.index: f for f in self.data.features}
        return cart_scores.nominal_ranks(hist, features, pairs,  # type: ignore[arg-type]
                                         orders(self.n_classes) if by is None else by)

    def materialize_partition(self, level: Any, tests: list[TestRow], routes: list[RouteRow],
                              ordered: bool) -> Any:
        assert self.backend is not None
        moves = self._routes(tests, routes)
        self.backend.route(moves)
        return self.backend.pairs

    def _routes(self, tests: list[TestRow], routes: list[RouteRow]) -> list[Route]:
        """The grower's tests and keyed routes as the backend's two-way routes, each split's
        smaller child read and the larger derived where its parent's histogram is kept."""
        keys: dict[int, dict[int, list[int]]] = {}
        for node, key, child, _factor in routes:
            keys.setdefault(node, {}).setdefault(child, []).append(int(key))
        hist = self._last
        budget = KEPT_PARENT_BYTES
        out = []
        for node, index, threshold in tests:
            children = keys.get(node)
            if not children:
                continue
            position = self._position[index]
            codes = self._layout.features[position].n_codes
            unknown = next((c for c, k in children.items() if UNKNOWN_KEY in k), None)
            if threshold is not None:
                by_key = {k: c for c, ks in children.items() for k in ks if k != UNKNOWN_KEY}
                left, right = by_key.get(0, -1), by_key.get(1, -1)
                upto = codes - 1 if threshold >= INFINITE_THRESHOLD else int(threshold) + 1
                left_codes: tuple[int, ...] = ()
            else:
                named = sorted(children)
                left = named[0]
                right = named[1] if len(named) > 1 else -1
                upto = 0
                left_codes = tuple(k + 1 for k in children[left] if k != UNKNOWN_KEY)
            missing_left = unknown == left if unknown is not None else left == -1
            scan_left = scan_right = True
            if left >= 0 and right >= 0 and hist is not None:
                parent = hist.of_node(node)
                if parent.nbytes <= budget:
                    offset = self._layout.offsets[position]
                    block = parent[offset: offset + codes, 0]
                    if threshold is not None:
                        goes_left = np.arange(codes) <= upto
                    else:
                        goes_left = np.isin(np.arange(codes), left_codes)
                    goes_left[0] = missing_left
                    rows_left = float(block[goes_left].sum())
                    small_left = rows_left <= float(block.sum()) - rows_left
                    scan_left, scan_right = small_left, not small_left
                    self._kept[node] = parent
                    budget -= parent.nbytes
                    if small_left:
                        self._derived[right] = (node, (left,))
                    else:
                        self._derived[left] = (node, (right,))
            out.append(Route(node=node, feature=position, missing_left=missing_left, upto=upto,
                             left_codes=left_codes, nominal=threshold is None, left=left,
                             right=right, scan_left=scan_left, scan_right=scan_right))
        return out

    _last: ScanHistogram | None = None

    def on_histogram(self, engine: Any, hist: Any, depth: int) -> None:
        self._last = hist
        super().on_histogram(engine, hist, depth)  # type: ignore[misc]

    def _measure_density(self, engine: Any, hist: Any) -> None:
        """No density probe: it chooses how SQL histograms group rows."""

    def drop(self, table: Any) -> None:
        """Levels and histograms are the backend's or numpy's: nothing to drop."""

    def close(self, engine: Any) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None
        self._last = None
        super().close(engine)  # type: ignore[misc]


class LevelScanC45Stages(_ScanStages):
    """C4.5's and ID3's stages on the level scan (mixed in before the strategy).

    The level's rows stay the tables plan's (node, weight, class, a bin index or value code
    per feature), partitioned by its statement, which spreads a row of unknown value over
    the branches with a share of its weight each. Its histogram statement is read into numpy
    rather than stored (``_read_histogram``), where the memory plan's scorer
    (``c45_scores``) scores it and the chosen tests' branches are counted: no scoring query,
    no histogram table. Sums are whole numbers (fixed point once weights are fractional), so
    the histogram is the memory plan's to the last bit."""

    entropy_bits: int
    options: Any
    weight_bits: Any
    summed_by_class: Any
    _last: ScanHistogram | None = None
    _kept: dict[int, np.ndarray] | None = None
    _derived: dict[int, tuple[int, tuple[int, ...]]] | None = None
    branch_counts: dict[int, dict[int, list[float]]]

    def materialize_histogram(self, level: Any, features: list[Feature], nodes: int
                              ) -> Any:
        if isinstance(level, Level):  # the deep levels, in memory
            return super().materialize_histogram(level, features, nodes)  # type: ignore[misc]
        self.hist_bits = bits = self.weight_bits()
        layout = self._codes_layout()
        derived = self._derived or {}
        rows: exp.Expression = level
        if derived:  # their parents' histograms less their siblings': not read
            rows = exp.select(exp.Star()).from_(level.copy()).where(exp.Not(this=exp.In(
                this=exp.column("node", quoted=True),
                expressions=[num(c) for c in sorted(derived)]))).subquery("v")
        node, code, sums = self._read_histogram(rows, features, nodes, bits, layout)
        hist = ScanHistogram(node, code, sums, layout if features else Layout(()),
                             self._position, self.n_classes, bits)
        if not features:  # the last level: its counts only (the first feature's codes)
            hist.layout = Layout(layout.features[:1])
        if derived:
            assert self._kept is not None
            kept = self._kept
            if bits is not None and self._last is not None and self._last.bits is None:
                # the parents' weights were whole numbers: the same in fixed point
                for parent in kept.values():
                    parent[:, 1:] <<= bits
            hist = with_derived(hist, kept, derived)
        self._kept, self._derived, self._last = None, None, hist
        return hist

    def _read_histogram(self, rows: exp.Expression, features: list[Feature], nodes: int,
                        bits: int | None, layout: Layout
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tables plan's histogram statement (``queries.build_histogram``, row counts
        included), read rather than stored, as long rows (node, code, [rows, class sums...])
        sorted by (node, code). Fixed-point sums may pass 2^53: each is read as two exact
        parts (``backends.limbs``). With no feature (the last level) the node totals stand as the
        first feature's unknown code."""
        engine = self.data.engine
        classes = q.class_columns(self.n_classes)
        query = q.build_histogram(
            rows, features, self.n_classes, self.summed_by_class(features, nodes), (), bits,
            counts=True, one_pass=engine.ONE_PASS_HISTOGRAM, lookup=engine.VECTORIZED)
        h = "h"
        parts: list[exp.Expression] = []
        for c in classes:
            total = exp.column(c, table=h, quoted=True)
            # fixed-point sums may pass 2^53: read in two exact parts
            parts += [total] if bits is None else limbs(total, c)
        keys = [exp.column(k, table=h, quoted=True) for k in ("node", "attr", "v", "n")]
        query = exp.select(*keys, *parts).from_(query.subquery(h))
        batches = list(engine.float_batches(query))
        width = 1 + self.n_classes
        if not batches:
            return (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                    np.zeros((0, width), dtype=np.int64))
        cols = [np.concatenate([b[i] for b in batches]) for i in range(len(batches[0]))]
        node, attr, v = cols[0].astype(np.int64), cols[1].astype(np.int64), cols[2]
        values = np.nan_to_num(np.stack(cols[3:], axis=1), nan=0.0).astype(np.int64)
        if bits is not None:
            values = joined_limbs(values)
        # every feature's rows, or with none the node totals (as the first feature's)
        keep = attr >= 0 if features else attr < 0
        node, attr, v, values = node[keep], attr[keep], v[keep], values[keep]
        offsets = np.array(layout.offsets, dtype=np.int64)
        position = np.zeros(max(self._position, default=0) + 1, dtype=np.int64)
        for index, pos in self._position.items():
            position[index] = pos
        at = offsets[position[attr.clip(0)]]
        code = at + np.where(np.isnan(v), 0, np.nan_to_num(v) + 1).astype(np.int64)
        order = np.lexsort((code, node))
        return node[order], code[order], values[order]

    def materialize_partition(self, level: Any, tests: list[TestRow], routes: list[RouteRow],
                              ordered: bool) -> Any:
        if isinstance(level, Level):
            return super().materialize_partition(level, tests, routes, ordered)  # type: ignore[misc]
        self._plan_subtraction(tests, routes)
        table = super().materialize_partition(level, tests, routes, ordered)  # type: ignore[misc]
        if isinstance(table, Level):
            self._kept, self._derived = None, None
        return table

    def _few_rows(self, routes: list[RouteRow]) -> bool:
        """Whether the next levels grow in memory: once reading the histogram costs as much
        as reading the rows (its rows were at least ``ROWS_PER_HISTOGRAM_ROW`` of the
        level's), where the rows fit the memory plan's bound (``MEMORY_MAX_CELLS``); never
        for data that is small from the start (``ENGINE_ONLY_MAX_CELLS``)."""
        data, hist = self.data, self._last
        cells = data.n_rows * max(len(data.features), 1)
        if hist is None or cells <= ENGINE_ONLY_MAX_CELLS or cells > MEMORY_MAX_CELLS:
            return False
        return len(hist.node) * ROWS_PER_HISTOGRAM_ROW >= hist.level.node.stop

    def _plan_subtraction(self, tests: list[TestRow], routes: list[RouteRow]) -> None:
        """Which children the next level derives instead of reading: a split's child of
        most rows, where every row of its node went whole to one child that grows on (no
        unknown value spread over branches, no branch a leaf), its parent's histogram kept
        within ``KEPT_PARENT_BYTES``."""
        hist = self._last
        if hist is None:
            return
        children: dict[int, dict[int, int]] = {}  # node -> key -> child
        spread: set[int] = set()  # nodes whose unknown values, if any, go to many branches
        for node, key, child, factor in routes:
            if int(key) == UNKNOWN_KEY and factor != 1.0:
                spread.add(node)
            children.setdefault(node, {})[int(key)] = child
        kept: dict[int, np.ndarray] = {}
        derived: dict[int, tuple[int, tuple[int, ...]]] = {}
        budget = KEPT_PARENT_BYTES
        for node, index, threshold in tests:
            by_key = children.get(node, {})
            reached = self.branch_counts.get(node, {})
            if (node in spread and UNKNOWN_KEY in reached) or any(
                    k not in by_key for k in reached):
                continue
            kids = sorted({by_key[k] for k in reached})
            if len(kids) < 2:
                continue
            parent = hist.of_node(node)
            if parent.nbytes > budget:
                continue
            budget -= parent.nbytes
            position = self._position[index]
            layout = self._codes_layout()
            offset = layout.offsets[position]
            size = layout.features[position].n_codes
            block = parent[offset:offset + size, 0]
            value = np.arange(size) - 1  # a code's bin index or value code; -1: unknown
            key = value if threshold is None else np.where(value <= threshold, 0, 1)
            key = np.where(value < 0, UNKNOWN_KEY, key)
            rows = {kid: 0 for kid in kids}
            for k, n in zip(key.tolist(), block.tolist(), strict=True):
                if n > 0:
                    rows[by_key[k]] += n
            largest = max(kids, key=lambda kid: (rows[kid], -kid))
            kept[node] = parent
            derived[largest] = (node, tuple(kid for kid in kids if kid != largest))
        self._kept, self._derived = kept, derived

    def read_counts(self, engine: Any, hist: Any) -> dict[int, list[float]]:
        if not isinstance(hist, ScanHistogram):
            return super().read_counts(engine, hist)  # type: ignore[misc,no-any-return]
        nodes, _, sums = hist.totals()
        return dict(zip(nodes.tolist(), as_weight(sums, self.hist_bits).tolist(), strict=True))

    def score_rows(self, hist: Any, features: list[Feature]) -> list[Any]:
        if not isinstance(hist, ScanHistogram):
            return super().score_rows(hist, features)  # type: ignore[misc,no-any-return]
        options = replace(score_options(self.options), fractional=self.hist_bits is not None,
                          bits=self.hist_bits, entropy_bits=self.entropy_bits)
        return c45_scores.score(hist, features, options, self.workers)  # type: ignore[arg-type]

    def read_branch_counts(self, engine: Any, hist: Any, tests: list[TestRow]
                           ) -> dict[int, dict[int, list[float]]]:
        if not isinstance(hist, ScanHistogram):
            return super().read_branch_counts(engine, hist, tests)  # type: ignore[misc,no-any-return]
        return hist.branch_counts(tests)

    def drop(self, table: Any) -> None:
        """A histogram read into numpy is nothing to drop."""
        if not isinstance(table, ScanHistogram):
            super().drop(table)  # type: ignore[misc]


class LevelScanC45Strategy(LevelScanC45Stages, DeepC45Strategy):
    """C4.5 and ID3 on the level scan, the deep levels in memory (``_few_rows``)."""

    plan_name = SCAN


class LevelScanCARTStrategy(LevelScanStages, CARTStrategy):
    """CART classification on the level scan."""


class LevelScanRegressionStrategy(LevelScanStages, RegressionStrategy):
    """CART regression on the level scan."""


SCAN_STRATEGIES: dict[str, type[Strategy]] = {
    CART: LevelScanCARTStrategy,
    CART_REGRESSION: LevelScanRegressionStrategy,
    C45: LevelScanC45Strategy,
    ID3: LevelScanC45Strategy,
}
"""Algorithm name (``GrowOptions.strategy_name``) -> its strategy on the level scan."""


def scan_strategy(options: Any, data: Any) -> Strategy | None:
    """The level scan's strategy for this tree, or None where it does not apply: it grows
    binned CART (classification and regression) on an engine that stores tables."""
    found = SCAN_STRATEGIES.get(options.strategy_name)
    if found is None or not options.max_bins or data.engine.plan != TABLES:
        return None
    return found(data, options)
