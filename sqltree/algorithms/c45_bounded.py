"""C4.5's and ID3's best cut per (node, continuous feature) by the bound-pruned search
(``sqltree.bounded_search``): the rows of ``c45_cuts.best_cuts_ordered``, to the last bit.

J48 compares features by gain ratio among those whose gain is at least the average of every
feature's gain, so each (node, feature)'s best cut, its gain, split info and its number of
valid cuts (the MDL correction ``log2(valid cuts) / N``) can decide the choice; all are exact
here. Within a (node, feature) the best cut is the one of highest information gain (ties
within ``threshold_tie`` to the lowest threshold), and gain is convex in the left class
vector, so the corner bound of ``bounded_search`` covers every cut inside a bin. A bin is
scanned when its bound reaches the best valid boundary cut of its own (node, feature), less
the tie tolerance and a rounding margin; every cut that could be its feature's best, or tie
with it, is then scored exactly.

The count of valid cuts: a cut is valid when both sides weigh more than the minimum split
(``SplitCriteria.min_split``) and its values are more than ``cut_gap`` apart. The left weight
only grows along a feature's values, so a bin whose sums before it already clear the minimum
and whose sums through it leave enough on the right holds only valid cuts (its distinct values
less one), and a bin below or above those limits holds none; at most two bins per
(node, feature) straddle a limit, and those are always scanned. Features that have two values
within ``cut_gap`` anywhere (``build_close_features``, once per training) keep the full scan:
bins cannot see such gaps.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from sqlglot import exp

from .. import bounded_search as bs
from ..criteria import J48_SMALL
from ..queries import attr_in
from ..running_sums import same_group
from ..sqlexpr import add_all, alias, case, class_columns, col, num, paren, window, xlogx
from .c45_criteria import LN2, SplitCriteria

MAX_C45_BOUND_CLASSES = bs.MAX_BOUND_CLASSES
"""Above this many classes the 2^k corners cost more than the scan they save."""

MIN_GROUP_VALUES = bs.MIN_GROUP_VALUES

ROUNDING_MARGIN = 1e-9
"""Added to the tie tolerance: a bound and an exact gain are rounded differently."""


def build_close_features(values: exp.Table, gap: float) -> exp.Select:
    """The features (attr) of the table of distinct (attr, v) with two neighbouring values
    that are not more than ``gap`` apart: no node has a cut between them either."""
    nxt = exp.select(
        "attr", "v", alias(window(exp.func("LEAD", col("v")), [col("attr")], [col("v")]), "nv")
    ).from_(values.copy())
    return (
        exp.select("attr")
        .from_(nxt.subquery("n", copy=False), copy=False)
        .where(exp.and_(
            col("nv").is_(exp.null()).not_(),
            exp.GTE(this=paren(col("v") + num(gap)), expression=col("nv")),
        ), copy=False)
        .group_by("attr", copy=False)
    )


def count_known(hist: exp.Table, attrs: Sequence[int]) -> exp.Select:
    """The histogram's rows of known values of the features ``attrs``."""
    return exp.select(exp.func("COUNT", exp.Star())).from_(hist.copy()).where(exp.and_(
        col("v").is_(exp.null()).not_(), attr_in(attrs)))


def bounded_best_cuts(
    hist: exp.Table,
    agg: exp.Select,
    edges: Mapping[int, Sequence[float]],
    criteria: SplitCriteria,
    ctes: list[tuple[str, exp.Expression]],
    ordered: bool,
) -> exp.Select:
    """Best cut per (node, feature of ``edges``), in ``best_cuts_ordered``'s columns.

    ``agg``: ``node_feature_totals``; ``ordered``: the cuts inside bins by one ordered
    streaming scan (DuckDB), else windows. Adds its CTEs to ``ctes``.
    """
    options = criteria.options
    k = criteria.n_classes
    columns = class_columns(k)
    bits = options.bits
    fixed = options.fractional or bits is not None
    ctes.append(("ftotals", agg.copy().where(attr_in(sorted(edges)), copy=False)))
    ctes.append(("bins", bs.binned_sums(hist, edges, columns, fixed=fixed, bits=bits,
                                        distinct=True)))
    through = bs.weights("e", columns, fixed, bits, table="bn")
    boundary = exp.select(
        col("node", "bn"), col("attr", "bn"), alias(col("hi", "bn"), "v"),
        alias(col("nlo", "bn"), "next_value"), *[alias(w, f"l{i}") for i, w in enumerate(through)],
    ).from_(alias(exp.to_table("bins"), "bn")).where(col("nlo", "bn").is_(exp.null()).not_())
    ctes.append(("edge_cuts", _scored(boundary, criteria)))
    ctes.append(("bin_bounds", _bin_bounds(criteria, fixed)))
    keep = (
        exp.select("node", "attr", "b", "lo", "hi", *[f"s{i}" for i in range(k)])
        .from_("bin_bounds")
        .where(exp.EQ(this=col("scan"), expression=num(1)))
    )
    inside = bs.interior_cuts(hist, keep, edges, columns, fixed=fixed, bits=bits,
                              ctes=ctes if ordered else None)
    interior = exp.select(
        "node", "attr", "v", alias(col("nv"), "next_value"), *[f"l{i}" for i in range(k)]
    ).from_(inside.subquery("ic", copy=False), copy=False)
    valid = exp.EQ(this=col("valid"), expression=num(1))
    ctes.append(("bcand", exp.union(
        exp.select("*").from_("edge_cuts").where(valid.copy()),
        exp.select("*").from_(_scored(interior, criteria).subquery("sc")).where(valid.copy()),
        distinct=False,
    )))
    return _best(criteria)


