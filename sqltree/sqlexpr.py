"""SQL building blocks every builder, the engines and the compiler share: columns, exact
numeric literals, CASE, aliases, small literal tables, window specs and materialised CTEs, all
as sqlglot expressions (never pasted text)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlglot import exp


def col(name: str, table: str | None = None) -> exp.Column:
    return exp.column(name, table=table)


def num(x: float | int, *, double: bool = True) -> exp.Expression:
    """A numeric literal, exact (``repr``) for floats.

    Floats get an exponent (``0.25e0``) unless ``double=False``: DuckDB and Spark read a plain
    ``0.25`` as a DECIMAL, whose products soon overflow its scale, and ``e0`` makes it DOUBLE.
    """
    if isinstance(x, bool):
        raise TypeError("booleans are not numbers here")
    if isinstance(x, int):
        return exp.Literal.number(x)
    if math.isinf(x) or math.isnan(x):
        raise ValueError(f"{x} cannot be written as a SQL literal")
    text = repr(float(x))
    if double and "e" not in text:
        text += "e0"
    if text.startswith("-"):
        return exp.Neg(this=exp.Literal.number(text[1:]))
    return exp.Literal.number(text)


_DOUBLE = exp.DataType.build("DOUBLE")
"""DOUBLE parsed once (``exp.cast`` copies it): parsing it for every cast was a tenth of
building a small fit's level-0 query."""


def as_double(e: exp.Expression) -> exp.Cast:
    return exp.cast(e, _DOUBLE)


def alias(e: exp.Expression, name: str) -> exp.Alias:
    """``e AS name``, taking ``e`` itself: the builders here pass fresh expressions, and
    copying each one again cost most of the time of building a level's queries."""
    return exp.alias_(e, name, copy=False)


def paren(e: exp.Expression) -> exp.Expression:
    return exp.paren(e, copy=False)


def case(
    *whens: tuple[exp.Expression, exp.Expression], default: exp.Expression, copy: bool = True
) -> exp.Case:
    """``CASE WHEN ... ELSE default END``, copying each part once (sqlglot's own builder
    copies the whole CASE on every WHEN), or, with ``copy=False``, taking parts built for it."""
    def part(e: exp.Expression) -> exp.Expression:
        return e.copy() if copy else e

    c = exp.Case()
    for cond, value in whens:
        c.when(part(cond), part(value), copy=False)
    return c.else_(part(default), copy=False)


def xlogx(e: exp.Expression) -> exp.Expression:
    """``e * LN(e)``, 0 for ``e <= 0`` (engines disagree on LN(0), so it is never evaluated)."""
    return case(
        (exp.GT(this=e, expression=num(0)), paren(e * exp.func("LN", e))), default=num(0.0)
    )


