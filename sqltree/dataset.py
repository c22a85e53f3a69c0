"""Resolve a training source into a relation, its schema, the features' roles and the classes."""

from __future__ import annotations

import glob
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from .engines.base import Engine
from .errors import DataError, UnsupportedError
from .tree import CONTINUOUS, NOMINAL, Value

NUMERIC_TYPES = exp.DataType.NUMERIC_TYPES
FLOAT_TYPES = {exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE}
TEXT_TYPES = exp.DataType.TEXT_TYPES | {exp.DataType.Type.BOOLEAN}


@dataclass
class Feature:
    """A feature column: its role, its position in the working table, its known values."""

    name: str
    kind: str  # "continuous" or "nominal"
    index: int
    sql_type: str
    values: list[Value] = field(default_factory=list)  # nominal: sorted domain

    @property
    def column(self) -> str:
        """Name of the feature's column in sqltree's working tables."""
        return f"f{self.index}"


@dataclass
class Dataset:
    """A source the engine can query, with the roles and statistics training needs."""

    engine: Engine
    relation: exp.Expression
    target: str
    target_type: str
    weight: str | None
    features: list[Feature]
    classes: list[Value]
    class_weights: list[float]
    n_rows: int
    n_null_target: int
    infinite: list[str] = field(default_factory=list)
    """Continuous features holding +infinity (C4.5 takes it as a value; CART cannot)."""

    def feature(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(name)


def resolve_relation(source: Any, engine: Engine) -> exp.Expression:
    """Turn a user's source into a relation expression the engine can select from.

    A source is a pandas DataFrame, a sqlglot expression, a ``SELECT``/``WITH`` query, a Parquet,
    CSV or JSON path or glob, or a table or view name.
    """
    if isinstance(source, exp.Expression):
        return _wrap(source)
    if _is_dataframe(source):
        return engine.relation_for_dataframe(source)
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str):
        raise UnsupportedError(
            f"cannot train on a {type(source).__name__}: pass a DataFrame, a query, "
            "a file path or a table name"
        )
    text = source.strip()
    if not text:
        raise DataError("the source is an empty string")
    first = text.split(None, 1)[0].upper()
    if first in {"SELECT", "WITH", "FROM", "VALUES", "(", "TABLE"} or text.startswith("("):
        return _wrap(sqlglot.parse_one(text, read=engine.dialect))
    if _looks_like_path(text):
        if not glob.glob(text) and "://" not in text:
            raise DataError(f"no file matches {text!r}")
        return engine.relation_for_path(text)
    try:
        return exp.to_table(text, dialect=engine.dialect)
    except Exception:
        return exp.Table(this=exp.to_identifier(text, quoted=True))


def _wrap(query: exp.Expression) -> exp.Expression:
    if isinstance(query, exp.Query):
        return query.subquery("src")
    return query


def _is_dataframe(obj: Any) -> bool:
    return type(obj).__name__ == "DataFrame" and hasattr(obj, "columns")


def _looks_like_path(text: str) -> bool:
    return (
        os.sep in text
        or "*" in text
        or "://" in text
        or os.path.exists(text)
        or text.lower().endswith((".parquet", ".csv", ".tsv", ".json", ".jsonl", ".gz"))
    )


