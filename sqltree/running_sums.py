"""The running-sum scan of a threshold search, shared by the algorithms (DuckDB).

A continuous feature's cuts are scored from each (node, feature) group's class sums over the
values up to the cut. Windows partitioned by (node, feature) sort and scan each partition on
one thread, which is slow when a level holds a few large nodes. Instead the histogram is read
once in (attr, node, v) order by a streaming window whose sums run across the groups, and a
group's own sums are those less the totals of the groups before it. Both are exact in fixed
point (``queries.to_fixed``): in floating point a group's sums would be differences of two large
running totals. C4.5's best-cut scan (``algorithms.c45_cuts``) and CART's scores read these.

Signed sums (a regression histogram's ``SUM(w*y)``, ``SUM(w*y*y)``) are scanned as 128-bit
integers at a scale chosen once from a bound of every partial sum (``wide_fixed_bits``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from sqlglot import exp

from .queries import FIXED_POINT_MAX_BITS, from_fixed, to_fixed
from .sqlexpr import alias, case, col, num, paren, window

WIDE_FIXED_HEADROOM = 120
"""A bound on every partial sum of a wide fixed-point scan is scaled to below this power of
two; HUGEINT holds up to 2^127, and the per-row roundings add at most half a unit per row,
so any level of fewer than 2^125 histogram rows stays in range (DuckDB fails on overflow
rather than wrapping)."""


def wide_fixed_bits(bound: float) -> int:
    """Fractional bits of HUGEINT sums (``to_wide_fixed``) whose every partial sum is at most
    ``bound`` in magnitude.

    A power of two, so scaling is exact: each term is then rounded once, to ``2**-bits``, and
    every sum of terms after that is exact, whatever the order. With the bound scaled to
    2^120 a term loses at most 2^-121 of the bound, far below a DOUBLE's rounding of a
    running total (2^-53 of it per addition).
    """
    if not math.isfinite(bound):
        raise ValueError(f"a bound of the sums must be finite, not {bound}")
    _, exponent = math.frexp(bound if bound > 0 else 1.0)  # bound < 2**exponent
    return max(-FIXED_POINT_MAX_BITS, min(FIXED_POINT_MAX_BITS, WIDE_FIXED_HEADROOM - exponent))


def to_wide_fixed(e: exp.Expression, bits: int) -> exp.Expression:
    """A DOUBLE, of either sign, as a HUGEINT count of ``2**-bits`` (DuckDB's cast rounds to
    the nearest, half away from zero; the product with a power of two is exact)."""
    return exp.cast(paren(e * num(2.0**bits)), "HUGEINT")


def ordered_running_sums(
    hist: exp.Table,
    columns: Sequence[str],
    where: exp.Expression,
    prefix: str = "l",
    ctes: list[tuple[str, exp.Expression]] | None = None,
    fixed: bool = True,
    bits: int | None = None,
    counts: Collection[str] = (),
    wide: Mapping[str, int] | None = None,
) -> exp.Select:
    """Running sums of ``columns`` over each (node, attr) group of ``hist`` in value order.

    Rows: node, attr, v, nv (the group's next value, NULL after its last), and
    ``<prefix><i>`` (the sum of ``columns[i]`` over the group's values up to v). The histogram
    is read once in (attr, node, v) order by a streaming window, whose sums run across groups;
    a group's sums before it come from its known totals, summed in the same order (see
    ``c45_cuts.best_cuts_ordered``, which does the same with the totals it needs anyway). With
    ``ctes``, the scan becomes the materialised CTE ``running`` added to it, so that what
    follows the one-thread streaming window runs in parallel. ``fixed``: sum in fixed point
    (``to_fixed``), needed unless every weight is a whole number; ``bits``: the columns hold
    fixed-point weights already (``build_histogram``), summed as they are. ``counts``: columns
    of row counts, summed as they are and not converted. ``wide``: columns of DOUBLE sums of
    either sign, each scanned at its own scale (``to_wide_fixed``; column -> bits).
    """
    known = exp.and_(col("v").is_(exp.null()).not_(), where.copy())
    wide = wide or {}
    terms = [
        col(c) if c in counts
        else to_wide_fixed(col(c), wide[c]) if c in wide
        else scan_term(c, fixed, bits)
        for c in columns
    ]
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
                    from_fixed(col(f"g{i}", "s") - col(f"o{i}", "b"), wide[c]) if c in wide
                    else left_sum(
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
