"""Date features: a DATE or TIMESTAMP column as four numbers, the same SQL in training and in
every scoring query.

With ``train(..., date_features=True)`` (``--date-features``) each date or timestamp feature
column ``d`` becomes four continuous features, named ``d.year``, ``d.month``, ``d.dow`` and
``d.epoch_day``:

- ``year``: the calendar year;
- ``month``: 1 (January) to 12;
- ``dow``: the ISO day of the week, 1 (Monday) to 7 (Sunday), on every engine;
- ``epoch_day``: the days from 1970-01-01 to the row's date (negative before it).

A timestamp's parts are those of its date (its time of day is dropped; a ``TIMESTAMPTZ``'s
date is the one in the session's time zone). Each part is a BIGINT computed in SQL from the
column (``part_expression``): training reads them from the source wrapped in ``SELECT *,
<parts> FROM source`` (``add_parts``), scoring queries the same (``for_scoring``), and the
compiled expression (``Model.to_sql``, dbt) writes each part's expression where the tree tests
it (``inline``), so a table with the raw date column scores as it is. The day of the week is
counted from ``epoch_day`` (1970-01-01 was a Thursday) because engines number weekdays
differently (Spark's ``DAYOFWEEK`` is 1 for Sunday, PostgreSQL's ``DOW`` 0 for Sunday).

A model file records, for each such feature, the column (``date_column``) and the part
(``date_part``) it is computed from.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from .errors import DataError

YEAR, MONTH, DOW, EPOCH_DAY = "year", "month", "dow", "epoch_day"
PARTS = (YEAR, MONTH, DOW, EPOCH_DAY)
"""The parts of a date that become features, in the order they take the column's place."""
SEPARATOR = "."
EPOCH = datetime.date(1970, 1, 1)
DATE_TYPES = exp.DataType.TEMPORAL_TYPES - {exp.DataType.Type.TIME, exp.DataType.Type.TIMETZ}
"""Column types with a date: dates and timestamps of any precision or time zone (not a time of
day alone)."""
_TEXT_DATES = exp.DataType.TEXT_TYPES
"""SQLite has no date type: its dates are ISO-8601 text, which its date functions read."""
_UNTYPED = (exp.DataType.Type.NULL, exp.DataType.Type.UNKNOWN)


@dataclass(frozen=True)
class DatePart:
    """A feature computed from a date column: its name, the column and the part."""

    name: str
    column: str
    part: str


def part_name(column: str, part: str) -> str:
    """The feature name of a date column's part: ``order_date.month``."""
    return f"{column}{SEPARATOR}{part}"


def is_date(dtype: exp.DataType) -> bool:
    """Whether a column of this type holds dates (or timestamps)."""
    return dtype.is_type(*DATE_TYPES)


def _bigint() -> exp.DataType:
    return exp.DataType(this=exp.DataType.Type.BIGINT)


def _number(n: int) -> exp.Literal:
    return exp.Literal(this=str(n), is_string=False)


def part_expression(column: exp.Expression, part: str, dialect: str | None = None
                    ) -> exp.Expression:
    """The SQL of one part of the date in ``column``, a BIGINT (NULL where the date is NULL).

    ``dialect`` "sqlite" writes the year and month with ``STRFTIME`` (SQLite's dates are text
    and it has no ``YEAR``); any other dialect (or None) gets ``YEAR``/``MONTH``, which sqlglot
    writes in each dialect's form (``EXTRACT(YEAR FROM d)`` for PostgreSQL).
    """
    if part in (YEAR, MONTH):
        if dialect == "sqlite":
            value: exp.Expression = exp.TimeToStr(
                this=column.copy(), format=exp.Literal.string("%Y" if part == YEAR else "%m"))
        else:
            value = (exp.Year if part == YEAR else exp.Month)(this=column.copy())
    elif part in (EPOCH_DAY, DOW):
        value = exp.DateDiff(
            this=exp.Cast(this=column.copy(), to=exp.DataType(this=exp.DataType.Type.DATE)),
            expression=exp.Cast(this=exp.Literal.string(EPOCH.isoformat()),
                                to=exp.DataType(this=exp.DataType.Type.DATE)),
            unit=exp.var("DAY"),
        )
        if part == DOW:
            # ((days % 7) + 10) % 7 + 1: 1 for Monday to 7 for Sunday, also before 1970 (where
            # days % 7 is negative); day 0, 1970-01-01, was a Thursday (4).
            shifted = exp.Add(this=exp.Mod(this=value, expression=_number(7)),
                              expression=_number(10))
            value = exp.Add(this=exp.Mod(this=exp.Paren(this=shifted), expression=_number(7)),
                            expression=_number(1))
    else:
        raise ValueError(f"no date part {part!r}; the parts are {PARTS}")
    return exp.Cast(this=value, to=_bigint())


def parts_of(features: Iterable[Any]) -> list[DatePart]:
    """The date parts among a model's or a data set's features (``date_column`` and
    ``date_part`` set), in their order."""
    return [DatePart(f.name, f.date_column, f.date_part) for f in features
            if getattr(f, "date_part", None) is not None]


