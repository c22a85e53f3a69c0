"""C4.5's and ID3's best cut per (node, continuous feature) by the bound-pruned search
(``sqltree.bounded_search``): the rows of ``cuts.best_cuts_ordered``, to the last bit.

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
(node, feature) straddle a limit, and those are always scanned.

Values not more than ``cut_gap`` apart: every cut scored is checked by ``SplitCriteria.cut``,
gap included, and the corner bound covers valid and invalid cuts alike, so only the count of an
unscanned all-valid bin needs them: less the bin's values, but its first, that are close to
their predecessor in the node (``close_pairs``). Which values can be is found once per training
from the distinct values (``build_close_values``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp

from ... import bounded_search as bs
from ...criteria import J48_SMALL
from ...queries import attr_in
from ...running_sums import same_group
from ...sqlexpr import add_all, alias, case, class_columns, col, num, paren, window, xlogx
from .criteria import LN2, SplitCriteria

MAX_C45_BOUND_CLASSES = bs.MAX_BOUND_CLASSES
"""Above this many classes the 2^k corners cost more than the scan they save."""

MIN_GROUP_VALUES = bs.MIN_GROUP_VALUES

ROUNDING_MARGIN = 1e-9
"""Added to the tie tolerance: a bound and an exact gain are rounded differently."""


@dataclass(frozen=True)
class CloseValues:
    """The features with values not more than the cut gap apart (``attrs``), and the table of
    ``build_close_values`` that holds those values."""

    table: exp.Table
    attrs: tuple[int, ...]


def close_limit(gap: float) -> float:
    """No two doubles of magnitude at least this are close: above a double ``a`` of magnitude
    ``2**e`` or more the next lies ``2**(e - 52)`` away, at least ``2**(e - 53)`` at a power of
    two; ``a + gap`` rounds back to ``a`` unless ``gap`` is half that, so ``2**e <= 2**54 * gap``
    and ``|a| < 2**55 * gap``. A value above ``a`` and close to it is then below the limit too."""
    return 2.0**55 * gap


def close_bucket(value: exp.Expression, gap: float) -> exp.Expression:
    """``value``'s bucket: ``FLOOR(value * 2**s)`` as BIGINT, with ``2**-s`` the least power of
    two above ``3 * gap``. Two close values ``a < b`` (``a + gap >= b`` in doubles) are in the
    same bucket or neighbouring ones: ``a + gap`` is rounded by at most half the spacing of the
    doubles there, at most twice the spacing at ``a`` (one binade up), itself at most
    ``2 * gap`` (``close_limit``), so ``b - a <= 3 * gap``. The product by a power of two is
    exact, and below ``close_limit`` the bucket's magnitude is below ``2**55 / 3``: a BIGINT."""
    scale = 2 ** -(math.floor(math.log2(3 * gap)) + 1)
    return exp.cast(exp.func("FLOOR", exp.Mul(this=value, expression=num(scale))), "BIGINT")


def build_close_values(values: exp.Table, attrs: Sequence[int], gap: float) -> exp.Select:
    """The distinct (attr, v) of ``values`` of the features ``attrs`` that are not more than
    ``gap`` above their predecessor (``to_prev`` 1) or below their successor (``to_next`` 1), with
    their bucket ``bk`` (``close_bucket``).

    A node's values are a subset of the feature's, so a value close to its predecessor in a node
    is close to its predecessor over all values (that one lies between), and the value below
    it that makes it close is close to its own successor over all values: only these rows can
    take part in a node's close pair (``close_pairs``). Values beyond ``close_limit`` never can,
    and are left out (which keeps the buckets in BIGINT).
    """
    part, order = [col("attr")], [col("v")]
    near = exp.select(
        "attr", "v",
        alias(window(exp.func("LAG", col("v")), part, order), "pv"),
        alias(window(exp.func("LEAD", col("v")), part, order), "nv"),
    ).from_(values.copy()).where(attr_in(attrs))
    to_prev = exp.GTE(this=paren(col("pv") + num(gap)), expression=col("v"))
    to_next = exp.GTE(this=paren(col("v") + num(gap)), expression=col("nv"))
    return exp.select(
        "attr", "v", alias(close_bucket(col("v"), gap), "bk"),
        alias(case((to_prev, num(1)), default=num(0)), "to_prev"),
        alias(case((to_next, num(1)), default=num(0)), "to_next"),
    ).from_(near.subquery("n", copy=False), copy=False).where(exp.and_(
        exp.LT(this=exp.Abs(this=col("v")), expression=num(close_limit(gap))),
        exp.or_(to_prev.copy(), to_next.copy()),
    ), copy=False)


