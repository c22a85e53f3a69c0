"""The bound-pruned exact threshold search, shared by the algorithms (CLOUDS: Alsabti, Ranka and
Singh, 1998).

A full threshold scan sorts every distinct (node, value) of every continuous feature and runs
class sums over all of them. Here the values are first cut into quantile bins (edges chosen
once per training; the histogram holds each value's bin) and summed per (node, feature, bin),
a hash aggregate. The
cut at each bin's upper end (between the bin's largest value and the next bin's smallest) is a
real cut, scored exactly from those sums. A cut inside a bin sends left a class-weight vector
between the sums before the bin and the sums through it, componentwise; the impurity of a
binary split is concave in that vector (entropy and Gini both), so the gain is convex, and its
largest value over that box is at one of the box's 2^k corners: an upper bound for every cut
inside the bin. Only the values of the bins whose bound reaches the best exact cut of their
(node, feature), less the algorithm's tie tolerance, are then sorted and scanned
(``interior_cuts``); a cut inside any other bin scores below every cut that could be chosen or
tie with the chosen one, so the choice is the full scan's, ties included.

The sums are those of the full scan, in the same arithmetic (``running_sums.scan_term``): a
cut's left sums are the bin's sums before it plus the running sums inside the bin, both exact
integers where the scan sums in fixed point, so scores are the full scan's to the last bit.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from sqlglot import exp

from .queries import attr_in
from .running_sums import left_sum, ordered_scan, scan_term, sum_before
from .sqlexpr import alias, col, num, window

SEARCH_BINS = 64
"""Quantile bins per continuous feature of the bounded search."""

MAX_BOUND_CLASSES = 4
"""Above this many classes the bound's 2^k corners (two unknown sides each) make an expression
too large to pay; those trees use the full scan."""

MIN_GROUP_VALUES = 4 * SEARCH_BINS
"""Histogram rows per (node, bounded feature) a level needs for the bounded search to pay:
levels with fewer than about 300 rows per group were no faster bounded on the 200k and
1M-row benchmarks (benchmarks/README.md), levels with more were faster."""

Edges = Mapping[int, Sequence[float]]


def _known_continuous(edges: Edges, table: str | None = None) -> exp.Expression:
    return exp.and_(col("v", table).is_(exp.null()).not_(), attr_in(sorted(edges), table))


def binned_sums(
    hist: exp.Table,
    edges: Edges,
    columns: Sequence[str],
    *,
    fixed: bool,
    bits: int | None,
    counts: Collection[str] = (),
    distinct: bool = False,
) -> exp.Select:
    """Per (node, attr, bin ``b``) of the known values of the features in ``edges``, from a
    histogram with bins (``queries.build_histogram``'s ``search_bins``).

    Columns: node, attr, b, lo and hi (the bin's smallest and largest value), nlo (the next
    non-empty bin's smallest value, NULL after the last), and per ``columns[i]`` the sums
    ``s<i>`` over the bins before and ``e<i>`` through this one, in the scan's arithmetic
    (``scan_term``: integers where ``fixed`` or ``bits``; convert with ``weights``). With
    ``distinct``, also ``d``: the bin's number of distinct values (a histogram may repeat one).
    """
    terms = [col(c) if c in counts else scan_term(c, fixed, bits) for c in columns]
    grouped = (
        exp.select(
            col("node"), col("attr"), col("b"),
            alias(exp.func("MIN", col("v")), "lo"), alias(exp.func("MAX", col("v")), "hi"),
            *[alias(exp.func("SUM", t), f"t{i}") for i, t in enumerate(terms)],
            *([alias(exp.Count(this=exp.Distinct(expressions=[col("v")])), "d")]
              if distinct else []),
        )
        .from_(hist.copy(), copy=False)
        .where(_known_continuous(edges), copy=False)
        .group_by(col("node"), col("attr"), col("b"), copy=False)
    )
    part = [col("node"), col("attr")]
    return exp.select(
        "node", "attr", "b", "lo", "hi", *(["d"] if distinct else []),
        alias(window(exp.func("LEAD", col("lo")), part, [col("b")]), "nlo"),
        *[
            alias(window(exp.func("SUM", col(f"t{i}")), part, [col("b")], running=True)
                  - col(f"t{i}"), f"s{i}")
            for i in range(len(terms))
        ],
        *[
            alias(window(exp.func("SUM", col(f"t{i}")), part, [col("b")], running=True),
                  f"e{i}")
            for i in range(len(terms))
        ],
    ).from_(grouped.subquery("g", copy=False), copy=False)


def weights(
    prefix: str, columns: Sequence[str], converted: bool, bits: int | None,
    counts: Collection[str] = (), table: str | None = None,
) -> list[exp.Expression]:
    """``<prefix><i>`` of ``binned_sums`` as weights (counts as they are)."""
    return [
        col(f"{prefix}{i}", table) if c in counts
        else left_sum(col(f"{prefix}{i}", table), converted, bits)
        for i, c in enumerate(columns)
    ]


def interior_cuts(
    hist: exp.Table,
    keep: exp.Expression,
    edges: Edges,
    columns: Sequence[str],
    *,
    fixed: bool,
    bits: int | None,
    counts: Collection[str] = (),
    prefix: str = "l",
    ctes: list[tuple[str, exp.Expression]] | None = None,
) -> exp.Select:
    """The cuts inside the bins of ``keep`` (node, attr, b, lo, hi and the sums ``s<i>`` before
    the bin, as ``binned_sums``): node, attr, v, nv (the next value in the bin; the bin's last
    value has none, its cut is the bin's boundary) and ``<prefix><i>``, the sums of
    ``columns[i]`` over the (node, feature)'s values up to v, as weights.

    With ``ctes`` (DuckDB), one ordered streaming scan (``_ordered_interior``) instead of
    windows partitioned by (node, attr, bin): DuckDB pays per partition, and deep levels keep
    hundreds of thousands of small bins (9.4 s for 663k rows at level 8 of the 1M benchmark).
    """
    terms = [col(c, "h") if c in counts else scan_term(c, fixed, bits) for c in columns]
    for term in terms:  # scan_term names the bare column; these read the histogram as h
        for column in term.find_all(exp.Column):
            column.set("table", exp.to_identifier("h"))
    kept = (
        exp.select(col("node", "h"), col("attr", "h"), col("v", "h"), col("b", "k"),
                   *[alias(t, f"x{i}") for i, t in enumerate(terms)],
                   *[col(f"s{i}", "k") for i in range(len(terms))])
        .from_(alias(hist.copy(), "h"), copy=False)
        .join(
            alias(exp.Subquery(this=keep), "k"),
            on=exp.and_(
                exp.EQ(this=col("node", "h"), expression=col("node", "k")),
                exp.EQ(this=col("attr", "h"), expression=col("attr", "k")),
                exp.EQ(this=col("b", "h"), expression=col("b", "k")),
            ),
            copy=False,
        )
        .where(_known_continuous(edges, "h"), copy=False)
    )
    if ctes is not None:
        scanned = _ordered_interior(kept, len(terms), ctes)
    else:
        part, order = [col("node"), col("attr"), col("b")], [col("v")]
        scanned = exp.select(
            "node", "attr", "v",
            alias(window(exp.func("LEAD", col("v")), part, order), "nv"),
            *[alias(window(exp.func("SUM", col(f"x{i}")), part, order, running=True)
                    + col(f"s{i}"), f"g{i}") for i in range(len(terms))],
        ).from_(kept.subquery("kp", copy=False), copy=False)
    converted = fixed or bits is not None
    return exp.select(
        "node", "attr", "v", "nv",
        *[alias(w, f"{prefix}{i}") for i, w in
          enumerate(weights("g", columns, converted, bits, counts))],
    ).from_(scanned.subquery("sc", copy=False), copy=False).where(
        col("nv").is_(exp.null()).not_(), copy=False
    )


BIN_KEY = 2**16
"""A bin's group key in the ordered scan is ``node * BIN_KEY + b`` (bins are SMALLINTs)."""


def _ordered_interior(
    kept: exp.Select, n_terms: int, ctes: list[tuple[str, exp.Expression]]
) -> exp.Select:
    """``interior_cuts``' running sums by one streaming window over the kept rows in (attr,
    bin key, v) order, less the sums of the bins before in that order, plus the sums before
    the bin in its (node, feature): integers throughout, so exact as the full scan's.
    Adds the CTEs ``kept`` and ``inner_scan``."""
    key = exp.cast(col("node"), "BIGINT") * num(BIN_KEY) + col("b")
    keyed = exp.select("*", alias(key, "gk")).from_(kept.subquery("kk", copy=False), copy=False)
    ctes.append(("kept", keyed))
    as_groups = exp.select(
        alias(col("gk"), "node"), "attr", "v", *[f"x{i}" for i in range(n_terms)]
    ).from_("kept")
    scan = ordered_scan(
        as_groups.subquery("g", copy=False),  # type: ignore[arg-type]
        [f"x{i}" for i in range(n_terms)], exp.true(), "nv",
        [col(f"x{i}") for i in range(n_terms)],
    )
    # materialised: the one-thread streaming window, and the parallel join after it
    ctes.append(("inner_scan", scan))
    # per bin: its sums, and those of the bins before it in the scan's (attr, key) order
    totals = (
        exp.select(alias(col("gk"), "node"), col("attr"), alias(col("node"), "rnode"),
                   *[alias(exp.func("MIN", col(f"s{i}")), f"s{i}") for i in range(n_terms)],
                   *[alias(exp.func("SUM", col(f"x{i}")), f"f{i}") for i in range(n_terms)])
        .from_("kept")
        .group_by(col("gk"), col("attr"), col("node"))
    )
    before = exp.select(
        "node", "attr", "rnode", *[f"s{i}" for i in range(n_terms)],
        *[sum_before(f"f{i}", f"o{i}") for i in range(n_terms)],
    ).from_(totals.subquery("t", copy=False), copy=False)
    return exp.select(
        alias(col("rnode", "o"), "node"), col("attr", "s"), col("v", "s"), col("nv", "s"),
        *[alias(col(f"g{i}", "s") - col(f"o{i}", "o") + col(f"s{i}", "o"), f"g{i}")
          for i in range(n_terms)],
    ).from_(alias(exp.to_table("inner_scan"), "s")).join(
        alias(before.subquery(copy=False), "o"),
        on=exp.and_(
            exp.EQ(this=col("node", "s"), expression=col("node", "o")),
            exp.EQ(this=col("attr", "s"), expression=col("attr", "o")),
        ),
    )
