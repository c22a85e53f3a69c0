"""SQLite through Python's ``sqlite3``: training with no server, on the select plan.

sqltree trains on SQLite with the select plan only (``engines.select_plan``): every statement is
one ``SELECT`` over the source, so a read-only database is enough. SQLite has the window
functions the portable threshold scan needs (3.25 and later) and ``MATERIALIZED`` CTEs (3.35);
its math functions (``LN``, ``FLOOR``, ``CEIL``, ``POWER``) are built only with
``SQLITE_ENABLE_MATH_FUNCTIONS``, so any of them the library lacks is registered on the
connection in Python. What SQLite writes differently is rewritten here, on the syntax tree:

- a ``VALUES`` list with named columns (``(VALUES ...) AS t(a, b)``, which SQLite does not
  parse) becomes ``(SELECT column1 AS a, column2 AS b FROM (VALUES ...)) AS t``;
- SQLite has no NaN (it stores NULL) and reads ``CAST('Infinity' AS REAL)`` as 0, so the
  special doubles the checks compare with become NULL and ``±9e999`` (SQLite's infinity);
- SQLite misreads a few decimal texts by a unit in the last place, so every float is written
  in a text it reads exactly (``sqlite_numbers``).

SQLite keeps a column's type per value. A column's type is the widest its values have (text
over real over integer), and a column declared ``BOOLEAN`` is boolean: its 0 and 1 are read back
as False and True where sqltree reads a source's values (classes, nominal domains), as the other
engines return them.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
from collections.abc import Callable
from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.errors import ErrorLevel

from ..errors import UnsupportedError
from .base import UNION, Engine, temp_table_create
from .sqlite_numbers import exact_numbers

MIN_VERSION = (3, 35, 0)
"""The oldest SQLite with everything the select plan writes: window functions (3.25) and
``MATERIALIZED`` CTEs (3.35)."""

_SPECIAL = {"nan": None, "infinity": 1, "-infinity": -1}
"""Special doubles by their text: NULL for NaN, the sign of an infinity."""

_MATH: dict[str, tuple[int, Callable[..., Any]]] = {
    "LN": (1, lambda x: None if x is None or x <= 0 else math.log(x)),
    "FLOOR": (1, lambda x: None if x is None else float(math.floor(x))),
    "CEIL": (1, lambda x: None if x is None else float(math.ceil(x))),
    "POWER": (2, lambda x, y: None if x is None or y is None else math.pow(x, y)),
    "MD5": (1, lambda x: None if x is None else hashlib.md5(str(x).encode()).hexdigest()),
}
"""The math functions training uses, as Python functions for a SQLite built without them,
and ``MD5`` (the hash that deals rows into folds and shuffles them for permutation
importance), which SQLite has not: lowercase hex of the UTF-8 text, as the other engines
give it."""

# typeof() of a value, ranked: a column's type is that of its widest value.
_RANKS = {"integer": 1, "real": 2, "text": 3, "blob": 4}
_TYPE_OF_RANK = {1: "BIGINT", 2: "DOUBLE", 3: "TEXT", 4: "BLOB"}


class SQLiteEngine(Engine):
    """Run queries on a ``sqlite3`` connection (a new in-memory database when none is given).

    Parameters
    ----------
    connection : sqlite3.Connection, optional
        An open connection. sqltree only reads from it, except that a pandas DataFrame given
        as a source is copied into a ``TEMP`` table, dropped at cleanup, and that math
        functions SQLite lacks are registered on it.
    """

    dialect: ClassVar[str] = "sqlite"
    NAME: ClassVar[str] = "SQLite"
    SUPPORTS_GROUPING_SETS: ClassVar[bool] = False
    HISTOGRAM_FORM: ClassVar[str] = UNION
    BOOLEANS_AS_INTEGERS: ClassVar[bool] = True

    def __init__(self, connection: sqlite3.Connection | None = None) -> None:
        if sqlite3.sqlite_version_info < MIN_VERSION:
            raise UnsupportedError(
                f"sqltree needs SQLite {'.'.join(map(str, MIN_VERSION))} or later (window "
                f"functions, MATERIALIZED CTEs); Python's sqlite3 has {sqlite3.sqlite_version}"
            )
        super().__init__()
        self.owns_connection = connection is None
        self.connection = connection if connection is not None else sqlite3.connect(":memory:")
        self._booleans: list[tuple[exp.Expression, set[str]]] = []
        self.begin()
        self.registered = register_math(self.connection)
        """The math functions registered on the connection because SQLite lacked them."""
        self.use_plan("select")

    def _claim_key(self) -> Any:
        # A sqlite3 connection cannot be weakly referenced, and serves one thread unless made
        # with check_same_thread=False; sqltree changes none of its settings.
        return self

    def tables_plan_refusal(self) -> str | None:
        return "sqltree trains on SQLite with the select plan only"

    # -- rendering -----------------------------------------------------------------------------
    def render(self, query: exp.Expression) -> str:
        # One copy, rewritten in place and rendered without sqlglot's own copy: a select
        # plan statement holds every level's definitions, and copies were most of its cost.
        tree = query.copy()
        for node in list(tree.walk()):
            rewritten = _for_sqlite(node)
            if rewritten is not node:
                if node is tree:
                    tree = rewritten
                else:
                    node.replace(rewritten)
        tree = exact_numbers(tree)
        return tree.sql(dialect=self.dialect, unsupported_level=ErrorLevel.RAISE, copy=False)

    # -- the contract --------------------------------------------------------------------------
    def _run(self, sql: str) -> list[tuple[Any, ...]]:
        cursor = self.connection.execute(self._sending(sql))
        try:
            return [tuple(row) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def _run_columns(self, sql: str) -> list[tuple[str, str]]:
        cursor = self.connection.execute(self._sending(sql))
        try:
            return [(d[0], "") for d in cursor.description or []]
        finally:
            cursor.close()

    def execute(self, query: exp.Expression) -> list[tuple[Any, ...]]:
        rows = super().execute(query)
        booleans = self._boolean_outputs(query)
        if not booleans:
            return rows
        return [
            tuple(bool(v) if i in booleans and v is not None else v for i, v in enumerate(r))
            for r in rows
        ]

    def _boolean_outputs(self, query: exp.Expression) -> set[int]:
        """Positions of the output columns that are a described relation's BOOLEAN columns,
        named as they are, in a query that reads that relation directly."""
        source = query.args.get("from_") if isinstance(query, exp.Select) else None
        if source is None:
            return set()
        for relation, names in self._booleans:
            if source.this == relation:
                return {
                    i for i, e in enumerate(query.expressions)
                    if isinstance(e, exp.Column) and not e.table and e.name in names
                }
        return set()

    def columns(self, relation: exp.Expression) -> list[tuple[str, exp.DataType]]:
        """Names, and types read from the values: the widest a column's values have (text over
        real over integer); declared BOOLEAN columns are boolean; a column with no values
        has its declared type's affinity (TEXT when none is declared)."""
        names = [name for name, _ in super().columns(relation)]
        source = relation.subquery("src") if isinstance(relation, exp.Query) else relation
        ranks = [
            exp.func("MAX", exp.Case(
                this=exp.func("TYPEOF", exp.column(n, quoted=True)),
                ifs=[exp.If(this=exp.Literal.string(t), true=exp.Literal.number(r))
                     for t, r in _RANKS.items()],
                default=exp.Literal.number(0),
            ))
            for n in names
        ]
        (row,) = self.execute(exp.select(*ranks).from_(source.copy())) if names else [()]
        declared = self._declared(relation)
        booleans = {n for n in names if declared.get(n, "").upper() in {"BOOLEAN", "BOOL"}}
        self._booleans.append((relation.copy(), booleans))
        out = []
        for name, rank in zip(names, row, strict=True):
            text = "BOOLEAN" if name in booleans else _TYPE_OF_RANK.get(
                int(rank or 0), _affinity(declared.get(name, "")))
            out.append((name, exp.DataType.build(text)))
        return out

    def _declared(self, relation: exp.Expression) -> dict[str, str]:
        """Declared types of a table's columns (none for a query)."""
        if not isinstance(relation, exp.Table) or not isinstance(relation.this, exp.Identifier):
            return {}
        args = [exp.Literal.string(relation.name)]
        if relation.db:
            args.append(exp.Literal.string(relation.db))
        info = exp.Table(this=exp.Anonymous(this="pragma_table_info", expressions=args))
        rows = self.execute(exp.select("name", "type").from_(info))
        return {str(name): str(kind or "") for name, kind in rows}

    def _create_temp_table(self, name: str, query: exp.Expression,
                           statistics: bool = True) -> None:
        create = temp_table_create(name, query)
        self.connection.execute(self._sending(self.render(create)))

    def _drop_temp_table(self, name: str) -> None:
        drop = exp.Drop(
            tables=[exp.Table(this=exp.to_identifier(name, quoted=True),
                              db=exp.to_identifier("temp"))],
            kind="TABLE",
            exists=True,
        )
        self.connection.execute(self._sending(self.render(drop)))

    def relation_for_path(self, path: str) -> exp.Expression:
        raise UnsupportedError(
            f"SQLite cannot read the file {path!r}: load it into a table first, pass a pandas "
            "DataFrame, or train on DuckDB"
        )

    def relation_for_dataframe(self, frame: Any) -> exp.Expression:
        """Copy a pandas DataFrame into a ``TEMP`` table (NaN and NA become NULL)."""
        self.begin()
        return self._copied_dataframe(frame)

    def load_dataframe(self, frame: Any, table: exp.Table, *, temporary: bool = False) -> None:
        """Create ``table`` with the DataFrame's columns (booleans declared BOOLEAN, numbers
        INTEGER or REAL, anything else TEXT) and insert its rows."""
        self.begin()
        kinds = [_declared_type(frame[c]) for c in frame.columns]
        columns = [
            # Declared as written: sqlglot writes BOOLEAN as INTEGER for SQLite.
            exp.ColumnDef(this=exp.to_identifier(str(c), quoted=True),
                          kind=exp.DataType(this=exp.DataType.Type.USERDEFINED, kind=k))
            for c, k in zip(frame.columns, kinds, strict=True)
        ]
        create = exp.Create(
            this=exp.Schema(this=table.copy(), expressions=columns),
            kind="TABLE",
            properties=exp.Properties(expressions=[exp.TemporaryProperty()])
            if temporary else None,
        )
        insert = exp.Insert(
            this=table.copy(),
            expression=exp.Values(expressions=[
                exp.Tuple(expressions=[exp.Placeholder() for _ in frame.columns])
            ]),
        )
        rows = [
            tuple(_plain(v, k) for v, k in zip(row, kinds, strict=True))
            for row in frame.itertuples(index=False, name=None)
        ]
        with self._statement():
            opened = not self.connection.in_transaction
            self.connection.execute(self._sending(self.render(create)))
            self.connection.executemany(self._sending(self.render(insert)), rows)
            if opened and self.connection.in_transaction:
                self.connection.commit()  # the insert began a transaction; the caller had none

    def close(self) -> None:
        """Clean up and close the connection if this engine opened it."""
        try:
            self.cleanup()
        finally:
            if self.owns_connection:
                self.connection.close()