def _scored(lefts: exp.Select, criteria: SplitCriteria) -> exp.Select:
    """Cuts (node, attr, v, next_value, left class weights ``l<i>``) with threshold, gain,
    left weight ``lw`` and ``valid`` (1 or 0), by ``SplitCriteria.cut`` as the full scan."""
    k = criteria.n_classes
    left = [col(f"l{i}", "s") for i in range(k)]
    lw = add_all([c.copy() for c in left])
    scores = criteria.cut(left, lw, "s")
    # a histogram with rows per level row repeats a value; only cuts between values count
    valid = exp.and_(scores["valid"],
                     exp.LT(this=col("v", "s"), expression=col("next_value", "s")))
    return (
        exp.select(
            col("node", "s"), col("attr", "s"), alias(col("v", "s"), "threshold"),
            col("next_value", "s"), alias(scores["gain"], "gain"), alias(lw.copy(), "lw"),
            alias(case((valid, num(1)), default=num(0)), "valid"),
        )
        .from_(lefts.subquery("s", copy=False), copy=False)
        .join(alias(exp.to_table("ftotals"), "a"), on=same_group("s", "a"), copy=False)
    )


def _bin_bounds(criteria: SplitCriteria, fixed: bool) -> exp.Select:
    """Per bin of two or more values of ``bins``: node, attr, b, lo, hi, the sums ``s<i>``
    before it, ``d``, ``all_valid`` (1: every cut inside is valid) and ``scan`` (1: its cuts
    are scored)."""
    k = criteria.n_classes
    bits = criteria.options.bits
    columns = class_columns(k)
    low = bs.weights("s", columns, fixed, bits, table="bn")
    high = bs.weights("e", columns, fixed, bits, table="bn")
    least = paren(criteria.min_split() - num(J48_SMALL))
    known = col("w_known", "a")
    low_w, high_w = add_all([e.copy() for e in low]), add_all([e.copy() for e in high])
    # left weights inside the bin lie between low_w and high_w (rounded sums are monotone)
    all_valid = exp.and_(exp.GT(this=low_w, expression=least.copy()),
                         exp.GT(this=paren(known.copy() - high_w), expression=least.copy()))
    none_valid = exp.or_(exp.LTE(this=high_w.copy(), expression=least.copy()),
                         exp.LTE(this=paren(known.copy() - low_w.copy()),
                                 expression=least.copy()))
    corners = list(itertools.product((0, 1), repeat=k))
    passed = ["node", "attr", "b", "lo", "hi", "d", *[f"s{i}" for i in range(k)]]
    corner_sums = (
        exp.select(
            *[col(c, "bn") for c in passed],
            *[col(c, "a") for c in ("w_known", "w_all", "w_unknown")],
            *[col(f"k{i}", "a") for i in range(k)],
            alias(case((all_valid, num(1)), default=num(0)), "all_valid"),
            alias(case((none_valid, num(1)), default=num(0)), "none_valid"),
            col("best", "bb"),
            alias(criteria.parent_entropy(), "pe"),
            alias(criteria.weight(), "wt"),
            *[alias((high if bit else low)[i].copy(), f"c{c}_{i}")
              for c, corner in enumerate(corners) for i, bit in enumerate(corner)],
            copy=False,
        )
        .from_(alias(exp.to_table("bins"), "bn"), copy=False)
        .join(alias(exp.to_table("ftotals"), "a"), on=same_group("bn", "a"), copy=False)
        .join(alias(_best_boundary().subquery(copy=False), "bb"), on=same_group("bn", "bb"),
              join_type="left", copy=False)
        .where(exp.LT(this=col("lo", "bn"), expression=col("hi", "bn")), copy=False)
    )

    def gain(c: int) -> exp.Expression:
        """``SplitCriteria.cut``'s gain at a corner, over the columns of ``corner_sums``."""
        left = [col(f"c{c}_{i}", "a") for i in range(k)]
        right = [paren(exp.Sub(this=col(f"k{i}", "a"), expression=col(f"c{c}_{i}", "a")))
                 for i in range(k)]
        lw = add_all([e.copy() for e in left])
        rw = paren(exp.Sub(this=col("w_known", "a"), expression=add_all(
            [e.copy() for e in left])))
        mass = exp.Sub(this=exp.Sub(this=col("pe", "a"), expression=_mass(left, lw)),
                       expression=_mass(right, rw))
        return exp.Div(this=paren(mass),
                       expression=paren(exp.Mul(this=col("wt", "a"), expression=num(LN2))))

    gains = [gain(c) for c in range(len(corners))]
    bound = exp.Greatest(this=gains[0], expressions=gains[1:])
    margin = num(criteria.options.threshold_tie + ROUNDING_MARGIN)
    # built without exp.and_/or_, which would copy the bound's large expression
    reaches = exp.Or(
        this=exp.Or(this=exp.EQ(this=col("all_valid", "a"), expression=num(0)),
                    expression=col("best", "a").is_(exp.null())),
        expression=exp.GTE(this=bound, expression=col("best", "a") - margin),
    )
    scan = exp.And(this=exp.EQ(this=col("none_valid", "a"), expression=num(0)),
                   expression=paren(reaches))
    return exp.select(
        *[col(c, "a") for c in passed], col("all_valid", "a"),
        alias(case((scan, num(1)), default=num(0)), "scan"), copy=False,
    ).from_(corner_sums.subquery("a", copy=False), copy=False)


