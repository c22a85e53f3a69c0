"""CART's nominal candidates in SQL: a node's values ranked by code, ordered by class
proportion, and every two-way partition of at most ``EXACT_SUBSETS_MAX`` values as a bit mask
of value ranks.

Two classes: the values in order of the second class's proportion, every cut of that order
(exact for two classes, Breiman et al. 1984, theorem 4.5). More classes: every partition of a
node's values when it has at most ``EXACT_SUBSETS_MAX`` of them, else one ordered scan per
class (one-vs-rest), a heuristic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlglot import exp

from ... import queries as q
from ...dataset import Feature
from ...fixed_point import weight
from ...sqlexpr import alias, case, class_columns, col, num, safe_div, total, values_table, window
from ...tree import NOMINAL

EXACT_SUBSETS_MAX = 10
"""More classes than two: all two-way partitions up to this many values at a node."""


MEAN_ORDER = -1
"""The order of a regression histogram's values: by mean target ``c1 / c0``
(``queries.MOMENTS``)."""


def orders(n_classes: int) -> list[int]:
    """The classes whose proportion orders a node's values: the second of two, else each."""
    return [1] if n_classes == 2 else list(range(n_classes))


def bits_table(name: str, max_values: int) -> exp.Expression:
    """(mask, r, span): bit ``r`` is set in ``mask``; ``span`` is the mask's bit length.

    The masks leave the highest-ranked value out (it stays on the right), so each two-way
    partition of up to ``max_values`` values appears once.
    """
    rows = []
    for mask in range(1, 1 << (max_values - 1)):
        span = mask.bit_length()
        for r in range(span):
            if mask >> r & 1:
                rows.append((mask, r, span))
    return values_table(name, ["mask", "r", "span"], rows, ["BIGINT", "INT", "INT"])


def subset_masks(features: Sequence[Feature], name: str) -> exp.Expression:
    """The literal table of two-way partitions (``bits_table``) for the most values a
    node can hold in any nominal feature, up to ``EXACT_SUBSETS_MAX``: the largest domain
    ``describe`` read (the maximum where a domain is not known)."""
    sizes = [len(f.values) for f in features if f.kind == NOMINAL]
    most = EXACT_SUBSETS_MAX if not sizes or 0 in sizes else min(max(sizes), EXACT_SUBSETS_MAX)
    return bits_table(name, max(most, 2))


def ranked_values(hist: exp.Table, nominal: Sequence[int], n_classes: int) -> exp.Select:
    """Known values of nominal features with their rank (by code) and count per (node, attr)."""
    classes = class_columns(n_classes)
    part = [col("node"), col("attr")]
    return (
        exp.select(
            col("node"),
            col("attr"),
            col("v"),
            col("n"),
            *[col(c) for c in classes],
            alias(total(classes), "wv"),
            alias(window(exp.func("ROW_NUMBER"), part, [col("v")]) - num(1), "rank_v"),
            alias(window(exp.func("COUNT", exp.Star()), part), "m"),
        )
        .from_(hist.copy(), copy=False)
        .where(
            exp.and_(
                col("v").is_(exp.null()).not_(),
                q.attr_in(nominal),
            ),
            copy=False,
        )
    )


def _proportion(classes: Sequence[str], bits: int | None, mean: bool) -> exp.Expression:
    """Of a ranked value (``rv``) crossed with orders (``ot``): its proportion of class ``o``
    (its mean target for ``MEAN_ORDER``, only asked of a regression histogram)."""
    by_mean = (exp.EQ(this=col("o", "ot"), expression=num(MEAN_ORDER)),
               safe_div(weight(col(classes[1], "rv"), bits), weight(col(classes[0], "rv"), bits)))
    return case(
        *([by_mean] if mean else []),
        *[
            (
                exp.EQ(this=col("o", "ot"), expression=num(i)),
                safe_div(weight(col(c, "rv"), bits), weight(col("wv", "rv"), bits)),
            )
            for i, c in enumerate(classes)
        ],
        default=num(0.0),
    )


