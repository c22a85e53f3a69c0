"""CART's impurity of a node or side, in SQL."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlglot import exp

from ...sqlexpr import add_all, binary, case, num, paren


def build_impurity(
    counts: Sequence[exp.Expression], weight: exp.Expression, criterion: str
) -> exp.Expression:
    """Gini ``1 - sum c^2 / w^2`` or entropy ``-sum p log2 p`` of SQL counts; 0 for no weight.

    Reads ``counts`` and ``weight`` (copies them where it uses them)."""
    positive = exp.GT(this=weight.copy(), expression=num(0))
    if criterion == "gini":
        squares = add_all([paren(binary(exp.Mul, c.copy(), c.copy())) for c in counts])
        value = binary(exp.Sub, num(1.0), paren(binary(
            exp.Div, squares, paren(binary(exp.Mul, weight.copy(), weight.copy())))))
    else:
        terms: list[exp.Expression] = []
        for c in counts:
            p = paren(binary(exp.Div, c.copy(), weight.copy()))
            log2 = paren(binary(exp.Div, exp.func("LN", p.copy()), num(math.log(2.0))))
            terms.append(case((exp.GT(this=c.copy(), expression=num(0)),
                               paren(binary(exp.Mul, p, log2))), default=num(0.0), copy=False))
        value = binary(exp.Sub, num(0.0), add_all(terms))
    return case((positive, paren(value)), default=num(0.0), copy=False)
