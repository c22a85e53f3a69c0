"""C4.5's and ID3's scoring query, and the branch counts of the splits they choose.

Both read the level's histogram (``queries.build_histogram``). The scoring query gives one row
per (node, nominal feature), scored as its multiway split, and one per (node, continuous
feature) with its best cut (``cuts``); the criteria are ``criteria``'s. Python then
chooses among these few rows (``strategy.choose_split``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from sqlglot import exp

from ...dataset import Feature
from ...fixed_point import weight_sum
from ...queries import UNKNOWN_KEY, attr_in
from ...running_sums import same_group
from ...sqlexpr import (
    alias,
    case,
    class_columns,
    col,
    num,
    safe_div,
    with_materialized,
    without_nested_loops,
    xlogx,
)
from ...tree import CONTINUOUS
from .bounded import CloseValues, bounded_best_cuts
from .criteria import LN2, ScoreOptions, SplitCriteria, node_feature_totals
from .cuts import best_cuts_ordered, best_cuts_windowed


class C45ScoreRow(NamedTuple):
    """A row of ``build_split_scores`` (or of its numpy twin, ``memory.c45_scores``): a
    (node, feature)'s split, with the values as the engine returns them (``choose_split``
    converts what it computes with)."""

    node: int
    attr: int
    threshold: float | None  # a cut's value below it; None: a nominal feature's row
    next_value: float | None  # the value above the cut
    gain: float | None
    mdl_gain: float | None  # the gain less the MDL cost of the cut (J48)
    split_info: float | None
    gain_ratio: float | None
    candidates: int | None  # valid cuts (continuous), values (nominal)
    w_known: float | None  # the node's weight of rows with a known value
    w_all: float  # the node's weight
    big_branches: int  # branches of at least ``min_cases`` (nominal); 2 for a cut


SCORE_COLUMNS = C45ScoreRow._fields
"""The columns of ``build_split_scores``, in order."""


def build_split_scores(
    hist: exp.Table,
    features: Sequence[Feature],
    n_classes: int,
    options: ScoreOptions,
    search_edges: Mapping[int, Sequence[float]] | None = None,
    close: CloseValues | None = None,
) -> exp.Select:
    """Information gain, split info and gain ratio of every candidate split of every node.

    One row per (node, feature) with the best threshold of a continuous feature (by gain, ties
    to the lowest threshold), or one row per candidate threshold when ``all_thresholds``.
    Columns: ``SCORE_COLUMNS``. ``search_edges``: bin edges of the continuous features to
    search bound-pruned (``bounded``; the histogram holds their bins), the same rows;
    ``close``: those of them with values not more than the cut gap apart.
    """
    agg = node_feature_totals(hist, features, class_columns(n_classes), options)
    criteria = SplitCriteria(n_classes, options)
    nominal = _nominal_scores(agg, [f.index for f in features if f.kind != CONTINUOUS], criteria)
    attrs = [f.index for f in features if f.kind == CONTINUOUS]
    edges = {} if options.all_thresholds else {
        a: search_edges[a] for a in attrs if search_edges and a in search_edges}
    ctes: list[tuple[str, exp.Expression]] = []
    scanned = [a for a in attrs if a not in edges]
    both: exp.Expression = nominal
    if scanned or not edges:
        if options.ordered_scan and not options.all_thresholds:
            cuts = best_cuts_ordered(hist, agg, attr_in(scanned), criteria, ctes)
        else:
            cuts = best_cuts_windowed(hist, agg, attr_in(scanned), criteria)
        both = exp.union(both, cuts, distinct=False, copy=False)
    if edges:
        bounded = bounded_best_cuts(hist, agg, edges, criteria, ctes, options.ordered_scan,
                                    close)
        both = exp.union(both, bounded, distinct=False, copy=False)
    scores = with_materialized(_with_gain_ratio(both.subquery("u"), options), ctes,
                               options.ordered_scan)
    return without_nested_loops(scores) if edges else scores


def _nominal_scores(
    agg: exp.Select, nominal: Sequence[int], criteria: SplitCriteria
) -> exp.Select:
    """Gain and split info of each nominal feature's multiway split, from its totals."""
    denom = criteria.weight()
    return exp.select(
        col("node", "a"),
        col("attr", "a"),
        alias(exp.cast(exp.null(), "DOUBLE"), "threshold"),
        alias(exp.cast(exp.null(), "DOUBLE"), "next_value"),
        alias(
            safe_div(criteria.parent_entropy() - col("bags_ent", "a"), denom * num(LN2)), "gain"
        ),
        alias(
            safe_div(
                xlogx(denom.copy()) - col("bags_xlogx", "a") - xlogx(criteria.unknown_weight()),
                denom.copy() * num(LN2),
            ),
            "split_info",
        ),
        alias(exp.cast(col("n_values", "a"), "BIGINT"), "candidates"),
        col("w_known", "a"),
        col("w_all", "a"),
        col("big_branches", "a"),
    ).from_(alias(exp.Subquery(this=agg.copy()), "a"), copy=False).where(
        attr_in(nominal, "a"), copy=False
    )


def _with_gain_ratio(scores: exp.Expression, options: ScoreOptions) -> exp.Select:
    """The scored rows with ``mdl_gain`` (a continuous gain less log2(candidates) / N, C4.5
    release 8, with ``mdl``) and ``gain_ratio`` (``mdl_gain / split_info``), sorted."""
    if options.mdl:
        mdl_gain = case(
            (
                exp.and_(
                    col("threshold").is_(exp.null()).not_(),
                    exp.GT(this=col("candidates"), expression=num(0)),
                ),
                col("gain")
                - exp.func("LN", col("candidates")) / num(LN2) / col("w_all"),
            ),
            default=col("gain"),
        )
    else:
        mdl_gain = col("gain")
    scored = exp.select(
        "node", "attr", "threshold", "next_value", "gain",
        alias(mdl_gain, "mdl_gain"),
        "split_info", "candidates", "w_known", "w_all", "big_branches",
    ).from_(scores, copy=False)
    query = exp.select(
        "node", "attr", "threshold", "next_value", "gain", "mdl_gain", "split_info",
        alias(
            case(
                (exp.GT(this=col("split_info"), expression=num(0)),
                 col("mdl_gain") / col("split_info")),
                default=exp.null(),
            ),
            "gain_ratio",
        ),
        "candidates", "w_known", "w_all", "big_branches",
    ).from_(scored.subquery("m"), copy=False)
    return query.order_by(col("node"), col("attr"), col("threshold"), copy=False)


def build_branch_counts(
    hist: exp.Table, tests: exp.Expression, n_classes: int, bits: int | None = None
) -> exp.Select:
    """Class counts per (node, key) of the chosen tests, key -1 for unknown values.

    Keys as in ``queries.build_partition``; the known keys give the branch shares, and with
    the routes they give every child's class counts without reading the level's rows again.
    ``bits`` as in the histogram.
    """
    classes = class_columns(n_classes)
    key = case(
        (col("v", "h").is_(exp.null()), num(float(UNKNOWN_KEY))),
        (col("thr", "t").is_(exp.null()), col("v", "h")),
        (exp.LTE(this=col("v", "h"), expression=col("thr", "t")), num(0.0)),
        default=num(1.0),
    )
    return (
        exp.select(
            col("node", "h"),
            alias(key, "key"),
            *[alias(weight_sum(col(c, "h"), bits), c) for c in classes],
        )
        .from_(alias(hist.copy(), "h"))
        .join(alias(tests.copy(), "t"), on=same_group("h", "t"))
        .group_by(col("node", "h"), key.copy())
    )
