"""The engine contract: the only layer that knows a database driver.

Everything above it builds sqlglot expressions and hands them to ``Engine.execute``;
the engine renders them in its dialect, runs them, and returns plain Python rows.
"""

from __future__ import annotations

import itertools
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.errors import ErrorLevel


@dataclass
class EngineStats:
    """Counters an engine keeps while it runs queries."""

    queries: int = 0
    seconds: float = 0.0
    sql: list[str] = field(default_factory=list)


class Engine(ABC):
    """Execute sqlglot expressions on one database connection.

    Capability flags are class attributes so that callers branch on facts, never on names.
    """

    dialect: ClassVar[str]
    """The sqlglot dialect that queries are rendered in."""

    MAX_CASE_DEPTH: ClassVar[int] = 1000
    """Deepest nested CASE the engine parses (measured; scoring SQL stays far below it)."""

    SUPPORTS_ASOF_JOIN: ClassVar[bool] = False
    """Whether ``ASOF JOIN`` (nearest earlier match by sort-merge) is available."""

    SUPPORTS_ROW_SAMPLE: ClassVar[bool] = False
    """Whether ``USING SAMPLE reservoir(n ROWS) REPEATABLE (seed)`` is available."""

    SUPPORTS_ORDERED_SCAN: ClassVar[bool] = False
    """Whether a window with an empty ``OVER`` streams over a subquery's ``ORDER BY`` order
    (one pass, in parallel with nothing else) and ``ARG_MIN`` exists."""

    VECTORIZED: ClassVar[bool] = False
    """Whether a CASE runs a batch of rows at a time, evaluating every branch that some row
    of the batch takes. Then the closed form of C4.5's spread of unknown values (a sum over the
    whole tree) costs about as much per batch as the tree is large, and ``Model.predict``
    instead walks copies of the rows that stopped at an unknown value. Row-at-a-time engines
    (PostgreSQL, Spark) evaluate only the branches each row takes and keep the closed form."""

    KEEPS_ROW_ORDER: ClassVar[bool] = False
    """Whether a table made from an ordered query is stored, and scanned, in that order."""

    CACHES_TEMP_TABLES: ClassVar[bool] = False
    """Whether a temp table must be cached explicitly to avoid recomputation (Spark)."""

    keep_sql: bool = False
    """Record every statement's text in ``stats.sql`` (for debugging and golden files)."""

    def __init__(self) -> None:
        self.stats = EngineStats()
        self._prefix = f"sqltree_{uuid.uuid4().hex[:8]}_"
        self._counter = itertools.count()
        self._temp: list[str] = []

    # -- rendering -------------------------------------------------------------------------
    def render(self, query: exp.Expression) -> str:
        """Render ``query`` in this engine's dialect, refusing anything it cannot express."""
        return query.sql(dialect=self.dialect, unsupported_level=ErrorLevel.RAISE)

    # -- the contract ------------------------------------------------------------------------
    @abstractmethod
    def _run(self, sql: str) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows (an empty list for DDL)."""

    @abstractmethod
    def _run_columns(self, sql: str) -> list[tuple[str, str]]:
        """Return (name, SQL type text) of a query's result columns without reading rows."""

    @abstractmethod
    def _create_temp_table(self, name: str, query: exp.Expression) -> None:
        """Create a session-local table ``name`` holding the rows of ``query``."""

    @abstractmethod
    def _drop_temp_table(self, name: str) -> None:
        """Drop a table made by ``_create_temp_table`` if it exists."""

    @abstractmethod
    def relation_for_path(self, path: str) -> exp.Expression:
        """A relation reading a Parquet or CSV file (path or glob)."""

    def relation_for_dataframe(self, frame: Any) -> exp.Expression:
        """A relation reading a pandas DataFrame."""
        raise NotImplementedError(f"{type(self).__name__} cannot read a pandas DataFrame")

    # -- helpers used by the planner ---------------------------------------------------------
    @contextmanager
    def counted(self, sql: str) -> Iterator[None]:
        """Count one statement, its time and (with ``keep_sql``) its text in ``stats``."""
        start = time.perf_counter()
        yield
        self.stats.queries += 1
        self.stats.seconds += time.perf_counter() - start
        if self.keep_sql:
            self.stats.sql.append(sql)

    def execute(self, query: exp.Expression) -> list[tuple[Any, ...]]:
        """Run ``query`` and return its rows as tuples."""
        sql = self.render(query)
        with self.counted(sql):
            rows = self._run(sql)
        return rows

    def frame(self, query: exp.Expression) -> Any:
        """Run ``query`` and return its result as a pandas DataFrame."""
        import pandas as pd

        sql = self.render(query)
        names = [name for name, _ in self._run_columns(sql)]
        rows = self.execute(query)
        return pd.DataFrame.from_records(rows, columns=names)

    def create_table(self, name: str, query: exp.Expression) -> None:
        """Write ``query``'s rows to a new permanent table ``name`` (a user's output table)."""
        create = exp.Create(
            this=exp.to_table(name, dialect=self.dialect), kind="TABLE", expression=query
        )
        self.execute(create)

    def columns(self, relation: exp.Expression) -> list[tuple[str, exp.DataType]]:
        """Names and types of a relation's columns, types parsed into sqlglot DataTypes."""
        query = exp.select("*").from_(_as_from(relation)).limit(0)
        out = []
        for name, type_text in self._run_columns(self.render(query)):
            try:
                dtype = exp.DataType.build(type_text, dialect=self.dialect)
            except Exception:  # an engine type sqlglot cannot parse: unsupported downstream
                dtype = exp.DataType.build("UNKNOWN")
            out.append((name, dtype))
        return out

    def temp_name(self, hint: str) -> str:
        """A fresh name for a temporary object, unique to this engine instance."""
        return f"{self._prefix}{hint}_{next(self._counter)}"

    def materialize(self, hint: str, query: exp.Expression) -> exp.Table:
        """Store ``query``'s rows in a new temporary table and return a reference to it."""
        name = self.temp_name(hint)
        with self.counted(f"-- {name} :=\n" + self.render(query) if self.keep_sql else ""):
            self._create_temp_table(name, query)
        self._temp.append(name)
        return exp.Table(this=exp.to_identifier(name, quoted=True))

    def load_rows(
        self,
        hint: str,
        columns: Sequence[str],
        types: Sequence[str],
        rows: Sequence[Sequence[Any]],
    ) -> exp.Table:
        """Store small Python rows (a level's splits and routes) in a new temporary table.

        The default writes them as a typed ``VALUES`` list; engines with a bulk path override
        it, so that the statement's size does not grow with the number of rows.
        """
        select = _values_select(columns, types, rows)
        return self.materialize(hint, select)

    def drop(self, table: exp.Table) -> None:
        """Drop a temporary table made by ``materialize``."""
        name = table.name
        self._drop_temp_table(name)
        if name in self._temp:
            self._temp.remove(name)

    def cleanup(self) -> None:
        """Drop every temporary object this engine made."""
        for name in list(self._temp):
            try:
                self._drop_temp_table(name)
            finally:
                self._temp.remove(name)


def _values_select(
    columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]
) -> exp.Select:
    """``SELECT CAST(c AS type) ... FROM (VALUES ...)``, or no rows when ``rows`` is empty."""
    from .. import queries  # the literal writers; imported here to keep engines a leaf module

    if not rows:
        return exp.select(
            *[
                exp.alias_(exp.cast(exp.null(), t), exp.to_identifier(c, quoted=True))
                for c, t in zip(columns, types)
            ]
        ).where(exp.false())
    table = queries.values_table("v", list(columns), [tuple(r) for r in rows], list(types))
    return exp.select(*[exp.column(c, table="v") for c in columns]).from_(table)


def _as_from(relation: exp.Expression) -> exp.Expression:
    if isinstance(relation, (exp.Select, exp.Union, exp.SetOperation)):
        return relation.subquery("src")
    return relation
