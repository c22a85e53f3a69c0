"""The running-sum scan of a threshold search, shared by the algorithms (DuckDB).

A continuous feature's cuts are scored from each (node, feature) group's class sums over the
values up to the cut. Windows partitioned by (node, feature) sort and scan each partition on
one thread, which is slow when a level holds a few large nodes. Instead the histogram is read
once in (attr, node, v) order by a streaming window whose sums run across the groups, and a
group's own sums are those less the totals of the groups before it. Both are exact in fixed
point (``fixed_point.to_fixed``): in floating point a group's sums would be differences of two large
running totals. C4.5's best-cut scan (``algorithms.c45.cuts``) and CART's scores read these.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlglot import exp

from .fixed_point import from_fixed, to_fixed
from .sqlexpr import alias, case, col, paren, window


def ordered_running_sums(
    hist: exp.Table,
    columns: Sequence[str],
    where: exp.Expression,
    prefix: str = "l",
    ctes: list[tuple[str, exp.Expression]] | None = None,
    fixed: bool = True,
    bits: int | None = None,
    counts: Collection[str] = (),
) -> exp.Select:
    """Running sums of ``columns`` over each (node, attr) group of ``hist`` in value order.

    Rows: node, attr, v, nv (the group's next value, NULL after its last), and
    ``<prefix><i>`` (the sum of ``columns[i]`` over the group's values up to v). The histogram
    is read once in (attr, node, v) order by a streaming window, whose sums run across groups;
    a group's sums before it come from its known totals, summed in the same order (see
    ``c45.cuts.best_cuts_ordered``, which does the same with the totals it needs anyway). With
    ``ctes``, the scan becomes the materialised CTE ``running`` added to it, so that what
    follows the one-thread streaming window runs in parallel. ``fixed``: sum in fixed point
    (``to_fixed``), needed unless every weight is a whole number; ``bits``: the columns hold
    fixed-point weights already (``build_histogram``), summed as they are. ``counts``: columns
    of row counts, summed as they are and not converted.
    """
    known = exp.and_(col("v").is_(exp.null()).not_(), where.copy())
    terms = [col(c) if c in counts else scan_term(c, fixed, bits) for c in columns]
    scan = ordered_scan(hist, columns, known, "nv", terms)
    offsets = _group_offsets(hist, terms, known)
    source: exp.Expression = exp.Subquery(this=scan)
    if ctes is not None:
        ctes.append(("running", scan))
        source = exp.to_table("running")
    return (
        exp.select(
            col("node", "s"), col("attr", "s"), col("v", "s"), col("nv", "s"),
            *[
                alias(
                    left_sum(
                        col(f"g{i}", "s") - col(f"o{i}", "b"),
                        (fixed or bits is not None) and c not in counts,
                        bits,
                    ),
                    f"{prefix}{i}",
                )
                for i, c in enumerate(columns)
            ],
        )
        .from_(alias(source, "s"))
        .join(alias(exp.Subquery(this=offsets), "b"), on=same_group("s", "b"))
    )


def left_sum(difference: exp.Expression, fixed: bool, bits: int | None = None) -> exp.Expression:
    """A difference of running sums as a weight."""
    if not fixed:
        return paren(difference)
    return from_fixed(difference, bits)


def scan_term(column: str, fixed: bool, bits: int | None) -> exp.Expression:
    """What an ordered scan adds up of a histogram column: the column itself when it holds
    fixed-point weights (``bits``) or floating-point whole numbers, else ``to_fixed`` of it."""
    return to_fixed(col(column)) if fixed and bits is None else col(column)


def ordered_scan(
    hist: exp.Table,
    columns: Sequence[str],
    known: exp.Expression,
    next_name: str,
    terms: Sequence[exp.Expression],
) -> exp.Select:
    """The known rows of ``hist`` in (attr, node, v) order with running sums.

    Columns: node, attr, v, ``next_name`` (the group's next value, else NULL) and ``g<i>``,
    the sum of ``terms[i]`` (of the histogram's ``columns``) over every row so far, across
    groups.
    """
    ordered = (
        exp.select(col("node"), col("attr"), col("v"), *[col(c) for c in columns])
        .from_(hist.copy())
        .where(known.copy())
        .order_by(col("attr"), col("node"), col("v"))
    )
    return exp.select(
        col("node"),
        col("attr"),
        col("v"),
        alias(_next_in_group(), next_name),
        *[
            alias(
                window(exp.func("SUM", term.copy()), [], running=True),
                f"g{i}",
            )
            for i, term in enumerate(terms)
        ],
    ).from_(alias(exp.Subquery(this=ordered), "o"))


def _group_offsets(
    hist: exp.Table, terms: Sequence[exp.Expression], known: exp.Expression
) -> exp.Select:
    """Per (node, attr): ``o<i>``, the sums of ``terms[i]`` over the groups before it in the
    ordered scan."""
    group_totals = (
        exp.select(
            col("node"), col("attr"),
            *[
                alias(exp.func("SUM", term.copy()), f"f{i}")
                for i, term in enumerate(terms)
            ],
        )
        .from_(hist.copy())
        .where(known.copy())
        .group_by(col("node"), col("attr"))
    )
    return exp.select(
        col("node"), col("attr"), *[sum_before(f"f{i}", f"o{i}") for i in range(len(terms))]
    ).from_(alias(exp.Subquery(this=group_totals), "t"))


def same_group(a: str, b: str) -> exp.Expression:
    """Whether the rows of relations ``a`` and ``b`` are of one (node, attr) group."""
    return exp.and_(
        exp.EQ(this=col("node", a), expression=col("node", b)),
        exp.EQ(this=col("attr", a), expression=col("attr", b)),
    )


def _next_in_group() -> exp.Expression:
    """In an (attr, node, v)-ordered stream: the next value of the same group, else NULL."""
    return case(
        (
            exp.and_(
                *[
                    exp.EQ(this=window(exp.func("LEAD", col(c)), []), expression=col(c))
                    for c in ("node", "attr")
                ]
            ),
            window(exp.func("LEAD", col("v")), []),
        ),
        default=exp.null(),
    )


def sum_before(column: str, name: str) -> exp.Expression:
    """The sum of ``column`` over the rows before this one in (attr, node) order."""
    return alias(
        exp.Sub(
            this=exp.Window(
                this=exp.func("SUM", col(column)),
                order=exp.Order(
                    expressions=[exp.Ordered(this=col("attr")), exp.Ordered(this=col("node"))]
                ),
                spec=exp.WindowSpec(
                    kind="ROWS", start="UNBOUNDED", start_side="PRECEDING", end="CURRENT ROW"
                ),
            ),
            expression=col(column),
        ),
        name,
    )