def add_parts(relation: exp.Expression, parts: Sequence[DatePart], dialect: str
              ) -> exp.Expression:
    """``(SELECT *, <part> AS "d.year", ... FROM relation) AS dated``; ``relation`` itself when
    there are no parts. The result keeps the relation's ``meta`` (the source's description)."""
    if not parts:
        return relation
    select = exp.Select(expressions=[exp.Star(), *[
        exp.Alias(this=part_expression(exp.column(p.column, quoted=True), p.part, dialect),
                  alias=exp.to_identifier(p.name, quoted=True))
        for p in parts
    ]]).from_(relation.copy(), copy=False)
    dated = exp.Subquery(this=select, alias=exp.TableAlias(this=exp.to_identifier("dated")))
    dated.meta.update(relation.meta)
    return dated


def inline(expression: exp.Expression, parts: Sequence[DatePart], dialect: str | None = None
           ) -> exp.Expression:
    """``expression`` with every column named as a part replaced by the part's SQL over the
    date column (with the same table, if any), in place; returns the expression."""
    if not parts:
        return expression
    by_name = {p.name: p for p in parts}

    def computed(column: exp.Column) -> exp.Expression | None:
        p = by_name.get(column.name)
        if p is None or not isinstance(column.this, exp.Identifier):
            return None
        table = column.args.get("table")
        raw = exp.Column(this=exp.to_identifier(p.column, quoted=True),
                         table=table.copy() if table is not None else None)
        return part_expression(raw, p.part, dialect)

    if isinstance(expression, exp.Column):
        return computed(expression) or expression
    for column in list(expression.find_all(exp.Column)):
        replacement = computed(column)
        if replacement is not None:
            column.replace(replacement)
    return expression


def check_date_column(p: DatePart, types: Mapping[str, exp.DataType], dialect: str) -> None:
    """Refuse a source without ``p``'s date column, or where that column holds no dates (on
    SQLite, text is its dates), or that already has a column named as the part."""
    taken = {name.casefold(): name for name in types}
    if p.name.casefold() in taken:
        raise DataError(
            f"the source already has a column {taken[p.name.casefold()]!r}, the name of the "
            f"{p.part} computed from the date column {p.column!r}: rename that column in a "
            "query"
        )
    if p.column not in types:
        raise DataError(
            f"the feature {p.name!r} is computed from the date column {p.column!r}, which is "
            "not in the source"
        )
    dtype = types[p.column]
    if is_date(dtype) or dtype.is_type(*_UNTYPED) or (
            dialect == "sqlite" and dtype.is_type(*_TEXT_DATES)):
        return
    raise DataError(
        f"the feature {p.name!r} is computed from the date column {p.column!r}, which is "
        f"{dtype.sql(dialect)} in the source: cast it to DATE or TIMESTAMP in a query"
    )


def needed_parts(features: Iterable[Any], needed: Iterable[str]) -> list[DatePart]:
    """The date parts among ``features`` that are in ``needed`` (the features a query reads,
    such as those the tree tests)."""
    wanted = set(needed)
    return [p for p in parts_of(features) if p.name in wanted]


def checked_schema(
    features: Iterable[Any],
    needed: Iterable[str],
    schema: Sequence[tuple[str, exp.DataType]],
    dialect: str,
) -> list[tuple[str, exp.DataType]]:
    """The source's schema with the date parts among ``needed`` as BIGINT columns, each
    checked against its date column (``check_date_column``)."""
    parts = needed_parts(features, needed)
    types = dict(schema)
    for p in parts:
        check_date_column(p, types, dialect)
    return [*schema, *[(p.name, _bigint()) for p in parts]]


def for_scoring(
    features: Iterable[Any],
    needed: Iterable[str],
    relation: exp.Expression,
    schema: Sequence[tuple[str, exp.DataType]],
    dialect: str,
) -> tuple[exp.Expression, list[tuple[str, exp.DataType]]]:
    """The relation a scoring (or validation) query reads and its schema (``checked_schema``):
    the date parts among ``needed`` computed from their columns (``add_parts``); the relation
    as given when none is needed."""
    needed = list(needed)
    checked = checked_schema(features, needed, schema, dialect)
    return add_parts(relation, needed_parts(features, needed), dialect), checked


# -- Python -------------------------------------------------------------------------------------
def value_of(value: Any, part: str) -> int | None:
    """One part of a date in Python, as the SQL computes it (``predict_row``): ``value`` a
    ``date``, a ``datetime`` (a pandas ``Timestamp``), ISO-8601 text, or None."""
    if value is None:
        return None
    day = _as_date(value)
    if day is None:
        return None
    if part == YEAR:
        return day.year
    if part == MONTH:
        return day.month
    if part == DOW:
        return day.isoweekday()
    if part == EPOCH_DAY:
        return day.toordinal() - EPOCH.toordinal()
    raise ValueError(f"no date part {part!r}; the parts are {PARTS}")


def _as_date(value: Any) -> datetime.date | None:
    if isinstance(value, datetime.datetime):
        if value != value:  # pandas' NaT
            return None
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value.strip()[:10])
        except ValueError:
            raise DataError(f"{value!r} is not an ISO-8601 date (YYYY-MM-DD)") from None
    if type(value).__name__ == "datetime64":  # numpy's: a date, or None for NaT
        day = value.astype("datetime64[D]").item()
        return day if isinstance(day, datetime.date) else None
    raise DataError(f"{value!r} is not a date")


def with_values(row: Mapping[str, Any], parts: Sequence[DatePart]) -> Mapping[str, Any]:
    """``row`` (column name to value) with the date parts computed from its date columns,
    where the row has the column and not the part already."""
    if not parts:
        return row
    out = dict(row)
    for p in parts:
        if p.name not in out and p.column in out:
            out[p.name] = value_of(out[p.column], p.part)
    return out