def _mass(counts: list[exp.Expression], weight: exp.Expression) -> exp.Expression:
    """``entropy_mass`` built without copying its growing operand."""
    out: exp.Expression = xlogx(weight)
    for c in counts:
        out = exp.Sub(this=out, expression=xlogx(c))
    return paren(out)


def _best_boundary() -> exp.Select:
    """Per (node, attr): the highest gain of a valid boundary cut (NULL: none is valid)."""
    return (
        exp.select("node", "attr", alias(exp.func("MAX", case(
            (exp.EQ(this=col("valid"), expression=num(1)), col("gain")), default=exp.null()
        )), "best"))
        .from_("edge_cuts")
        .group_by("node", "attr")
    )


def _best(criteria: SplitCriteria) -> exp.Select:
    """Per (node, attr) of ``bcand``: the lowest threshold whose gain is within
    ``threshold_tie`` of the best, its split info, and the number of valid cuts (those scored
    and those of the bins left unscanned whose cuts are all valid)."""
    part = [col("node"), col("attr")]
    ranked = exp.select(
        "*", alias(window(exp.func("MAX", col("gain")), part), "best_gain"),
    ).from_("bcand")
    near = exp.select(
        "*",
        alias(window(exp.func("ROW_NUMBER"), part, [col("threshold")]), "rank_in_ties"),
    ).from_(ranked.subquery("r", copy=False), copy=False).where(
        exp.GTE(this=col("gain"), expression=col("best_gain") - num(
            criteria.options.threshold_tie)),
        copy=False,
    )
    unscanned = (
        exp.select("node", "attr", alias(exp.func("SUM", col("d") - num(1)), "n_unscanned"))
        .from_("bin_bounds")
        .where(exp.and_(exp.EQ(this=col("scan"), expression=num(0)),
                        exp.EQ(this=col("all_valid"), expression=num(1))))
        .group_by("node", "attr")
    )
    scored = (
        exp.select("node", "attr", alias(exp.func("COUNT", exp.Star()), "n_valid"))
        .from_("bcand")
        .group_by("node", "attr")
    )
    candidates = exp.cast(
        col("n_valid", "n") + exp.func("COALESCE", col("n_unscanned", "u"), num(0)), "BIGINT"
    )
    return (
        exp.select(
            col("node", "t"), col("attr", "t"), col("threshold", "t"), col("next_value", "t"),
            col("gain", "t"), alias(criteria.split_info(col("lw", "t"), "a"), "split_info"),
            alias(candidates, "candidates"), col("w_known", "a"), col("w_all", "a"),
            alias(exp.cast(num(2), "BIGINT"), "big_branches"),
        )
        .from_(near.subquery("t", copy=False), copy=False)
        .join(alias(exp.to_table("ftotals"), "a"), on=same_group("t", "a"), copy=False)
        .join(scored.subquery("n", copy=False), on=same_group("t", "n"), copy=False)
        .join(unscanned.subquery("u", copy=False), on=same_group("t", "u"), join_type="left",
              copy=False)
        .where(exp.EQ(this=col("rank_in_ties", "t"), expression=num(1)), copy=False)
    )