def safe_div(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    """``a / b``, NULL where ``b`` is not positive (engines disagree on division by zero)."""
    return case((exp.GT(this=b, expression=num(0)), paren(a) / paren(b)), default=exp.null())


def class_columns(n_classes: int, prefix: str = "c") -> list[str]:
    return [f"{prefix}{i}" for i in range(n_classes)]


def total(names: Sequence[str], table: str | None = None) -> exp.Expression:
    return add_all([col(name, table) for name in names])


def binary(
    op: type[exp.Binary], this: exp.Expression, other: exp.Expression
) -> exp.Binary:
    """``this <op> other`` as sqlglot's operator overloads build it (an operand that is
    another binary operation is parenthesised unless one side already is ``op``), without
    their copies of both operands, which made building a CART level's bounds most of its
    Python time. The operands become the result's: pass copies of what is used again."""
    if not isinstance(this, op) and not isinstance(other, op):
        this = paren(this) if isinstance(this, exp.Binary) else this
        other = paren(other) if isinstance(other, exp.Binary) else other
    return op(this=this, expression=other)


def add_all(terms: Sequence[exp.Expression]) -> exp.Expression:
    """``(t1 + t2 + ...)``."""
    # Built without the operator overloads, which copy the growing left operand every time.
    out = terms[0]
    for t in terms[1:]:
        out = exp.Add(this=out, expression=t)
    return paren(out)


def window(
    func: exp.Expression,
    partition: Sequence[exp.Expression],
    order: Sequence[exp.Expression] = (),
    running: bool = False,
) -> exp.Window:
    spec = None
    if running:
        spec = exp.WindowSpec(
            kind="ROWS", start="UNBOUNDED", start_side="PRECEDING", end="CURRENT ROW"
        )
    return exp.Window(
        this=func,
        partition_by=list(partition),
        order=exp.Order(expressions=[exp.Ordered(this=o, nulls_first=False) for o in order])
        if order
        else None,
        spec=spec,
    )



def with_materialized(
    query: exp.Select, ctes: Sequence[tuple[str, exp.Expression]], materialized: bool = True
) -> exp.Select:
    """``query`` with each (name, body) of ``ctes`` as a ``MATERIALIZED`` CTE (plain where
    ``materialized`` is false: Spark has no such keyword), in order."""
    for name, body in ctes:
        query = query.with_(name, as_=body, materialized=materialized or None, copy=False)
    return query

WITHOUT_NESTED_LOOPS = "without_nested_loops"
"""The ``meta`` key of ``without_nested_loops`` statements."""


def without_nested_loops(select: exp.Select) -> exp.Select:
    """Mark ``select``, a statement whose joins PostgreSQL's planner estimates at one row where
    thousands arrive, and return it. It then picks nested loops that scan the inner side once
    per outer row: the bound-pruned search's candidates joined with their nodes' totals re-read
    the histogram 7,400 times at 30,000 rows, for minutes, and CART's full scan re-read it once
    per candidate too (40,000 rows to depth 4 trained in 19.7 s so, 3.5 s marked). Engines
    with planner settings run a marked statement without nested loops (PostgreSQL:
    ``enable_nestloop``, as the select plan does)."""
    select.meta[WITHOUT_NESTED_LOOPS] = True
    return select


COMPUTED_ONCE = "computed_once"
"""The ``meta`` key of ``computed_once`` derived tables."""


def computed_once(select: exp.Select) -> exp.Select:
    """Mark ``select``, a derived table whose computed columns the query around it reads
    several times, and return it. PostgreSQL merges a derived table into the query that reads
    it, and then computes each column again wherever it is read: a CART level's statement took
    4.1 s merged and 1.65 s kept apart at 30,000 rows. Engines with ``FENCES_DERIVED_TABLES``
    keep marked tables apart when they render (``fenced``)."""
    select.meta[COMPUTED_ONCE] = True
    return select


def fenced(query: exp.Expression) -> exp.Expression:
    """``query`` with ``OFFSET 0`` on each derived table marked by ``computed_once``, which
    PostgreSQL never merges into the query around it (a copy; ``query`` itself if none is
    marked)."""
    if not any(s.meta.get(COMPUTED_ONCE) for s in query.find_all(exp.Select)):
        return query

    def fence(node: exp.Expression) -> exp.Expression:
        if (isinstance(node, exp.Select) and node.meta.get(COMPUTED_ONCE)
                and not node.args.get("limit") and not node.args.get("offset")):
            return node.offset(0, copy=False)
        return node

    return query.transform(fence)


def literal(value: object) -> exp.Expression:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        return num(value)
    return exp.Literal.string(str(value))


def values_table(
    name: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[float | int | None]],
    types: Sequence[str],
) -> exp.Expression:
    """A small literal table, typed by casts so every engine infers the same column types."""
    literal_rows = [
        exp.Tuple(
            expressions=[exp.null() if v is None else num(v) for v in row]
        )
        for row in rows
    ]
    raw = exp.Values(
        expressions=literal_rows,
        alias=exp.TableAlias(
            this=exp.to_identifier(f"{name}_raw"),
            columns=[exp.to_identifier(c) for c in columns],
        ),
    )
    select = exp.select(
        *[alias(exp.cast(col(c), t), c) for c, t in zip(columns, types)]
    ).from_(raw)
    return alias(exp.Subquery(this=select), name)
