"""Level 0 of the learner: the source's rows as codes and whole-number statistics, stored once.

Codes are the grower's encoding shifted by one so that 0 is the unknown value: a continuous
value's quantile bin (``bin_edges``: every threshold is an observed value) or a nominal value's
place in its sorted domain. Rows are numbered in the order of their codes and statistics, so
that the numbers, and the bootstrap counts hashed from them, depend on the data, not on the
order an engine returns it in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlglot import exp

from .. import queries as q
from ..dataset import Dataset, frame_level0
from ..quantiles import bin_edges
from ..sqlexpr import alias, as_double, num
from ..tree import CONTINUOUS
from .backends import NumpyBackend, Packing, SqlBackend
from .rows import quantize, scale_bits
from .splitter import FeatureCodes, Layout

KNOWN_LEFT = float(np.finfo(np.float64).max)
"""The threshold of a continuous test that sends every known value left."""


@dataclass
class Encoded:
    """The stored codes and what the learner needs to read them back into splits."""

    data: Dataset
    layout: Layout
    edges: dict[int, list[float]]
    table: exp.Table | None
    """The codes table in the engine (None when the rows were encoded in numpy)."""
    stat_sql: list[exp.Expression]
    scale: np.ndarray
    stored: list[str]
    """The codes table's statistic columns (after ``rid`` and ``y``)."""
    centre: float | None = None
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]] | None = None
    """In numpy: (rid, y, codes, stored statistic columns)."""
    weighted: bool = False
    """Whether rows carry weights (a weight column or class weights): ``v_w`` is not 1."""
    packing: Packing | None = None
    """How the codes table packs the codes into words beside their columns (``Packing``)."""

    @property
    def features(self) -> list[Any]:
        return self.data.features

    def threshold(self, position: int, upto: int) -> float:
        """The value a continuous test ``code <= upto`` compares with: bin ``upto``'s top edge,
        or, when the test takes every bin (every known value left, the unknown ones right),
        the largest double (scikit-learn's +inf; a model file holds finite numbers)."""
        edges = self.edges[self.data.features[position].index]
        return KNOWN_LEFT if upto >= len(edges) else float(edges[upto - 1])

    def tests(self, feature: list[int], upto: list[int], left_codes: list[tuple[int, ...]]
              ) -> tuple[np.ndarray, dict[int, tuple[Any, ...]]]:
        """A grown tree's tests in the data's terms: each continuous test's threshold (0 at
        leaves and nominal tests) and each nominal test's values that go left."""
        threshold = np.zeros(len(feature))
        categories: dict[int, tuple[Any, ...]] = {}
        for i, pos in enumerate(feature):
            if pos < 0:
                continue
            if self.data.features[pos].kind == CONTINUOUS:
                threshold[i] = self.threshold(pos, upto[i])
            else:
                categories[i] = self.values(pos, left_codes[i])
        return threshold, categories

    def values(self, position: int, codes: tuple[int, ...]) -> tuple[Any, ...]:
        domain = self.data.features[position].values
        return tuple(domain[c - 1] for c in codes)

    def sql_backend(self) -> SqlBackend:
        assert self.table is not None, "encoded in numpy"
        return SqlBackend(self.data.engine, self.table, self.layout, self.stat_sql, self.scale,
                          n_classes=len(self.data.classes), packing=self.packing)

    def numpy_backend(self) -> NumpyBackend:
        """The same codes and statistics as arrays (read out of the codes table, or as
        encoded in numpy)."""
        if self.arrays is not None:
            rid, y, codes, stored = self.arrays
        else:
            assert self.table is not None
            names = ["rid", "y", *self.stored, *[f"c{i}" for i in range(len(self.features))]]
            query = exp.select(*[exp.column(n, quoted=True) for n in names]).from_(
                self.table.copy())
            cols = _read(self.data.engine, query, len(names))
            rid, y = cols[0].astype(np.int64), cols[1]
            stored = cols[2 : 2 + len(self.stored)]
            codes = _stack(cols[2 + len(self.stored):], len(rid))
        values = [np.ones(len(rid))]
        if self.data.classes:
            (wq,) = stored
            for k in range(len(self.data.classes)):
                values.append(np.where(y == k, wq, 0.0))
        else:
            values.extend(stored)
        return NumpyBackend(codes, np.stack(values, axis=1), rid, self.layout, self.scale, y=y)