def describe(
    source: Any,
    engine: Engine,
    target: str,
    *,
    features: Sequence[str] | None = None,
    nominal: Sequence[str] = (),
    continuous: Sequence[str] = (),
    weight: str | None = None,
) -> Dataset:
    """Read the schema, check the data, assign roles and read the class list."""
    relation = resolve_relation(source, engine)
    schema = engine.columns(relation)
    names = [n for n, _ in schema]
    types = dict(schema)
    for name, what in [(target, "target"), *[(w, "weight") for w in [weight] if w]]:
        if name not in types:
            raise DataError(f"{what} column {name!r} is not in the source; columns: {names}")
    unknown = [c for c in [*(features or []), *nominal, *continuous] if c not in types]
    if unknown:
        raise DataError(f"columns not in the source: {unknown}; columns: {names}")
    both = set(nominal) & set(continuous)
    if both:
        raise DataError(f"columns given as both nominal and continuous: {sorted(both)}")

    chosen = list(features) if features is not None else [
        n for n in names if n not in {target, weight}
    ]
    chosen = [c for c in chosen if c not in {target, weight}]
    if not chosen:
        raise DataError("there are no feature columns to learn from")

    feats: list[Feature] = []
    for name in chosen:
        dtype = types[name]
        if name in nominal:
            kind = NOMINAL
        elif name in continuous:
            if not dtype.is_type(*NUMERIC_TYPES):
                raise UnsupportedError(f"column {name!r} ({dtype.sql()}) cannot be continuous")
            kind = CONTINUOUS
        elif dtype.is_type(*NUMERIC_TYPES):
            kind = CONTINUOUS
        elif dtype.is_type(*TEXT_TYPES):
            kind = NOMINAL
        else:
            raise UnsupportedError(
                f"column {name!r} has type {dtype.sql(engine.dialect)}, which sqltree cannot "
                "use as a feature; leave it out with features=[...] or cast it in a query"
            )
        feats.append(Feature(name, kind, len(feats), dtype.sql(engine.dialect)))


    col = _column
    w = col(weight) if weight else exp.Literal.number(1)
    # One scan checks the size, the weights and which feature columns hold anything at all.
    checks: list[exp.Expression] = [
        exp.func("COUNT", exp.Star()),
        exp.func("COUNT", col(target)),
        exp.func(
            "SUM",
            exp.Case()
            .when(exp.or_(w.is_(exp.null()), exp.LT(this=w, expression=exp.Literal.number(0))), 1)
            .else_(exp.Literal.number(0)),
        ),
        *[exp.func("COUNT", col(f.name)) for f in feats],
    ]
    # NaN orders above every number in DuckDB, PostgreSQL and Spark, where it also equals
    # itself; it would be a value above the largest, not a missing one.
    floats = [
        f for f in feats
        if f.kind == CONTINUOUS and types[f.name].is_type(*FLOAT_TYPES)
    ]
    checks += [
        exp.func(
            "SUM",
            exp.Case()
            .when(
                exp.EQ(
                    this=col(f.name),
                    expression=exp.cast(exp.Literal.string(special), "DOUBLE"),
                ),
                exp.Literal.number(1),
            )
            .else_(exp.Literal.number(0)),
        )
        for special in ("NaN", "Infinity")
        for f in floats
    ]
    row = engine.execute(exp.select(*checks).from_(relation))[0]
    n_rows, n_target = int(row[0]), int(row[1])
    bad_weights = int(row[2] or 0)
    if n_rows == 0:
        raise DataError("the source has no rows")
    if n_target == 0:
        raise DataError(f"every value of the target {target!r} is NULL")
    if bad_weights:
        raise DataError(f"{bad_weights} rows have a NULL or negative weight in {weight!r}")
    empty = [f.name for f, n in zip(feats, row[3:3 + len(feats)]) if int(n) == 0]
    if empty:
        raise DataError(
            f"columns with no values (all NULL): {empty}; leave them out with features=[...]"
        )
    specials = row[3 + len(feats):]
    with_nan = [f.name for f, n in zip(floats, specials) if int(n or 0) > 0]
    infinite = [f.name for f, n in zip(floats, specials[len(floats):]) if int(n or 0) > 0]
    if with_nan:
        raise DataError(
            f"columns holding NaN: {with_nan}; sqltree reads a missing value as NULL, so "
            "replace NaN by NULL first (in SQL: NULLIF(x, 'NaN'))"
        )

    target_type = types[target]
    if not (target_type.is_type(*TEXT_TYPES) or target_type.is_type(*NUMERIC_TYPES)):
        raise UnsupportedError(
            f"target {target!r} has type {target_type.sql(engine.dialect)}; "
            "use a text, boolean or integer column"
        )

    # Class list and weights (NULL targets are excluded from training and counted).
    rows = engine.execute(
        exp.select(col(target), exp.func("SUM", w))
        .from_(relation)
        .where(col(target).is_(exp.null()).not_())
        .group_by(col(target))
    )
    pairs = sorted(((v, float(s)) for v, s in rows), key=lambda p: sort_key(p[0]))
    if any(isinstance(v, float) and math.isnan(v) for v, _ in pairs):
        raise DataError(
            f"the target {target!r} holds NaN; a missing label is NULL (NULLIF(y, 'NaN'))"
        )
    classes = [v for v, _ in pairs]
    if len(classes) < 2:
        raise DataError(
            f"the target {target!r} has a single class ({classes[0]!r}); "
            "a classifier needs at least two"
        )
    n_null = n_rows - n_target
    if n_null:
        warnings.warn(
            f"{n_null} rows with a NULL target are left out of training", stacklevel=3
        )

    # Domains of nominal features, one small GROUP BY each.
    for f in feats:
        if f.kind == NOMINAL:
            vals = engine.execute(
                exp.select(col(f.name))
                .from_(relation)
                .where(col(f.name).is_(exp.null()).not_())
                .group_by(col(f.name))
            )
            f.values = sorted((v for (v,) in vals), key=sort_key)

    return Dataset(
        engine=engine,
        relation=relation,
        target=target,
        target_type=target_type.sql(engine.dialect),
        weight=weight,
        features=feats,
        classes=classes,
        class_weights=[s for _, s in pairs],
        n_rows=n_rows,
        n_null_target=n_null,
        infinite=infinite,
    )


def sort_key(value: Value) -> tuple[int, Any]:
    """Engine-independent order of values: booleans, then numbers, then text by code point."""
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, (int, float)):
        return (1, value)
    return (2, str(value))


def _column(name: str) -> exp.Column:
    return exp.column(name, quoted=True)
