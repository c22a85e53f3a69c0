"""CART's continuous candidates by the bound-pruned search (``sqltree.bounded_search``).

The candidates are the cuts at bin boundaries and the cuts inside the bins whose bound reaches
the best boundary (or known-left) candidate of any continuous feature of their node, less twice
the tie tolerance. Every candidate that could win or tie with the winner is among them, so each
feature that ``CARTStrategy.choose`` may take or count as a tie has the full scan's best
candidate and ``n_near``; a feature none of whose candidates comes that near may report a lower
best, which is as far from being chosen. The bound covers both unknown sides: a candidate with
the unknown rows left sends ``L + U`` left, the same box shifted.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from sqlglot import exp

from ... import bounded_search as bs
from ...dataset import Feature
from ...sqlexpr import add_all, alias, binary, class_columns, col, num, paren
from .sql_impurity import build_impurity

Candidate = Callable[..., list[exp.Expression]]
"""A continuous cut's candidate columns from (threshold, next value, rows left, class weights
left): ``scores._candidate`` with the kind of a continuous cut."""


def bounded_continuous(
    hist: exp.Table,
    search_edges: bs.Edges,
    continuous: Sequence[Feature],
    n_classes: int,
    *,
    stats: exp.Select,
    criterion: str,
    candidate: Candidate,
    known_left: exp.Select,
    scored: Callable[[exp.Expression], exp.Select],
    feature_threshold: float,
    tolerance: float,
    fixed: bool,
    bits: int | None,
    ordered: bool,
    ctes: list[tuple[str, exp.Expression]],
) -> exp.Select:
    """The continuous candidates worth scoring, in ``candidate``'s columns.

    ``stats``: the (node, feature) totals of ``scores._feature_totals``; ``known_left``: the
    continuous features' known-left candidates; ``scored``: candidates with their unknown
    sides, leaf rules and ``gain`` (``scores._gains``); ``criterion``: gini or entropy;
    ``ordered``: the cuts inside bins by one ordered streaming scan (DuckDB), not partitioned
    windows. Adds the CTE ``bins`` (and the scan's) to ``ctes``.
    """
    edges = {f.index: search_edges[f.index] for f in continuous if f.index in search_edges}
    k = n_classes
    columns = ["n", *class_columns(k)]
    counts = ("n",)
    converted = fixed or bits is not None
    ctes.append(("bins", bs.binned_sums(hist, edges, columns, fixed=fixed, bits=bits,
                                        counts=counts)))
    through = bs.weights("e", columns, converted, bits, counts)
    boundary = (
        exp.select(*candidate(col("hi"), col("nlo"), through[0], through[1:]))
        .from_("bins", copy=False)
        .where(_apart(col("hi"), col("nlo"), feature_threshold), copy=False)
    )
    exact = scored(exp.union(boundary.copy(), known_left, distinct=False, copy=False))
    best = (
        exp.select(col("node"), alias(exp.func("MAX", col("gain")), "best_gain"))
        .from_(exact.subquery("ex", copy=False), copy=False)
        .group_by(col("node"), copy=False)
    )
    keep = _worth_scanning(stats, best, k, criterion, tolerance, converted, bits)
    inside = bs.interior_cuts(hist, keep, edges, columns, fixed=fixed, bits=bits, counts=counts,
                              ctes=ctes if ordered else None)
    interior = exp.select(
        *candidate(col("v"), col("nv"), col("l0"), [col(f"l{i + 1}") for i in range(k)])
    ).from_(inside.subquery("ic", copy=False), copy=False).where(
        _apart(col("v"), col("nv"), feature_threshold), copy=False
    )
    return exp.union(boundary, interior, distinct=False, copy=False)


def _apart(v: exp.Expression, nv: exp.Expression, gap: float) -> exp.Expression:
    return exp.and_(nv.is_(exp.null()).not_(), exp.GT(this=nv.copy(), expression=v + num(gap)))


def _worth_scanning(
    stats: exp.Select,
    best: exp.Select,
    n_classes: int,
    criterion: str,
    tolerance: float,
    converted: bool,
    bits: int | None,
) -> exp.Select:
    """The bins of ``bins`` with two or more values whose bound reaches their node's best
    exact candidate (``best``: node, best_gain) less twice ``tolerance`` (one for ties, one
    for the rounding of either score): node, attr, b, lo, hi and the sums before the bin.

    The corners' gains are built over named columns, a layer of subqueries at a time: written
    out in one expression they would repeat each side's sums in every term.
    """
    k = n_classes
    columns = ["n", *class_columns(k)]
    low = bs.weights("s", columns, converted, bits, ("n",), "bn")[1:]
    high = bs.weights("e", columns, converted, bits, ("n",), "bn")[1:]
    corners = list(itertools.product((0, 1), repeat=k))
    # unknown rows right (side 0), then left: the same box shifted by the unknown weights
    lefts = []
    for side, corner in itertools.product((0, 1), corners):
        left = []
        for i, bit in enumerate(corner):
            edge = (high if bit else low)[i].copy()
            unknown = paren(col(f"t{i}", "st") - col(f"k{i}", "st"))
            left.append(paren(edge + unknown) if side else edge)
        lefts.append(left)
    keys = [col("node", "bn"), col("attr", "bn"), col("b", "bn"), col("lo", "bn"),
            col("hi", "bn"), *[col(f"s{i}", "bn") for i in range(k + 1)]]
    same = exp.and_(
        exp.EQ(this=col("node", "bn"), expression=col("node", "st")),
        exp.EQ(this=col("attr", "bn"), expression=col("attr", "st")),
    )
    totals = [col(f"t{i}", "st") for i in range(k)]
    corner_sums = (
        exp.select(
            *keys,
            alias(add_all(totals), "w"),
            alias(build_impurity(totals, add_all([t.copy() for t in totals]), criterion), "imp"),
            *[alias(t.copy(), f"t{i}") for i, t in enumerate(totals)],
            *[alias(e, f"a{c}_{i}") for c, left in enumerate(lefts) for i, e in enumerate(left)],
        )
        .from_(alias(exp.to_table("bins"), "bn"), copy=False)
        .join(alias(stats.subquery(copy=False), "st"), on=same, copy=False)
        .where(exp.LT(this=col("lo", "bn"), expression=col("hi", "bn")), copy=False)
    )
    passed = ["node", "attr", "b", "lo", "hi", *[f"s{i}" for i in range(k + 1)]]

    def side(counts: list[exp.Expression]) -> exp.Expression:
        """``w_side / w * impurity(side)``, built without copying what it nests."""
        w_side = add_all(counts)
        share = paren(binary(exp.Div, w_side.copy(), col("w")))
        return binary(exp.Mul, share, build_impurity(counts, w_side, criterion))

    def gain(c: int) -> exp.Expression:
        left = [col(f"a{c}_{i}") for i in range(k)]
        right = [paren(binary(exp.Sub, col(f"t{i}"), col(f"a{c}_{i}"))) for i in range(k)]
        return binary(exp.Sub, binary(exp.Sub, col("imp"), side(right)), side(left))

    bounded = exp.select(
        *passed, alias(exp.func("GREATEST", *[gain(c) for c in range(len(lefts))]), "bound")
    ).from_(corner_sums.subquery("cs", copy=False), copy=False)
    return (
        exp.select(*[col(c, "bd") for c in passed])
        .from_(bounded.subquery("bd", copy=False), copy=False)
        .join(
            alias(best.subquery(copy=False), "bb"),
            on=exp.EQ(this=col("node", "bd"), expression=col("node", "bb")),
            join_type="left",
            copy=False,
        )
        .where(
            exp.or_(
                col("best_gain", "bb").is_(exp.null()),
                exp.GTE(this=col("bound", "bd"),
                        expression=col("best_gain", "bb") - num(2 * tolerance)),
            ),
            copy=False,
        )
    )
