"""The engine contract: the only layer that knows a database driver.

Everything above it builds sqlglot expressions and hands them to ``Engine.execute``;
the engine renders them in its dialect, runs them, and returns plain Python rows.

An engine works on a caller's connection as a guest. Engines on one connection (several
threads training on it, each with its own engine) take turns a statement at a time: two
statements at once break each other (DuckDB refuses the second, psycopg's transaction blocks
nest out of order), while statements taking turns do not, since each engine's tables have names
of their own. Whatever setting an engine changes is remembered first, by the first engine to
begin, and given back when the last one cleans up, also after an error or a Ctrl-C. One engine
object serves one training or scoring at a time.
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
import time
import uuid
import warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.errors import ErrorLevel

from .. import progress as reporting
from ..errors import DataError, SourceError, SqlTreeError
from ..sqlexpr import fenced, values_table
from .select_plan import SELECT, TABLES, SelectPlan, choose_plan

GROUPING_SETS, UNION, UNPIVOT = "grouping sets", "union", "unpivot"
"""How an engine sums many features' groups in one statement (``Engine.HISTOGRAM_FORM``):
one ``GROUP BY GROUPING SETS``, a ``UNION ALL`` of a ``GROUP BY`` per feature, or each row's
values unpivoted (``EXPLODE``) and grouped once."""

REWRITE, PATH, UPDATE = "rewrite", "path", "update"
"""How the level scan moves its rows down a level (``Engine.SCAN_ROUTING``): every open row
rewritten with its child's node; level 0's rows kept as stored and only the rows the next
histogram reads written, each one's node computed from the splits so far; or the rows kept
where they are and only their node and scan flag updated in place."""


@dataclass
class EngineStats:
    """Counters an engine keeps while it runs queries."""

    queries: int = 0
    seconds: float = 0.0
    max_statement_chars: int = 0
    """Length of the longest SQL text sent: on the tables plan, training statements grow with
    the number of features and classes, never with the size of the tree (the select plan's
    carry the tree grown so far)."""
    sql: list[str] = field(default_factory=list)
    scans: int = 0
    """Statements that read the source through the select plan's definitions (on the tables
    plan the grower counts the statements that read a level table)."""

    @property
    def jobs(self) -> int | None:
        """Jobs the engine's statements ran, where the engine counts them (Spark), else None."""
        return None


class _Shared:
    """What the engines on one connection share: the turn to run a statement, how many of
    them have begun, and the caller's values of the settings they changed."""

    def __init__(self) -> None:
        self.turn = threading.RLock()  # re-entrant: a statement may run another (type lookups)
        self.engines = 0
        self.saved: dict[str, Any] = {}


_shared: dict[int, _Shared] = {}
_shared_guard = threading.Lock()


def _shared_by(key: Any) -> _Shared:
    """The record of ``key`` (a connection), made on first use and gone with the connection."""
    with _shared_guard:
        found = _shared.get(id(key))
        if found is None:
            found = _shared[id(key)] = _Shared()
            weakref.finalize(key, _shared.pop, id(key), None)
        return found


@functools.lru_cache(maxsize=1024)
def parsed_type(type_text: str, dialect: str) -> exp.DataType:
    """An engine's type name parsed (UNKNOWN where sqlglot cannot parse it: unsupported
    downstream), once per name: a source's columns are mostly of a few types, and parsing
    each one's was a tenth of a small fit's description. Callers take a copy."""
    try:
        return exp.DataType.build(type_text, dialect=dialect)
    except Exception:
        return exp.DataType.build("UNKNOWN")


def temp_table_create(name: str, query: exp.Expression) -> exp.Create:
    """``CREATE TEMPORARY TABLE "name" AS query``, as DuckDB, PostgreSQL and SQLite write it."""
    return exp.Create(
        this=exp.Table(this=exp.to_identifier(name, quoted=True)),
        kind="TABLE",
        expression=query,
        properties=exp.Properties(expressions=[exp.TemporaryProperty()]),
    )