def _with_order(
    hist: exp.Table,
    nominal: Sequence[int],
    n_classes: int,
    by: Sequence[int],
    bits: int | None,
) -> exp.Select:
    """Each ranked value once per ordering ``o`` in ``by``, with ``p``, its proportion of
    class ``o``."""
    ranked = ranked_values(hist, nominal, n_classes).subquery("rv", copy=False)
    prop = _proportion(class_columns(n_classes), bits, MEAN_ORDER in by)
    return (
        exp.select("rv.*", col("o", "ot"), alias(exp.func("COALESCE", prop, num(0.0)), "p"))
        .from_(ranked, copy=False)
        .join(
            values_table("ot", ["o"], [(o,) for o in by], ["INT"]),
            join_type="cross",
            copy=False,
        )
    )


def _in_order(func: exp.Expression, running: bool = False) -> exp.Window:
    """``func`` over each (node, attr, o) in the order's value order (proportion, code)."""
    return window(
        func, [col("node"), col("attr"), col("o")], [col("p"), col("v")], running=running
    )


def ordered_values(
    hist: exp.Table,
    nominal: Sequence[int],
    n_classes: int,
    by: Sequence[int],
    exhaustive: bool,
    bits: int | None = None,
) -> exp.Select:
    """Nominal values per ordering ``o``: by proportion of class ``o``, ties by value code,
    with their rank ``rank_o`` and the running row count ``ln`` and class weights ``l<i>``.

    Only the (node, feature) pairs that the ordered scan covers: all of them for two classes,
    those with more than ``EXACT_SUBSETS_MAX`` values otherwise. ``bits`` as in the histogram.
    """
    with_order = _with_order(hist, nominal, n_classes, by, bits)
    if (n_classes > 2 or exhaustive) and MEAN_ORDER not in by:
        with_order = with_order.where(
            exp.GT(this=col("m", "rv"), expression=num(EXACT_SUBSETS_MAX)), copy=False
        )
    return exp.select(
        "*",
        alias(_in_order(exp.func("ROW_NUMBER")), "rank_o"),
        alias(_in_order(exp.func("SUM", col("n")), running=True), "ln"),
        *[
            alias(weight(_in_order(exp.func("SUM", col(c)), running=True), bits), f"l{i}")
            for i, c in enumerate(class_columns(n_classes))
        ],
    ).from_(with_order.subquery("wo", copy=False), copy=False)


def build_nominal_ranks(
    hist: exp.Table,
    pairs: Sequence[tuple[int, int]],
    n_classes: int,
    by: Sequence[int],
    bits: int | None = None,
) -> exp.Select:
    """Per chosen (node, nominal feature): each value's code, rank by code and rank per order.

    The ranks are computed by the same expressions as in the scoring query (given the same
    ``bits``), so a candidate's ``cut`` (a mask of value ranks, or a cut position in an order)
    names the same values.
    """
    nominal = sorted({a for _, a in pairs})
    chosen = values_table("ch", ["node", "attr"], list(pairs), ["BIGINT", "INT"])
    with_order = _with_order(hist, nominal, n_classes, by, bits)
    inner = exp.select("*", alias(_in_order(exp.func("ROW_NUMBER")), "rank_o")).from_(
        with_order.subquery("wo", copy=False), copy=False
    )
    return (
        exp.select(
            col("node", "x"),
            col("attr", "x"),
            col("v", "x"),
            col("rank_v", "x"),
            col("o", "x"),
            col("rank_o", "x"),
        )
        .from_(inner.subquery("x", copy=False), copy=False)
        .join(
            chosen,
            on=exp.and_(
                exp.EQ(this=col("node", "x"), expression=col("node", "ch")),
                exp.EQ(this=col("attr", "x"), expression=col("attr", "ch")),
            ),
            copy=False,
        )
    )


def read_nominal_ranks(
    engine: Any,
    hist: exp.Table,
    pairs: Sequence[tuple[int, int]],
    n_classes: int,
    bits: int | None = None,
    by: Sequence[int] | None = None,
) -> dict[tuple[int, int], list[tuple[int, int, int, int]]]:
    """Per (node, nominal feature) of ``pairs``: (code, rank by code, order, rank in order)
    of each of its values (``build_nominal_ranks``; ``by`` the orders, by default
    ``orders(n_classes)``)."""
    ranks: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
    if not pairs:
        return ranks
    query = build_nominal_ranks(
        hist, pairs, n_classes, orders(n_classes) if by is None else by, bits
    )
    for node_id, attr, v, rank_v, o, rank_o in engine.execute(query):
        ranks.setdefault((int(node_id), int(attr)), []).append(
            (int(v), int(rank_v), int(o), int(rank_o))
        )
    return ranks