def _affinity(declared: str) -> str:
    """The type of SQLite's affinity for a declared type (its rules, in their order)."""
    kind = declared.upper()
    if "INT" in kind:
        return "BIGINT"
    if any(t in kind for t in ("CHAR", "CLOB", "TEXT")) or not kind or "BLOB" in kind:
        return "TEXT"
    return "DOUBLE"  # REAL, FLOA, DOUB, and NUMERIC affinity


def register_math(connection: sqlite3.Connection, *, force: bool = False) -> list[str]:
    """Register on ``connection`` the math functions its SQLite lacks (all of them with
    ``force``); returns their names."""
    added = []
    for name, (arity, fn) in _MATH.items():
        if not force:
            probe = exp.select(exp.Anonymous(
                this=name, expressions=[exp.Literal.number(2)] * arity)).sql("sqlite")
            try:
                connection.execute(probe).fetchall()
                continue
            except sqlite3.OperationalError:
                pass
        connection.create_function(name, arity, fn, deterministic=True)
        added.append(name)
    return added


def _for_sqlite(node: exp.Expression) -> exp.Expression:
    """One node as SQLite writes it (see the module's notes)."""
    if isinstance(node, exp.Values) and node.alias_column_names:
        alias = node.args["alias"]
        select = exp.Select(expressions=[
            exp.alias_(exp.column(f"column{i + 1}"), name.copy())
            for i, name in enumerate(alias.columns)
        ]).from_(exp.Values(expressions=node.expressions), copy=False)
        return exp.Subquery(this=select, alias=exp.TableAlias(this=alias.this.copy()))
    if (
        isinstance(node, exp.Cast)
        and isinstance(node.this, exp.Literal)
        and node.this.is_string
        and node.this.name.lower() in _SPECIAL
        and node.to.is_type(*exp.DataType.REAL_TYPES)
    ):
        sign = _SPECIAL[node.this.name.lower()]
        if sign is None:
            return exp.null()
        infinity = exp.Literal.number("9e999")
        return infinity if sign > 0 else exp.Neg(this=infinity)
    return node


def _declared_type(series: Any) -> str:
    import pandas as pd

    kind = pd.api.types.infer_dtype(series, skipna=True)
    if kind == "boolean":
        return "BOOLEAN"
    if kind == "integer":
        return "INTEGER"
    if kind in {"floating", "mixed-integer-float", "decimal"}:
        return "REAL"
    return "TEXT"


def _plain(value: Any, kind: str) -> Any:
    """A DataFrame value as sqlite3 stores it: NULL for NaN and NA, Python numbers."""
    import pandas as pd

    if pd.isna(value):
        return None
    if hasattr(value, "item"):
        value = value.item()
    if kind == "TEXT" and not isinstance(value, str):
        return str(value)
    return value
