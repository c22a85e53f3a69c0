"""Literals and boolean nodes for compiled trees, built without copying.

A large tree's SQL holds tens of thousands of literals and tests. sqlglot's ``Literal.number``
and ``Literal.string`` check and convert each literal, and its builder functions and operators
copy their operands, which makes trees of thousands of tests quadratic to build; everything here
is built with constructors instead. ``sqltree.sqlexpr`` holds the training queries' helpers,
which copy where their callers reuse parts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlglot import exp

from ..tree import Split


# -- literals ----------------------------------------------------------------------------------
def _number(text: str) -> exp.Expression:
    if text.startswith("-"):
        return exp.Neg(this=exp.Literal(this=text[1:], is_string=False))
    return exp.Literal(this=text, is_string=False)


def dnum(x: float, *, double: bool = True) -> exp.Expression:
    """A float literal, exact; typed DOUBLE by every engine unless ``double=False`` (see
    ``sqlexpr.num``)."""
    x = float(x)
    if math.isinf(x) or math.isnan(x):
        raise ValueError(f"{x} cannot be written as a SQL literal")
    text = repr(x)
    return _number(text + "e0" if double and "e" not in text else text)


def inum(i: int) -> exp.Expression:
    """An integer literal."""
    return _number(str(i))


def literal(value: Any) -> exp.Expression:
    """A class label or nominal value (see ``sqlexpr.literal``).

    A boolean is ``CAST(1 AS BOOLEAN)`` or ``CAST(0 AS BOOLEAN)``, not TRUE or FALSE: SQLite does
    not reserve those words and reads a column named ``true`` or ``false`` instead, without an
    error. A cast names nothing a table could hold, and sqlglot writes it as each dialect stores
    booleans (an INTEGER on SQLite and MySQL, a BIT on T-SQL).
    """
    if isinstance(value, bool):
        return exp.Cast(this=inum(int(value)), to=exp.DataType(this=exp.DataType.Type.BOOLEAN))
    if isinstance(value, int):
        return inum(value)
    if isinstance(value, float):
        return dnum(value)
    return exp.Literal(this=str(value), is_string=True)


def literal_table(alias: str, columns: Sequence[str], rows: Sequence[Sequence[float]],
                  types: Sequence[str]) -> exp.Subquery:
    """``(SELECT CAST(c AS type) AS c ... FROM (VALUES ...)) AS alias`` (see
    ``sqlexpr.values_table``), with literals built directly: a leaf table has thousands."""
    tuples = [
        exp.Tuple(expressions=[inum(v) if isinstance(v, int) else dnum(v) for v in row])
        for row in rows
    ]
    raw = exp.Values(expressions=tuples, alias=exp.TableAlias(
        this=exp.to_identifier(f"{alias}_raw"), columns=[exp.to_identifier(c) for c in columns]))
    casts = [
        exp.Alias(this=exp.Cast(this=exp.column(c), to=exp.DataType.build(t)),
                  alias=exp.to_identifier(c))
        for c, t in zip(columns, types)
    ]
    return exp.Subquery(this=exp.Select(expressions=casts).from_(raw, copy=False),
                        alias=exp.TableAlias(this=exp.to_identifier(alias)))


def column(name: str, table: str | None = None) -> exp.Column:
    """A quoted column reference."""
    return exp.Column(
        this=exp.to_identifier(name, quoted=True),
        table=exp.to_identifier(table, quoted=True) if table else None,
    )


# -- boolean nodes -----------------------------------------------------------------------------
def or_(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Or(this=a, expression=b)


def and_(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    def side(e: exp.Expression) -> exp.Expression:
        return exp.Paren(this=e) if isinstance(e, exp.Or) else e

    return exp.And(this=side(a), expression=side(b))


def not_(e: exp.Expression) -> exp.Expression:
    return exp.Not(this=exp.Paren(this=e) if isinstance(e, exp.Connector) else e)


def is_null(e: exp.Expression) -> exp.Expression:
    return exp.Is(this=e, expression=exp.Null())


def cases(ifs: list[tuple[exp.Expression, exp.Expression]], default: exp.Expression | None
          ) -> exp.Case:
    """``CASE WHEN c THEN v ... ELSE default END``; no ELSE (NULL) for a None default."""
    return exp.Case(ifs=[exp.If(this=c, true=v) for c, v in ifs], default=default)


def in_values(c: exp.Expression, values: Sequence[Any]) -> exp.Expression | None:
    """``c IN (values)``; None for no values, which no value matches (``IN ()`` is no SQL)."""
    if not values:
        return None
    if len(values) == 1:
        return exp.EQ(this=c, expression=literal(values[0]))
    return exp.In(this=c, expressions=[literal(v) for v in values])


def listed(split: Split) -> list[Any]:
    """Every value a nominal test's branches list, in branch order."""
    assert split.groups is not None
    return [v for g in split.groups for v in g]

