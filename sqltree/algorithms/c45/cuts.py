"""C4.5's continuous cuts: the best cut per (node, feature), and the value each cut prints as.

A cut between two sorted values of a continuous feature is scored from the class sums up to it
(``SplitCriteria.cut``). On most engines, windows partitioned by (node, feature) give those sums
(``best_cuts_windowed``, which also lists every candidate for ``split_scores``); on DuckDB one
ordered streaming scan does (``best_cuts_ordered`` over ``sqltree.running_sums``). Growth cuts
at the value below a cut; J48 prints the largest training value not above the midpoint, found
for the whole tree at the end (``build_observed_thresholds``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from ...dataset import Feature
from ...fixed_point import weight
from ...queries import attr_in
from ...running_sums import left_sum, ordered_scan, same_group, scan_term, sum_before
from ...sqlexpr import add_all, alias, case, class_columns, col, computed_once, num, total, window
from ...tree import CONTINUOUS
from .criteria import SplitCriteria


# -- windows per (node, feature) -----------------------------------------------------------------
def best_cuts_windowed(
    hist: exp.Table, agg: exp.Select, continuous: exp.Expression, criteria: SplitCriteria
) -> exp.Select:
    """Best cut per (node, continuous feature) by windows partitioned by (node, feature).

    ``agg`` holds the (node, feature) totals (``node_feature_totals``); ``continuous`` tells
    the histogram rows of continuous features. Portable (every engine has these windows);
    with ``all_thresholds`` every candidate, each with ``big_branches`` 1 where it is valid.
    """
    options = criteria.options
    part = [col("node"), col("attr")]
    # gain is read four times below: computed once (``computed_once``)
    cand = computed_once(_windowed_candidates(hist, agg, continuous, criteria))
    if options.all_thresholds:
        return exp.select(
            "node", "attr", "threshold", "next_value", "gain", "split_info",
            alias(
                exp.cast(window(exp.func("SUM", col("is_valid")), part), "BIGINT"), "candidates"
            ),
            "w_known", "w_all",
            alias(exp.cast(col("is_valid"), "BIGINT"), "big_branches"),
        ).from_(alias(exp.Subquery(this=cand), "c"), copy=False)
    ranked = exp.select(
        "*",
        alias(window(exp.func("COUNT", exp.Star()), part), "n_valid"),
        alias(window(exp.func("MAX", col("gain")), part), "best_gain"),
    ).from_(alias(exp.Subquery(this=cand), "c"), copy=False).where(
        exp.EQ(this=col("is_valid"), expression=num(1)),
        copy=False,
    )
    near = exp.select(
        "*",
        alias(window(exp.func("ROW_NUMBER"), part, [col("threshold")]), "rank_in_ties"),
    ).from_(alias(exp.Subquery(this=ranked), "r"), copy=False).where(
        exp.GTE(this=col("gain"), expression=col("best_gain") - num(options.threshold_tie)),
        copy=False,
    )
    return exp.select(
        "node", "attr", "threshold", "next_value", "gain", "split_info",
        alias(exp.cast(col("n_valid"), "BIGINT"), "candidates"),
        "w_known", "w_all",
        alias(exp.cast(num(2), "BIGINT"), "big_branches"),
    ).from_(alias(exp.Subquery(this=near), "t"), copy=False).where(
        exp.EQ(this=col("rank_in_ties"), expression=num(1)),
        copy=False,
    )


def _windowed_candidates(
    hist: exp.Table, agg: exp.Select, continuous: exp.Expression, criteria: SplitCriteria
) -> exp.Select:
    """Every cut of every (node, continuous feature): its gain, split info and ``is_valid``."""
    k = criteria.n_classes
    part = [col("node"), col("attr")]
    cum = exp.select(
        col("node"),
        col("attr"),
        col("v"),
        alias(window(exp.func("LEAD", col("v")), part, [col("v")]), "next_value"),
        *[
            alias(
                weight(window(exp.func("SUM", col(c)), part, [col("v")], running=True),
                       criteria.options.bits),
                f"l{i}",
            )
            for i, c in enumerate(class_columns(k))
        ],
    ).from_(hist.copy(), copy=False)
    cum = cum.where(exp.and_(col("v").is_(exp.null()).not_(), continuous.copy()), copy=False)
    lw = total([f"l{i}" for i in range(k)], "s")
    scores = criteria.cut([col(f"l{i}", "s") for i in range(k)], lw)
    return (
        exp.select(
            *_cut(scores, "s"),
            alias(scores["split_info"], "split_info"),
            col("w_known", "a"),
            col("w_all", "a"),
            alias(case((scores["valid"], num(1)), default=num(0)), "is_valid"),
        )
        .from_(alias(exp.Subquery(this=cum), "s"), copy=False)
        .join(alias(exp.Subquery(this=agg.copy()), "a"), on=same_group("s", "a"), copy=False)
        .where(col("next_value", "s").is_(exp.null()).not_(), copy=False)
    )



def _cut(scores: dict[str, exp.Expression], table: str) -> list[exp.Expression]:
    """A cut's node, attr, threshold (the value below it), next value and gain."""
    return [
        col("node", table),
        col("attr", table),
        alias(col("v", table), "threshold"),
        col("next_value", table),
        alias(scores["gain"], "gain"),
    ]


