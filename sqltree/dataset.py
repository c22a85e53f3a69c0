"""Resolve a training source into a relation, its schema, the features' roles and the classes."""

from __future__ import annotations

import glob
import math
import os
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from . import dates
from .engines.base import Engine
from .errors import DataError, OptionError, SqlTreeError, UnsupportedError, UnsupportedOptionError
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
    date_column: str | None = None
    """The date column a date feature is computed from (``date_features``), else None."""
    date_part: str | None = None
    """Which part of ``date_column`` it is (``dates.PARTS``), else None."""

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
    """A regression target's greatest value (with ``target_min``, the range that centres and
    scales a regression tree's target, ``regression.target_scale``)."""
    frame: FrameColumns | None = None
    """The pandas DataFrame that ``relation`` reads where the engine reads it in place
    (``Engine.READS_FRAMES_IN_PLACE``) and it is small (``FRAME_MAX_CELLS``), its columns
    the source's: what reads of the source compute in numpy instead (``frame_facts``,
    ``frame_level0``, ``quantiles.bin_edges``), through ``in_numpy``."""

    @property
    def in_numpy(self) -> FrameColumns | None:
        """``frame`` where ``relation`` is still the one that reads it: a Dataset copied with
        another relation (a validation source, a table of the same rows) keeps the field,
        but its rows are no longer the frame's."""
        frame = self.frame
        return frame if frame is not None and frame.relation is self.relation else None

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
    date_features: bool = False,
) -> Dataset:
    """Read the schema, check the data, assign roles and read the class list (for
    ``task="regression"``, the numeric target's weighted mean instead).

    ``date_features``: each date or timestamp feature column becomes its parts
    (``dates.PARTS``), computed in SQL by the relation training reads (``_date_parts``)."""
    relation = resolve_relation(source, engine)
    # a small DataFrame's types from its dtypes, where the engine says how it reads them
    small = is_pandas_frame(source) and source.size <= FRAME_MAX_CELLS
    schema = (engine.frame_columns(source) if small else None) or _read_schema(engine, relation)
    names = [n for n, _ in schema]
    types = dict(schema)
    parts: dict[str, dates.DatePart] = {}
    if date_features:
        relation, names, types, parts, features, continuous = _date_parts(
            relation, schema, engine, target=target, weight=weight, features=features,
            nominal=nominal, continuous=continuous)
    chosen = _chosen_columns(
        names, types, target, weight, features, nominal, continuous, engine
    )
    feats = [
        Feature(name, _role(name, types[name], nominal, continuous, engine), i,
                _type_sql(types[name], engine.dialect),
                date_column=parts[name].column if name in parts else None,
                date_part=parts[name].part if name in parts else None)
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

    frame = FrameColumns(source, relation) if not parts and engine.READS_FRAMES_IN_PLACE and (
        is_pandas_frame(source)) and len(source) * (len(feats) + 2) <= FRAME_MAX_CELLS else None
    facts = None if frame is None or untyped or task == "regression" else frame_facts(
        frame, feats, types, target, weight)
    if facts is not None:
        engine.expect_rows(facts.n_rows)
        for f in feats:
            if f.kind == NOMINAL:
                f.values = facts.domains[f.index]
        return Dataset(
            engine=engine, relation=relation, target=target,
            target_type=target_type.sql(engine.dialect), weight=weight, features=feats,
            classes=[v for v, _ in facts.pairs], class_weights=[s for _, s in facts.pairs],
            n_rows=facts.n_rows, n_null_target=0, infinite=facts.infinite,
            value_ranges=facts.value_ranges, frame=frame,
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
        _read_domains(engine, relation, feats)
    else:
        mean, pairs = None, _read_classes_and_domains(engine, relation, target, w, feats)
        least = total = most = None
    n_null = n_rows - int(row["labelled"])
    if n_null:
        warnings.warn(
            f"{n_null} rows with a NULL target are left out of training", stacklevel=3
        )
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
        frame=frame,
    )


def _date_parts(
    relation: exp.Expression,
    schema: list[tuple[str, exp.DataType]],
    engine: Engine,
    *,
    target: str,
    weight: str | None,
    features: Sequence[str] | None,
    nominal: Sequence[str],
    continuous: Sequence[str],
) -> tuple[exp.Expression, list[str], dict[str, exp.DataType], dict[str, dates.DatePart],
           Sequence[str] | None, Sequence[str]]:
    """The source with the parts of its date feature columns computed (``dates.add_parts``):
    the relation, its column names (each date column's parts in its place, for the default
    features), the types (the date columns' too), the parts by name, and ``features`` and
    ``continuous`` with each date column named there replaced by its parts.

    A date column is a feature unless it is the target or weight, left out of ``features``
    (naming one of its parts there keeps it) or declared ``nominal`` (its values are then
    categories, as without ``date_features``).
    """
    if engine.dialect == "sqlite":
        raise UnsupportedOptionError(
            "date_features needs date columns, and SQLite has none: its dates are text, which "
            "sqltree reads as categories. Compute the parts in a query (such as "
            "CAST(STRFTIME('%m', d) AS INTEGER) AS month) or train on DuckDB, PostgreSQL or "
            "Spark; a model with date features scores ISO-8601 text on SQLite"
        )
    listed = set(features) if features is not None else None
    columns = [
        name for name, dtype in schema
        if dates.is_date(dtype) and name not in {target, weight} and name not in nominal
        and (listed is None or name in listed
             or any(dates.part_name(name, p) in listed for p in dates.PARTS))
    ]
    if not columns:
        return relation, [n for n, _ in schema], dict(schema), {}, features, continuous
    parts = {p.name: p for p in (dates.DatePart(dates.part_name(c, part), c, part)
                                 for c in columns for part in dates.PARTS)}
    taken = {name.casefold(): name for name, _ in schema}
    for p in parts.values():
        if p.name.casefold() in taken:
            raise DataError(
                f"date_features names the {p.part} of the date column {p.column!r} "
                f"{p.name!r}, but the source already has a column "
                f"{taken[p.name.casefold()]!r}: rename that column in a query, or leave "
                f"{p.column!r} out with features=[...]"
            )

    def expanded(names: Sequence[str]) -> list[str]:
        return [n for name in names
                for n in ([dates.part_name(name, p) for p in dates.PARTS]
                          if name in columns else [name])]

    types = dict(schema) | {name: exp.DataType.build("BIGINT") for name in parts}
    return (dates.add_parts(relation, list(parts.values()), engine.dialect),
            expanded([n for n, _ in schema]), types, parts,
            None if features is None else expanded(features), expanded(continuous))


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


_TYPE_SQL: dict[tuple[exp.DataType, str], str] = {}


def _type_sql(dtype: exp.DataType, dialect: str) -> str:
    """A column type's SQL, rendered once per type (a source's columns have few; rendering
    each feature's was a tenth of a small fit's description), keyed by a copy of it."""
    found = _TYPE_SQL.get((dtype, dialect))
    if found is None:
        found = dtype.sql(dialect)
        if len(_TYPE_SQL) < 1024:
            _TYPE_SQL[(dtype.copy(), dialect)] = found
    return found


def _role(
    name: str, dtype: exp.DataType, nominal: Sequence[str], continuous: Sequence[str],
    engine: Engine,
) -> str:
    """A feature's kind: as given, else continuous for numbers and nominal for text."""
    # ``dtype.this in`` a set of types is ``is_type(*types)`` for plain types (which builds a
    # DataType of each one, 30 numeric types for every feature of a small fit)
    if name in nominal:
        return NOMINAL
    if name in continuous:
        if dtype.this not in NUMERIC_TYPES:
            raise UnsupportedError(f"column {name!r} ({dtype.sql()}) cannot be continuous")
        return CONTINUOUS
    if dtype.this in NUMERIC_TYPES:
        return CONTINUOUS
    if dtype.this in TEXT_TYPES:
        return NOMINAL
    if dtype.is_type(*exp.DataType.TEMPORAL_TYPES):
        dated = dates.is_date(dtype)
        raise UnsupportedError(
            f"column {name!r} holds dates or times ({dtype.sql(engine.dialect)}), which are "
            "neither numbers nor categories: "
            + ("train with date_features=True (--date-features) to use its year, month, day "
               "of the week and days since 1970 as features, or " if dated else "")
            + "derive features from it in a query (such as "
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


def _read_classes_and_domains(
    engine: Engine, relation: exp.Expression, target: str, w: exp.Expression,
    feats: list[Feature],
) -> list[tuple[Value, float]]:
    """The classes with their weights, in ``sort_key`` order (NULL targets are left out), and
    each nominal feature's domain (``_read_domains``), in one ``GROUPING SETS`` statement with
    a set for the target where the engine has them: one scan of the source less (on Spark, a
    job or two)."""
    nominal = [f for f in feats if f.kind == NOMINAL]
    if not nominal or not engine.SUPPORTS_GROUPING_SETS:
        pairs = _read_classes(engine, relation, target, w)
        _read_domains(engine, relation, feats)
        return pairs
    columns = [_column(target), *[_column(f.name) for f in nominal]]
    query = (
        exp.select(*[exp.func("GROUPING", c.copy()) for c in columns], *columns,
                   exp.func("SUM", w))
        .from_(relation)
        .group_by(exp.GroupingSets(expressions=[exp.paren(c.copy()) for c in columns]))
    )
    n = len(columns)
    classes: list[tuple[Value, Any]] = []
    domains: list[list[Value]] = [[] for _ in nominal]
    for row in engine.execute(query):
        # A row is one value of the one column whose GROUPING() is 0 (its NULL group too).
        i = list(row[:n]).index(0)
        value = row[n + i]
        if value is None:
            continue
        if i == 0:
            classes.append((value, row[-1]))
        else:
            domains[i - 1].append(value)
    for f, values in zip(nominal, domains, strict=True):
        f.values = sorted(values, key=sort_key)
    return _checked_classes(target, classes)


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
    return _checked_classes(target, rows)


def _checked_classes(target: str, rows: Iterable[Sequence[Any]]) -> list[tuple[Value, float]]:
    """The (class, weight) rows in ``sort_key`` order, refusing what is not a set of labels."""
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


FRAME_MAX_CELLS = 1 << 21
"""A DataFrame of at most this many rows x (features + 2) that the engine reads in place is
also read in numpy (``Dataset.frame``): its types (``Engine.frame_columns``; rows x columns),
description, level-0 rows and bin edges are found there, with no statement (a small fit's
statements cost more than its tree). Larger frames are read by the engine, whose threads
sort and group them, and which samples a text column for its type."""


@dataclass
class FrameFacts:
    """What ``describe``'s statements read about a classification source (the checking
    scan, the classes and their weights, the nominal domains), found in a DataFrame."""

    n_rows: int
    pairs: list[tuple[Value, float]]
    infinite: list[str]
    value_ranges: dict[int, tuple[float, float]]
    domains: dict[int, list[Value]]


def frame_facts(frame: FrameColumns, feats: list[Feature], types: dict[str, exp.DataType],
                target: str, weight: str | None) -> FrameFacts | None:
    """``describe``'s reads of a DataFrame that the engine reads in place
    (``Engine.READS_FRAMES_IN_PLACE``: DuckDB), computed from its columns in numpy: a small
    fit's description took 4 statements and 25-55 ms of building, rendering and running
    them, more than its tree.

    They are the engine's answers: NaN (and None in text) is NULL, as the engine reads it,
    and every sum is exact in any order (row counts, or whole-number weights), as the
    engine's. Where a column is of a kind these reads do not cover (extension types, numbers
    as categories, mixed objects) or the data would get a message (no rows, a NULL target,
    weights not whole or not positive, empty columns, infinities that training refuses,
    integers beyond 2**53, fractional or single classes) there are none (None): the
    statements then run and say what they say."""
    import numpy as np

    n_rows = len(frame.frame)
    if n_rows == 0:
        return None
    read: dict[str, tuple[Any, Any]] = {}
    for name in {target, *([weight] if weight else []), *(f.name for f in feats)}:
        found = frame.column(name)
        # a column the engine would not read as the frame holds it (text as ENUM or VARCHAR)
        if found is None or (found[0].dtype.kind == "O" and types[name].this not in TEXT_TYPES):
            return None
        read[name] = found
    y, y_known = read[target]
    if not y_known.all():
        return None
    w = None
    if weight:
        w, w_known = read[weight]
        w = w.astype(np.float64)
        total = float(w.sum()) if w_known.all() and not (w < 0).any() else -1.0
        if not (total < 2.0**53 and WEIGHT_RANGE[0] <= total <= WEIGHT_RANGE[1]
                and bool(np.all(w == np.floor(w)))):
            return None
    infinite: list[str] = []
    ranges: dict[int, tuple[float, float]] = {}
    domains: dict[int, list[Value]] = {}
    for f in feats:
        v, known = read[f.name]
        if not known.any():
            return None
        kv = v[known]
        if f.kind == NOMINAL:
            if kv.dtype.kind == "f":  # -0.0 and 0.0 are one group: the engine's domain
                return None
            domains[f.index] = sorted(np.unique(kv).tolist(), key=sort_key)
            continue
        if kv.dtype.kind == "f":
            if np.isneginf(kv).any():
                return None
            if np.isposinf(kv).any():
                infinite.append(f.name)
                continue
        elif max(abs(int(kv.min())), abs(int(kv.max()))) > EXACT_INTEGER:
            return None
        ranges[f.index] = (float(kv.min()), float(kv.max()))
    classes, inverse = np.unique(y, return_inverse=True)
    values = classes.tolist()
    if len(values) < 2 or any(isinstance(c, float) and not c.is_integer() for c in values):
        return None
    sums = np.bincount(inverse.ravel(), weights=w, minlength=len(values))
    pairs = sorted(((c, float(s)) for c, s in zip(values, sums.tolist(), strict=True)),
                   key=lambda p: sort_key(p[0]))
    return FrameFacts(n_rows, pairs, infinite, ranges, domains)


LEVEL0 = "sqltree_level0"
"""Set in the ``meta`` of ``queries.build_level0``'s query to its ``Level0`` (what its rows are
made of), so that a reader of a Dataset with a ``frame`` may make them in numpy
(``frame_level0``); a reader that changes the query must not keep it."""


@dataclass(frozen=True)
class Level0:
    """The options of a level-0 query (``queries.build_level0``)."""

    bins: dict[int, list[float]] | None
    class_weight: Sequence[float] | None
    centre: float | None


def frame_level0(data: Dataset, query: Any) -> list[Any] | None:
    """The rows of a level-0 query (``LEVEL0`` in its meta) made from ``data.in_numpy``,
    as ``Engine.float_batches`` gives them (float64 columns, NaN for NULL): the rows with a
    target (and a positive weight), node 0, the weight (times its class's factor), the class
    index, each continuous value as a double (with bins, its bin's index: the first edge at or
    above it) and each nominal value's place in the domain.

    The same doubles as the engine's: each is the row's own value converted, or one product of
    two doubles. None where ``data`` has no frame, for a regression's centred target (whose
    moments are summed in row order: the engine's order is the one to follow), and for
    columns ``FrameColumns`` does not read or numbers as categories (the engine's equality
    of -0.0 and 0.0): the query then runs."""
    spec = query.meta.get(LEVEL0) if isinstance(query, exp.Expression) else None
    frame = data.in_numpy
    if frame is None or not isinstance(spec, Level0) or spec.centre is not None:
        return None
    import numpy as np
    import pandas as pd

    read: dict[str, tuple[Any, Any]] = {}
    for name in {data.target, *([data.weight] if data.weight else []),
                 *(f.name for f in data.features)}:
        found = frame.column(name)
        if found is None:
            return None
        read[name] = found
    target, keep = read[data.target]
    if data.weight:
        weight, known = read[data.weight]
        with np.errstate(invalid="ignore"):
            keep = keep & known & (weight > 0)
    rows = np.flatnonzero(keep)
    y = pd.Index(data.classes).get_indexer(target[rows])
    if (y < 0).any():
        return None
    w = read[data.weight][0][rows].astype(np.float64) if data.weight else np.ones(len(rows))
    if spec.class_weight is not None:
        factor = np.array([float(cw) for cw in spec.class_weight])[y]
        w = w * factor if data.weight else factor
    columns = [np.zeros(len(rows)), w, y.astype(np.float64)]
    for f in data.features:
        values, known = read[f.name]
        values, known = values[rows], known[rows]
        out = np.full(len(rows), np.nan)
        if f.kind == NOMINAL:
            if values.dtype.kind == "f":
                return None
            codes = pd.Index(f.values).get_indexer(values[known])
            out[np.flatnonzero(known)[codes >= 0]] = codes[codes >= 0]
        elif spec.bins and f.index in spec.bins:
            edges = np.asarray(spec.bins[f.index], dtype=np.float64)
            at = np.searchsorted(edges, values[known].astype(np.float64), side="left")
            out[known] = np.minimum(at, len(edges) - 1)
        else:
            out[known] = values[known].astype(np.float64)
        columns.append(out)
    return columns


class FrameColumns:
    """A DataFrame that the engine reads in place as ``relation``, its columns read in numpy
    as the engine reads them (``column``), each once."""

    def __init__(self, frame: Any, relation: exp.Expression) -> None:
        self.frame = frame
        self.relation = relation
        self._read: dict[str, tuple[Any, Any] | None] = {}

    def column(self, name: str) -> tuple[Any, Any] | None:
        """Column ``name``'s values and which are known (``_frame_column``)."""
        if name not in self._read:
            self._read[name] = _frame_column(self.frame, name)
        return self._read[name]


def _frame_column(frame: Any, name: str) -> tuple[Any, Any] | None:
    """A column's values as the engine reads them and which are known (not NULL), or None
    for a column the numpy reads do not take: numpy floats (NaN is NULL), integers and
    booleans, and text (objects that are strings, pandas strings, categories of strings;
    None, NaN and NA are NULL)."""
    import numpy as np
    import pandas as pd

    if name not in frame.columns or not frame.columns.is_unique:
        return None
    series = frame[name]
    kind = series.dtype
    if isinstance(kind, np.dtype) and kind.kind == "f" and kind.itemsize in (4, 8):
        values = series.to_numpy()
        return values, ~np.isnan(values)
    if isinstance(kind, np.dtype) and kind.kind in "iub":
        values = series.to_numpy()
        return values, np.ones(len(values), dtype=bool)
    text = (isinstance(kind, pd.StringDtype)
            or (isinstance(kind, pd.CategoricalDtype)
                and pd.api.types.infer_dtype(kind.categories, skipna=True) == "string")
            or (isinstance(kind, np.dtype) and kind.kind == "O"
                and pd.api.types.infer_dtype(series, skipna=True) == "string"))
    if text:
        known = series.notna().to_numpy()
        return series.to_numpy(dtype=object, na_value=None), known
    return None
