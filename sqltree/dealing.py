"""Rows in an order that is the same on every engine, and a session of queries on one
connection: what cross-validation deals its folds by (``sqltree.crossval``) and permutation
importance numbers and shuffles its rows by (``sqltree.permutation``).

A row's hash is the MD5 (hex text) of a seed and a text form of its values, or of one ``key``
column: a float enters as the integer ``FLOOR(frac(x * c) * 2^31)`` (IEEE arithmetic, exact and
the same everywhere), integers and text as their text, booleans as ``t`` or ``f``, NULL as the
empty text (engines write floats as text differently, and their own hash functions differ).
Ties are broken by ``order_key``: text by its MD5 (collations differ), other comparable values by
themselves.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlglot import exp

from .compiler.blocks import column as quoted
from .compiler.blocks import dnum
from .dataset import FLOAT_TYPES, INTEGER_TYPES, NUMERIC_TYPES, TEXT_TYPES
from .engines import Engine, get_engine
from .errors import UnsupportedError

__all__ = ["FLOAT_MULTIPLIER", "hash_text", "order_key", "row_hash", "session"]

FLOAT_MULTIPLIER = 0.6180339887498949
"""``c`` of the float hash ``frac(x * c)``: the golden ratio's fraction spreads integers and
steps of any size over [0, 1) (a Weyl sequence)."""
_EXACT = 2.0**52
"""Below this magnitude a double's integer part, and so its fraction, is exact."""


def _text(value: exp.Expression) -> exp.Expression:
    return exp.cast(value, exp.DataType.build("VARCHAR"))


def _string(text: str) -> exp.Expression:
    return exp.Literal.string(text)


def hash_text(column: exp.Expression, dtype: exp.DataType) -> exp.Expression | None:
    """A text form of a value that every engine writes the same (None: a type left out)."""
    if dtype.is_type(exp.DataType.Type.BOOLEAN):
        return exp.Case(ifs=[exp.If(this=column.copy(), true=_string("t")),
                             exp.If(this=exp.Not(this=column.copy()), true=_string("f"))])
    if dtype.is_type(*TEXT_TYPES):
        return column.copy()
    if dtype.is_type(*INTEGER_TYPES):
        return _text(column.copy())
    if dtype.is_type(*FLOAT_TYPES, *NUMERIC_TYPES):
        scaled = exp.Mul(this=exp.cast(column.copy(), exp.DataType.build("DOUBLE")),
                         expression=dnum(FLOAT_MULTIPLIER))
        fraction = exp.Case(
            ifs=[exp.If(this=exp.LT(this=exp.Abs(this=scaled.copy()),
                                    expression=dnum(_EXACT)),
                        true=exp.Sub(this=scaled.copy(), expression=exp.Floor(this=scaled)))],
            default=dnum(0.0),
        )
        bits = exp.Floor(this=exp.Mul(this=fraction, expression=dnum(2.0**31)))
        return _text(exp.cast(bits, exp.DataType.build("BIGINT")))
    return None


def order_key(column: exp.Expression, dtype: exp.DataType) -> exp.Expression | None:
    """What rows are ordered by for a column: text by its MD5 (collations differ), other
    comparable values by themselves; None for types without a portable order."""
    if dtype.is_type(*TEXT_TYPES) and not dtype.is_type(exp.DataType.Type.BOOLEAN):
        return exp.MD5(this=column.copy())
    if dtype.is_type(*NUMERIC_TYPES, exp.DataType.Type.BOOLEAN, *exp.DataType.TEMPORAL_TYPES):
        return column.copy()
    return None


def row_hash(
    schema: Sequence[tuple[str, exp.DataType]], seed: int, key: str | None
) -> exp.Expression:
    """``MD5(seed | value | value ...)`` over the hashed columns (only ``key`` if given)."""
    parts: list[exp.Expression] = [_string(str(seed))]
    for name, dtype in schema:
        if key is not None and name != key:
            continue
        text = hash_text(quoted(name), dtype)
        if text is not None:
            parts += [_string("|"), exp.Coalesce(this=text, expressions=[_string("")])]
    joined = parts[0]
    for p in parts[1:]:
        joined = exp.DPipe(this=joined, expression=p, safe=True)
    return exp.MD5(this=joined)


@contextmanager
def session(connection: Any) -> Iterator[tuple[Engine, Any]]:
    """An engine for the work's own tables (cross-validation's dealt rows), and the
    connection the calls it makes (trainings, evaluations) share with it.

    A new in-memory DuckDB database or a ``postgresql://`` URL is opened once, for all the
    calls; an engine the caller made is left to the calls and a second engine on its
    connection keeps the work's tables (training cleans up its engine's tables at the end).
    """
    if connection is None:
        from .engines.duckdb import DuckDBEngine

        engine = DuckDBEngine()  # sqltree's own database: its files count as local rows
        conn = engine.connection
        try:
            yield engine, conn
        finally:
            engine.cleanup()
            conn.close()
        return
    if isinstance(connection, Engine):
        raw = getattr(connection, "connection", None) or getattr(connection, "spark", None)
        if raw is None:
            raise UnsupportedError(f"cannot share the connection of a {type(connection)}")
        engine, shared = get_engine(raw), connection
    else:
        engine = get_engine(connection)
        # A postgresql:// URL opened a connection for this call: the trainings share it.
        shared = engine.connection if isinstance(connection, str) else connection
    try:
        yield engine, shared
    finally:
        engine.cleanup()