def close_features(close_values: exp.Table) -> exp.Select:
    """The features of ``build_close_values``' table with a value close to its predecessor."""
    return exp.select("attr").from_(close_values.copy()).where(
        exp.EQ(this=col("to_prev"), expression=num(1))).group_by("attr")


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
    close: CloseValues | None = None,
) -> exp.Select:
    """Best cut per (node, feature of ``edges``), in ``best_cuts_ordered``'s columns.

    ``agg``: ``node_feature_totals``; ``ordered``: the cuts inside bins by one ordered
    streaming scan (DuckDB), else windows; ``close``: the features of ``edges`` with values
    not more than the cut gap apart, and those values. Adds its CTEs to ``ctes``.
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
    close_attrs = [a for a in close.attrs if a in edges] if close else []
    if close and close_attrs:
        close_pairs(hist, close.table, close_attrs, options.cut_gap, ctes)
    return _best(criteria, bool(close_attrs))


def close_pairs(hist: exp.Table, values: exp.Table, attrs: Sequence[int], gap: float,
                ctes: list[tuple[str, exp.Expression]]) -> None:
    """Per (node, attr): ``n_close``, the values of the unscanned all-valid bins of
    ``bin_bounds``, but each bin's first, that are not more than ``gap`` above their
    predecessor in the node: the bins' invalid cuts. Adds the CTEs ``close_rows`` and
    ``close_pairs``.

    Such a value ``b`` has a value ``a`` of its bin below it with ``a + gap >= b`` (its
    predecessor is one, in the bin as ``b`` is not the bin's first; and any such ``a`` lies
    at or below the predecessor, rounding being monotone), so no sort is needed: an equi-join
    on ``close_bucket`` (the witness ``a`` in its bucket and the next), then the exact test.
    ``values`` (``build_close_values``) keeps the join to the values that can be either side.
    """
    unscanned = exp.and_(
        attr_in(attrs, "h"),
        exp.EQ(this=col("scan", "k"), expression=num(0)),
        exp.EQ(this=col("all_valid", "k"), expression=num(1)),
    )
    ctes.append(("close_rows", (
        exp.select(col("node", "h"), col("attr", "h"), col("b", "h"), col("v", "h"),
                   col("lo", "k"), col("bk", "c"), col("to_prev", "c"), col("to_next", "c"))
        .from_(alias(hist.copy(), "h"), copy=False)
        .join(alias(exp.to_table("bin_bounds"), "k"), on=exp.and_(
            same_group("h", "k"), exp.EQ(this=col("b", "h"), expression=col("b", "k"))),
            copy=False)
        .join(alias(values.copy(), "c"), on=exp.and_(
            exp.EQ(this=col("attr", "h"), expression=col("attr", "c")),
            exp.EQ(this=col("v", "h"), expression=col("v", "c"))), copy=False)
        .where(unscanned, copy=False)
    )))
    witness = exp.EQ(this=col("to_next"), expression=num(1))
    witnesses = exp.union(
        exp.select("node", "attr", "b", "v", "bk").from_("close_rows").where(witness),
        exp.select("node", "attr", "b", "v", alias(col("bk") + num(1), "bk"))
        .from_("close_rows").where(witness.copy()),
        distinct=False,
    )
    key = exp.and_(same_group("c", "w"), *[exp.EQ(this=col(c, "c"), expression=col(c, "w"))
                                           for c in ("b", "bk")])
    ctes.append(("close_pairs", (
        exp.select(col("node", "c"), col("attr", "c"),
                   alias(exp.Count(this=exp.Distinct(expressions=[col("v", "c")])), "n_close"))
        .from_(alias(exp.to_table("close_rows"), "c"), copy=False)
        .join(witnesses.subquery("w", copy=False), on=key, copy=False)
        .where(exp.and_(
            exp.EQ(this=col("to_prev", "c"), expression=num(1)),
            exp.GT(this=col("v", "c"), expression=col("lo", "c")),
            exp.LT(this=col("v", "w"), expression=col("v", "c")),
            exp.GTE(this=paren(col("v", "w") + num(gap)), expression=col("v", "c")),
        ), copy=False)
        .group_by(col("node", "c"), col("attr", "c"), copy=False)
    )))


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


def _best(criteria: SplitCriteria, close: bool) -> exp.Select:
    """Per (node, attr) of ``bcand``: the lowest threshold whose gain is within
    ``threshold_tie`` of the best, its split info, and the number of valid cuts (those scored
    and those of the bins left unscanned whose cuts are all valid; with ``close``, less
    ``close_pairs``)."""
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
    count = col("n_valid", "n") + exp.func("COALESCE", col("n_unscanned", "u"), num(0))
    if close:
        count = count - exp.func("COALESCE", col("n_close", "cp"), num(0))
    candidates = exp.cast(count, "BIGINT")
    best = (
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
    if close:
        best = best.join(alias(exp.to_table("close_pairs"), "cp"), on=same_group("t", "cp"),
                         join_type="left", copy=False)
    return best
