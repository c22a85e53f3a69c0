"""PostgreSQL through psycopg 3: training runs where warehouse tables already live.

sqltree only reads the source and writes working tables, so a role with ``SELECT`` on the
source and the ``TEMP`` privilege on the database is enough; a role without ``TEMP`` (or a
read-only transaction) trains on the select plan (``engines.select_plan``).

PostgreSQL's parallel workers cannot read a session's ``TEMP`` tables, so where the role may
create tables in its current schema and the server runs parallel workers, the working tables
are ``UNLOGGED`` tables there instead (``parallel``), named ``sqltree_<id>_...`` and dropped
when training ends, also after an error or a Ctrl-C.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from sqlglot import exp

from ..errors import EngineConnectionError, UnsupportedError, install_hint
from ..sqlexpr import WITHOUT_NESTED_LOOPS
from .base import PATH, UNION, Engine, one_line, temp_table_create
from .select_plan import SELECT

try:  # psycopg is an optional dependency (the "postgres" extra)
    import psycopg
    from psycopg.adapt import Loader
    from psycopg.rows import tuple_row
except ImportError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]
    Loader = object  # type: ignore[assignment,misc]


class _FloatNumericLoader(Loader):  # type: ignore[misc,valid-type]
    """Load ``numeric`` as float: PG's SUM(bigint) and AVG(int) are numeric, the rest is float."""

    def load(self, data: Any) -> float:
        return float(bytes(data))


# Type categories of pg_type (``typcategory``) that sqltree can treat as a known type name
# when sqlglot does not know the type itself (enums, domains over text, citext).
_CATEGORY_TYPES = {"S": "TEXT", "E": "TEXT", "B": "BOOLEAN", "N": "DOUBLE PRECISION"}

# psycopg's short names that sqlglot's Postgres dialect reads as something else or not at all.
_TYPE_NAMES = {"bpchar": "char", "char": "char"}


_NO_PSYCOPG = f"PostgreSQL needs psycopg 3: {install_hint('postgres')}"


