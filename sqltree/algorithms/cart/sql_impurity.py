"""CART's impurity of a node or side, in SQL."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlglot import exp

from ...sqlexpr import add_all, binary, num, paren


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
            terms.append(_case(exp.GT(this=c.copy(), expression=num(0)),
                               paren(binary(exp.Mul, p, log2)), num(0.0)))
        value = binary(exp.Sub, num(0.0), add_all(terms))
    return _case(positive, paren(value), num(0.0))


def _case(cond: exp.Expression, value: exp.Expression, default: exp.Expression) -> exp.Case:
    """``CASE WHEN cond THEN value ELSE default END`` of parts built for it (no copies)."""
    return exp.Case(ifs=[exp.If(this=cond, true=value)], default=default)