# -- one ordered scan (DuckDB) -------------------------------------------------------------------
def best_cuts_ordered(
    hist: exp.Table,
    agg: exp.Select,
    continuous: exp.Expression,
    criteria: SplitCriteria,
    ctes: list[tuple[str, exp.Expression]],
) -> exp.Select:
    """Best cut per (node, continuous feature) from one ordered scan of the histogram (DuckDB).

    Windows partitioned by (node, feature) sort and scan each partition on one thread, which
    is slow when a level holds few large nodes. Instead the histogram is read once in
    (attr, node, v) order by a streaming window (``running_sums.ordered_scan``), and a cut's
    left counts are the running sums less the known counts of the (attr, node) groups before
    it, both in exact fixed point (``to_fixed``). The best cut per group (highest gain, ties
    within ``threshold_tie`` to the lowest threshold) then takes two GROUP BYs instead of
    windows, and only the best cut's split info is computed. Adds CTEs ``scan`` and ``cand``
    to ``ctes``.
    """
    scan, joined = _ordered_left_sums(hist, agg, continuous, criteria)
    # The streaming window runs on one thread and so would everything after it in the same
    # pipeline; materialised, the join and the gain arithmetic run in parallel.
    ctes.append(("scan", scan))
    k = criteria.n_classes
    left = [col(f"l{i}", "a") for i in range(k)]
    lw = add_all([c.copy() for c in left])
    scores = criteria.cut(left, lw, "a")
    cand = (
        exp.select(
            *_cut(scores, "a"),
            alias(lw.copy(), "lw"),
            col("w_known", "a"),
            col("w_all", "a"),
            col("w_unknown", "a"),
        )
        .from_(alias(exp.Subquery(this=joined), "a"), copy=False)
        .where(scores["valid"], copy=False)
    )
    ctes.append(("cand", cand))
    return exp.select(
        "node", "attr", "threshold", "next_value", "gain",
        alias(criteria.split_info(col("lw", "k"), "k"), "split_info"),
        "candidates", "w_known", "w_all",
        alias(exp.cast(num(2), "BIGINT"), "big_branches"),
    ).from_(alias(exp.Subquery(this=_best_of_candidates(criteria)), "k"), copy=False)


def _ordered_left_sums(
    hist: exp.Table, agg: exp.Select, continuous: exp.Expression, criteria: SplitCriteria
) -> tuple[exp.Select, exp.Select]:
    """The ordered scan, and every cut of it (reading the scan as the table ``scan``) with its
    group's totals and its left class sums ``l<i>``."""
    k = criteria.n_classes
    classes = class_columns(k)
    known = exp.and_(col("v").is_(exp.null()).not_(), continuous.copy())
    bits = criteria.options.bits
    fixed = criteria.options.fractional or bits is not None
    scan = ordered_scan(
        hist, classes, known, "next_value", [scan_term(c, fixed, bits) for c in classes]
    )
    # ``agg`` holds each group's known sums, in fixed point as ``f<i>`` when ``fixed``.
    before = [sum_before(f"f{i}" if fixed else f"k{i}", f"o{i}") for i in range(k)]
    totals = (
        exp.select("*", *before)
        .from_(alias(exp.Subquery(this=agg.copy()), "t"), copy=False)
        .where(continuous.copy(), copy=False)
    )
    # Each left count once per cut: the gain uses it many times, and the subtraction and
    # conversion of 128-bit sums cost more than the arithmetic on doubles.
    return scan, (
        exp.select(
            col("node", "s"),
            col("attr", "s"),
            col("v", "s"),
            col("next_value", "s"),
            *[col(c, "t") for c in ("w_all", "w_known", "w_unknown")],
            *[col(f"k{i}", "t") for i in range(k)],
            *[
                alias(left_sum(col(f"g{i}", "s") - col(f"o{i}", "t"), fixed, bits), f"l{i}")
                for i in range(k)
            ],
        )
        .from_(alias(exp.to_table("scan"), "s"), copy=False)
        .join(alias(exp.Subquery(this=totals), "t"), on=same_group("s", "t"), copy=False)
        # A histogram with rows per level row (``build_histogram``'s ``rowwise``) repeats a
        # value; only its last row, whose sums hold every repeat, is a cut.
        .where(exp.LT(this=col("v", "s"), expression=col("next_value", "s")), copy=False)
    )