class PostgresEngine(Engine):
    """Run queries on a psycopg 3 connection.

    Parameters
    ----------
    connection : psycopg.Connection
        An open connection. In autocommit mode each statement is its own transaction; otherwise
        sqltree's statements run inside the connection's transaction, each guarded by a
        savepoint so that a failed query leaves the transaction usable (and the caller's own
        uncommitted work untouched).

    Notes
    -----
    Engines of several threads on one connection take turns a statement at a time (see
    ``sqltree.engines.base``). Statements run with ``SET LOCAL jit = off`` (and, on the select
    plan, with the join order as written and no nested loops: ``_SELECT_PLAN_LOCAL``); inside
    the caller's open transaction that lasts until the transaction ends, so ``cleanup`` gives
    each setting the caller's value back. The connection is left in the transaction state it
    was found in.

    Examples
    --------
    >>> engine = PostgresEngine.connect("postgresql://user@localhost/db")  # doctest: +SKIP
    """

    dialect: ClassVar[str] = "postgres"
    NAME: ClassVar[str] = "PostgreSQL"
    FENCES_DERIVED_TABLES: ClassVar[bool] = True
    HISTOGRAM_FORM: ClassVar[str] = UNION
    SCAN_ROUTING: ClassVar[str] = PATH

    def __init__(
        self, connection: Any, *, owns_connection: bool = False, close_on_cleanup: bool = False,
        parallel: bool | None = None,
    ) -> None:
        """``parallel``: store working tables as ``UNLOGGED`` tables in the current schema,
        which parallel workers can scan, rather than as ``TEMP`` tables; None (the default):
        where the role may create tables there and ``max_parallel_workers_per_gather`` is
        above 0."""
        if psycopg is None:  # pragma: no cover
            raise UnsupportedError(_NO_PSYCOPG)
        super().__init__()
        self.connection = connection
        self.owns_connection = owns_connection
        self.close_on_cleanup = close_on_cleanup
        self.parallel = parallel
        self.begin()

    @classmethod
    def connect(cls, url: str, *, close_on_cleanup: bool = False, parallel: bool | None = None,
                **kwargs: Any) -> PostgresEngine:
        """Open a connection (autocommit) from a libpq URL or key=value string and wrap it;
        ``kwargs`` go to ``psycopg.connect``.

        ``close_on_cleanup=True`` closes it when ``cleanup`` runs, for an engine made for one
        call (``train(..., connection="postgresql://...")``).
        """
        if psycopg is None:  # pragma: no cover
            raise UnsupportedError(_NO_PSYCOPG)
        try:
            conn = psycopg.connect(url, autocommit=True, **kwargs)
        except psycopg.Error as error:
            # psycopg's message spreads over lines (one per address tried, and a hint).
            raise EngineConnectionError(
                f"PostgreSQL: cannot connect to {_without_password(url)}: {one_line(error)}"
            ) from error
        return cls(conn, owns_connection=True, close_on_cleanup=close_on_cleanup,
                   parallel=parallel)

    def explain(self, error: BaseException) -> str:
        """The server's own message (without the ``LINE 1: ...`` excerpt of sqltree's query),
        its hint, and the SQLSTATE, which says what kind of error it is."""
        diag = getattr(error, "diag", None)
        primary = getattr(diag, "message_primary", None)
        if not primary:
            return super().explain(error)
        hint = getattr(diag, "message_hint", None)
        sqlstate = getattr(error, "sqlstate", None)
        return " ".join(part for part in (
            primary if primary.endswith(".") else primary + ".",
            hint or "",
            f"(SQLSTATE {sqlstate})" if sqlstate else "",
        ) if part)

    # -- settings and Ctrl-C ----------------------------------------------------------------------
    def _in_callers_transaction(self) -> bool:
        return (
            not self.connection.closed
            and self.connection.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        )

    def _apply_settings(self) -> None:
        # SET LOCAL (below) ends with the transaction it ran in: sqltree's own, except inside
        # the caller's open transaction, where a released savepoint keeps it to the end.
        if self._in_callers_transaction():
            with self._cursor() as cur:
                cur.execute(self._sending(_SHOW_LOCAL_SETTINGS))
                values = cur.fetchone()
            for name, value in zip(_LOCAL_SETTINGS, values, strict=True):
                self._remember(name, value)

    def _restore_settings(self, saved: dict[str, Any]) -> None:
        if not self._in_callers_transaction():
            return  # sqltree's SET LOCALs ended with their own transactions
        with self.connection.cursor() as cur:
            for name, value in saved.items():
                restore = exp.select(
                    exp.func(
                        "set_config",
                        exp.Literal.string(name),
                        exp.Literal.string(str(value)),
                        exp.true(),
                    )
                )
                cur.execute(self._sending(self.render(restore)))

    @contextmanager
    def _cancel_on_ctrl_c(self) -> Iterator[None]:
        """Make a Ctrl-C during a statement cancel it in the server, then raise it.

        psycopg cancels a query itself when the KeyboardInterrupt reaches its wait loop, but
        one that lands in its Python code between sending a query and reading the result
        leaves the connection busy ("another command is already in progress"; 91 of 300
        interrupts of a loop of short statements), and every cleanup statement after it
        fails. While a statement runs, the signal only asks the server to cancel it: the
        statement ends with QueryCanceled through psycopg's usual error path, which rolls
        back its transaction or savepoint, and the KeyboardInterrupt is raised after that.
        Python delivers signals to the main thread only, so other threads are left alone.
        """
        previous = signal.getsignal(signal.SIGINT)
        if threading.current_thread() is not threading.main_thread() or not callable(previous):
            yield
            return
        caught: list[KeyboardInterrupt] = []

        def on_sigint(signum: int, frame: Any) -> None:
            try:
                previous(signum, frame)  # the caller's handler decides what Ctrl-C means
            except KeyboardInterrupt as interrupt:
                caught.append(interrupt)
                self._cancel()

        signal.signal(signal.SIGINT, on_sigint)
        try:
            yield
        except Exception as error:
            if caught:
                raise caught[0] from error
            raise
        finally:
            signal.signal(signal.SIGINT, previous)
        if caught:
            raise caught[0]

    def _cancel(self) -> None:
        cancel = getattr(self.connection, "cancel_safe", None)  # psycopg >= 3.2
        with contextlib.suppress(Exception):
            if cancel is not None:
                cancel(timeout=5.0)
            else:
                self.connection.cancel()

    def tables_plan_refusal(self) -> str | None:
        """Asked in one SELECT, which creates nothing: the TEMP privilege on the database,
        outside a read-only transaction (a standby's, or ``default_transaction_read_only``)."""
        privilege = exp.func(
            "has_database_privilege", exp.func("current_database"),
            exp.Literal.string("TEMPORARY"),
        )
        writable = exp.EQ(
            this=exp.func("current_setting", exp.Literal.string("transaction_read_only")),
            expression=exp.Literal.string("off"),
        )
        (row,) = self._run(self.render(exp.select(exp.and_(privilege, writable))))
        if row[0]:
            return None
        return (
            "this PostgreSQL session may not create temporary tables (no TEMP privilege on the "
            "database, or a read-only transaction)"
        )

    # -- the contract ------------------------------------------------------------------------
    def _cursor(self, name: str = "") -> Any:
        # Rows as tuples whatever the caller's connection makes (``dict_row``, say).
        cur = self.connection.cursor(name, row_factory=tuple_row)
        # Per cursor, so the caller's own connection keeps loading numeric as Decimal.
        cur.adapters.register_loader("numeric", _FloatNumericLoader)
        return cur

    _without_nested_loops = False
    """Whether the statement being run is marked ``sqlexpr.without_nested_loops``."""

    def execute(self, query: exp.Expression) -> list[tuple[Any, ...]]:
        self._without_nested_loops = bool(query.meta.get(WITHOUT_NESTED_LOOPS))
        try:
            return super().execute(query)
        finally:
            self._without_nested_loops = False

    def _execute(self, sql: str, *, fetch: bool) -> list[tuple[Any, ...]]:
        # ``transaction()`` is BEGIN/COMMIT in autocommit mode and a SAVEPOINT inside an open
        # transaction: either way an error (or a Ctrl-C, which _cancel_on_ctrl_c turns into a
        # query cancel) rolls back only this statement and leaves the connection usable for
        # the cleanup that follows.
        with (
            self._cancel_on_ctrl_c(),
            self.connection.transaction(),
            self._cursor() as cur,
        ):
            # LLVM compilation of sqltree's large expressions costs far more than it saves:
            # scoring 200k rows with a 2,347-leaf tree took 196 s with JIT and 2.2 s without.
            # LOCAL: the setting ends with this statement's transaction (inside a caller's
            # transaction, with that transaction; see _restore_settings).
            cur.execute(_JIT_OFF)
            if self.plan == SELECT:
                cur.execute(_SELECT_PLAN_SETTINGS)
            elif self._without_nested_loops:
                cur.execute(_NESTED_LOOPS_OFF)
            cur.execute(self._sending(sql))
            if fetch and cur.description is not None:
                return cur.fetchall()
            return []

    def _run(self, sql: str) -> list[tuple[Any, ...]]:
        return self._execute(sql, fetch=True)

    FETCHES_ROWS = True

    def _run_batches(self, sql: str, size: int) -> Iterator[tuple[list[str], list[Any]]]:
        # Streamed in chunks: libpq holds a batch, not the whole result (reading the 1M-row
        # benchmark file's training rows, 19 columns, whole took 692 MB against 378 MB a batch
        # at a time). Not through a server-side cursor, which PostgreSQL never runs in
        # parallel: with parallel workers a level's histogram took 1.3-2.2 s against 2.1-3.3 s.
        with (
            self._cancel_on_ctrl_c(),
            self.connection.transaction(),
            self._cursor() as cur,
        ):
            cur.execute(_JIT_OFF)  # as in _execute
            if self.plan == SELECT:
                cur.execute(_SELECT_PLAN_SETTINGS)
            rows = cur.stream(self._sending(sql), size=size)
            names: list[str] | None = None
            while batch := list(itertools.islice(rows, size)):
                if names is None:
                    names = [column.name for column in cur.description or []]
                yield names, batch

    def _run_columns(self, sql: str) -> list[tuple[str, str]]:
        with (
            self._cancel_on_ctrl_c(),
            self.connection.transaction(),
            self._cursor() as cur,
        ):
            cur.execute(_JIT_OFF)  # as in _execute: planning a large expression JIT-compiles it
            cur.execute(self._sending(sql))
            description = list(cur.description or [])
        out = []
        unknown: dict[int, str] = {}
        for column in description:
            name = _TYPE_NAMES.get(column.type_display, column.type_display)
            if column.type_display.startswith("bpchar("):
                name = "char" + column.type_display[len("bpchar") :]
            if not _parses(name):
                unknown[column.type_code] = name
            out.append((column.name, name))
        if unknown:
            categories = self._type_categories(list(unknown))
            out = [
                (n, _CATEGORY_TYPES.get(categories.get(c.type_code, ""), t))
                if c.type_code in unknown
                else (n, t)
                for (n, t), c in zip(out, description, strict=True)
            ]
        return out

    def _type_categories(self, oids: list[int]) -> dict[int, str]:
        pg_type = exp.Table(this=exp.to_identifier("pg_type"), db=exp.to_identifier("pg_catalog"))
        query = (
            exp.select(exp.cast(exp.column("oid"), "BIGINT"), exp.column("typcategory"))
            .from_(pg_type)
            .where(exp.column("oid").isin(*[exp.Literal.number(o) for o in oids]))
        )
        return {int(oid): str(cat) for oid, cat in self._run(self.render(query))}

    def _parallel_tables(self) -> bool:
        """Whether working tables are ``UNLOGGED`` tables in the current schema (asked once,
        in a SELECT that creates nothing)."""
        if self.parallel is None:
            asked = exp.select(exp.and_(
                exp.func("has_schema_privilege", exp.func("current_schema"),
                         exp.Literal.string("CREATE")),
                exp.GT(this=exp.cast(exp.func("current_setting", exp.Literal.string(
                    "max_parallel_workers_per_gather")), "INT"), expression=exp.Literal.number(0)),
            ))
            ((allowed,),) = self._run(self.render(asked))
            self.parallel = bool(allowed)
        return self.parallel

    def _create_temp_table(self, name: str, query: exp.Expression,
                           statistics: bool = True) -> None:
        create = temp_table_create(name, query)
        if self._parallel_tables():
            create.set("properties", exp.Properties(expressions=[exp.UnloggedProperty()]))
        table = create.this
        self._execute(self.render(create), fetch=False)
        # Autovacuum never analyzes temp tables; without statistics the planner guesses row
        # counts and can pick nested loops for the level joins.
        if statistics:
            self._execute(self.render(analyze(table)), fetch=False)

    def _drop_temp_table(self, name: str) -> None:
        drop = exp.Drop(
            tables=[exp.Table(this=exp.to_identifier(name, quoted=True))],
            kind="TABLE",
            exists=True,
        )
        self._execute(self.render(drop), fetch=False)

    def relation_for_path(self, path: str) -> exp.Expression:
        raise UnsupportedError(
            f"PostgreSQL cannot read the local file {path!r}: load it into a table first "
            "(e.g. COPY or \\copy), pass a pandas DataFrame, or train on DuckDB"
        )

    def relation_for_dataframe(self, frame: Any) -> exp.Expression:
        """Copy a pandas DataFrame into a session-local temp table (NaN and NA become NULL)."""
        return self._copied_dataframe(frame)

    def load_dataframe(self, frame: Any, table: exp.Table, *, temporary: bool = False) -> None:
        """Create ``table`` with the DataFrame's columns and COPY its rows into it.

        Column types come from Arrow's reading of the frame: booleans, 64-bit integers,
        doubles, and text for everything else.
        """
        import pyarrow as pa

        self.begin()
        data = pa.Table.from_pandas(frame, preserve_index=False)
        columns = [
            exp.ColumnDef(
                this=exp.to_identifier(field.name, quoted=True),
                kind=exp.DataType.build(_pg_type_of(field.type)),
            )
            for field in data.schema
        ]
        properties = [exp.TemporaryProperty()] if temporary else []
        create = exp.Create(
            this=exp.Schema(this=table.copy(), expressions=columns),
            kind="TABLE",
            properties=exp.Properties(expressions=properties) if properties else None,
        )
        copy = exp.Copy(
            this=table.copy(),
            kind=True,
            files=[exp.to_identifier("STDIN")],
            credentials=exp.Credentials(),
        )
        # Text columns of other Arrow types (dates, decimals) are written as their text.
        stringify = [
            _pg_type_of(f.type) == "TEXT"
            and not (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
            for f in data.schema
        ]
        with (
            self._statement(),
            self._cancel_on_ctrl_c(),
            self.connection.transaction(),
            self.connection.cursor() as cur,
        ):
            cur.execute(self._sending(self.render(create)))
            with cur.copy(self._sending(self.render(copy))) as out:
                values = [c.to_pylist() for c in data.columns]
                for row in zip(*values, strict=True):
                    out.write_row(
                        [
                            str(v) if text and v is not None else v
                            for v, text in zip(row, stringify, strict=True)
                        ]
                    )
            cur.execute(self.render(analyze(table)))

    def cleanup(self) -> None:
        try:
            super().cleanup()
        finally:
            if self.close_on_cleanup and self.owns_connection:
                self.connection.close()

    def close(self) -> None:
        """Drop sqltree's temp tables and close the connection if this engine opened it."""
        try:
            if not self.connection.closed:
                self.cleanup()
            else:  # its temp tables went with the session
                self._temp.clear()
                self._end()
        finally:
            if self.owns_connection:
                self.connection.close()


_JIT_OFF = "SET LOCAL jit = off"
_NESTED_LOOPS_OFF = "SET LOCAL enable_nestloop = off"
"""For the statements marked ``sqlexpr.without_nested_loops`` (LOCAL, as ``jit``)."""
_SELECT_PLAN_LOCAL = {"join_collapse_limit": "1", "from_collapse_limit": "1",
                      "enable_nestloop": "off"}
"""Planner settings for the select plan's statements (LOCAL, as ``jit``).

A statement there joins its rows, level after level, with literal tables of tests and routes,
and the planner's estimates of those joins fall to one row within two levels: it then reorders
them (hashing the routes on the node alone, the key a filter evaluated per candidate route) and
picks nested loops over hundreds of thousands of rows. Kept in the written order (large side
first, each join hashed on its full key) and without nested loops, the statements of levels 4
and 5 of a 100,000-row tree ran in 0.5-4.4 s instead of 3.0-6.7 s, and level 6 no longer took
minutes.
"""
_SELECT_PLAN_SETTINGS = exp.select(*[
    exp.func("set_config", exp.Literal.string(name), exp.Literal.string(value), exp.true())
    for name, value in _SELECT_PLAN_LOCAL.items()
]).sql("postgres")
_LOCAL_SETTINGS = ("jit", *_SELECT_PLAN_LOCAL)
"""Settings sqltree's statements change with SET LOCAL, remembered inside a caller's open
transaction (where they last until it ends) and given back at cleanup."""
_SHOW_LOCAL_SETTINGS = exp.select(*[
    exp.func("current_setting", exp.Literal.string(name)) for name in _LOCAL_SETTINGS
]).sql("postgres")


def analyze(table: exp.Table) -> exp.Analyze:
    """``ANALYZE table``. sqlglot takes the tables of its node as ``tables`` (older releases as
    ``this``); a node without them renders a bare ``ANALYZE``, which analyzes every table
    of the database: 0.5-1.0 s per stored table on a small test database, and hours on a
    warehouse."""
    if "tables" in exp.Analyze.arg_types:
        return exp.Analyze(tables=[table.copy()])
    return exp.Analyze(this=table.copy())


def _without_password(url: str) -> str:
    """``postgresql://me:secret@db/x`` -> ``postgresql://me@db/x``: messages reach logs."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if "://" not in url:  # key=value form
        return " ".join(p for p in url.split() if not p.lower().startswith("password="))
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _parses(type_text: str) -> bool:
    try:
        exp.DataType.build(type_text, dialect="postgres")
    except Exception:
        return False
    return True


def _pg_type_of(arrow_type: Any) -> str:
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return "BOOLEAN"
    if pa.types.is_integer(arrow_type):
        return "BIGINT"
    if pa.types.is_floating(arrow_type):
        return "DOUBLE"
    return "TEXT"
