"""CART: binary splits scored by Gini or entropy, grown and pruned as scikit-learn does.

The strategy plugs into the level-wise grower (``sqltree.grower``). Per level, one scoring query
over the histogram evaluates every candidate split of every frontier node and feature in SQL
and returns the best candidate per (node, feature); Python only picks among those rows.

Candidates (all scored in SQL):

- continuous ``a <= t``: one candidate between each pair of adjacent distinct values ``a < b``
  of the node with ``b > a + 1e-7`` (scikit-learn's ``FEATURE_THRESHOLD``); ``t = a/2 + b/2``,
  or ``a`` when that rounds to ``b``;
- nominal, two classes: values ordered by the proportion of the second class (ties by value)
  and every cut of that order scanned; for two classes this finds the best two-way partition
  exactly (Breiman et al. 1984, theorem 4.5);
- nominal, more classes: every two-way partition when the node holds at most
  ``EXACT_SUBSETS_MAX`` values (the highest-ranked value stays on the right, so each partition
  is scored once); above that a heuristic: for each class ``c``, values ordered by the
  proportion of ``c`` and every cut scanned (k orderings, each exact for the one-vs-rest
  problem of class ``c``);
- unknown values (NULL) as scikit-learn >= 1.3 does: every cut is scored with the unknown rows
  on the right and on the left, and one more candidate sends all known rows left and the
  unknown rows right. At prediction, unknown values follow the side learnt; a node that saw no
  unknown values sends them to the child with more training rows.

Ties: scikit-learn visits features in a random order and keeps the first strictly better
split. sqltree is deterministic: candidates whose impurity decrease is within ``TIE_TOLERANCE``
of the best tie, and the tie goes to the first feature in column order, then unknown values to
the right before the left, then the lowest threshold.

Stopping rules, ``min_impurity_decrease``, best-first growth for ``max_leaf_nodes`` and
cost-complexity pruning (``ccp_alpha``) follow scikit-learn's ``_tree.pyx``.

Growth stays level-wise for ``max_leaf_nodes``: scikit-learn splits nodes in the order of the
lowest improvement on their path, so a node with ``max_leaf_nodes - 1`` better-ranked nodes
already known can never be split; every other node of the level is split speculatively, and
the tree is cut back to the first ``max_leaf_nodes - 1`` splits at the end.

Known differences from scikit-learn: it converts features to float32 before growing and
predicting (sqltree keeps float64, so the trees agree on data float32 represents exactly);
ties are broken as described above, not at random.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from .. import queries as q
from ..criteria import TIE_TOLERANCE
from ..dataset import Dataset, Feature
from ..errors import DataError
from ..grower import DENSE_VALUES, GrowOptions, Pending, Plan, Strategy, bin_edges
from ..pruning.cost_complexity import (
    CRITERIA,
    _criterion,
    cost_complexity_pruning_path,
    impurity,
    prune_ccp,
)
from ..sqlexpr import (
    add_all,
    case,
    class_columns,
    col,
    num,
    paren,
    safe_div,
    total,
    values_table,
    window,
)
from ..tree import CONTINUOUS, NOMINAL, Node, Split

__all__ = [  # cost-complexity pruning is re-exported: CART's pruning API is found here too
    "CRITERIA",
    "CARTStrategy",
    "build_cart_scores",
    "build_nominal_ranks",
    "cost_complexity_pruning_path",
    "impurity",
    "midpoint",
    "prune_ccp",
    "split_scores",
]

FEATURE_THRESHOLD = 1e-7
"""Adjacent values closer than this are not split apart (scikit-learn's constant)."""

EPSILON = 2.220446049250313e-16
"""``np.finfo(float).eps``: impurity at most this is pure; improvement tolerance."""

EXACT_SUBSETS_MAX = 10
"""More classes than two: all two-way partitions up to this many values at a node."""

INFINITE_THRESHOLD = 1.7976931348623157e308
"""Stands for scikit-learn's ``inf`` threshold (all known values left, unknown right): SQL has
no infinite literal and every finite value is at most this."""

SCORE_COLUMNS = (
    "node",
    "attr",
    "kind",
    "o",
    "cut",
    "threshold",
    "next_value",
    "side",
    "n_left",
    "w_left",
    "n_right",
    "w_right",
    "n_unknown",
    "impurity_left",
    "impurity_right",
    "gain",
    "impurity_after",
    "n_near",
)

# candidate kinds
_CONTINUOUS = 0
_ORDERED = 1
_SUBSET = 2
_KNOWN_LEFT = 3


# -- SQL builders ------------------------------------------------------------------------------
def build_impurity(
    counts: Sequence[exp.Expression], weight: exp.Expression, criterion: str
) -> exp.Expression:
    """Gini ``1 - sum c^2 / w^2`` or entropy ``-sum p log2 p`` of SQL counts; 0 for no weight."""
    positive = exp.GT(this=weight.copy(), expression=num(0))
    if criterion == "gini":
        value = num(1.0) - paren(
            add_all([paren(c.copy() * c.copy()) for c in counts])
            / paren(weight.copy() * weight.copy())
        )
    else:
        terms = []
        for c in counts:
            p = paren(c.copy() / weight.copy())
            terms.append(
                case(
                    (
                        exp.GT(this=c.copy(), expression=num(0)),
                        paren(p * paren(exp.func("LN", p.copy()) / num(math.log(2.0)))),
                    ),
                    default=num(0.0),
                )
            )
        value = num(0.0) - add_all(terms)
    return case((positive, paren(value)), default=num(0.0))


def _bits_table(alias: str, max_values: int) -> exp.Expression:
    """(mask, r, span): bit ``r`` is set in ``mask``; ``span`` is the mask's bit length."""
    rows = []
    for mask in range(1, 1 << (max_values - 1)):
        span = mask.bit_length()
        for r in range(span):
            if mask >> r & 1:
                rows.append((mask, r, span))
    return values_table(alias, ["mask", "r", "span"], rows, ["BIGINT", "INT", "INT"])


def _ranked_values(hist: exp.Table, nominal: Sequence[int], n_classes: int) -> exp.Select:
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
            exp.alias_(total(classes), "wv", copy=False),
            exp.alias_(
                window(exp.func("ROW_NUMBER"), part, [col("v")]) - num(1), "rank_v", copy=False
            ),
            exp.alias_(window(exp.func("COUNT", exp.Star()), part), "m", copy=False),
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


def _proportion(classes: Sequence[str], bits: int | None) -> exp.Expression:
    """Of a ranked value (``rv``) crossed with orders (``ot``): its proportion of class ``o``."""
    return case(
        *[
            (
                exp.EQ(this=col("o", "ot"), expression=num(i)),
                safe_div(q.weight(col(c, "rv"), bits), q.weight(col("wv", "rv"), bits)),
            )
            for i, c in enumerate(classes)
        ],
        default=num(0.0),
    )


def _ordered_values(
    hist: exp.Table,
    nominal: Sequence[int],
    n_classes: int,
    orders: Sequence[int],
    exhaustive: bool,
    bits: int | None = None,
) -> exp.Select:
    """Nominal values per ordering ``o``: by proportion of class ``o``, ties by value code.

    Only the (node, feature) pairs that the ordered scan covers: all of them for two classes,
    those with more than ``EXACT_SUBSETS_MAX`` values otherwise. ``bits`` as in the histogram.
    """
    classes = class_columns(n_classes)
    ranked = _ranked_values(hist, nominal, n_classes).subquery("rv", copy=False)
    prop = _proportion(classes, bits)
    with_order = (
        exp.select(
            "rv.*",
            col("o", "ot"),
            exp.alias_(exp.func("COALESCE", prop, num(0.0)), "p", copy=False),
        )
        .from_(ranked, copy=False)
        .join(
            values_table("ot", ["o"], [(o,) for o in orders], ["INT"]),
            join_type="cross",
            copy=False,
        )
    )
    if n_classes > 2 or exhaustive:
        with_order = with_order.where(
            exp.GT(this=col("m", "rv"), expression=num(EXACT_SUBSETS_MAX)), copy=False
        )
    part = [col("node"), col("attr"), col("o")]
    order = [col("p"), col("v")]
    return exp.select(
        "*",
        exp.alias_(window(exp.func("ROW_NUMBER"), part, order), "rank_o", copy=False),
        exp.alias_(
            window(exp.func("SUM", col("n")), part, order, running=True), "ln", copy=False
        ),
        *[
            exp.alias_(
                q.weight(window(exp.func("SUM", col(c)), part, order, running=True), bits),
                f"l{i}",
                copy=False,
            )
            for i, c in enumerate(classes)
        ],
    ).from_(with_order.subquery("wo", copy=False), copy=False)


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
) -> exp.Select:
    """Score every binary split of every node and feature of the histogram's level.

    Returns the best candidate per (node, feature) (``SCORE_COLUMNS``; ``n_near`` counts the
    feature's candidates within ``TIE_TOLERANCE`` of its best), or every valid candidate when
    ``all_candidates``. ``gain`` is the impurity decrease per unit weight of the node,
    ``impurity(node) - w_right/w * impurity(right) - w_left/w * impurity(left)``.
    ``exhaustive`` scores every two-way partition of nominal features up to
    ``EXACT_SUBSETS_MAX`` values, two classes included (for tests and worked examples).
    ``ordered_scan``: continuous running sums from one ordered streaming scan
    (``queries.ordered_running_sums``; DuckDB) instead of windows per (node, feature).
    ``fractional``: weights may be fractional (class or sample weights), so the ordered scan
    sums in fixed point. ``bits``: the histogram holds fixed-point weights
    (``queries.build_histogram``), whose sums here are exact, so the counts of a candidate (and
    the shares a split stores) are the same on every run and engine.
    """
    k = n_classes
    classes = class_columns(k)
    continuous = [f.index for f in features if f.kind == CONTINUOUS]
    nominal = [f.index for f in features if f.kind == NOMINAL]
    is_known = col("v").is_(exp.null()).not_()

    def known_sum(e: exp.Expression) -> exp.Expression:
        return exp.func("SUM", case((is_known.copy(), e), default=num(0)))

    # Per (node, feature): known rows and weight, and the node totals (unknown included).
    agg = (
        exp.select(
            col("node"),
            col("attr"),
            exp.alias_(known_sum(col("n")), "kn", copy=False),
            *[
                exp.alias_(q.weight(known_sum(col(c)), bits), f"k{i}", copy=False)
                for i, c in enumerate(classes)
            ],
        )
        .from_(hist.copy(), copy=False)
        .where(q.of_features(features), copy=False)
        .group_by(col("node"), col("attr"), copy=False)
    )
    totals = (
        exp.select(
            col("node"),
            exp.alias_(col("n"), "tn", copy=False),
            *[
                exp.alias_(q.weight(col(c), bits), f"t{i}", copy=False)
                for i, c in enumerate(classes)
            ],
        )
        .from_(hist.copy(), copy=False)
        .where(exp.EQ(this=col("attr"), expression=num(-1)), copy=False)
    )
    stats = (
        exp.select(
            "ag.*",
            col("tn", "tt"),
            *[col(f"t{i}", "tt") for i in range(k)],
        )
        .from_(agg.subquery("ag", copy=False), copy=False)
        .join(
            totals.subquery("tt", copy=False),
            on=exp.EQ(this=col("node", "ag"), expression=col("node", "tt")),
            copy=False,
        )
    )

    def cand(
        kind: int,
        o: exp.Expression,
        cut: exp.Expression,
        threshold: exp.Expression,
        next_value: exp.Expression,
        ln: exp.Expression,
        ls: Sequence[exp.Expression],
    ) -> list[exp.Expression]:
        return [
            col("node"),
            col("attr"),
            exp.alias_(exp.cast(num(kind), "INT"), "kind", copy=False),
            exp.alias_(exp.cast(o, "INT"), "o", copy=False),
            exp.alias_(exp.cast(cut, "BIGINT"), "cut", copy=False),
            exp.alias_(exp.cast(threshold, "DOUBLE"), "threshold", copy=False),
            exp.alias_(exp.cast(next_value, "DOUBLE"), "next_value", copy=False),
            exp.alias_(exp.cast(ln, "DOUBLE"), "ln", copy=False),
            *[exp.alias_(exp.cast(l_, "DOUBLE"), f"l{i}", copy=False) for i, l_ in enumerate(ls)],
        ]

    parts: list[exp.Select] = []
    ctes: list[tuple[str, exp.Expression]] = []
    if continuous:
        in_continuous = q.attr_in(continuous)
        sums = ["n", *classes]
        if ordered_scan:
            scan = q.ordered_running_sums(
                hist, sums, in_continuous, prefix="r", ctes=ctes, fixed=fractional, bits=bits,
                counts=("n",),
            )
            scan = exp.select(
                "node", "attr", "v", "nv",
                exp.alias_(col("r0"), "ln", copy=False),
                *[exp.alias_(col(f"r{i + 1}"), f"l{i}", copy=False) for i in range(k)],
            ).from_(scan.subquery("rs", copy=False), copy=False)
        else:
            part = [col("node"), col("attr")]
            scan = (
                exp.select(
                    col("node"),
                    col("attr"),
                    col("v"),
                    exp.alias_(
                        window(exp.func("LEAD", col("v")), part, [col("v")]), "nv", copy=False
                    ),
                    *[
                        exp.alias_(
                            q.weight(
                                window(exp.func("SUM", col(c)), part, [col("v")], running=True),
                                None if c == "n" else bits,
                            ),
                            name,
                            copy=False,
                        )
                        for c, name in zip(sums, ["ln", *[f"l{i}" for i in range(k)]])
                    ],
                )
                .from_(hist.copy(), copy=False)
                .where(exp.and_(is_known.copy(), in_continuous), copy=False)
            )
        parts.append(
            exp.select(
                *cand(
                    _CONTINUOUS,
                    num(-1),
                    num(0),
                    col("v"),
                    col("nv"),
                    col("ln"),
                    [col(f"l{i}") for i in range(k)],
                )
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
    if nominal:
        orders = [1] if k == 2 else list(range(k))
        ordered = _ordered_values(hist, nominal, k, orders, exhaustive, bits)
        parts.append(
            exp.select(
                *cand(
                    _ORDERED,
                    col("o"),
                    col("rank_o"),
                    exp.null(),
                    exp.null(),
                    col("ln"),
                    [col(f"l{i}") for i in range(k)],
                )
            )
            .from_(ordered.subquery("ov", copy=False), copy=False)
            .where(exp.LT(this=col("rank_o"), expression=col("m")), copy=False)
        )
        if k > 2 or exhaustive:
            ranked = _ranked_values(hist, nominal, k).subquery("rv", copy=False)
            subsets = (
                exp.select(
                    col("node", "rv"),
                    col("attr", "rv"),
                    col("mask", "bt"),
                    exp.alias_(exp.func("SUM", col("n", "rv")), "ln", copy=False),
                    *[
                        exp.alias_(q.weight_sum(col(c, "rv"), bits), f"l{i}", copy=False)
                        for i, c in enumerate(classes)
                    ],
                )
                .from_(ranked, copy=False)
                .join(
                    _bits_table("bt", EXACT_SUBSETS_MAX),
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
            parts.append(
                exp.select(
                    *cand(
                        _SUBSET,
                        num(-1),
                        col("mask"),
                        exp.null(),
                        exp.null(),
                        col("ln"),
                        [col(f"l{i}") for i in range(k)],
                    )
                ).from_(subsets.subquery("sb", copy=False), copy=False)
            )
    # All known rows left, unknown rows right (only where some are unknown).
    parts.append(
        exp.select(
            *cand(
                _KNOWN_LEFT,
                num(-1),
                num(0),
                exp.null(),
                exp.null(),
                col("kn"),
                [col(f"k{i}") for i in range(k)],
            )
        )
        .from_(agg.copy().subquery("kl", copy=False), copy=False)
        .where(q.of_features(features), copy=False)
    )
    union: exp.Expression = (
        parts[0] if len(parts) == 1 else exp.union(*parts, distinct=False, copy=False)
    )

    # Each candidate with the unknown rows right (side 0) and left (side 1).
    c_, s_ = "c", "st"
    unknown_n = paren(col("tn", s_) - col("kn", s_))
    side = col("side", "sd")
    left = [
        paren(col(f"l{i}", c_) + side * paren(col(f"t{i}", s_) - col(f"k{i}", s_)))
        for i in range(k)
    ]
    expanded = (
        exp.select(
            col("node", c_),
            col("attr", c_),
            col("kind", c_),
            col("o", c_),
            col("cut", c_),
            col("threshold", c_),
            col("next_value", c_),
            side,
            exp.alias_(col("ln", c_) + side.copy() * unknown_n, "n_left", copy=False),
            exp.alias_(
                col("tn", s_) - col("ln", c_) - side.copy() * unknown_n.copy(),
                "n_right",
                copy=False,
            ),
            exp.alias_(unknown_n.copy(), "n_unknown", copy=False),
            *[exp.alias_(left[i], f"a{i}", copy=False) for i in range(k)],
            *[exp.alias_(col(f"t{i}", s_) - left[i].copy(), f"b{i}", copy=False) for i in range(k)],
            *[exp.alias_(col(f"t{i}", s_), f"t{i}", copy=False) for i in range(k)],
        )
        .from_(union.subquery(c_, copy=False), copy=False)
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
                    exp.and_(
                        exp.NEQ(this=col("kind", c_), expression=num(_KNOWN_LEFT)),
                        exp.GT(this=unknown_n.copy(), expression=num(0)),
                    ),
                ),
                exp.or_(
                    exp.NEQ(this=col("kind", c_), expression=num(_KNOWN_LEFT)),
                    exp.GT(this=unknown_n.copy(), expression=num(0)),
                ),
            ),
            copy=False,
        )
    )
    a = [col(f"a{i}") for i in range(k)]
    b = [col(f"b{i}") for i in range(k)]
    t = [col(f"t{i}") for i in range(k)]
    # The three weights get names first, so the impurity expressions refer to columns.
    weighed = exp.select(
        "*",
        exp.alias_(add_all(a), "w_left", copy=False),
        exp.alias_(add_all(b), "w_right", copy=False),
        exp.alias_(add_all(t), "w_node", copy=False),
    ).from_(expanded.subquery("e", copy=False), copy=False)
    wl, wr, wt = col("w_left"), col("w_right"), col("w_node")
    scored = (
        exp.select(
            "node",
            "attr",
            "kind",
            "o",
            "cut",
            "threshold",
            "next_value",
            "side",
            "n_left",
            "w_left",
            "n_right",
            "w_right",
            "n_unknown",
            exp.alias_(build_impurity(a, wl, criterion), "impurity_left", copy=False),
            exp.alias_(build_impurity(b, wr, criterion), "impurity_right", copy=False),
            exp.alias_(build_impurity(t, wt, criterion), "impurity_node", copy=False),
            "w_node",
        )
        .from_(weighed.subquery("ew", copy=False), copy=False)
        .where(
            exp.and_(
                exp.GTE(this=col("n_left"), expression=num(min_samples_leaf)),
                exp.GTE(this=col("n_right"), expression=num(min_samples_leaf)),
                exp.GT(this=wl.copy(), expression=num(0)),
                exp.GT(this=wr.copy(), expression=num(0)),
                exp.GTE(this=wl.copy(), expression=num(float(min_weight_leaf))),
                exp.GTE(this=wr.copy(), expression=num(float(min_weight_leaf))),
            ),
            copy=False,
        )
    )
    gain = (
        col("impurity_node")
        - paren(col("w_right") / col("w_node")) * col("impurity_right")
        - paren(col("w_left") / col("w_node")) * col("impurity_left")
    )
    after = paren(col("w_right") / col("w_node")) * col("impurity_right") + paren(
        col("w_left") / col("w_node")
    ) * col("impurity_left")
    with_gain = exp.select(
        "node",
        "attr",
        "kind",
        "o",
        "cut",
        "threshold",
        "next_value",
        "side",
        "n_left",
        "w_left",
        "n_right",
        "w_right",
        "n_unknown",
        "impurity_left",
        "impurity_right",
        exp.alias_(gain, "gain", copy=False),
        exp.alias_(after, "impurity_after", copy=False),
    ).from_(scored.subquery("g", copy=False), copy=False)
    part = [col("node"), col("attr")]
    columns = [c for c in SCORE_COLUMNS if c != "n_near"]
    if all_candidates:
        return q.with_materialized(
            exp.select(*columns, exp.alias_(exp.cast(num(1), "BIGINT"), "n_near", copy=False))
            .from_(with_gain.subquery("w", copy=False), copy=False)
            .order_by(
                col("node"),
                col("attr"),
                col("side"),
                col("kind"),
                col("threshold"),
                col("o"),
                col("cut"),
                copy=False,
            ),
            ctes,
        )
    if ordered_scan:
        # Windows partitioned by (node, feature) over millions of candidates run each
        # partition on one thread (2.5 s of a 4.1 s level); a GROUP BY finds the best gain,
        # and the windows below only see the candidates near it.
        ctes.append(("scored", with_gain))
        best_gain = (
            exp.select(col("node"), col("attr"),
                       exp.alias_(exp.func("MAX", col("gain")), "best_gain", copy=False))
            .from_("scored")
            .group_by(col("node"), col("attr"), copy=False)
        )
        best = (
            exp.select("w.*", col("best_gain", "bg"))
            .from_(exp.alias_(exp.to_table("scored"), "w"), copy=False)
            .join(
                best_gain.subquery("bg", copy=False),
                on=exp.and_(
                    exp.EQ(this=col("node", "w"), expression=col("node", "bg")),
                    exp.EQ(this=col("attr", "w"), expression=col("attr", "bg")),
                    exp.GTE(this=col("gain", "w"),
                            expression=col("best_gain", "bg") - num(TIE_TOLERANCE)),
                ),
                copy=False,
            )
        )
    else:
        best = exp.select(
            "*", exp.alias_(window(exp.func("MAX", col("gain")), part), "best_gain", copy=False)
        ).from_(with_gain.subquery("w", copy=False), copy=False)
    near = (
        exp.select(
            "*",
            exp.alias_(window(exp.func("COUNT", exp.Star()), part), "n_near", copy=False),
            exp.alias_(
                window(
                    exp.func("ROW_NUMBER"),
                    part,
                    [col("side"), col("kind"), col("threshold"), col("o"), col("cut")],
                ),
                "rank_in_ties",
                copy=False,
            ),
        )
        .from_(best.subquery("b", copy=False), copy=False)
        .where(
            exp.GTE(this=col("gain"), expression=col("best_gain") - num(TIE_TOLERANCE)), copy=False
        )
    )
    query = (
        exp.select(*columns, exp.alias_(exp.cast(col("n_near"), "BIGINT"), "n_near", copy=False))
        .from_(near.subquery("nr", copy=False), copy=False)
        .where(exp.EQ(this=col("rank_in_ties"), expression=num(1)), copy=False)
        .order_by(col("node"), col("attr"), copy=False)
    )
    return q.with_materialized(query, ctes)


def build_nominal_ranks(
    hist: exp.Table,
    pairs: Sequence[tuple[int, int]],
    n_classes: int,
    orders: Sequence[int],
    bits: int | None = None,
) -> exp.Select:
    """Per chosen (node, nominal feature): each value's code, rank by code and rank per order.

    The ranks are computed by the same expressions as in the scoring query (given the same
    ``bits``), so a candidate's ``cut`` (a mask of value ranks, or a cut position in an order)
    names the same values.
    """
    nominal = sorted({a for _, a in pairs})
    chosen = values_table("ch", ["node", "attr"], list(pairs), ["BIGINT", "INT"])
    inner = _ordered_unrestricted(hist, nominal, n_classes, orders, bits)
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


def _ordered_unrestricted(
    hist: exp.Table,
    nominal: Sequence[int],
    n_classes: int,
    orders: Sequence[int],
    bits: int | None = None,
) -> exp.Select:
    classes = class_columns(n_classes)
    ranked = _ranked_values(hist, nominal, n_classes).subquery("rv", copy=False)
    prop = _proportion(classes, bits)
    with_order = (
        exp.select(
            "rv.*",
            col("o", "ot"),
            exp.alias_(exp.func("COALESCE", prop, num(0.0)), "p", copy=False),
        )
        .from_(ranked, copy=False)
        .join(
            values_table("ot", ["o"], [(o,) for o in orders], ["INT"]),
            join_type="cross",
            copy=False,
        )
    )
    part = [col("node"), col("attr"), col("o")]
    return exp.select(
        "*",
        exp.alias_(
            window(exp.func("ROW_NUMBER"), part, [col("p"), col("v")]), "rank_o", copy=False
        ),
    ).from_(with_order.subquery("wo", copy=False), copy=False)


# -- the strategy ------------------------------------------------------------------------------
@dataclass
class NodeInfo:
    """What scikit-learn's arrays hold per node beyond the class counts."""

    n_samples: int = 0
    impurity: float = 0.0
    improvement: float = 0.0
    infinite_threshold: bool = False
    tied: bool = False
    order_tied: bool = False  # best-first: its turn ties with another node's
    key: float = math.inf  # best-first priority: the lowest improvement on the path


@dataclass
class CARTChoice:
    feature: Feature
    row: dict[str, Any]
    improvement: float
    tied: bool


@dataclass
class ResolvedOptions:
    """scikit-learn's parameters turned into the numbers its builder compares with."""

    criterion: str
    max_depth: int | None
    min_samples_split: int
    min_samples_leaf: int
    min_weight_leaf: float
    min_impurity_decrease: float
    max_leaf_nodes: int | None
    ccp_alpha: float
    class_weight: list[float] | None
    n_samples: int
    total_weight: float


class CARTStrategy(Strategy):
    """CART as scikit-learn's ``DecisionTreeClassifier(splitter="best")`` grows it."""

    def __init__(self, data: Dataset, options: GrowOptions) -> None:
        super().__init__(data, options)
        if options.criterion not in CRITERIA:
            raise ValueError(f"criterion must be one of {CRITERIA}, not {options.criterion!r}")
        if data.infinite:
            # Its "known values left, unknown right" test compares with the largest double.
            raise DataError(
                f"columns holding +infinity: {data.infinite}; CART (like scikit-learn) needs "
                "finite values: replace them, or use C4.5, which takes infinity as a value"
            )
        self.criterion = "gini" if options.criterion == "gini" else "entropy"
        self.info: dict[int, NodeInfo] = {}
        self.resolved: ResolvedOptions | None = None
        self.expanded: list[int] = []  # nodes split, in the order a best-first builder pops them
        self.root_weight = 0.0
        self._class_weight = _class_weights(data, options.class_weight)
        self.score_columns = SCORE_COLUMNS
        # Class or sample weights make counts fractional: histograms then hold them in fixed
        # point, scaled for the largest sum, the root's weight.
        self.hist_bits = None
        if self._class_weight is not None or data.weight is not None:
            self.hist_bits = q.fixed_point_bits(sum(self._weighted_class_totals()))

    def _weighted_class_totals(self) -> list[float]:
        weights = list(self.data.class_weights)
        if self._class_weight is not None:
            weights = [w * cw for w, cw in zip(weights, self._class_weight, strict=True)]
        return weights

    @property
    def max_depth(self) -> int | None:
        return self.options.max_depth

    def prior(self) -> list[float]:
        k = self.n_classes
        weights = self._weighted_class_totals()
        total = sum(weights)
        return [w / total for w in weights] if total > 0 else [1.0 / k] * k

    def build_level0(self) -> exp.Expression:
        if self.options.max_bins:
            # scikit-learn never cuts between values closer than FEATURE_THRESHOLD
            self.bins = bin_edges(self.data, self.options.max_bins, FEATURE_THRESHOLD)
        return q.build_level0(
            self.data,
            self.bins,
            lookup=self.data.engine.VECTORIZED,
            class_weight=self._class_weight,
        )

    def build_histogram(
        self, level: exp.Table, features: list[Feature], nodes: int = 1
    ) -> exp.Expression:
        """The shared histogram with row counts (scikit-learn's ``min_samples_*`` count rows)."""
        return q.build_histogram(
            level,
            features,
            self.n_classes,
            self.summed_by_class(features, nodes),
            self.rowwise(features),
            self.hist_bits,
            counts=True,
        )

    def _measure_density(self, engine: Any, hist: exp.Table) -> None:
        """Density from the histogram: its rows per feature against the level's rows."""
        if self.bins or not engine.SUPPORTS_ORDERED_SCAN:
            return
        rows = engine.execute(
            exp.select(
                col("attr"),
                exp.func("COUNT", exp.Star()),
                exp.func("SUM", col("n")),
            )
            .from_(hist.copy(), copy=False)
            .group_by(col("attr"), copy=False)
        )
        level_rows = sum(float(n) for attr, _, n in rows if attr == -1)
        continuous = {f.index for f in self.data.features if f.kind == CONTINUOUS}
        self.dense = frozenset(
            int(attr) for attr, groups, _ in rows
            if attr in continuous and level_rows > 0 and groups >= DENSE_VALUES * level_rows
        )

    def read_counts(self, engine: Any, hist: exp.Table) -> dict[int, list[float]]:
        rows = engine.execute(
            q.build_node_counts(hist, self.n_classes, self.hist_bits, counts=True)
        )
        out: dict[int, list[float]] = {}
        for node_id, n, *counts in rows:
            counts_f = [float(c) for c in counts]
            out[int(node_id)] = counts_f
            info = self.info.setdefault(int(node_id), NodeInfo())
            info.n_samples = int(n)
            info.impurity = impurity(counts_f, self.criterion)
        if self.resolved is None:  # the root level: resolve fractions against the data size
            n_root = sum(self.info[i].n_samples for i in out)
            self.root_weight = sum(sum(c) for c in out.values())
            self.resolved = resolve_options(
                self.options, n_root, self.root_weight, self._class_weight, self.criterion
            )
        return out

    def may_split(self, p: Pending) -> bool:
        r = self.resolved
        assert r is not None
        info = self.info[p.node.node_id]
        weight = sum(p.node.counts)
        if r.max_depth is not None and p.depth >= r.max_depth:
            return False
        if info.n_samples < r.min_samples_split or info.n_samples < 2 * r.min_samples_leaf:
            return False
        if weight < 2 * r.min_weight_leaf:
            return False
        return info.impurity > EPSILON

    def build_scores(self, hist: exp.Table, features: list[Feature]) -> exp.Expression:
        r = self.resolved
        assert r is not None
        return build_cart_scores(
            hist,
            features,
            self.n_classes,
            criterion=self.criterion,
            min_samples_leaf=r.min_samples_leaf,
            min_weight_leaf=r.min_weight_leaf,
            ordered_scan=self.data.engine.SUPPORTS_ORDERED_SCAN,
            fractional=self.hist_bits is not None,
            bits=self.hist_bits,
        )

    def choose(self, rows: list[dict[str, Any]], p: Pending) -> CARTChoice | None:
        r = self.resolved
        assert r is not None
        rows = [row for row in rows if row["gain"] is not None]
        if not rows:
            return None
        rows.sort(key=lambda row: int(row["attr"]))
        best = max(float(row["gain"]) for row in rows)
        near = [row for row in rows if float(row["gain"]) >= best - TIE_TOLERANCE]
        row = near[0]
        weight = sum(p.node.counts)
        info = self.info[p.node.node_id]
        gain = float(row["gain"])
        improvement = (weight / self.root_weight) * gain
        if improvement + EPSILON < r.min_impurity_decrease:
            return None
        info.improvement = improvement
        info.tied = len(near) > 1 or int(row["n_near"]) > 1
        features = {f.index: f for f in self.data.features}
        return CARTChoice(features[int(row["attr"])], row, improvement, info.tied)

    def select(self, choices: dict[int, Any], frontier: dict[int, Pending]) -> dict[int, Any]:
        """Best-first growth: carry out only the splits a best-first builder may still make.

        scikit-learn pops nodes by improvement, so a node is split before another when the
        lowest improvement on its path (its *key*) is higher. With ``B = max_leaf_nodes - 1``
        splits to make, a node that already has ``B`` known nodes ranked above it can never be
        split; every other node is split now, speculatively, and ``finish`` keeps the first
        ``B`` by key.
        """
        r = self.resolved
        assert r is not None
        parent_key = self._parent_keys
        for node_id, choice in choices.items():
            info = self.info[node_id]
            info.key = min(parent_key.get(node_id, math.inf), choice.improvement)
        if r.max_leaf_nodes is None:
            return choices
        budget = r.max_leaf_nodes - 1
        self._keyed.extend((-self.info[n].key, frontier[n].depth, n) for n in choices)
        ranked = sorted(self._keyed)
        keep_set = {n for _, _, n in ranked[:budget]}
        self._keyed = [e for e in self._keyed if e[2] in keep_set]
        return {n: c for n, c in choices.items() if n in keep_set}

    _parent_keys: dict[int, float]
    _keyed: list[tuple[float, int, int]]

    def on_histogram(self, engine: Any, hist: exp.Table, depth: int) -> None:
        if depth == 0:
            self._parent_keys = {}
            self._keyed = []
        self._measure_density(engine, hist)

    def on_child(self, parent: Pending, branch: int, child: Node) -> None:
        self._parent_keys[child.node_id] = self.info[parent.node.node_id].key

    def plan(
        self, engine: Any, hist: exp.Table, choices: dict[int, Any], frontier: dict[int, Pending]
    ) -> dict[int, Plan]:
        k = self.n_classes
        orders = [1] if k == 2 else list(range(k))
        nominal_pairs = [
            (n, c.feature.index) for n, c in choices.items() if c.feature.kind == NOMINAL
        ]
        ranks: dict[tuple[int, int], list[tuple[float, int, int, int]]] = {}
        if nominal_pairs:
            for node_id, attr, v, rank_v, o, rank_o in engine.execute(
                build_nominal_ranks(hist, nominal_pairs, k, orders, self.hist_bits)
            ):
                ranks.setdefault((int(node_id), int(attr)), []).append(
                    (float(v), int(rank_v), int(o), int(rank_o))
                )
        plans: dict[int, Plan] = {}
        for node_id, choice in choices.items():
            row = choice.row
            f = choice.feature
            info = self.info[node_id]
            side = int(row["side"])
            kind = int(row["kind"])
            n_left, n_right = float(row["n_left"]), float(row["n_right"])
            if float(row["n_unknown"]) > 0:
                unknown_branch = 0 if side == 1 else 1
            else:
                # scikit-learn: no unknown value seen here, so they go where most rows went
                unknown_branch = 0 if n_left > n_right else 1
            if f.kind == CONTINUOUS:
                if kind == _KNOWN_LEFT:
                    threshold = INFINITE_THRESHOLD
                    info.infinite_threshold = True
                    test: float | None = threshold
                elif self.bins:
                    # the level table holds bin indexes; the tree cuts at the left bin's top
                    # edge, a training value, as Spark and MADlib cut at bin boundaries
                    test = float(row["threshold"])
                    threshold = self.bins[f.index][int(test)]
                else:
                    threshold = midpoint(float(row["threshold"]), float(row["next_value"]))
                    test = threshold
                split = Split(f.name, CONTINUOUS, threshold=threshold)
                keys: list[list[int]] = [[0], [1]]
            else:
                values = ranks.get((node_id, f.index), [])
                codes = sorted({int(v) for v, _, _, _ in values})
                if kind == _KNOWN_LEFT:
                    left = set(codes)
                elif kind == _SUBSET:
                    mask = int(row["cut"])
                    left = {int(v) for v, rv, _, _ in values if mask >> rv & 1}
                else:
                    o, cut = int(row["o"]), int(row["cut"])
                    left = {int(v) for v, _, oo, ro in values if oo == o and ro <= cut}
                right = [c for c in codes if c not in left]
                keys = [sorted(left), right]
                split = Split(f.name, NOMINAL, groups=[[f.values[c] for c in g] for g in keys])
                test = None
            w_left, w_right = float(row["w_left"]), float(row["w_right"])
            plans[node_id] = Plan(
                split=split,
                test_threshold=test,
                keys_of_branch=keys,
                shares=[w_left / (w_left + w_right), w_right / (w_left + w_right)],
                unknown_branch=unknown_branch,
            )
            self.expanded.append(node_id)
        return plans

    def finish(self, root: Node) -> Node:
        r = self.resolved
        if r is None:
            return root
        if r.max_leaf_nodes is not None:
            budget = r.max_leaf_nodes - 1
            order = best_first_order(root, self.info)
            keep = set(order[:budget])
            # scikit-learn's heap orders equal improvements arbitrarily: mark nodes whose
            # turn ties with another's across the budget's edge, or among the kept ones.
            by_key = sorted(range(len(order)), key=lambda i: self.info[order[i]].key)
            for a, b in itertools.pairwise(by_key):
                ka, kb = self.info[order[a]].key, self.info[order[b]].key
                if abs(ka - kb) <= TIE_TOLERANCE and (a < budget or b < budget):
                    self.info[order[a]].order_tied = True
                    self.info[order[b]].order_tied = True
            for node in list(root.walk()):
                if not node.is_leaf and node.node_id not in keep:
                    node.make_leaf()
        if r.ccp_alpha > 0:
            prune_ccp(root, r.ccp_alpha, self.criterion, self.node_order(root, grown=True))
        return root

    def node_order(self, root: Node, grown: bool = False) -> list[Node]:
        """Nodes in scikit-learn's numbering.

        Preorder, except for a best-first tree as grown (``grown``, or no ``ccp_alpha``):
        then creation order. scikit-learn renumbers a tree in preorder when it prunes it.
        """
        r = self.resolved
        best_first = r is not None and r.max_leaf_nodes is not None
        if best_first and (grown or r is None or r.ccp_alpha == 0):
            return best_first_numbering(root, self.info)
        return list(root.walk())


def midpoint(a: float, b: float) -> float:
    """scikit-learn's threshold between adjacent values: ``a/2 + b/2``, or ``a`` if that is b."""
    t = a / 2.0 + b / 2.0
    if t == b or math.isinf(t):
        return a
    return t


def _class_weights(data: Dataset, class_weight: Any) -> list[float] | None:
    """Weight per class in ``data.classes`` order; "balanced" is n / (k * row count)."""
    if class_weight is None:
        return None
    k = len(data.classes)
    if class_weight == "balanced":
        counts = _class_row_counts(data)
        n = sum(counts)
        return [n / (k * c) if c > 0 else 1.0 for c in counts]
    if isinstance(class_weight, Mapping):
        out = []
        for c in data.classes:
            w = class_weight.get(c, class_weight.get(str(c), 1.0))
            out.append(float(w))
        return out
    raise ValueError(f"class_weight must be None, 'balanced' or a dict, not {class_weight!r}")


def _class_row_counts(data: Dataset) -> list[float]:
    if data.weight is None:
        return list(data.class_weights)
    target = exp.column(data.target, quoted=True)
    rows = data.engine.execute(
        exp.select(target, exp.func("COUNT", exp.Star()))
        .from_(data.relation.copy(), copy=False)
        .where(target.is_(exp.null()).not_(), copy=False)
        .group_by(target, copy=False)
    )
    by_class = {v: float(n) for v, n in rows}
    return [by_class.get(c, 0.0) for c in data.classes]


def resolve_options(
    options: GrowOptions,
    n_samples: int,
    total_weight: float,
    class_weight: list[float] | None,
    criterion: str,
) -> ResolvedOptions:
    """scikit-learn's ``fit`` arithmetic: fractions to counts, split >= 2 x leaf, weights."""
    msl = options.min_samples_leaf
    # scikit-learn: a float is a fraction of the rows, an int a count
    min_samples_leaf = math.ceil(msl * n_samples) if isinstance(msl, float) else int(msl)
    if min_samples_leaf < 1:
        raise ValueError("min_samples_leaf must be at least 1 (or a fraction in (0, 1))")
    mss = options.min_samples_split
    if not mss:
        min_samples_split = 2
    elif isinstance(mss, float) and mss <= 1.0:
        min_samples_split = max(2, math.ceil(mss * n_samples))
    else:
        min_samples_split = int(mss)
    min_samples_split = max(min_samples_split, 2 * min_samples_leaf)
    if options.max_leaf_nodes is not None and options.max_leaf_nodes < 2:
        raise ValueError("max_leaf_nodes must be at least 2")
    if options.ccp_alpha < 0:
        raise ValueError("ccp_alpha must be non-negative")
    return ResolvedOptions(
        criterion=criterion,
        max_depth=options.max_depth,
        min_samples_split=min_samples_split,
        min_samples_leaf=min_samples_leaf,
        min_weight_leaf=options.min_weight_fraction_leaf * total_weight,
        min_impurity_decrease=options.min_impurity_decrease,
        max_leaf_nodes=options.max_leaf_nodes,
        ccp_alpha=options.ccp_alpha,
        class_weight=class_weight,
        n_samples=n_samples,
        total_weight=total_weight,
    )


# -- best-first order --------------------------------------------------------------------------
def best_first_order(root: Node, info: Mapping[int, NodeInfo]) -> list[int]:
    """Ids of the split nodes in the order a best-first builder pops them.

    The builder pops by improvement from a heap that a node enters when its parent is split,
    which is the order of the path minimum of improvements (``NodeInfo.key``); ties go to the
    shallower node, then the earlier one.
    """
    heap: list[tuple[float, int, int, Node]] = []
    out: list[int] = []
    heapq.heappush(heap, (-info[root.node_id].key, 0, root.node_id, root))
    depth = {root.node_id: 0}
    while heap:
        _, d, _, node = heapq.heappop(heap)
        if node.is_leaf:
            continue
        out.append(node.node_id)
        for child in node.children:
            depth[child.node_id] = d + 1
            key = info[child.node_id].key if not child.is_leaf else -math.inf
            heapq.heappush(heap, (-key, d + 1, child.node_id, child))
    return out


def best_first_numbering(root: Node, info: Mapping[int, NodeInfo]) -> list[Node]:
    """Nodes in the order a best-first builder creates them: root, then children as popped."""
    by_id = {n.node_id: n for n in root.walk()}
    out = [root]
    for node_id in best_first_order(root, info):
        out.extend(by_id[node_id].children)
    return out


# -- inspection --------------------------------------------------------------------------------
def split_scores(
    data: Dataset,
    *,
    criterion: str = "gini",
    exhaustive: bool = False,
    class_weight: Any = None,
) -> list[dict[str, Any]]:
    """Every valid binary split of the whole data set, scored in SQL.

    One dict per candidate: ``feature``, ``threshold`` (continuous) or ``left``/``right``
    value lists (nominal), ``unknown_left``, ``n_left``/``n_right``, ``w_left``/``w_right``,
    ``impurity_after`` (the weighted impurity of the two children) and ``gain``.
    ``exhaustive`` lists every two-way partition of nominal features with at most
    ``EXACT_SUBSETS_MAX`` values, not only those the ordered scan visits.

    Examples
    --------
    >>> from sqltree.engines.duckdb import DuckDBEngine
    >>> from sqltree.dataset import describe
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"x": ["a", "b", "c", "a"], "y": [0, 1, 1, 0]})
    >>> rows = split_scores(describe(frame, DuckDBEngine(), "y"))
    >>> [(r["left"], r["right"], r["impurity_after"]) for r in rows]
    [(['a'], ['b', 'c'], 0.0), (['a', 'b'], ['c'], 0.3333333333333333)]
    """
    engine = data.engine
    k = len(data.classes)
    crit = _criterion(criterion)
    level = engine.materialize(
        "level", q.build_level0(data, class_weight=_class_weights(data, class_weight))
    )
    hist = engine.materialize("hist", q.build_histogram(level, data.features, k, counts=True))
    try:
        rows = [
            dict(zip(SCORE_COLUMNS, r, strict=True))
            for r in engine.execute(
                build_cart_scores(
                    hist,
                    data.features,
                    k,
                    criterion=crit,
                    all_candidates=True,
                    exhaustive=exhaustive,
                )
            )
        ]
        nominal = [(0, f.index) for f in data.features if f.kind == NOMINAL]
        orders = [1] if k == 2 else list(range(k))
        ranks: dict[int, list[tuple[int, int, int, int]]] = {}
        if nominal:
            for _, attr, v, rank_v, o, rank_o in engine.execute(
                build_nominal_ranks(hist, nominal, k, orders)
            ):
                ranks.setdefault(int(attr), []).append((int(v), int(rank_v), int(o), int(rank_o)))
    finally:
        engine.drop(hist)
        engine.drop(level)
    features = {f.index: f for f in data.features}
    out = []
    for row in rows:
        f = features[int(row["attr"])]
        item: dict[str, Any] = {"feature": f.name}
        kind = int(row["kind"])
        if f.kind == CONTINUOUS:
            item["threshold"] = (
                math.inf
                if kind == _KNOWN_LEFT
                else midpoint(float(row["threshold"]), float(row["next_value"]))
            )
        else:
            values = ranks.get(f.index, [])
            codes = sorted({v for v, _, _, _ in values})
            if kind == _KNOWN_LEFT:
                left = set(codes)
            elif kind == _SUBSET:
                left = {v for v, rv, _, _ in values if int(row["cut"]) >> rv & 1}
            else:
                left = {v for v, _, o, ro in values if o == int(row["o"]) and ro <= int(row["cut"])}
            item["left"] = [f.values[c] for c in codes if c in left]
            item["right"] = [f.values[c] for c in codes if c not in left]
        item["unknown_left"] = int(row["side"]) == 1
        for key in ("n_left", "n_right", "w_left", "w_right", "impurity_after", "gain"):
            item[key] = float(row[key])
        out.append(item)
    return out