class Engine(ABC):
    """Execute sqlglot expressions on one database connection.

    Capability flags are class attributes so that callers branch on facts, never on names.
    """

    dialect: ClassVar[str]
    """The sqlglot dialect that queries are rendered in."""

    NAME: ClassVar[str] = "the engine"
    """The engine's name in messages (``DuckDB``, ``PostgreSQL``, ``Spark``)."""

    SUPPORTS_ASOF_JOIN: ClassVar[bool] = False
    """Whether ``ASOF JOIN`` (nearest earlier match by sort-merge) is available."""

    SUPPORTS_ORDERED_SCAN: ClassVar[bool] = False
    """Whether a window with an empty ``OVER`` streams over a subquery's ``ORDER BY`` order
    (one pass, in parallel with nothing else) and ``ARG_MIN`` exists."""

    VECTORIZED: ClassVar[bool] = False
    """Whether a CASE runs a batch of rows at a time, evaluating every branch that some row
    of the batch takes. Then the closed form of C4.5's spread of unknown values (a sum over the
    whole tree) costs about as much per batch as the tree is large, and ``Model.predict``
    instead walks copies of the rows that stopped at an unknown value. Row-at-a-time engines
    (PostgreSQL, Spark) evaluate only the branches each row takes and keep the closed form."""

    ONE_PASS_HISTOGRAM: ClassVar[bool] = False
    """Whether a level's histogram is one aggregate over the level crossed with the feature
    numbers (``queries.build_histogram``'s ``one_pass``) rather than a UNION of one aggregate
    per feature: for an engine that runs each aggregate of a UNION as a stage of its own."""

    SUPPORTS_GROUPING_SETS: ClassVar[bool] = True
    """Whether ``GROUP BY GROUPING SETS`` and ``GROUPING()`` exist: every nominal feature's
    domain is then read in one statement (``dataset.describe``)."""

    BOOLEANS_AS_INTEGERS: ClassVar[bool] = False
    """Whether booleans are stored as the integers 1 and 0 (SQLite has no boolean type): an
    integer column then scores where the model was trained on a boolean one."""
    LOADS_SMALL_ROWS: ClassVar[bool] = False
    """Whether a level's tests and routes reach the engine as loaded tables (``load_rows``)
    in every algorithm, rather than as literal rows in the partition statement: for an
    engine whose parser and planner pay for every literal row (Spark)."""
    HISTOGRAM_FORM: ClassVar[str] = GROUPING_SETS
    """How a level's histogram of every feature is summed (``learner.backends``): one
    ``GROUP BY GROUPING SETS`` (one pass over the rows), a ``"union"`` of a ``GROUP BY`` per
    feature (PostgreSQL: 5.7 s against 8.5 s at 1M rows of 16 features and 256 nodes; SQLite
    has no grouping sets), or each row's codes ``"unpivot"``-ed and grouped once."""

    SCAN_ROUTING: ClassVar[str] = REWRITE
    """How the level scan (``learner.backends.SqlBackend``, rows carrying their codes) moves
    its rows to the next level: ``"rewrite"``, one statement per level that joins the level's
    splits and stores every open row again with its new node; or ``"path"``, level 0's rows
    stored once and never rewritten, and per level one statement that stores apart only the
    rows of the nodes the next histogram reads (the smaller child of each split), each row's
    node computed from its codes by a ``CASE`` over the splits so far (until the tree passes
    ``learner.backends.PATH_SPLITS``, then by rewriting); or ``"update"``, the rows kept where
    they are and per level one ``UPDATE`` of their node and scan flag, joined to the level's
    splits (a level splitting a nominal feature of more than ``learner.backends.MASK_CODES``
    codes rewrites instead, and so does every level after ``UPDATES_IN_A_ROW`` updates)."""

    KEEPS_ROW_ORDER: ClassVar[bool] = False
    """Whether a table made from an ordered query is stored, and scanned, in that order."""

    READS_FRAMES_IN_PLACE: ClassVar[bool] = False
    """Whether ``relation_for_dataframe`` reads the pandas DataFrame itself (no copy), its
    values as pandas holds them and NaN as NULL: facts about such a source are then
    computed from the frame in numpy (``dataset.frame_facts``), as the engine would find
    them."""

    SUPPORTS_MATERIALIZED_CTE: ClassVar[bool] = True
    """Whether ``WITH name AS MATERIALIZED (...)`` computes a CTE once for the statement."""

    PARTITIONS_BY_HINT: ClassVar[bool] = False
    """Whether a stored table may be hash-partitioned by its key with a ``REPARTITION`` hint,
    so that each later join on that key, with a table partitioned the same way, moves no
    rows (Spark)."""

    FENCES_DERIVED_TABLES: ClassVar[bool] = False
    """Whether ``render`` keeps the derived tables marked ``sqlexpr.computed_once`` apart from
    the query around them (``sqlexpr.fenced``): engines that merge derived tables into their
    readers and then compute a column at each reference."""

    keep_sql: bool = False
    """Record every statement's text in ``stats.sql`` (for debugging and golden files)."""

    def __init__(self) -> None:
        self.stats = EngineStats()
        self._prefix = f"sqltree_{uuid.uuid4().hex[:8]}_"
        self._counter = itertools.count()
        self._temp: list[str] = []
        self._shared: _Shared | None = None
        self.plan = TABLES
        """The training plan in force: ``"tables"`` or ``"select"`` (``use_plan``)."""
        self.plan_reason = "the default"
        """Why ``use_plan`` chose ``plan``."""
        self._select: SelectPlan | None = None
        self._probed = False
        self._refusal: str | None = None

    # -- the training plan ---------------------------------------------------------------------
    def use_plan(self, plan: str = "auto") -> str:
        """Train on ``plan`` (``"auto"``: working tables where the connection can create them,
        else the select plan); returns why that plan (see ``engines.select_plan``)."""
        if not self._probed:
            self.begin()
            with self._statement():  # engines on one connection take turns
                self._refusal = self.tables_plan_refusal()
            self._probed = True
        chosen, reason = choose_plan(plan, self._refusal)
        self.plan, self.plan_reason = chosen, reason
        if chosen != SELECT:
            self._select = None
        elif self._select is None:  # definitions made before (a source's) stay readable
            self._select = SelectPlan(self.SUPPORTS_MATERIALIZED_CTE)
        return reason

    def expect_rows(self, rows: int) -> None:
        """Told the number of rows of the source once it is described, before training
        reads it again: engines that size their work from it (Spark's shuffle partitions)
        change their settings here; the others do nothing."""
        return None

    def tables_plan_refusal(self) -> str | None:
        """Why the tables plan cannot run on this connection (it may not create temporary
        tables), or None where it can; asked once per engine by ``use_plan``."""
        return None

    # -- sharing the connection --------------------------------------------------------------
    def _claim_key(self) -> Any:
        """The object whose state sqltree's work shares (the connection, by default)."""
        return getattr(self, "connection", self)

    def begin(self) -> None:
        """Join the connection's engines and apply this engine's settings.

        Called by every method that uses the connection, so an engine used again after
        ``cleanup`` applies them again.
        """
        if self._shared is not None:
            return
        shared = _shared_by(self._claim_key())
        with shared.turn:
            shared.engines += 1
            self._shared = shared
            try:
                self._apply_settings()
            except BaseException:
                self._end()
                raise

    def _apply_settings(self) -> None:
        """Change the connection's settings for sqltree's work (``_remember`` each first)."""
        return None  # nothing to change unless an engine says so

    def _remember(self, name: str, value: Any) -> None:
        """Note a setting's value before sqltree changes it (the caller's, if it is the first)."""
        assert self._shared is not None
        self._shared.saved.setdefault(name, value)

    def _restore_settings(self, saved: dict[str, Any]) -> None:
        """Give every remembered setting its caller's value back."""
        raise NotImplementedError(f"{type(self).__name__} remembered settings: {sorted(saved)}")

    def _end(self) -> None:
        """Leave the connection's engines; the last one gives the settings back."""
        shared, self._shared = self._shared, None
        if shared is None:
            return
        with shared.turn:
            shared.engines -= 1
            if shared.engines == 0 and shared.saved:
                saved, shared.saved = shared.saved, {}
                self._restore_settings(dict(reversed(list(saved.items()))))

    # -- statements ----------------------------------------------------------------------------
    def _interrupted(self, error: BaseException) -> bool:
        """Whether ``error`` is the driver's report of a Ctrl-C (engines add their own forms)."""
        seen: set[int] = set()
        cause: BaseException | None = error
        while cause is not None and id(cause) not in seen:
            if isinstance(cause, KeyboardInterrupt):
                return True
            seen.add(id(cause))
            cause = cause.__cause__ or cause.__context__
        return False

    @contextmanager
    def _statement(self) -> Iterator[None]:
        """Use the connection: wait for the turn to, and raise a driver's report of a Ctrl-C
        (DuckDB's ``Query interrupted``, a cancelled query) as the KeyboardInterrupt it was."""
        shared = self._shared
        with shared.turn if shared is not None else nullcontext():
            try:
                yield
            except Exception as error:
                if self._interrupted(error):
                    raise KeyboardInterrupt from error
                raise

    def _sending(self, sql: str) -> str:
        """Note the size of a statement about to be sent; returns it unchanged."""
        if len(sql) > self.stats.max_statement_chars:
            self.stats.max_statement_chars = len(sql)
        return sql

    # -- rendering -------------------------------------------------------------------------
    def render(self, query: exp.Expression) -> str:
        """Render ``query`` in this engine's dialect, refusing anything it cannot express."""
        owned = False
        if self.FENCES_DERIVED_TABLES:
            fenced_query = fenced(query)
            owned, query = fenced_query is not query, fenced_query
        # a fenced query is a copy already, which the generator may change: copying it again
        # took as long as fencing (0.1-0.3 s for the level scan's routing CASE of 1,020 splits)
        return query.sql(dialect=self.dialect, unsupported_level=ErrorLevel.RAISE,
                         copy=not owned)

    # -- the contract ------------------------------------------------------------------------
    @abstractmethod
    def _run(self, sql: str) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows (an empty list for DDL)."""

    @abstractmethod
    def _run_columns(self, sql: str) -> list[tuple[str, str]]:
        """Return (name, SQL type text) of a query's result columns without reading rows."""

    @abstractmethod
    def _create_temp_table(self, name: str, query: exp.Expression,
                           statistics: bool = True) -> None:
        """Create a session-local table ``name`` holding the rows of ``query``; ``statistics``:
        whether later statements join it (an engine that gathers statistics for its planner
        gathers them then)."""

    @property
    def defers_tables(self) -> bool:
        """Whether ``materialize(..., deferred=True)`` leaves the rows to the first reader."""
        return False

    def _create_deferred_table(self, name: str, query: exp.Expression) -> None:
        """``_create_temp_table`` whose rows are computed when first read."""
        self._create_temp_table(name, query)

    @abstractmethod
    def _drop_temp_table(self, name: str) -> None:
        """Drop a table made by ``_create_temp_table`` if it exists."""

    @abstractmethod
    def relation_for_path(self, path: str) -> exp.Expression:
        """A relation reading a Parquet or CSV file (path or glob)."""

    def relation_for_dataframe(self, frame: Any) -> exp.Expression:
        """A relation reading a pandas DataFrame."""
        raise NotImplementedError(f"{type(self).__name__} cannot read a pandas DataFrame")

    def frame_columns(self, frame: Any) -> list[tuple[str, exp.DataType]] | None:
        """The names and types ``columns`` gives the relation of a DataFrame
        (``relation_for_dataframe``), known from the frame without a statement; None where
        the engine must be asked."""
        return None

    def _copied_dataframe(self, frame: Any) -> exp.Table:
        """A ``TEMP`` table holding the DataFrame's rows, written by the engine's
        ``load_dataframe`` and dropped with the engine's other temporary tables."""
        name = self.temp_name("frame")
        table = exp.Table(this=exp.to_identifier(name, quoted=True))
        self._temp.append(name)
        self.load_dataframe(frame, table, temporary=True)
        return table

    def load_dataframe(self, frame: Any, table: exp.Table, *, temporary: bool = False) -> None:
        """Create ``table`` holding the DataFrame's rows (engines that copy DataFrames)."""
        raise NotImplementedError(f"{type(self).__name__} does not copy DataFrames into tables")

    # -- helpers used by the planner ---------------------------------------------------------
    @contextmanager
    def counted(self, sql: str, what: str = "query") -> Iterator[None]:
        """Count one statement, its time and (with ``keep_sql``) its text in ``stats``; a long
        one is noted to ``sqltree.progress`` as ``what`` (``progress.statement``)."""
        start = time.perf_counter()
        with self._statement():
            yield
        seconds = time.perf_counter() - start
        self.stats.queries += 1
        self.stats.seconds += seconds
        if self.keep_sql:
            self.stats.sql.append(sql)
        reporting.statement(seconds, what)

    def _attached(self, query: exp.Expression, *, scan: bool = True) -> exp.Expression:
        """``query`` with the select plan's definitions it reads (counting a scan of the
        source if ``scan``), or ``query`` itself on the tables plan."""
        if self._select is None:
            return query
        query, reads = self._select.attach(query)
        if scan and reads:
            self.stats.scans += 1
        return query

    def execute(self, query: exp.Expression) -> list[tuple[Any, ...]]:
        """Run ``query`` and return its rows as tuples."""
        self.begin()
        query = self._attached(query)
        sql = self.render(query)
        with self.counted(sql):
            rows = self._run(sql)
        return rows

    def frame(self, query: exp.Expression) -> Any:
        """Run ``query`` and return its result as a pandas DataFrame."""
        import pandas as pd

        self.begin()
        sql = self.render(self._attached(query, scan=False))
        with self._statement():
            names = [name for name, _ in self._run_columns(sql)]
        rows = self.execute(query)
        return pd.DataFrame.from_records(rows, columns=names)

    FRAME_ROWS: ClassVar[int] = 100_000
    """Rows per DataFrame of ``frames`` on engines that fetch rows a batch at a time."""

    FETCHES_ROWS: ClassVar[bool] = False
    """Whether the driver gives rows as Python objects (``_run_batches``), so that a large
    result is better converted a batch at a time; DuckDB gives columns."""

    def frames(self, query: exp.Expression) -> Iterator[Any]:
        """Run ``query`` and yield its result as pandas DataFrames, in order: of at most
        ``FRAME_ROWS`` rows each where the driver gives rows (``FETCHES_ROWS``), so that a
        large result never exists as Python objects all at once (the training rows that
        pruning reads: 1M rows of 19 columns were about 1 GB of tuples); else one."""
        if not self.FETCHES_ROWS:
            yield self.frame(query)
            return
        import pandas as pd

        self.begin()
        sql = self.render(self._attached(query))
        with self.counted(sql):
            for names, rows in self._run_batches(sql, self.FRAME_ROWS):
                yield pd.DataFrame.from_records(rows, columns=names)

    def float_batches(self, query: exp.Expression) -> Iterator[list[Any]]:
        """Run ``query`` (numeric columns only) and yield its result as batches of columns,
        each a float64 numpy array with NaN for NULL, in order (``frames``' batches)."""
        import numpy as np

        for frame in self.frames(query):
            yield [frame[name].to_numpy(dtype=np.float64, na_value=np.nan)
                   for name in frame.columns]

    def _run_batches(self, sql: str, size: int) -> Iterator[tuple[list[str], list[Any]]]:
        """The result's column names and rows, ``size`` rows at a time (``FETCHES_ROWS``)."""
        raise NotImplementedError

    def create_table(self, name: str, query: exp.Expression) -> None:
        """Write ``query``'s rows to a new permanent table ``name`` (a user's output table)."""
        create = exp.Create(
            this=exp.to_table(name, dialect=self.dialect), kind="TABLE", expression=query
        )
        self.execute(create)

    def columns(self, relation: exp.Expression) -> list[tuple[str, exp.DataType]]:
        """Names and types of a relation's columns, types parsed into sqlglot DataTypes.

        This is the first statement to read a user's source, so an error the engine raises
        here is about that source (a missing table, column or file, a permission): it is
        raised as a ``SourceError`` naming the source (``relation.meta["sqltree_source"]``)
        and the engine.
        """
        self.begin()
        source = relation.meta.get("sqltree_source", "the source")
        inner = relation.this if isinstance(relation, exp.Subquery) else relation
        if isinstance(inner, (exp.Select, exp.SetOperation)):
            # The query itself, not a subquery of it: a subquery renames repeated names
            # (DuckDB's x_1), which would make a second copy of the target a feature.
            query = inner.copy().limit(0)
        else:
            query = exp.select("*").from_(relation).limit(0)
        with self.reading(source), self._statement():
            described = self._run_columns(self.render(query))
        repeated = sorted({n for n, _ in described if [m for m, _ in described].count(n) > 1})
        if repeated:
            raise DataError(
                f"{source} repeats column names ({', '.join(map(repr, repeated))}): "
                "give each column a name of its own (SELECT ... AS ...)"
            )
        return [(name, parsed_type(type_text, self.dialect).copy())
                for name, type_text in described]

    @contextmanager
    def reading(self, source: str) -> Iterator[None]:
        """Raise an engine's error in the enclosed block as a ``SourceError`` that names
        ``source`` and the engine (a Ctrl-C and sqltree's own errors go on as they are)."""
        try:
            yield
        except SqlTreeError:
            raise
        except Exception as error:
            if self._interrupted(error):
                raise
            raise SourceError(
                f"{self.NAME} cannot read {source}: {self.explain(error)}",
                source=source, engine=self.NAME,
            ) from error

    def explain(self, error: BaseException) -> str:
        """The driver's error in one line, led by what it means when the engine can tell
        (``no such table or view``, ``permission denied``)."""
        return one_line(error)

    def temp_name(self, hint: str) -> str:
        """A fresh name for a temporary object, unique to this engine instance."""
        return f"{self._prefix}{hint}_{next(self._counter)}"

    def materialize(self, hint: str, query: exp.Expression, deferred: bool = False,
                    statistics: bool = True) -> exp.Table:
        """Store ``query``'s rows in a new temporary table and return a reference to it.

        ``deferred``: the rows may be computed by the first statement that reads the table
        rather than now, on an engine that can (``defers_tables``); the tables it reads must
        then stay until that statement has run. ``statistics``: whether statements will join
        the table (False: it is only scanned and grouped, and its planner statistics would
        be wasted work)."""
        self.begin()
        name = self.temp_name(hint)
        if self._select is not None:
            return self._select.define(name, query)
        # Listed first: a statement interrupted after creating the table (PostgreSQL's
        # ANALYZE) must not leave it behind; dropping a table that is not there is a no-op.
        self._temp.append(name)
        with self.counted(f"-- {name} :=\n" + self.render(query) if self.keep_sql else "",
                          f"stored {name.removeprefix(self._prefix)}"):
            if deferred and self.defers_tables:
                self._create_deferred_table(name, query)
            else:
                self._create_temp_table(name, query, statistics)
        return exp.Table(this=exp.to_identifier(name, quoted=True))

    def load_rows(
        self, hint: str, columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]
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
        if self._select is not None:
            self._select.drop(name)
            return
        with self._statement():
            self._drop_temp_table(name)
        if name in self._temp:
            self._temp.remove(name)

    def cleanup(self) -> None:
        """Drop every temporary object this engine made and leave the connection's engines
        (the last one gives the settings back); safe to call more than once.

        Every step runs even if one fails. Called while an exception propagates (a failed
        training, a Ctrl-C), a failure here is reported as a warning and that exception goes
        on; otherwise the first failure is raised.
        """
        propagating = sys.exc_info()[1] is not None
        if self._select is not None:
            self._select.clear()
        failure: BaseException | None = None
        for step in (self._drop_temporaries, self._end):
            try:
                step()
            except BaseException as error:
                if self._interrupted(error) and not isinstance(error, KeyboardInterrupt):
                    # a Ctrl-C that landed on one of cleanup's own statements
                    interrupt = KeyboardInterrupt()
                    interrupt.__cause__ = error
                    error = interrupt
                failure = failure or error
        if failure is None:
            return
        if propagating and not isinstance(failure, KeyboardInterrupt):
            warnings.warn(
                f"sqltree could not clean up after the error: {failure!r}",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        raise failure

    def _drop_temporaries(self) -> None:
        """Drop the tables made by ``materialize`` and ``load_rows`` (all of them, even if
        dropping one fails; the first failure is raised at the end)."""
        failure: BaseException | None = None
        for name in list(self._temp):
            try:
                with self._statement():
                    self._drop_temp_table(name)
            except BaseException as error:
                failure = failure or error
            finally:
                self._temp.remove(name)
        if failure is not None:
            raise failure


def one_line(error: BaseException) -> str:
    """An error's message on one line: drivers spread theirs over several (psycopg's hints,
    DuckDB's candidates, Spark's query context)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines) or type(error).__name__


def arrow_rows(
    columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]
) -> Any:
    """Small Python rows as a pyarrow Table, for engines that load them without SQL text."""
    import pyarrow as pa

    arrow_types = {"BIGINT": pa.int64(), "INT": pa.int32(), "DOUBLE": pa.float64()}
    arrays = [
        pa.array([r[i] for r in rows], type=arrow_types[t.upper()]) for i, t in enumerate(types)
    ]
    return pa.table(arrays, names=list(columns))


def _values_select(
    columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]
) -> exp.Select:
    """``SELECT CAST(c AS type) ... FROM (VALUES ...)``, or no rows when ``rows`` is empty."""
    if not rows:
        return exp.select(
            *[
                exp.alias_(exp.cast(exp.null(), t), exp.to_identifier(c, quoted=True))
                for c, t in zip(columns, types)
            ]
        ).where(exp.false())
    table = values_table("v", list(columns), [tuple(r) for r in rows], list(types))
    return exp.select(*[exp.column(c, table="v") for c in columns]).from_(table)