def _best_of_candidates(criteria: SplitCriteria) -> exp.Select:
    """Per (node, attr) of the CTE ``cand``: the lowest threshold whose gain is within
    ``threshold_tie`` of the best, with that cut's columns, and the number of valid cuts."""
    best = (
        exp.select(
            col("node"),
            col("attr"),
            alias(exp.func("COUNT", exp.Star()), "n_valid"),
            alias(exp.func("MAX", col("gain")), "best_gain"),
        )
        .from_("cand", copy=False)
        .group_by(col("node"), col("attr"), copy=False)
    )

    def first(name: str) -> exp.Expression:
        return alias(
            exp.ArgMin(this=col(name, "c"), expression=col("threshold", "c")), name
        )

    return (
        exp.select(
            col("node", "c"),
            col("attr", "c"),
            alias(exp.func("MIN", col("threshold", "c")), "threshold"),
            first("next_value"),
            first("gain"),
            first("lw"),
            alias(exp.cast(exp.func("MIN", col("n_valid", "b")), "BIGINT"), "candidates"),
            *[
                alias(exp.func("MIN", col(name, "c")), name)
                for name in ("w_known", "w_all", "w_unknown")
            ],
        )
        .from_(alias(exp.to_table("cand"), "c"), copy=False)
        .join(alias(exp.Subquery(this=best), "b"), on=same_group("c", "b"), copy=False)
        .where(
            exp.GTE(
                this=col("gain", "c"),
                expression=col("best_gain", "b") - num(criteria.options.threshold_tie),
            ),
            copy=False,
        )
        .group_by(col("node", "c"), col("attr", "c"), copy=False)
    )


# -- observed thresholds -------------------------------------------------------------------------
CHOSEN_COLUMNS = (("key", "BIGINT"), ("attr", "INT"), ("low", "DOUBLE"), ("mid", "DOUBLE"))
"""Columns of the table of cuts whose printed threshold is wanted: (node, feature, the value
below the cut, the midpoint)."""


def build_observed_thresholds(
    values: exp.Table, chosen: exp.Expression, asof: bool = False
) -> exp.Select:
    """The largest training value not above each midpoint (C4.5 prints observed values).

    ``chosen`` is a table of (key, attr, low, midpoint) (``CHOSEN_COLUMNS``); ``values`` is
    the table of distinct (attr, v) pairs of the training data (``build_distinct_values``).
    ``low`` is itself a training value not above the midpoint, so the largest value not above
    the midpoint is the one wanted. With ``asof`` (engines with ``ASOF JOIN``) it is found by
    one sort-merge; elsewhere by one window over the values and the midpoints sorted together
    (``_running_maximum``). A range join (``v BETWEEN low AND mid``) compares every cut with
    every value of its feature: 1,230 s for the 1M-row benchmark's cuts on PostgreSQL.
    """
    table = alias(chosen.copy(), "q")
    if not asof:
        return _running_maximum(values, chosen)
    join = exp.Join(
        this=alias(values.copy(), "d"),
        method="ASOF",
        on=exp.and_(
            exp.EQ(this=col("attr", "q"), expression=col("attr", "d")),
            exp.GTE(this=col("mid", "q"), expression=col("v", "d")),
        ),
    )
    select = exp.select(col("key", "q"), alias(col("v", "d"), "threshold"))
    return select.from_(table).join(join)


def _running_maximum(values: exp.Table, chosen: exp.Expression) -> exp.Select:
    """Per cut, the running maximum of the values up to its midpoint, per feature, in the
    order of (position, values before midpoints), so that a value equal to a midpoint counts."""
    points = exp.union(
        exp.select(
            col("attr"), alias(col("v"), "pos"), alias(num(0), "kind"), col("v"),
            alias(exp.cast(exp.null(), "BIGINT"), "key"),
        ).from_(values.copy()),
        exp.select(
            col("attr"), alias(col("mid"), "pos"), alias(num(1), "kind"),
            alias(exp.cast(exp.null(), "DOUBLE"), "v"), col("key"),
        ).from_(chosen.copy()),
        distinct=False,
    )
    running = window(exp.func("MAX", col("v")), [col("attr")], [col("pos"), col("kind")],
                     running=True)
    scanned = exp.select(col("key"), alias(running, "threshold")).from_(
        alias(exp.Subquery(this=points), "p"), copy=False
    )
    return exp.select("key", "threshold").from_(
        alias(exp.Subquery(this=scanned), "r"), copy=False
    ).where(col("key").is_(exp.null()).not_(), copy=False)


def build_distinct_values(hist: exp.Table, features: Sequence[Feature]) -> exp.Select:
    """The distinct known (attr, v) pairs of the continuous features in a root histogram."""
    attrs = [f.index for f in features if f.kind == CONTINUOUS]
    return (
        exp.select("attr", "v")
        .from_(hist.copy())
        .where(
            exp.and_(
                col("v").is_(exp.null()).not_(),
                attr_in(attrs),
            )
        )
        .group_by("attr", "v")
    )