def encode(
    data: Dataset,
    max_bins: int,
    *,
    class_weight: list[float] | None = None,
    numbered: bool = True,
    in_memory: bool = False,
    centred: bool = True,
    partitioned: bool = False,
) -> Encoded:
    """Store the codes table (one statement) and describe its layout and statistics; or,
    ``in_memory``, read the rows once and encode them in numpy, to the same codes, numbers and
    statistics (small data: the SQL of 255 bins per column costs more than the rows).

    ``numbered``: number rows in the order of their codes (a sort; forests hash the numbers),
    else in any order. ``centred``: a target's ``y`` less its mean (the sums of squares of
    the criteria keep their precision), else the target itself (boosting's losses).
    ``partitioned``: the rows stored hash-partitioned by their number where the engine can
    (``Engine.PARTITIONS_BY_HINT``), for statements that join rows to the codes on it.
    """
    engine = data.engine
    edges = bin_edges(data, max_bins) or {}
    regression = not data.classes
    centre = data.target_mean if regression and centred else (0.0 if regression else None)
    level0 = q.build_level0(data, None if in_memory else edges, class_weight=class_weight,
                            centre=centre)
    w = exp.column("w", quoted=True)
    y = exp.column("y", quoted=True)
    n = data.n_rows
    weight_bound = _weight_bound(data, class_weight)
    stats: list[tuple[str, exp.Expression, float]] = []
    if regression:
        spread = max(abs((data.target_max or 0.0) - (centre or 0.0)),
                     abs((data.target_min or 0.0) - (centre or 0.0)), 1e-300)
        stats = [("v_w", w.copy(), weight_bound),
                 ("v_wy", w.copy() * y.copy(), weight_bound * spread),
                 ("v_wyy", w.copy() * y.copy() * y.copy(), weight_bound * spread * spread)]
    else:
        stats = [("v_w", w.copy(), weight_bound)]
    columns: list[exp.Expression] = [alias(y.copy(), "y")]
    scale = [1.0]
    unit_weight = not data.weight and class_weight is None
    for name, value, bound in stats:
        bits = scale_bits(bound, n)
        if unit_weight and name == "v_w":
            bits = 0
            columns.append(alias(as_double(num(1)), name))
        else:
            columns.append(alias(exp.func("FLOOR", exp.paren(value * num(float(2**bits)))
                                          + num(0.5)), name))
        scale.append(2.0**-bits)
    codes = [f"c{i}" for i in range(len(data.features))]
    feats = tuple(
        FeatureCodes(i, f.kind, 1 + (len(edges.get(f.index, [])) if f.kind == CONTINUOUS
                                    else len(f.values)))
        for i, f in enumerate(data.features)
    )
    for f, name, fc in zip(data.features, codes, feats):
        code = exp.func("COALESCE", exp.column(f.column, quoted=True) + num(1), num(0))
        # narrow: a forest's pairs carry the codes, a row per drawn row and tree
        columns.append(alias(exp.cast(code, "SMALLINT" if fc.n_codes < 2**15 else "INT"),
                             name))
    table = arrays = packing = None
    if in_memory:
        arrays = _encode_arrays(data, level0, edges, stats, scale, unit_weight)
    else:
        inner = exp.select(*columns).from_(level0.subquery("l0", copy=False), copy=False)
        order = [exp.column(c, quoted=True) for c in [*codes, "y", *[s[0] for s in stats]]]
        over = exp.Window(this=exp.RowNumber(), order=exp.Order(
            expressions=[exp.Ordered(this=o) for o in order]) if numbered else None)
        # the codes also packed into words: a statement that reads one code per row, of a
        # feature that varies by row (a forest's), shifts one word instead of choosing
        # among every feature's column
        widest = max((f.n_codes for f in feats), default=1)
        packing = Packing(len(feats), max(1, (widest - 1).bit_length()))
        words = packing.packed([exp.column(c, table="e", quoted=True) for c in codes])
        query = exp.select(alias(over, "rid"), exp.Star(), *words).from_(
            inner.subquery("e", copy=False), copy=False)
        if partitioned and engine.PARTITIONS_BY_HINT:
            query = exp.select(exp.Star()).from_(query.subquery("n", copy=False), copy=False)
            query.set("hint", exp.Hint(expressions=[exp.Anonymous(
                this="REPARTITION", expressions=[exp.column("rid", quoted=True)])]))
        table = engine.materialize("codes", query)
    a, c = "a", "c"
    cnt = exp.column("cnt", table=a, quoted=True)
    if regression:
        stat_sql = [cnt.copy()] + [cnt.copy() * exp.column(s[0], table=c, quoted=True)
                                   for s in stats]
        full_scale = np.array(scale)
    else:
        stat_sql = [cnt.copy()]
        if not unit_weight:  # else a class's weight is its row count
            stat_sql.append(cnt.copy() * exp.column("v_w", table=c, quoted=True))
        full_scale = np.array([1.0] + [scale[1]] * len(data.classes))
    return Encoded(data=data, layout=Layout(feats), edges=edges, table=table,
                   stat_sql=stat_sql, scale=full_scale, stored=[s[0] for s in stats],
                   centre=centre, arrays=arrays, weighted=not unit_weight, packing=packing)


