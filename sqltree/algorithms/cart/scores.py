"""CART's scoring query: every binary split of every frontier node and feature, in SQL.

The query reads the level's histogram (``queries.build_histogram`` with row counts) and is
built in stages, each a subquery of the next:

1. ``_feature_totals``: per (node, feature) the known rows and class weights, with the node's
   totals (unknown values included);
2. candidates, each with the rows and class weights it sends left: ``_continuous_candidates``
   (a running scan over the sorted values), ``_ordered_candidates`` and ``_subset_candidates``
   (nominal, ``subsets``), ``_known_left_candidates`` (every known value left, the unknown
   ones right);
3. ``_unknown_sides``: each candidate with the unknown rows on the right and on the left;
4. ``_gains``: the children's impurities, the leaf-size rules and the impurity decrease;
5. ``_best_per_feature``: the best candidate per (node, feature) and how many tie with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import NamedTuple

from sqlglot import exp

from ... import queries as q
from ...bounded_search import MAX_BOUND_CLASSES
from ...criteria import TIE_TOLERANCE
from ...dataset import Feature
from ...fixed_point import weight, weight_sum
from ...running_sums import ordered_running_sums
from ...sqlexpr import (
    add_all,
    alias,
    case,
    class_columns,
    col,
    computed_once,
    num,
    paren,
    values_table,
    window,
    with_materialized,
    without_nested_loops,
)
from ...tree import CONTINUOUS, NOMINAL
from .bounded import bounded_continuous
from .sql_impurity import build_impurity
from .subsets import (
    EXACT_SUBSETS_MAX,
    MEAN_ORDER,
    ordered_values,
    orders,
    ranked_values,
    subset_masks,
)

FEATURE_THRESHOLD = 1e-7
"""Adjacent values closer than this are not split apart (scikit-learn's constant)."""


class CARTScoreRow(NamedTuple):
    """A row of ``build_cart_scores`` (or of its numpy twin, ``memory.cart_scores``), of a
    classification or a regression tree: a candidate split of a (node, feature), with the
    values as the engine returns them (the readers convert what they compute with)."""

    node: int
    attr: int
    kind: int  # CONTINUOUS_CUT, ORDERED_CUT, SUBSET or KNOWN_LEFT
    o: int  # an ordered cut's order of the nominal values (``subsets``), else -1
    cut: int  # an ordered cut's last rank left, a subset's mask
    threshold: float | None  # a continuous cut's value below it, else None
    next_value: float | None  # the value above the cut
    side: int  # 1: unknown values go left, 0: right
    n_left: float
    w_left: float
    n_right: float
    w_right: float
    n_unknown: int
    impurity_left: float | None
    impurity_right: float | None
    gain: float | None  # the impurity decrease per unit weight of the node
    impurity_after: float | None
    n_near: int  # the feature's candidates within the tie tolerance of its best


SCORE_COLUMNS = CARTScoreRow._fields
"""Columns of the scoring query's rows."""

CANDIDATE_COLUMNS = SCORE_COLUMNS[: SCORE_COLUMNS.index("n_unknown") + 1]
"""What identifies a candidate and what it sends left and right."""

REGRESSION = ("squared_error", "friedman_mse", "poisson")
"""Criteria of regression trees, scored over a histogram of moments."""

# candidate kinds
CONTINUOUS_CUT = 0
ORDERED_CUT = 1
SUBSET = 2
KNOWN_LEFT = 3

TIE_ORDER = ("side", "kind", "threshold", "o", "cut")
"""Among a feature's tied candidates, the first in this order wins: unknown values right
before left, then continuous cuts, ordered cuts, subsets, known-left; the lowest threshold."""


def build_cart_scores(
    hist: exp.Table,
    features: Sequence[Feature],
    n_classes: int,
    *,
    criterion: str = "gini",
    min_samples_leaf: int = 1,
    min_weight_leaf: float = 0.0,
    all_candidates: bool = False,
    exhaustive: bool = False,
    ordered_scan: bool = False,
    fractional: bool = True,
    bits: int | None = None,
    tie_tolerance: float = TIE_TOLERANCE,
    search_edges: Mapping[int, Sequence[float]] | None = None,
    masks: exp.Table | None = None,
) -> exp.Select:
    """Score every binary split of every node and feature of the histogram's level.

    Returns the best candidate per (node, feature) (``SCORE_COLUMNS``; ``n_near`` counts the
    feature's candidates within ``TIE_TOLERANCE`` of its best), or every valid candidate when
    ``all_candidates``. ``gain`` is the impurity decrease per unit weight of the node,
    ``impurity(node) - w_right/w * impurity(right) - w_left/w * impurity(left)``.
    ``exhaustive`` scores every two-way partition of nominal features up to
    ``EXACT_SUBSETS_MAX`` values, two classes included (for tests and worked examples).
    ``ordered_scan``: continuous running sums from one ordered streaming scan
    (``running_sums.ordered_running_sums``; DuckDB) instead of windows per (node, feature).
    ``fractional``: weights may be fractional (class or sample weights), so the ordered scan
    sums in fixed point. ``bits``: the histogram holds fixed-point weights
    (``queries.build_histogram``), whose sums here are exact, so the counts of a candidate (and
    the shares a split stores) are the same on every run and engine.

    A regression criterion (``REGRESSION``): a regression histogram (``queries.MOMENTS``,
    ``n_classes`` 3): the moments (in fixed point, ``bits``) take the class weights' place in
    every stage, nominal values are ordered by their mean target (every cut: exact for
    squared error, Breiman et al. 1984, theorem 4.5), ``gain`` is the impurity decrease
    (``_regression_gains``) and ``tie_tolerance`` its ties.

    ``search_edges`` (bin edges per continuous feature; the histogram holds the bins,
    ``queries.build_histogram``'s ``search_bins``): the bound-pruned threshold search
    (``bounded.bounded_continuous``), the same choice as the full scan; classification with at
    most ``MAX_BOUND_CLASSES`` classes, not with ``all_candidates``.

    ``masks``: the nominal partitions as a table a training stores once (``subset_masks``).
    """
    k = n_classes
    regression = criterion in REGRESSION
    continuous = [f.index for f in features if f.kind == CONTINUOUS]
    nominal = [f.index for f in features if f.kind == NOMINAL]
    totals, agg, stats = _feature_totals(hist, features, k, bits)
    parts: list[exp.Select] = []
    # read by several parts: computed once (each inlined copy scanned the whole histogram)
    ctes: list[tuple[str, exp.Expression]] = [("feature_totals", totals)]
    bounded = (
        search_edges is not None and not regression and not all_candidates
        and k <= MAX_BOUND_CLASSES
    )
    if continuous and bounded:
        assert search_edges is not None
        cont = [f for f in features if f.kind == CONTINUOUS]
        parts.append(bounded_continuous(
            hist, search_edges, cont, k, stats=stats, criterion=criterion,
            candidate=partial(_candidate, CONTINUOUS_CUT, num(-1), num(0)),
            known_left=_known_left_candidates(agg, cont, k),
            scored=lambda c: _gains(_unknown_sides(c, stats, k), k, criterion,
                                    min_samples_leaf, min_weight_leaf),
            feature_threshold=FEATURE_THRESHOLD, tolerance=tie_tolerance,
            fixed=ordered_scan and fractional, bits=bits, ordered=ordered_scan, ctes=ctes,
        ))
    elif continuous:
        parts.append(
            _continuous_candidates(
                hist, continuous, k,
                ordered_scan=ordered_scan, fractional=fractional, bits=bits, ctes=ctes,
            )
        )
    if nominal:
        parts.append(_ordered_candidates(hist, nominal, k, exhaustive, bits, regression))
        if (k > 2 or exhaustive) and not regression:
            bt = alias(masks.copy(), "bt") if masks else subset_masks(features, "bt")
            parts.append(_subset_candidates(hist, nominal, k, bits, bt))
    parts.append(_known_left_candidates(agg, features, k))
    union: exp.Expression = (
        parts[0] if len(parts) == 1 else exp.union(*parts, distinct=False, copy=False)
    )
    expanded = _unknown_sides(union, stats, k)
    gains = _regression_gains if regression else _gains
    with_gain = gains(expanded, k, criterion, min_samples_leaf, min_weight_leaf)
    columns = [c for c in SCORE_COLUMNS if c != "n_near"]
    if all_candidates:
        every = (
            exp.select(*columns, alias(exp.cast(num(1), "BIGINT"), "n_near"))
            .from_(with_gain.subquery("w", copy=False), copy=False)
            .order_by(col("node"), col("attr"), *[col(c) for c in TIE_ORDER], copy=False)
        )
        return without_nested_loops(with_materialized(every, ctes, ordered_scan))
    best = with_materialized(
        _best_per_feature(with_gain, columns, ordered_scan, ctes, tie_tolerance), ctes,
        ordered_scan,
    )
    return without_nested_loops(best)


def _feature_totals(
    hist: exp.Table, features: Sequence[Feature], n_classes: int, bits: int | None
) -> tuple[exp.Select, exp.Select, exp.Select]:
    """Per (node, feature): known rows ``kn`` and class weights ``k<i>``: the CTE
    ``feature_totals``'s body, and a query of that CTE (``agg``); and the same joined with the
    node's totals ``tn`` and ``t<i>``, unknown values included."""
    classes = class_columns(n_classes)
    is_known = col("v").is_(exp.null()).not_()

    def known_sum(e: exp.Expression) -> exp.Expression:
        return exp.func("SUM", case((is_known, e), default=num(0)))

    body = (
        exp.select(
            col("node"),
            col("attr"),
            # a BIGINT: PostgreSQL sums BIGINTs to NUMERIC, slow in every candidate's arithmetic
            alias(exp.cast(known_sum(col("n")), "BIGINT"), "kn"),
            *[alias(weight(known_sum(col(c)), bits), f"k{i}") for i, c in enumerate(classes)],
        )
        .from_(hist.copy(), copy=False)
        .where(q.of_features(features), copy=False)
        .group_by(col("node"), col("attr"), copy=False)
    )
    agg = exp.select("*").from_("feature_totals")
    totals = (
        exp.select(
            col("node"),
            alias(col("n"), "tn"),
            *[alias(weight(col(c), bits), f"t{i}") for i, c in enumerate(classes)],
        )
        .from_(hist.copy(), copy=False)
        .where(exp.EQ(this=col("attr"), expression=num(-1)), copy=False)
    )
    stats = (
        exp.select("ag.*", col("tn", "tt"), *[col(f"t{i}", "tt") for i in range(n_classes)])
        .from_(agg.subquery("ag", copy=False), copy=False)
        .join(
            totals.subquery("tt", copy=False),
            on=exp.EQ(this=col("node", "ag"), expression=col("node", "tt")),
            copy=False,
        )
    )
    return body, agg, stats


def _candidate(
    kind: int,
    o: exp.Expression,
    cut: exp.Expression,
    threshold: exp.Expression,
    next_value: exp.Expression,
    ln: exp.Expression,
    ls: Sequence[exp.Expression],
) -> list[exp.Expression]:
    """A candidate's columns, one type each in every part of the union."""
    return [
        col("node"),
        col("attr"),
        alias(exp.cast(num(kind), "INT"), "kind"),
        alias(exp.cast(o, "INT"), "o"),
        alias(exp.cast(cut, "BIGINT"), "cut"),
        alias(exp.cast(threshold, "DOUBLE"), "threshold"),
        alias(exp.cast(next_value, "DOUBLE"), "next_value"),
        alias(exp.cast(ln, "DOUBLE"), "ln"),
        *[alias(exp.cast(l_, "DOUBLE"), f"l{i}") for i, l_ in enumerate(ls)],
    ]


def _left_sums(n_classes: int) -> list[exp.Expression]:
    return [col(f"l{i}") for i in range(n_classes)]


def _continuous_candidates(
    hist: exp.Table,
    continuous: Sequence[int],
    n_classes: int,
    *,
    ordered_scan: bool,
    fractional: bool,
    bits: int | None,
    ctes: list[tuple[str, exp.Expression]],
) -> exp.Select:
    """``a <= t`` between adjacent known values more than ``FEATURE_THRESHOLD`` apart, with
    the running row count and class weights (or moments) up to ``a``."""
    k = n_classes
    in_continuous = q.attr_in(continuous)
    sums = ["n", *class_columns(k)]
    scan: exp.Select
    if ordered_scan:
        running = ordered_running_sums(
            hist, sums, in_continuous, prefix="r", ctes=ctes, fixed=fractional, bits=bits,
            counts=("n",),
        )
        scan = exp.select(
            "node", "attr", "v", "nv",
            alias(col("r0"), "ln"),
            *[alias(col(f"r{i + 1}"), f"l{i}") for i in range(k)],
        ).from_(running.subquery("rs", copy=False), copy=False)
    else:
        part = [col("node"), col("attr")]
        scan = (
            exp.select(
                col("node"),
                col("attr"),
                col("v"),
                alias(window(exp.func("LEAD", col("v")), part, [col("v")]), "nv"),
                *[
                    alias(
                        weight(
                            window(exp.func("SUM", col(c)), part, [col("v")], running=True),
                            None if c == "n" else bits,
                        ),
                        name,
                    )
                    for c, name in zip(sums, ["ln", *[f"l{i}" for i in range(k)]], strict=True)
                ],
            )
            .from_(hist.copy(), copy=False)
            .where(exp.and_(col("v").is_(exp.null()).not_(), in_continuous), copy=False)
        )
    return (
        exp.select(
            *_candidate(CONTINUOUS_CUT, num(-1), num(0), col("v"), col("nv"), col("ln"),
                        _left_sums(k))
        )
        .from_(scan.subquery("cs", copy=False), copy=False)
        .where(
            exp.and_(
                col("nv").is_(exp.null()).not_(),
                exp.GT(this=col("nv"), expression=col("v") + num(FEATURE_THRESHOLD)),
            ),
            copy=False,
        )
    )


def _ordered_candidates(
    hist: exp.Table, nominal: Sequence[int], n_classes: int, exhaustive: bool, bits: int | None,
    regression: bool = False,
) -> exp.Select:
    """Every cut of each order of a node's values by class proportion, or by mean target
    for a regression histogram (``subsets``)."""
    by = [MEAN_ORDER] if regression else orders(n_classes)
    ordered = ordered_values(hist, nominal, n_classes, by, exhaustive and not regression, bits)
    return (
        exp.select(
            *_candidate(ORDERED_CUT, col("o"), col("rank_o"), exp.null(), exp.null(), col("ln"),
                        _left_sums(n_classes))
        )
        .from_(ordered.subquery("ov", copy=False), copy=False)
        .where(exp.LT(this=col("rank_o"), expression=col("m")), copy=False)
    )


def _subset_candidates(
    hist: exp.Table, nominal: Sequence[int], n_classes: int, bits: int | None,
    masks: exp.Expression,
) -> exp.Select:
    """Every two-way partition of a node's values, where it has at most
    ``EXACT_SUBSETS_MAX``: the values whose rank bit is set in ``mask`` go left. ``masks``
    (as ``bt``): ``subsets.subset_masks``, or a table stored from it."""
    ranked = ranked_values(hist, nominal, n_classes).subquery("rv", copy=False)
    subsets = (
        exp.select(
            col("node", "rv"),
            col("attr", "rv"),
            col("mask", "bt"),
            alias(exp.func("SUM", col("n", "rv")), "ln"),
            *[
                alias(weight_sum(col(c, "rv"), bits), f"l{i}")
                for i, c in enumerate(class_columns(n_classes))
            ],
        )
        .from_(ranked, copy=False)
        .join(
            masks,
            on=exp.EQ(this=col("r", "bt"), expression=col("rank_v", "rv")),
            copy=False,
        )
        .where(
            exp.and_(
                exp.LTE(this=col("m", "rv"), expression=num(EXACT_SUBSETS_MAX)),
                exp.LTE(this=col("span", "bt"), expression=col("m", "rv") - num(1)),
            ),
            copy=False,
        )
        .group_by(col("node", "rv"), col("attr", "rv"), col("mask", "bt"), copy=False)
    )
    return exp.select(
        *_candidate(SUBSET, num(-1), col("mask"), exp.null(), exp.null(), col("ln"),
                    _left_sums(n_classes))
    ).from_(subsets.subquery("sb", copy=False), copy=False)


def _known_left_candidates(
    agg: exp.Select, features: Sequence[Feature], n_classes: int
) -> exp.Select:
    """All known rows left, unknown rows right (kept only where some are unknown)."""
    return (
        exp.select(
            *_candidate(KNOWN_LEFT, num(-1), num(0), exp.null(), exp.null(), col("kn"),
                        [col(f"k{i}") for i in range(n_classes)])
        )
        .from_(agg.copy().subquery("kl", copy=False), copy=False)
        .where(q.of_features(features), copy=False)
    )


def _unknown_sides(
    candidates: exp.Expression, stats: exp.Select, n_classes: int
) -> exp.Select:
    """Each candidate with the unknown rows right (``side`` 0) and left (1): rows ``n_left``,
    ``n_right``, class weights ``a<i>`` left and ``b<i>`` right, the node's ``t<i>``.

    The left side is tried only where some rows are unknown, and the known-left candidate only
    then at all; a feature with no known row has no candidate.
    """
    k = n_classes
    c_, s_ = "c", "st"
    unknown_n = paren(col("tn", s_) - col("kn", s_))
    side = col("side", "sd")
    left = [
        paren(col(f"l{i}", c_) + side * paren(col(f"t{i}", s_) - col(f"k{i}", s_)))
        for i in range(k)
    ]
    not_known_left = exp.NEQ(this=col("kind", c_), expression=num(KNOWN_LEFT))
    some_unknown = exp.GT(this=unknown_n.copy(), expression=num(0))
    return computed_once(
        exp.select(
            *[col(c, c_) for c in CANDIDATE_COLUMNS[:7]],
            side,
            alias(col("ln", c_) + side.copy() * unknown_n, "n_left"),
            alias(col("tn", s_) - col("ln", c_) - side.copy() * unknown_n.copy(), "n_right"),
            alias(unknown_n.copy(), "n_unknown"),
            *[alias(left[i], f"a{i}") for i in range(k)],
            *[alias(col(f"t{i}", s_) - left[i].copy(), f"b{i}") for i in range(k)],
            *[alias(col(f"t{i}", s_), f"t{i}") for i in range(k)],
        )
        .from_(candidates.subquery(c_, copy=False), copy=False)
        .join(
            stats.subquery(s_, copy=False),
            on=exp.and_(
                exp.EQ(this=col("node", c_), expression=col("node", s_)),
                exp.EQ(this=col("attr", c_), expression=col("attr", s_)),
            ),
            copy=False,
        )
        .join(values_table("sd", ["side"], [(0,), (1,)], ["INT"]), join_type="cross", copy=False)
        .where(
            exp.and_(
                exp.GT(this=col("kn", s_), expression=num(0)),
                exp.or_(
                    exp.EQ(this=side.copy(), expression=num(0)),
                    exp.and_(not_known_left, some_unknown),
                ),
                exp.or_(not_known_left.copy(), some_unknown.copy()),
            ),
            copy=False,
        )
    )


def _gains(
    expanded: exp.Select,
    n_classes: int,
    criterion: str,
    min_samples_leaf: int,
    min_weight_leaf: float,
) -> exp.Select:
    """The candidates that leave ``min_samples_leaf`` rows and ``min_weight_leaf`` weight on
    both sides, with the children's impurities, ``gain`` (the impurity decrease per unit of
    the node's weight) and ``impurity_after`` (the children's weighted impurity)."""
    a = [col(f"a{i}") for i in range(n_classes)]
    b = [col(f"b{i}") for i in range(n_classes)]
    t = [col(f"t{i}") for i in range(n_classes)]
    # The three weights get names first, so the impurity expressions refer to columns.
    weighed = computed_once(exp.select(
        "*",
        alias(add_all(a), "w_left"),
        alias(add_all(b), "w_right"),
        alias(add_all(t), "w_node"),
    ).from_(expanded.subquery("e", copy=False), copy=False))
    wl, wr, wt = col("w_left"), col("w_right"), col("w_node")
    scored = computed_once(
        exp.select(
            *CANDIDATE_COLUMNS,
            alias(build_impurity(a, wl, criterion), "impurity_left"),
            alias(build_impurity(b, wr, criterion), "impurity_right"),
            alias(build_impurity(t, wt, criterion), "impurity_node"),
            "w_node",
        )
        .from_(weighed.subquery("ew", copy=False), copy=False)
        .where(_leaf_rules(wl, wr, min_samples_leaf, min_weight_leaf), copy=False)
    )
    right_part = paren(col("w_right") / col("w_node")) * col("impurity_right")
    left_part = paren(col("w_left") / col("w_node")) * col("impurity_left")
    return exp.select(
        *CANDIDATE_COLUMNS,
        "impurity_left",
        "impurity_right",
        alias(col("impurity_node") - right_part - left_part, "gain"),
        alias(right_part.copy() + left_part.copy(), "impurity_after"),
    ).from_(scored.subquery("g", copy=False), copy=False)


def _regression_gains(
    expanded: exp.Select,
    n_classes: int,
    criterion: str,
    min_samples_leaf: int,
    min_weight_leaf: float,
) -> exp.Select:
    """``_gains`` of a regression histogram: weights are ``a0``/``b0``/``t0`` and ``gain`` the
    impurity decrease per unit weight of the node.

    Squared error (and ``friedman_mse``, whose score ``wl wr (mean_l - mean_r)^2 / w`` is this
    gain times the node's weight): a side's impurity is its weighted variance
    ``s2/w - (s1/w)^2`` and the gain ``wl wr (mean_l - mean_r)^2 / w^2``, the SSE reduction
    without the cancellation of ``SSE(node) - SSE(left) - SSE(right)``.

    Poisson (``c2`` = SUM(w*y*LN(y)), ``regression.poisson_terms``): a side's impurity is its half
    Poisson deviance ``(s2 - s1 LN(s1/w)) / w``; in the gain the ``y LN y`` sums cancel,
    leaving ``(sl LN(mean_l) + sr LN(mean_r) - s LN(mean)) / w``. A side whose target sum is
    at most ``POISSON_EPSILON`` (a mean of zero, which the deviance cannot predict) is no
    candidate, as scikit-learn refuses it.
    """
    poisson = criterion == "poisson"
    weighed = exp.select(
        "*", alias(col("a0"), "w_left"), alias(col("b0"), "w_right"), alias(col("t0"), "w_node")
    ).from_(expanded.subquery("e", copy=False), copy=False)
    wl, wr = col("w_left"), col("w_right")
    rules = _leaf_rules(wl, wr, min_samples_leaf, min_weight_leaf)
    if poisson:
        rules = exp.and_(
            rules,
            exp.GT(this=col("a1"), expression=num(POISSON_EPSILON)),
            exp.GT(this=col("b1"), expression=num(POISSON_EPSILON)),
        )
    side_impurity = _deviance if poisson else _variance
    scored = computed_once(
        exp.select(
            *CANDIDATE_COLUMNS,
            "w_node",
            alias(side_impurity("a"), "impurity_left"),
            alias(side_impurity("b"), "impurity_right"),
            alias(_poisson_gain() if poisson else _variance_gain(), "gain"),
        )
        .from_(weighed.subquery("ew", copy=False), copy=False)
        .where(rules, copy=False)
    )
    right_part = paren(col("w_right") / col("w_node")) * col("impurity_right")
    left_part = paren(col("w_left") / col("w_node")) * col("impurity_left")
    return exp.select(
        *CANDIDATE_COLUMNS,
        "impurity_left",
        "impurity_right",
        "gain",
        alias(right_part + left_part, "impurity_after"),
    ).from_(scored.subquery("g", copy=False), copy=False)


POISSON_EPSILON = 10 * 2.220446049250313e-16
"""A Poisson side's least target sum: scikit-learn's ``EPSILON`` in ``_criterion.pyx``."""


def _variance(side: str) -> exp.Expression:
    w, s1, s2 = col(f"{side}0"), col(f"{side}1"), col(f"{side}2")
    mean = paren(s1 / w)
    value = paren(s2 / w.copy()) - mean * mean.copy()
    # rounding can leave a constant side's variance a hair below zero
    return case((exp.GT(this=value, expression=num(0.0)), value.copy()), default=num(0.0))


def _variance_gain() -> exp.Expression:
    gap = paren(paren(col("a1") / col("a0")) - paren(col("b1") / col("b0")))
    return (
        paren(col("a0") / col("t0")) * paren(col("b0") / col("t0")) * paren(gap * gap.copy())
    )


def _sum_log_mean(side: str) -> exp.Expression:
    """``s1 LN(s1 / w)`` of a side (0 where its target sum is not positive)."""
    w, s1 = col(f"{side}0"), col(f"{side}1")
    return case(
        (exp.GT(this=s1, expression=num(0.0)),
         paren(s1.copy() * exp.func("LN", paren(s1.copy() / w)))),
        default=num(0.0),
    )


def _deviance(side: str) -> exp.Expression:
    value = paren(paren(col(f"{side}2") - _sum_log_mean(side)) / col(f"{side}0"))
    return case((exp.GT(this=value, expression=num(0.0)), value.copy()), default=num(0.0))


def _poisson_gain() -> exp.Expression:
    return paren(_sum_log_mean("a") + _sum_log_mean("b") - _sum_log_mean("t")) / col("t0")


def _leaf_rules(
    wl: exp.Expression, wr: exp.Expression, min_samples_leaf: int, min_weight_leaf: float
) -> exp.Expression:
    """Both sides keep ``min_samples_leaf`` rows and a positive ``min_weight_leaf`` weight."""
    return exp.and_(
        exp.GTE(this=col("n_left"), expression=num(min_samples_leaf)),
        exp.GTE(this=col("n_right"), expression=num(min_samples_leaf)),
        exp.GT(this=wl.copy(), expression=num(0)),
        exp.GT(this=wr.copy(), expression=num(0)),
        exp.GTE(this=wl.copy(), expression=num(float(min_weight_leaf))),
        exp.GTE(this=wr.copy(), expression=num(float(min_weight_leaf))),
    )


def _best_per_feature(
    with_gain: exp.Select,
    columns: Sequence[str],
    ordered_scan: bool,
    ctes: list[tuple[str, exp.Expression]],
    tie_tolerance: float = TIE_TOLERANCE,
) -> exp.Select:
    """The best candidate per (node, feature), first in ``TIE_ORDER`` among those within
    ``tie_tolerance`` of the best gain, with ``n_near``, how many those are."""
    part = [col("node"), col("attr")]
    near_best = exp.GTE(this=col("gain"), expression=col("best_gain") - num(tie_tolerance))
    if ordered_scan:
        # Windows partitioned by (node, feature) over millions of candidates run each
        # partition on one thread (2.5 s of a 4.1 s level); a GROUP BY finds the best gain,
        # and the windows below only see the candidates near it.
        ctes.append(("scored", with_gain))
        best_gain = (
            exp.select(col("node"), col("attr"), alias(exp.func("MAX", col("gain")), "best_gain"))
            .from_("scored")
            .group_by(col("node"), col("attr"), copy=False)
        )
        best = (
            exp.select("w.*", col("best_gain", "bg"))
            .from_(alias(exp.to_table("scored"), "w"), copy=False)
            .join(
                best_gain.subquery("bg", copy=False),
                on=exp.and_(
                    exp.EQ(this=col("node", "w"), expression=col("node", "bg")),
                    exp.EQ(this=col("attr", "w"), expression=col("attr", "bg")),
                    exp.GTE(this=col("gain", "w"),
                            expression=col("best_gain", "bg") - num(tie_tolerance)),
                ),
                copy=False,
            )
        )
    else:
        best = exp.select(
            "*", alias(window(exp.func("MAX", col("gain")), part), "best_gain")
        ).from_(with_gain.subquery("w", copy=False), copy=False)
    near = (
        exp.select(
            "*",
            alias(window(exp.func("COUNT", exp.Star()), part), "n_near"),
            alias(
                window(exp.func("ROW_NUMBER"), part, [col(c) for c in TIE_ORDER]),
                "rank_in_ties",
            ),
        )
        .from_(best.subquery("b", copy=False), copy=False)
        .where(near_best, copy=False)
    )
    return (
        exp.select(*columns, alias(exp.cast(col("n_near"), "BIGINT"), "n_near"))
        .from_(near.subquery("nr", copy=False), copy=False)
        .where(exp.EQ(this=col("rank_in_ties"), expression=num(1)), copy=False)
        .order_by(col("node"), col("attr"), copy=False)
    )


def left_codes(row: CARTScoreRow, values: Sequence[tuple[int, int, int, int]]) -> set[int]:
    """The value codes a nominal candidate sends left.

    ``values`` are the node's (code, rank by code, order, rank in that order), as
    ``subsets.build_nominal_ranks`` reads them for the same histogram.
    """
    kind = int(row.kind)
    if kind == KNOWN_LEFT:
        return {v for v, _, _, _ in values}
    if kind == SUBSET:
        mask = int(row.cut)
        return {v for v, rank, _, _ in values if mask >> rank & 1}
    o, cut = int(row.o), int(row.cut)
    return {v for v, _, order, rank in values if order == o and rank <= cut}
