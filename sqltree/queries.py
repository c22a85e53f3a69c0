"""The shared stages of training, as sqlglot expressions: the same for every algorithm.

Training works on *level tables* with one row per (training row, node) pair:

    node INT, w DOUBLE, y SMALLINT, f0, f1, ...

``y`` is the class index, ``f<i>`` the value of feature i: a continuous value (DOUBLE; with
``max_bins``, the SMALLINT index of its bin), or the index of a nominal value in the feature's
sorted domain (SMALLINT), so every test compares numbers. A row whose value
is unknown at a split goes down several branches with a fraction of its weight, so a training
row may appear in several nodes of one level.

Per level, the grower runs one histogram query (weighted class counts per node, feature and
value, one column per class), the algorithm's scoring query over the histogram (its criteria,
``sqltree.algorithms``; the running sums of a threshold scan, ``sqltree.running_sums``), and
one partition query that routes the level's rows into the next level by joining a small table
of the chosen splits. This module holds the level table, binning, the histogram, node and
keyed counts, and the partition (the fixed-point arithmetic that makes sums exact is
``sqltree.fixed_point``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Collection, Mapping, Sequence

from sqlglot import exp

from .dataset import LEVEL0, Dataset, Feature, Level0
from .fixed_point import from_fixed, to_fixed
from .sqlexpr import (
    alias,
    as_double,
    case,
    class_columns,
    col,
    literal,
    num,
    paren,
    values_table,
)
from .tree import CONTINUOUS

LN2 = math.log(2.0)


# -- level 0 -----------------------------------------------------------------------------------
def build_level0(
    data: Dataset,
    bins: dict[int, list[float]] | None = None,
    *,
    lookup: bool = False,
    class_weight: Sequence[float] | None = None,
    centre: float | None = None,
    scale: int = 0,
) -> exp.Select:
    """Rows of the source as the root level: node 0, weight, class index, encoded features.

    With ``bins`` (feature index -> sorted bin edges, the last one the feature's maximum), a
    continuous value becomes the index of the smallest edge at or above it, so histograms
    have one row per bin and every threshold is an edge: a value of the training data.
    ``lookup``: bin by list lookups (``bin_by_lookup``; DuckDB) where the edges allow it.
    ``class_weight`` (one factor per class, CART's): each row's weight is multiplied by its
    class's factor, so every count after level 0 is a class-weighted count.
    ``centre`` (a regression target's, ``regression.target_scale``): ``y`` is the DOUBLE
    target less it, times ``2**-scale`` (exact), so that sums of ``w*y*y`` do not lose the
    spread to the size of the values and every moment is below 1 per unit weight
    (``MOMENTS``).
    """
    target = exp.column(data.target, quoted=True)
    # a DOUBLE either way: PostgreSQL types 1.0e0 NUMERIC, and every sum and logarithm after it
    # (a level's C4.5 statement took 8.3 s in NUMERIC at 30,000 rows, 0.4 s in DOUBLE)
    w = as_double(exp.column(data.weight, quoted=True) if data.weight else num(1.0))
    if class_weight is not None:
        factor = case(
            *[(exp.EQ(this=target, expression=literal(c)), as_double(num(float(cw))))
              for c, cw in zip(data.classes, class_weight, strict=True)],
            default=num(1.0),
        )
        w = paren(w * factor) if data.weight else factor
    if centre is None:
        y = exp.cast(case(
            *[(exp.EQ(this=target, expression=literal(c)), num(i))
              for i, c in enumerate(data.classes)],
            default=exp.null(),
        ), "SMALLINT")
    else:
        y = paren(as_double(target.copy()) - num(float(centre)))
        if scale:
            y = paren(y * num(math.ldexp(1.0, -scale)))
    columns: list[exp.Expression] = [
        alias(exp.cast(num(0), "INT"), "node"),
        alias(w, "w"),
        alias(y, "y"),
    ]
    for f in data.features:
        encoded = encode_feature(f)
        if bins and f.index in bins:
            binned = bin_by_lookup(encoded, bins[f.index]) if lookup else None
            encoded = binned if binned is not None else bin_value(encoded, bins[f.index])
        columns.append(alias(encoded, f.column))
    # copy=False: the select holds thousands of nodes in binned mode, and builders deep-copy
    query = exp.select(*columns, copy=False).from_(data.relation.copy(), copy=False)
    query = query.where(target.is_(exp.null()).not_(), copy=False)
    if data.weight:
        query = query.where(
            exp.GT(this=exp.column(data.weight, quoted=True), expression=num(0)),
            copy=False,
        )
    # what the rows are made of, for a reader that makes them from a DataFrame in numpy
    query.meta[LEVEL0] = Level0(bins, class_weight, centre)
    return query


def encode_feature(f: Feature) -> exp.Expression:
    """A continuous value as DOUBLE; a nominal value as its code, the narrowest integer."""
    source = exp.column(f.name, quoted=True)
    if f.kind == CONTINUOUS:
        return as_double(source)
    return exp.cast(
        case(
            *[(exp.EQ(this=source, expression=literal(v)), num(i)) for i, v in enumerate(f.values)],
            default=exp.null(),
        ),
        "SMALLINT" if len(f.values) < 32767 else "INT",
    )


def bin_value(value: exp.Expression, edges: Sequence[float]) -> exp.Expression:
    """The index of the smallest of the sorted ``edges`` at or above ``value`` (NULL stays NULL).

    Two levels of CASE over about sqrt(bins) groups of edges: a value takes about
    2 sqrt(bins) comparisons, in few large vectorised steps (measured on DuckDB at 1M rows
    and 256 bins: 0.24 s per column, against 0.45 s for a bisecting CASE and 0.64 s for one
    flat CASE). Values above the last edge (none: it is the maximum) get the last index. The
    index is a SMALLINT: level tables stay narrow and histograms group small integers.
    """
    size = max(1, math.isqrt(len(edges) - 1) + 1)
    starts = list(range(0, len(edges), size))

    def within(start: int) -> exp.Expression:
        group = edges[start : start + size]
        whens = [
            (exp.LTE(this=value.copy(), expression=num(float(e))), num(start + i))
            for i, e in enumerate(group[:-1])
        ]
        last = num(start + len(group) - 1)
        return case(*whens, default=last, copy=False) if whens else last

    outer = [
        (exp.LTE(this=value.copy(), expression=num(float(edges[min(s + size, len(edges)) - 1]))),
         within(s))
        for s in starts[:-1]
    ]
    # every part is built here for this expression: no copies (a 255-bin column is 500 nodes)
    binned = case(*outer, default=within(starts[-1]), copy=False) if outer else within(
        starts[-1])
    return exp.cast(
        case((value.copy().is_(exp.null()), exp.null()), default=binned, copy=False),
        "SMALLINT", copy=False,
    )


LOOKUP_CELLS = (4, 8, 16)
"""Grid cells per bin edge that ``bin_by_lookup`` tries, finest last."""
LOOKUP_EDGES_PER_CELL = 2
"""At most this many edges in one grid cell, else ``bin_by_lookup`` declines."""


def bin_by_lookup(value: exp.Expression, edges: Sequence[float]) -> exp.Expression | None:
    """``bin_value`` by list lookups on a uniform grid between the first and last edge (DuckDB).

    A value's cell is ``floor((value - lo) * scale)``, clamped to the grid. That is monotone in
    the value, so every edge in an earlier cell is below the value and every edge in a later
    cell above it: the index is the number of edges in earlier cells (one lookup) plus one
    comparison per edge in the value's own cell (one lookup each). The cells of the edges are
    computed here with the same double arithmetic, so the result is exactly ``bin_value``'s.
    A CASE over 256 edges keeps about 300 comparison steps per column in flight; ten such
    columns took 8.4 s at 10M rows on DuckDB, the lookups 2.9 s. None when no grid keeps
    ``LOOKUP_EDGES_PER_CELL`` edges per cell (edges crowded in a small part of the range).
    """
    lo, hi = float(edges[0]), float(edges[-1])
    # a range past the largest double (an infinite edge, or -1.8e308..1.8e308) has no grid
    if len(edges) < 3 or not hi > lo or not math.isfinite(hi - lo):
        return None
    for per_edge in LOOKUP_CELLS:
        cells = per_edge * len(edges)
        scale = cells / (hi - lo)
        within: list[list[float]] = [[] for _ in range(cells)]
        for e in edges:
            within[min(max(math.floor((float(e) - lo) * scale), 0), cells - 1)].append(float(e))
        depth = max(len(w) for w in within)
        if depth <= LOOKUP_EDGES_PER_CELL:
            break
    else:
        return None
    # 1-based list index; NaN and infinity sort above every number in DuckDB: the last cell.
    raw = exp.func("FLOOR", paren(value.copy() - num(lo)) * num(scale))
    cell = exp.cast(
        exp.func("LEAST", exp.func("GREATEST", raw, num(0)), num(cells - 1)), "INT"
    ) + num(1)
    before: list[int] = []
    count = 0
    for w in within:
        before.append(count)
        count += len(w)
    # Built node by node: sqlglot's operators and builders copy their operands. Each list is
    # one typed string (``CAST('[...]' AS DOUBLE[])``, folded once by DuckDB), not thousands
    # of literal nodes: ten columns of 256 bins were 34,000 nodes, 0.4 s to build and render.
    index: exp.Expression = exp.Anonymous(
        this="list_extract", expressions=[_typed_list(before, "INT[]"), cell]
    )
    for k in range(depth):
        # an empty slot compares with the largest double: no finite value is above it
        slot = [w[k] if len(w) > k else sys.float_info.max for w in within]
        looked_up = exp.Anonymous(
            this="list_extract", expressions=[_typed_list(slot, "DOUBLE[]"), cell.copy()]
        )
        above = exp.GT(this=value.copy(), expression=looked_up)
        index = exp.Add(this=index, expression=exp.Cast(this=above, to=exp.DataType.build("INT")))
    index = exp.Anonymous(this="LEAST", expressions=[index, num(len(edges) - 1)])
    unknown = exp.Is(this=value.copy(), expression=exp.null())
    binned = exp.Case(ifs=[exp.If(this=unknown, true=exp.null())], default=index)
    return exp.Cast(this=binned, to=exp.DataType.build("SMALLINT"))


def _typed_list(values: Sequence[float] | Sequence[int], type_: str) -> exp.Expression:
    """A DuckDB list of numbers as one string cast to its type: each float written exactly
    (``repr``, which DuckDB's cast reads back to the same double)."""
    text = "[" + ", ".join(repr(v) for v in values) + "]"
    return exp.Cast(this=exp.Literal.string(text),
                    to=exp.DataType.build(type_, dialect="duckdb"))


# -- histogram ---------------------------------------------------------------------------------
MOMENTS = 3
"""A regression histogram's sums in the class columns' place: ``c0`` = SUM(w),
``c1`` = SUM(w*y), ``c2`` = SUM(w*y*y) of the centred target ``y`` (``build_level0``)."""


def moment_terms() -> list[exp.Expression]:
    """A level row's terms of the regression histogram's sums (``MOMENTS``)."""
    w, y = col("w"), col("y")
    return [w, paren(w.copy() * y), paren(w.copy() * y.copy() * y.copy())]


def class_weights(n_classes: int, bits: int | None = None) -> list[exp.Expression]:
    """A level row's weight in each class column: ``w`` in its own class's, 0 elsewhere;
    with ``bits``, in fixed point (``to_fixed``)."""
    if bits is None:
        return per_class(n_classes, col("w"), num(0.0))
    return per_class(n_classes, to_fixed(col("w"), bits), num(0))


def per_class(
    n_classes: int, value: exp.Expression, zero: exp.Expression
) -> list[exp.Expression]:
    """``value`` in the column of the row's class ``y``, ``zero`` in the others."""
    return [
        case((exp.EQ(this=col("y"), expression=num(i)), value), default=zero)
        for i in range(n_classes)
    ]


def fixed_sum(e: exp.Expression, bits: int | None) -> exp.Expression:
    """``SUM(e)``; with ``bits`` (``e`` in fixed point), as a BIGINT (``FIXED_POINT_HEADROOM``).

    Engines return wider types for sums of BIGINT (DuckDB 128-bit integers, PostgreSQL
    NUMERIC); a BIGINT keeps histogram columns one type in every part and on every engine.
    """
    total_ = exp.func("SUM", e)
    return total_ if bits is None else exp.cast(total_, "BIGINT")


def build_histogram(
    level: exp.Table,
    features: Sequence[Feature],
    n_classes: int,
    by_class: Collection[int] = (),
    rowwise: Collection[int] = (),
    bits: int | None = None,
    *,
    counts: bool = False,
    moments: Sequence[exp.Expression] | None = None,
    one_pass: bool = False,
    search_bins: Mapping[int, Sequence[float]] | None = None,
    lookup: bool = False,
) -> exp.Expression:
    """Weighted class counts per (node, feature, value); ``attr = -1`` rows hold node totals.

    The value is NULL for the weight whose feature value is unknown. For the features in
    ``by_class`` the rows are first summed per (node, value, class), one plain SUM each, and
    the few groups that leaves are turned into class columns: faster when a feature has far
    fewer (node, value) pairs than the level has rows (10M rows, 16 features, 64 nodes:
    1.0 s instead of 1.7 s on DuckDB), slower when it has nearly as many.

    The continuous features in ``rowwise`` are not grouped at all: a row per level row, its
    weight in its class's column. Where nearly every (node, value) pair is a row of its own,
    grouping costs a hash table as large as the level and saves nothing; the histogram is
    then a bag, whose sums per (node, feature) and running sums in value order are the same.
    Only readers that add up rows, and cut only between distinct values, may read it.

    With ``bits`` the class columns are BIGINT counts of ``2**-bits`` (``to_fixed``): sums of
    them are exact in any order, so counts do not change from run to run or engine to engine
    where weights are fractional. Readers take ``bits`` too.

    ``counts`` adds ``n``, the number of level rows per group (a BIGINT after ``v``), for
    rules that count rows rather than weight (CART's ``min_samples_*``, as scikit-learn's).

    ``moments``: a regression histogram, whose ``n_classes`` (``MOMENTS``) columns sum these
    terms of a level row (``moment_terms``, each in fixed point with ``bits``; ``by_class``
    does not apply).

    ``one_pass``: the node totals and the grouped features in one aggregate over the level
    crossed with their attribute numbers (``_one_pass_part``), not one aggregate each. The
    rows and sums are the same; an engine that runs each aggregate of a UNION as a stage of
    its own (Spark: a shuffle each) reads the level once.

    ``search_bins``: bin edges of continuous features for the bound-pruned threshold search
    (``sqltree.bounded_search``); every row gets a last column ``b``, its value's bin
    (``bin_value``, or ``bin_by_lookup`` with ``lookup``), NULL for other features.
    """
    binned = None if search_bins is None else _SearchBins(search_bins, lookup)
    grouped: list[Feature | None] = [None]
    parts: list[tuple[exp.Select, Feature | None]] = []
    for f in features:
        if f.index in rowwise and f.kind == CONTINUOUS:
            how = "rows"
        else:
            how = "by_class" if f.index in by_class and not moments else "grouped"
        if how == "grouped":
            grouped.append(f)
        if how != "grouped" or not one_pass:
            parts.append((_histogram_part(level, f, n_classes, bits, counts, how, moments), f))
    if one_pass and len(grouped) > 1:
        first = _one_pass_part(level, grouped, n_classes, bits, counts, moments, binned)
    else:
        first = _histogram_part(level, None, n_classes, bits, counts, moments=moments)
        parts.insert(0, (first, None))
    if binned is not None:  # the one-pass part has its bins already
        for part, f in parts:
            part.select(alias(binned.of(f), "b"), copy=False)
    selects = [first, *[part for part, _ in parts if part is not first]]
    return selects[0] if len(selects) == 1 else exp.union(*selects, distinct=False, copy=False)


class _SearchBins:
    """The bounded search's bin of a feature's value (``build_histogram``'s ``b``)."""

    def __init__(self, edges: Mapping[int, Sequence[float]], lookup: bool) -> None:
        self.edges = edges
        self.lookup = lookup

    def of(self, f: Feature | None, table: str | None = None) -> exp.Expression:
        """The bin of ``f``'s column (of ``table``); NULL for the node totals (None) and for
        features without edges."""
        if f is None or f.index not in self.edges:
            return exp.cast(exp.null(), "SMALLINT")
        value, edges = col(f.column, table), self.edges[f.index]
        found = bin_by_lookup(value, edges) if self.lookup else None
        return found if found is not None else bin_value(value, edges)


def _one_pass_part(
    level: exp.Table,
    grouped: Sequence[Feature | None],
    n_classes: int,
    bits: int | None,
    counts: bool,
    moments: Sequence[exp.Expression] | None,
    binned: _SearchBins | None,
) -> exp.Select:
    """``_histogram_part``'s grouped rows of ``grouped`` (None: the node totals) from one
    aggregate: each level row once per attribute, with that attribute's value as ``v`` (and
    its bin as ``b``, with ``binned``)."""
    attrs = [-1 if f is None else f.index for f in grouped]

    def per_attr(of: Callable[[Feature], exp.Expression]) -> exp.Expression:
        return exp.Case(this=col("attr", "a"), ifs=[
            exp.If(this=num(f.index), true=of(f)) for f in grouped if f is not None])

    value = per_attr(lambda f: exp.cast(col(f.column, "l"), "DOUBLE"))
    weights = [m.copy() for m in moments] if moments else class_weights(n_classes, bits)
    classes = class_columns(n_classes)
    unpivoted = exp.select(
        col("node", "l"), col("attr", "a"), alias(value, "v"),
        *([alias(per_attr(lambda f: binned.of(f, "l")), "b")]
          if binned is not None else []),
        *[alias(w, c) for c, w in zip(classes, weights, strict=True)],
    ).from_(alias(level.copy(), "l")).join(
        values_table("a", ["attr"], [[a] for a in attrs], ["INT"]), join_type="cross")
    key = [col("node"), col("attr"), col("v"), *([col("b")] if binned is not None else [])]
    return (
        exp.select(
            *key[:3],
            *([alias(_count_rows(), "n")] if counts else []),
            *[alias(fixed_sum(col(c), bits), c) for c in classes],
            *key[3:],
        )
        .from_(unpivoted.subquery("u"))
        .group_by(*[k.copy() for k in key])
    )


def _histogram_part(
    level: exp.Table,
    f: Feature | None,
    n_classes: int,
    bits: int | None,
    counts: bool,
    how: str = "grouped",
    moments: Sequence[exp.Expression] | None = None,
) -> exp.Select:
    """The histogram rows of feature ``f`` (None: the node totals, ``attr = -1``), grouped by
    (node, value), summed per class first (``by_class``), or a row per level row (``rows``)."""
    classes = class_columns(n_classes)
    key = [col("node")] if f is None else [col("node"), col(f.column)]
    head = [
        col("node"),
        alias(exp.cast(num(-1 if f is None else f.index), "INT"), "attr"),
        alias(exp.cast(exp.null(), "DOUBLE") if f is None else col(f.column), "v"),
    ]
    weights = [m.copy() for m in moments] if moments else class_weights(n_classes, bits)
    if how == "rows":
        return exp.select(
            *head,
            *([alias(exp.cast(num(1), "BIGINT"), "n")] if counts else []),
            *[alias(w, c) for c, w in zip(classes, weights, strict=True)],
        ).from_(level.copy())
    source: exp.Expression = level.copy()
    rows = _count_rows()
    if how == "by_class":
        summed = col("w") if bits is None else to_fixed(col("w"), bits)
        source = (
            exp.select(
                *[k.copy() for k in key],
                col("y"),
                alias(fixed_sum(summed, bits), "w"),
                *([alias(exp.func("COUNT", exp.Star()), "n")] if counts else []),
            )
            .from_(level.copy())
            .group_by(*[k.copy() for k in key], col("y"))
            .subquery("by_class")
        )
        rows = _count_rows(col("n"))
        if bits is not None:  # the groups' sums are fixed point already
            weights = per_class(n_classes, col("w"), num(0))
    return (
        exp.select(
            *head,
            *([alias(rows, "n")] if counts else []),
            *[alias(fixed_sum(w, bits), c) for c, w in zip(classes, weights, strict=True)],
        )
        .from_(source)
        .group_by(*key)
    )


def of_features(features: Sequence[Feature]) -> exp.Expression:
    """Whether a histogram row is one of these features' (not a node total, attr -1)."""
    return attr_in([f.index for f in features])


def attr_in(indices: Sequence[int], table: str | None = None) -> exp.Expression:
    """``attr IN (...)``, or FALSE for no feature."""
    if not indices:
        return exp.false()
    return exp.In(this=col("attr", table), expressions=[num(i) for i in indices])


def _count_rows(groups: exp.Expression | None = None) -> exp.Expression:
    """A group's row count as a BIGINT: ``COUNT(*)``, or the sum of ``groups``' counts."""
    counted = exp.func("COUNT", exp.Star()) if groups is None else exp.func("SUM", groups)
    return exp.cast(counted, "BIGINT")


def build_node_counts(
    hist: exp.Table, n_classes: int, bits: int | None = None, *, counts: bool = False
) -> exp.Select:
    """Class counts of every node in the histogram's level (``bits`` as in the histogram);
    with ``counts`` (a histogram built with them), each node's row count ``n`` first."""
    classes = class_columns(n_classes)
    return (
        exp.select(
            col("node"),
            *([col("n")] if counts else []),
            *[col(c) if bits is None else alias(from_fixed(col(c), bits), c) for c in classes],
        )
        .from_(hist.copy())
        .where(exp.EQ(this=col("attr"), expression=num(-1)))
        .order_by(col("node"))
    )


# -- partition ---------------------------------------------------------------------------------
UNKNOWN_KEY = -1


TESTS_COLUMNS = (("node", "BIGINT"), ("attr", "INT"), ("thr", "DOUBLE"))
"""Columns of a level's tests table: (node, attr, threshold or NULL for a nominal test)."""
ROUTES_COLUMNS = (("node", "BIGINT"), ("key", "DOUBLE"), ("child", "BIGINT"), ("factor", "DOUBLE"))
"""Columns of a level's routes table: (node, key, child, factor)."""


def _small_table(
    rows_or_table: Sequence[Sequence[float | int | None]] | exp.Expression,
    name: str,
    columns: Sequence[tuple[str, str]],
) -> exp.Expression:
    """A loaded table under the alias ``name``, or Python rows written as a literal table."""
    if isinstance(rows_or_table, exp.Expression):
        return alias(rows_or_table.copy(), name)
    return values_table(
        name, [c for c, _ in columns], list(rows_or_table), [t for _, t in columns]
    )


def _test_key(features: Sequence[Feature]) -> tuple[exp.Expression, exp.Expression]:
    """(the tested value of a level row joined to its test ``n``, the row's key for it)."""
    value = case(
        *[(exp.EQ(this=col("attr", "n"), expression=num(f.index)), col(f.column, "l"))
          for f in features],
        default=exp.cast(exp.null(), "DOUBLE"),
    )
    key = case(
        (col("v").is_(exp.null()), num(float(UNKNOWN_KEY))),
        (col("thr").is_(exp.null()), col("v")),
        (exp.LTE(this=col("v"), expression=col("thr")), num(0.0)),
        default=num(1.0),
    )
    return value, key


def build_keyed_counts(
    level: exp.Table,
    features: Sequence[Feature],
    tests: Sequence[tuple[int, int, float | None]] | exp.Expression,
    n_classes: int,
    bits: int,
) -> exp.Select:
    """Class weights per (node, key of the node's test) of a level table's rows, by node and key.

    Keys as in ``build_partition``; rows of a node without a test, and rows whose tested
    value is unknown, have key -1. The weights are summed in fixed point (``to_fixed``) with
    ``bits`` fractional bits (``fixed_point.training_weight_bits``), so they are the same
    whatever order the engine adds rows in, and whichever rows the statement sums with them.
    """
    n_table = _small_table(tests, "n", TESTS_COLUMNS)
    value, key = _test_key(features)
    keyed = (
        exp.select(col("node", "l"), col("w", "l"), col("y", "l"), alias(value, "v"),
                   alias(col("thr", "n"), "thr"))
        .from_(alias(level.copy(), "l"), copy=False)
        .join(n_table, on=exp.EQ(this=col("node", "l"), expression=col("node", "n")),
              join_type="left", copy=False)
    )
    classes = class_columns(n_classes)
    unit = num(2.0**bits)
    fixed = exp.cast(exp.func("FLOOR", col("w") * unit + num(0.5)), "BIGINT")
    sums = [
        alias(exp.func("SUM", weight), name)
        for name, weight in zip(classes, per_class(n_classes, fixed, num(0)), strict=True)
    ]
    grouped = exp.select(col("node"), alias(key, "key"), *sums).from_(
        alias(exp.Subquery(this=keyed), "k"), copy=False
    ).group_by(col("node"), key.copy(), copy=False)
    scale = unit.copy()
    return (
        exp.select(
            col("node"),
            col("key"),
            *[alias(paren(as_double(col(c)) / scale.copy()), c) for c in classes],
        )
        .from_(alias(exp.Subquery(this=grouped), "g"), copy=False)
        .order_by(col("node"), col("key"), copy=False)
    )


def build_class_weights(level: exp.Expression, n_classes: int, *, copy: bool = True
                        ) -> exp.Select:
    """Class weights of every node of a level's rows, summed as DOUBLE (in no set order: for
    bounds that allow a rounding error, not for counts the tree keeps); ``copy=False`` as in
    ``build_partition``."""
    sums = [
        alias(exp.func("SUM", weight), name)
        for name, weight in zip(
            class_columns(n_classes), per_class(n_classes, col("w"), num(0.0)), strict=True
        )
    ]
    return (
        exp.select(col("node"), *sums)
        .from_(alias(level.copy() if copy else level, "l"), copy=False)
        .group_by(col("node"), copy=False)
    )


def build_partition(
    level: exp.Table,
    features: Sequence[Feature],
    tests: Sequence[tuple[int, int, float | None]] | exp.Expression,
    routes: Sequence[tuple[int, int, int, float]] | exp.Expression,
    *,
    copy: bool = True,
) -> exp.Select:
    """The next level: each row of a split node, moved to its child(ren).

    ``tests`` holds (node, attr, threshold or None for nominal); ``routes`` holds
    (node, key, child, factor). A row's key is 0/1 for ``v <= threshold`` / ``v > threshold``,
    the value's code for a nominal test, and -1 when the value is unknown; a key matches one
    route per known value and, for an unknown value, one route per branch it is spread over,
    with ``factor`` the fraction of its weight that goes there. Rows whose key has no route
    (a child that will not be split further) are left out. Either argument is a sequence of
    Python rows or a table holding them (``TESTS_COLUMNS``, ``ROUTES_COLUMNS``).
    ``copy=False``: ``level`` itself becomes part of the query, for a caller that uses it
    nowhere else (pruning's chain of levels' partitions: copying each level's whole chain
    again took 20 s of a million-row pruning).
    """
    n_table = _small_table(tests, "n", TESTS_COLUMNS)
    r_table = _small_table(routes, "r", ROUTES_COLUMNS)
    value, key = _test_key(features)
    keyed = exp.select(
        col("node", "l"),
        col("w", "l"),
        col("y", "l"),
        *[col(f.column, "l") for f in features],
        alias(value, "v"),
        alias(col("thr", "n"), "thr"),
    ).from_(alias(level.copy() if copy else level, "l"), copy=False).join(
        n_table, on=exp.EQ(this=col("node", "l"), expression=col("node", "n")), copy=False
    )
    # copy=False: the builders would copy the whole query, ``level`` included, at each call
    # (pruning passes a chain of levels' partitions as ``level``)
    keyed2 = exp.select("*", alias(key, "key")).from_(
        alias(exp.Subquery(this=keyed), "k"), copy=False
    )
    return exp.select(
        alias(exp.cast(col("child", "r"), "INT"), "node"),
        alias(col("w", "x") * col("factor", "r"), "w"),
        col("y", "x"),
        *[col(f.column, "x") for f in features],
    ).from_(alias(exp.Subquery(this=keyed2), "x"), copy=False).join(
        r_table,
        on=exp.and_(
            exp.EQ(this=col("node", "x"), expression=col("node", "r")),
            exp.EQ(this=col("key", "x"), expression=col("key", "r")),
            copy=False,
        ),
        copy=False,
    )


def ordered_by_node(query: exp.Expression) -> exp.Select:
    """``query``'s rows sorted by node."""
    return exp.select("*").from_(query.subquery("p")).order_by(col("node"))