def _read(engine: Any, query: exp.Expression, n_columns: int) -> list[np.ndarray]:
    parts = list(engine.float_batches(query))
    return [np.concatenate([p[i] for p in parts]) if parts else np.zeros(0)
            for i in range(n_columns)]


def _stack(columns: list[np.ndarray], n_rows: int) -> np.ndarray:
    if not columns:
        return np.zeros((n_rows, 0), dtype=np.int32)
    return np.stack(columns, axis=1).astype(np.int32)


def _encode_arrays(
    data: Dataset, level0: exp.Expression, edges: dict[int, list[float]],
    stats: list[tuple[str, exp.Expression, float]], scale: list[float], unit_weight: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """The SQL encoding's codes, statistics and row numbers, computed in numpy from level 0's
    rows: a bin is the first edge at or above the value (``bin_value``), a statistic
    ``floor(x * 2**bits + 0.5)`` of the same doubles, the numbers the order of the codes."""
    cols = frame_level0(data, level0) or _read(data.engine, level0, 3 + len(data.features))
    w, y = cols[1], cols[2]
    codes = []
    for f, values in zip(data.features, cols[3:]):
        known = ~np.isnan(values)
        code = np.zeros(len(values), dtype=np.int64)
        if f.kind == CONTINUOUS and f.index in edges:
            at = np.searchsorted(np.asarray(edges[f.index]), values[known], side="left")
            code[known] = np.minimum(at, len(edges[f.index]) - 1) + 1
        else:
            code[known] = values[known].astype(np.int64) + 1
        codes.append(code)
    stored = []
    for (name, _, _), factor in zip(stats, scale[1:]):
        if name == "v_w" and unit_weight:
            stored.append(np.ones(len(w)))
            continue
        value = {"v_w": w, "v_wy": w * y, "v_wyy": w * y * y}[name]
        stored.append(np.floor(value * (1.0 / factor) + 0.5))
    keys = [*codes, y, *stored]
    order = np.lexsort(keys[::-1]) if keys else np.arange(len(w))
    rid = np.empty(len(w), dtype=np.int64)
    rid[order] = np.arange(1, len(w) + 1)
    return rid, y, _stack(codes, len(w)), stored


def _weight_bound(data: Dataset, class_weight: list[float] | None) -> float:
    """The largest weight a row can carry (one query when the source has a weight column)."""
    bound = 1.0
    if data.weight:
        (row,) = data.engine.execute(exp.select(exp.func(
            "MAX", exp.Abs(this=as_double(exp.column(data.weight, quoted=True))))).from_(
            data.relation.copy()))
        bound = float(row[0] or 1.0)
    if class_weight:
        bound *= max(class_weight)
    return bound


__all__ = ["Encoded", "encode", "quantize"]
