"""Resolve a training source into a relation, its schema, the features' roles and the classes."""

from __future__ import annotations

import glob
import math
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from .engines.base import Engine
from .errors import DataError, OptionError, SqlTreeError, UnsupportedError
from .readers import reader_for
from .tree import CONTINUOUS, NOMINAL, Value

NUMERIC_TYPES = exp.DataType.NUMERIC_TYPES
FLOAT_TYPES = {exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE}
TEXT_TYPES = exp.DataType.TEXT_TYPES | {exp.DataType.Type.BOOLEAN, exp.DataType.Type.ENUM}
"""Types of nominal columns: text, booleans, and DuckDB's ENUM (a pandas Categorical, an
ARFF file's nominal attribute), whose values compare with text literals."""
INTEGER_TYPES = exp.DataType.INTEGER_TYPES
EXACT_INTEGER = 2**53
"""Every integer up to this magnitude is exactly a DOUBLE."""
WEIGHT_RANGE = (1e-150, 1e150)
"""The total training weight a tree can be grown with: impurities divide by its square and
square class weights, which underflow to 0 or overflow to infinity beyond these bounds."""
TARGET_LIMIT = 1e150
"""The largest magnitude of a regression target's values times the square root of the total
weight: the sums of weighted squares a variance needs must stay finite."""


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
    value_ranges: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Each continuous feature's least and greatest value over the source's rows, as DOUBLE,
    where it has values and no infinity (``quantiles`` lays its grids over them)."""
    target_mean: float | None = None
    """A regression target's weighted mean (None for classes); ``classes`` is then empty and
    ``class_weights`` holds the total weight."""
    target_min: float | None = None
    target_sum: float | None = None
    """A regression target's least value and unweighted sum (the Poisson deviance's checks)."""
    target_max: float | None = None
    """A regression target's greatest value (with ``target_min``, the range that scales the
    fixed-point sums of an ordered scan, ``RegressionStrategy.moment_bits``)."""

    def feature(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(name)


TABLE_PREFIX = "table:"
FILE_PREFIX = "file:"
FILE_EXTENSIONS = (
    ".parquet", ".pq", ".csv", ".tsv", ".txt", ".json", ".jsonl", ".ndjson", ".arff",
    ".gz", ".zst",
)
"""Endings that make a source name a file path (with ``.gz``/``.zst`` for compressed files)."""
GLOB_CHARACTERS = ("*", "?", "[")
QUERY_WORDS = {"SELECT", "WITH", "FROM", "VALUES", "TABLE"}


@dataclass(frozen=True)
class Source:
    """A source whose kind is said, not read from its text: see :func:`source`."""

    kind: str  # "table", "file" or "query"
    text: str


def source(*, table: str | None = None, file: str | os.PathLike[str] | None = None,
           query: str | None = None) -> Source:
    """Name a source's kind explicitly: exactly one of ``table=``, ``file=`` or ``query=``.

    Accepted wherever a source is (``train``, ``predict``, ``split_scores``, ``validation=``).
    On the command line the same choice is written ``table:NAME`` or ``file:PATH``.

    Examples
    --------
    >>> sqltree.train(sqltree.source(table="wine"), target="quality")    # doctest: +SKIP
    >>> sqltree.train(sqltree.source(file="wine"), target="quality")     # the folder wine/
    ...                                                                  # doctest: +SKIP
    """
    given = [(k, v) for k, v in (("table", table), ("file", file), ("query", query))
             if v is not None]
    if len(given) != 1:
        raise OptionError("source() takes exactly one of table=, file= or query=")
    kind, value = given[0]
    text = os.fspath(value) if kind == "file" else value
    if not isinstance(text, str) or not text.strip():
        raise OptionError(f"source({kind}=...) must be a non-empty string, not {value!r}")
    return Source(kind, text.strip() if kind != "file" else text)


def resolve_relation(source: Any, engine: Engine) -> exp.Expression:
    """Turn a user's source into a relation expression the engine can select from.

    A source is a pandas DataFrame, a sqlglot expression, a :func:`source`, a path-like object
    (a file), or a string, read without guessing:

    - ``table:NAME`` is a table or view, ``file:PATH`` a file, folder or glob;
    - text starting with ``SELECT``, ``WITH``, ``FROM``, ``VALUES``, ``TABLE`` or ``(`` is a
      query;
    - text that looks like a path (a data file's extension such as ``.parquet`` or ``.csv``,
      a glob character ``*?[``, a ``/``, or a URL's ``://``) is a file;
    - anything else is a table or view name (``sales``, ``analytics.sales``), and is refused
      as ambiguous if a file or folder of that name exists in the working directory.

    The relation's ``meta["sqltree_source"]`` says, for messages, what the user gave
    (``table 'sales'``).
    """
    relation = _resolve(source, engine)
    relation.meta["sqltree_source"] = describe_source(source)
    return relation


def describe_source(source: Any) -> str:
    """What a message calls the user's source: ``table 'sales'``, ``file 'x.csv'``, ..."""
    if isinstance(source, Source):
        return f"the query {_short(source.text)!r}" if source.kind == "query" else (
            f"{source.kind} {source.text!r}"
        )
    if _is_dataframe(source):
        return "the DataFrame"
    if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
        return f"table {'.'.join(part.name for part in source.parts)!r}"
    if isinstance(source, exp.Expression):
        return f"the query {_short(source.sql())!r}"
    if isinstance(source, os.PathLike):
        return f"file {os.fspath(source)!r}"
    if not isinstance(source, str):
        return f"a {type(source).__name__}"
    kind, text = _kind_of(source.strip())
    if kind == "query":
        return f"the query {_short(text)!r}"
    return f"{kind} {text!r}"


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind_of(text: str) -> tuple[str, str]:
    """("table" | "file" | "query", the text without its prefix) for a source string."""
    if text.startswith(TABLE_PREFIX):
        return "table", text[len(TABLE_PREFIX):].strip()
    if text.startswith(FILE_PREFIX):
        return "file", text[len(FILE_PREFIX):]
    first = text.split(None, 1)[0].upper() if text else ""
    if first in QUERY_WORDS or text.startswith("("):
        return "query", text
    if _looks_like_path(text):
        return "file", text
    return "table", text


def _resolve(source: Any, engine: Engine) -> exp.Expression:
    if isinstance(source, exp.Expression):
        return _wrap(_only_a_query(source))
    if _is_dataframe(source):
        _check_names([str(c) for c in source.columns], "the DataFrame")
        return engine.relation_for_dataframe(source)
    if isinstance(source, os.PathLike):
        return _file(os.fspath(source), engine)
    if isinstance(source, Source):
        kind, text = source.kind, source.text
    elif isinstance(source, str):
        if not source.strip():
            raise DataError("the source is an empty string")
        kind, text = _kind_of(source.strip())
    else:
        raise UnsupportedError(
            f"cannot train on a {type(source).__name__}: pass a DataFrame, a query, "
            "a file path or a table name"
        )
    if not text:
        raise DataError(f"the source {source!r} names nothing after its prefix")
    if kind == "query":
        return _wrap(_parse_query(text, engine.dialect))
    if kind == "file":
        return _file(text, engine)
    explicit = isinstance(source, Source) or source.strip().startswith(TABLE_PREFIX)
    if not explicit and os.path.exists(text):
        what = "folder" if os.path.isdir(text) else "file"
        raise OptionError(
            f"{text!r} could be the table {text!r} or the {what} {text!r} in the working "
            f"directory: write table:{text} for the table or file:{text} for the {what} "
            f"(in Python, sqltree.source(table={text!r}) or sqltree.source(file={text!r}))"
        )
    try:
        return exp.to_table(text, dialect=engine.dialect)
    except Exception:
        return exp.Table(this=exp.to_identifier(text, quoted=True))


def _file(path: str, engine: Engine) -> exp.Expression:
    """A file, folder or glob: read by sqltree where it has a reader (``readers``: ARFF), into
    a DataFrame the engine loads, else by the engine."""
    reader = reader_for(path)
    if reader is not None:
        if not os.path.isfile(path):
            raise DataError(f"no file {path!r} (a {path.rsplit('.', 1)[-1]} source is one file, "
                            "not a glob)")
        return engine.relation_for_dataframe(reader(path))
    if "://" not in path and not glob.glob(path):
        raise DataError(f"no file matches {path!r}")
    return engine.relation_for_path(path)


# Nodes that write, change the schema or pass text through unparsed: a training or scoring
# source only reads, and what reaches the engine is rendered from the checked tree.
_NOT_READ_ONLY: tuple[type[exp.Expression], ...] = (
    exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Alter,
    exp.Command, exp.Into, exp.Set, exp.Use, exp.Transaction, exp.Commit, exp.Rollback,
    exp.Pragma, exp.Copy, exp.Describe, exp.TruncateTable, exp.LoadData,
)


def _parse_query(text: str, dialect: str) -> exp.Expression:
    try:
        statements = [s for s in sqlglot.parse(text, read=dialect) if s is not None]
    except sqlglot.errors.SqlglotError as error:
        raise DataError(f"the source query does not parse as {dialect} SQL: {error}") from None
    if len(statements) != 1:
        raise DataError(
            f"the source must be one query; this text holds {len(statements)} statements"
        )
    query = _only_a_query(statements[0])
    if isinstance(query, exp.Query):
        _check_names([n for n in query.named_selects if n and n != "*"], "the query")
    return query


def _only_a_query(source: exp.Expression) -> exp.Expression:
    """Refuse anything but one read-only query or a table, before it reaches the engine."""
    if not isinstance(source, (exp.Query, exp.Subquery, exp.Table)):
        raise DataError(
            f"the source must be a query, a table or a path, not a {type(source).__name__} "
            "statement"
        )
    for node in source.walk():
        if isinstance(node, _NOT_READ_ONLY):
            raise DataError(
                f"the source query holds a {type(node).__name__} clause; a source may only "
                "read (one SELECT, with CTEs if needed)"
            )
    return source


def _check_names(names: Sequence[str], where: str) -> None:
    """Engines rename empty and clashing column names (``x_1``, ``A_1``, ``C3``) without a word;
    a model would then test columns the user does not have."""
    if any(not n.strip() for n in names):
        raise DataError(f"{where} has a column with an empty name; name every column")
    seen: dict[str, str] = {}
    for name in names:
        folded = name.casefold()
        if folded in seen:
            other = seen[folded]
            what = "twice" if other == name else f"as {other!r} and {name!r}"
            raise DataError(
                f"{where} names a column {what}; column names must differ in more than "
                "letter case (SQL engines fold or rename them)"
            )
        seen[folded] = name


def _wrap(query: exp.Expression) -> exp.Expression:
    if isinstance(query, exp.Query):
        return query.subquery("src")
    return query


def _is_dataframe(obj: Any) -> bool:
    return type(obj).__name__ == "DataFrame" and hasattr(obj, "columns")


def is_pandas_frame(obj: Any) -> bool:
    """Whether ``obj`` is a pandas DataFrame, without importing pandas (``import sqltree`` does
    not: it is 90 MB and a quarter of a second that a fit on a file never uses)."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(obj, pandas.DataFrame)


def _looks_like_path(text: str) -> bool:
    """A data file's extension, a glob, a separator or a URL: never the mere existence of a
    file, which would read a folder ``wine/`` for the table ``wine``."""
    return (
        "/" in text
        or os.sep in text
        or "://" in text
        or any(c in text for c in GLOB_CHARACTERS)
        or text.lower().endswith(FILE_EXTENSIONS)
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
    task: str = "classification",
) -> Dataset:
    """Read the schema, check the data, assign roles and read the class list (for
    ``task="regression"``, the numeric target's weighted mean instead)."""
    relation = resolve_relation(source, engine)
    schema = _read_schema(engine, relation)
    types = dict(schema)
    chosen = _chosen_columns(
        [n for n, _ in schema], types, target, weight, features, nominal, continuous, engine
    )
    feats = [
        Feature(name, _role(name, types[name], nominal, continuous, engine), i,
                types[name].sql(engine.dialect))
        for i, name in enumerate(chosen)
    ]
    target_type = types[target]
    # An all-NULL column may have no type at all; the scan below says so more plainly.
    untyped = target_type.is_type(exp.DataType.Type.NULL, exp.DataType.Type.UNKNOWN)
    if task == "regression" and not (untyped or target_type.is_type(*NUMERIC_TYPES)):
        raise DataError(
            f"a regression target must be numeric; {target!r} has type "
            f"{target_type.sql(engine.dialect)}"
        )
    if not (untyped or target_type.is_type(*TEXT_TYPES, *NUMERIC_TYPES)):
        raise UnsupportedError(
            f"target {target!r} has type {target_type.sql(engine.dialect)}; "
            "use a text, boolean or integer column"
        )

    w = _column(weight) if weight else exp.Literal.number(1)
    checks = _checks(feats, types, target, weight, w)
    row = dict(zip(checks, engine.execute(exp.select(*checks.values()).from_(relation))[0]))
    infinite = _check_rows(row, feats, target, weight)
    n_rows = int(row["rows"])
    engine.expect_rows(n_rows)
    if untyped:
        raise UnsupportedError(
            f"target {target!r} has a type the engine does not name; cast it to text or integer"
        )
    if task == "regression":
        mean, total_weight, least, total, most = _read_target_mean(engine, relation, target, w)
        _check_target_magnitude(target, least, most, total_weight)
        pairs = [(None, total_weight)]
    else:
        mean, pairs = None, _read_classes(engine, relation, target, w)
        least = total = most = None
    n_null = n_rows - int(row["labelled"])
    if n_null:
        warnings.warn(
            f"{n_null} rows with a NULL target are left out of training", stacklevel=3
        )
    _read_domains(engine, relation, feats)
    return Dataset(
        engine=engine,
        relation=relation,
        target=target,
        target_type=target_type.sql(engine.dialect),
        weight=weight,
        features=feats,
        classes=[v for v, _ in pairs] if mean is None else [],
        class_weights=[s for _, s in pairs],
        n_rows=n_rows,
        n_null_target=n_null,
        infinite=infinite,
        value_ranges={
            f.index: (float(row[f"least {f.index}"]), float(row[f"greatest {f.index}"]))
            for f in feats if f.kind == CONTINUOUS and f.name not in infinite
            and row[f"least {f.index}"] is not None},
        target_mean=mean,
        target_min=least,
        target_sum=total,
        target_max=most,
    )


def _chosen_columns(
    names: list[str],
    types: dict[str, exp.DataType],
    target: str,
    weight: str | None,
    features: Sequence[str] | None,
    nominal: Sequence[str],
    continuous: Sequence[str],
    engine: Engine,
) -> list[str]:
    """Check the target, weight and role columns against the schema; the feature columns."""
    for name, what in [(target, "target"), *[(w, "weight") for w in [weight] if w]]:
        if name not in types:
            raise DataError(f"{what} column {name!r} is not in the source; columns: {names}")
    if weight and not types[weight].is_type(*NUMERIC_TYPES):
        raise DataError(
            f"weight column {weight!r} has type {types[weight].sql(engine.dialect)}; "
            "weights must be numbers"
        )
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
    return chosen


def _role(
    name: str, dtype: exp.DataType, nominal: Sequence[str], continuous: Sequence[str],
    engine: Engine,
) -> str:
    """A feature's kind: as given, else continuous for numbers and nominal for text."""
    if name in nominal:
        return NOMINAL
    if name in continuous:
        if not dtype.is_type(*NUMERIC_TYPES):
            raise UnsupportedError(f"column {name!r} ({dtype.sql()}) cannot be continuous")
        return CONTINUOUS
    if dtype.is_type(*NUMERIC_TYPES):
        return CONTINUOUS
    if dtype.is_type(*TEXT_TYPES):
        return NOMINAL
    if dtype.is_type(*exp.DataType.TEMPORAL_TYPES):
        raise UnsupportedError(
            f"column {name!r} holds dates or times ({dtype.sql(engine.dialect)}), which are "
            "neither numbers nor categories: derive features from it in a query (such as "
            f"EXTRACT(year FROM {name}), or the days since a date), or leave it out with "
            "features=[...]"
        )
    raise UnsupportedError(
        f"column {name!r} has type {dtype.sql(engine.dialect)}, which sqltree cannot "
        "use as a feature; leave it out with features=[...] or cast it in a query"
    )


def _checks(
    feats: list[Feature], types: dict[str, exp.DataType], target: str, weight: str | None,
    w: exp.Expression,
) -> dict[str, exp.Expression]:
    """The aggregates of the one checking scan, each named so its answer is read by name.

    The scan checks the size, the weights, which feature columns hold anything at all, the
    special floats and the integer ranges (``_check_rows``).
    """
    col = _column
    checks: dict[str, exp.Expression] = {
        "rows": exp.func("COUNT", exp.Star()),
        "labelled": exp.func("COUNT", col(target)),
        "bad_weights": _count_when(
            exp.or_(w.is_(exp.null()), exp.LT(this=w, expression=exp.Literal.number(0)))
        ),
        "total_weight": exp.func("SUM", w),
    }
    if weight and types[weight].is_type(*FLOAT_TYPES):
        checks["special_weights"] = _count_when(_is_special(w, ("NaN", "Infinity", "-Infinity")))
    for f in feats:
        checks[f"values {f.index}"] = exp.func("COUNT", col(f.name))
        # NaN orders above every number in DuckDB, PostgreSQL and Spark, where it also equals
        # itself; it would be a value above the largest (or a category), not a missing one.
        if types[f.name].is_type(*FLOAT_TYPES):
            checks[f"nan {f.index}"] = _count_when(_is_special(col(f.name), ("NaN",)))
            checks[f"inf {f.index}"] = _count_when(_is_special(col(f.name), ("Infinity",)))
            checks[f"-inf {f.index}"] = _count_when(_is_special(col(f.name), ("-Infinity",)))
        if f.kind != CONTINUOUS:
            continue
        checks[f"least {f.index}"] = exp.func("MIN", exp.cast(col(f.name), "DOUBLE"))
        checks[f"greatest {f.index}"] = exp.func("MAX", exp.cast(col(f.name), "DOUBLE"))
        # Training compares continuous values as DOUBLE, where integers beyond 2^53 merge,
        # while the compiled SQL and the Python walk compare them exactly.
        if types[f.name].is_type(*INTEGER_TYPES):
            checks[f"min {f.index}"] = exp.func("MIN", col(f.name))
            checks[f"max {f.index}"] = exp.func("MAX", col(f.name))
    return checks


def _read_classes(
    engine: Engine, relation: exp.Expression, target: str, w: exp.Expression
) -> list[tuple[Value, float]]:
    """The classes with their weights, in ``sort_key`` order (NULL targets are left out)."""
    col = _column
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
    fractional = [v for v in classes if isinstance(v, float) and not v.is_integer()]
    if fractional:
        raise DataError(
            f"the target {target!r} holds {len(classes)} distinct numbers, "
            f"{len(fractional)} of them fractional (such as {fractional[0]!r}): that is a "
            "measurement, not class labels: for a regression tree pass task=\"regression\" "
            "(--task regression); to treat the values as labels, cast the column to text in a "
            "query"
        )
    if len(classes) < 2:
        raise DataError(
            f"the target {target!r} has a single class ({classes[0]!r}); "
            "a classifier needs at least two"
        )
    return pairs


def _read_target_mean(
    engine: Engine, relation: exp.Expression, target: str, w: exp.Expression
) -> tuple[float, float, float, float, float]:
    """A numeric target's weighted mean, total weight, least value, unweighted sum and
    greatest value, refusing NaN and infinities."""
    y = exp.cast(_column(target), "DOUBLE")
    known = _column(target).is_(exp.null()).not_()
    query = exp.select(
        exp.func("SUM", w.copy() * y.copy()),
        exp.func("SUM", w.copy()),
        _count_when(_is_special(y, ("NaN", "Infinity", "-Infinity"))),
        exp.func("MIN", y.copy()),
        exp.func("SUM", y.copy()),
        exp.func("MAX", y.copy()),
    ).from_(relation).where(known)
    ((weighted, total_weight, special, least, total, most),) = engine.execute(query)
    if int(special or 0):
        raise DataError(
            f"the target {target!r} holds NaN or infinite values in {int(special)} rows; "
            "a missing target is NULL (NULLIF(y, 'NaN'))"
        )
    return (float(weighted) / float(total_weight), float(total_weight), float(least),
            float(total), float(most))


def _check_target_magnitude(target: str, least: float, most: float, weight: float) -> None:
    """Refuse a regression target whose squares, summed over the rows, overflow a float: the
    variances would be NaN and the leaf values infinite."""
    largest = max(abs(least), abs(most))
    if largest * math.sqrt(weight) > TARGET_LIMIT:
        raise DataError(
            f"the target {target!r} reaches {largest:.3g}: its variance over "
            f"{weight:.3g} rows of weight would overflow a float; scale the target "
            "(divide it by a power of ten in a query) and scale the predictions back"
        )


def _read_domains(engine: Engine, relation: exp.Expression, feats: list[Feature]) -> None:
    """Set each nominal feature's sorted domain: one ``GROUP BY GROUPING SETS`` with a set per
    feature where the engine has them (a statement costs a Spark job or two, and a table can
    have dozens of nominal columns), else one small GROUP BY each."""
    nominal = [f for f in feats if f.kind == NOMINAL]
    if len(nominal) > 1 and engine.SUPPORTS_GROUPING_SETS:
        columns = [_column(f.name) for f in nominal]
        query = (
            exp.select(*[exp.func("GROUPING", c.copy()) for c in columns], *columns)
            .from_(relation)
            .group_by(exp.GroupingSets(expressions=[exp.paren(c.copy()) for c in columns]))
        )
        domains: list[list[Value]] = [[] for _ in nominal]
        n = len(nominal)
        for row in engine.execute(query):
            # A row is one value of the one feature whose GROUPING() is 0 (its NULL group too).
            i = list(row[:n]).index(0)
            if row[n + i] is not None:
                domains[i].append(row[n + i])
        for f, values in zip(nominal, domains, strict=True):
            f.values = sorted(values, key=sort_key)
        return
    for f in nominal:
        vals = engine.execute(
            exp.select(_column(f.name))
            .from_(relation)
            .where(_column(f.name).is_(exp.null()).not_())
            .group_by(_column(f.name))
        )
        f.values = sorted((v for (v,) in vals), key=sort_key)


def _check_rows(
    row: dict[str, Any], feats: list[Feature], target: str, weight: str | None
) -> list[str]:
    """Raise on what the checking scan found; return the continuous columns holding +inf."""
    if int(row["rows"]) == 0:
        raise DataError("the source has no rows")
    if int(row["labelled"]) == 0:
        raise DataError(f"every value of the target {target!r} is NULL")
    if int(row["bad_weights"] or 0):
        raise DataError(f"{row['bad_weights']} rows have a NULL or negative weight in {weight!r}")
    if int(row.get("special_weights") or 0):
        raise DataError(
            f"{row['special_weights']} rows have a NaN or infinite weight in {weight!r}"
        )
    if not row["total_weight"] or float(row["total_weight"]) <= 0:
        raise DataError(f"every weight in {weight!r} is zero: there is nothing to learn from")
    total = float(row["total_weight"])
    if not WEIGHT_RANGE[0] <= total <= WEIGHT_RANGE[1]:
        raise DataError(
            f"the weights in {weight!r} add up to {total:.3g}, outside "
            f"[{WEIGHT_RANGE[0]:g}, {WEIGHT_RANGE[1]:g}]: the impurities square such sums, "
            "which a float cannot hold; scale the weights (every split stays the same)"
        )
    empty = [f.name for f in feats if int(row[f"values {f.index}"]) == 0]
    if empty:
        raise DataError(
            f"columns with no values (all NULL): {empty}; leave them out with features=[...]"
        )
    with_nan = [f.name for f in feats if int(row.get(f"nan {f.index}") or 0)]
    if with_nan:
        raise DataError(
            f"columns holding NaN: {with_nan}; sqltree reads a missing value as NULL, so "
            "replace NaN by NULL first (in SQL: NULLIF(x, 'NaN'))"
        )
    # A cut is written as "x <= the value below it", and -infinity has no SQL literal; nor
    # has infinity, which a category of a nominal column would need in the scoring SQL.
    below = [f.name for f in feats if int(row.get(f"-inf {f.index}") or 0)]
    if below:
        raise DataError(
            f"columns holding -infinity: {below}; replace it by NULL (unknown) or by a "
            "finite number in a query"
        )
    infinite = [f.name for f in feats
                if f.kind != CONTINUOUS and int(row.get(f"inf {f.index}") or 0)]
    if infinite:
        raise DataError(
            f"nominal columns holding infinity: {infinite}; a category is written as a SQL "
            "literal, which infinity has in few dialects: replace it by NULL (unknown) or by "
            "a finite number in a query"
        )
    beyond = [
        f.name for f in feats
        if any(
            abs(int(row[k])) > EXACT_INTEGER
            for k in (f"min {f.index}", f"max {f.index}") if row.get(k) is not None
        )
    ]
    if beyond:
        raise DataError(
            f"integer columns with values beyond ±2^53: {beyond}; sqltree compares continuous "
            "values as DOUBLE, which cannot tell such integers apart. Treat them as nominal "
            "(nominal=[...]) or scale them in a query"
        )
    return [f.name for f in feats
            if f.kind == CONTINUOUS and int(row.get(f"inf {f.index}") or 0)]


def _count_when(condition: exp.Expression) -> exp.Expression:
    # Built from constructors: the builders parse and copy every argument, which took a
    # tenth of a small fit (a dozen of these per continuous feature).
    return exp.Sum(this=exp.Case(
        ifs=[exp.If(this=condition, true=exp.Literal.number(1))],
        default=exp.Literal.number(0),
    ))


def _is_special(e: exp.Expression, names: Sequence[str]) -> exp.Expression:
    """``e`` equals one of the special DOUBLEs ``'NaN'``, ``'Infinity'``, ``'-Infinity'``."""
    tests: list[exp.Expression] = [
        exp.EQ(this=e.copy(), expression=exp.Cast(
            this=exp.Literal.string(n), to=exp.DataType(this=exp.DataType.Type.DOUBLE)))
        for n in names
    ]
    out = tests[0]
    for t in tests[1:]:
        out = exp.Or(this=out, expression=t)
    return out


def _read_schema(engine: Engine, relation: exp.Expression) -> list[tuple[str, exp.DataType]]:
    try:
        return engine.columns(relation)
    except SqlTreeError:
        raise
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DataError(f"cannot read the source: {first}") from error


def sort_key(value: Value) -> tuple[int, Any]:
    """Engine-independent order of values: booleans, then numbers, then text by code point."""
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, (int, float)):
        return (1, value)
    return (2, str(value))


def _column(name: str) -> exp.Column:
    return exp.column(name, quoted=True)
