"""CART's impurity of a node or side, in SQL."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlglot import exp

from ...sqlexpr import add_all, case, num, paren


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
