"""DuckDB, the default engine: embedded, reads Parquet, CSV and pandas DataFrames directly."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import duckdb
import numpy as np
from sqlglot import exp
from sqlglot.errors import ErrorLevel

from ..errors import OptionError
from ..heap import share_arenas
from .base import UPDATE, Engine, arrow_rows, one_line, parsed_type, temp_table_create
from .select_plan import TABLES

_CSV_TYPES = ("BIGINT", "DOUBLE", "DATE", "TIMESTAMP", "VARCHAR")
"""The types a CSV column may be read as: dates and timestamps are read as such, as from a
Parquet file or a DataFrame, not as text (where each day would be a category)."""
_PROBE_SIDE_OPTIMIZER = "build_side_probe_side"


OWN_DATABASE_ALLOCATOR = {"allocator_background_threads": True,
                          "allocator_flush_threshold": "0MB"}
"""DuckDB's allocator in sqltree's own database: free memory given back to the system as
statements finish, not kept for the next ones. The memory plan reads its rows with a few
statements and then allocates in Python for the rest of the fit: the no-option call on the
1M benchmark file peaked at 1,247-1,433 MB (five runs) against 1,328-1,624 MB (five) with
DuckDB's defaults, as fast; the tables plan's fit with ``max_depth=10`` took 33.2 and 33.5 s
against 33.1 and 33.7 s (2.85-2.95 GB either way)."""


def new_database() -> duckdb.DuckDBPyConnection:
    """A new in-memory database of sqltree's own, spilling (when a statement needs more than
    ``memory_limit``) into a folder of this process in the system's temporary folder: DuckDB's
    default is ``.tmp`` in the working directory, which would leave files in a user's project.
    Its allocator gives free memory back (``OWN_DATABASE_ALLOCATOR``) where the DuckDB
    version has those settings."""
    spill = os.path.join(tempfile.gettempdir(), f"sqltree-duckdb-{os.getpid()}")
    share_arenas()
    try:
        return duckdb.connect(config={"temp_directory": spill, **OWN_DATABASE_ALLOCATOR})
    except duckdb.Error:  # a DuckDB without them
        return duckdb.connect(config={"temp_directory": spill})


class DuckDBEngine(Engine):
    """Run queries on a DuckDB connection (a new in-memory database when none is given).

    Parameters
    ----------
    connection : duckdb.DuckDBPyConnection, optional
        An open connection; sqltree only creates and drops its own temporary tables in it.
    threads, memory_limit : optional
        Applied with ``SET`` when given (e.g. ``threads=2``, ``memory_limit="4GB"``).

    Notes
    -----
    Engines of several threads on one connection take turns a statement at a time (see
    ``sqltree.engines.base``). Every setting changed here (``threads``, ``memory_limit``,
    ``perfect_ht_threshold``, ``disabled_optimizers``) is in force from the engine's
    construction and gets the caller's value back at ``cleanup`` (of the connection's last
    engine).
    """

    dialect: ClassVar[str] = "duckdb"
    NAME: ClassVar[str] = "DuckDB"
    SUPPORTS_ASOF_JOIN: ClassVar[bool] = True
    SUPPORTS_ORDERED_SCAN: ClassVar[bool] = True
    KEEPS_ROW_ORDER: ClassVar[bool] = True
    VECTORIZED: ClassVar[bool] = True
    READS_FRAMES_IN_PLACE: ClassVar[bool] = True
    # Updating a level's node and scan flag in place took 0.05 s at 1M rows where rewriting
    # the rows with their 16 codes took 0.1 s, and later scans read updated rows as fast.
    SCAN_ROUTING: ClassVar[str] = UPDATE

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection | None = None,
        *,
        threads: int | None = None,
        memory_limit: str | None = None,
        private: bool = False,
    ) -> None:
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise OptionError(f"threads must be a whole number of at least 1, not {threads!r}")
        super().__init__()
        self._loaded: set[str] = set()
        self._registered: list[str] = []
        self._pending: dict[str, Any] = {}
        """DataFrames named by ``relation_for_dataframe`` and registered when the next
        statement is sent (``_sending``): a fit that reads its DataFrame in numpy only sends
        none, and registering a frame and letting it go took a few ms of a small fit."""
        self.owns_connection = connection is None
        self.connection = connection if connection is not None else new_database()
        self.threads = threads
        self.memory_limit = memory_limit
        self.private = private
        self.own_database = connection is None or private
        """The database is sqltree's own (made here, or by ``private_connection``): what it
        reads is a file, a DataFrame or a query over them, never a user's table."""
        """The connection came from ``private_connection``: sqltree's settings are in force
        for good, so they are not read again (two statements a fit)."""
        # Begun at once, so that the engine's settings are in force as soon as it exists.
        self.begin()

    @classmethod
    def private_connection(cls) -> duckdb.DuckDBPyConnection:
        """A new in-memory database with sqltree's settings in force for good.

        For a connection that only sqltree uses (the estimators keep one per thread and reuse
        it across fits, which saves opening a database, about 12 ms, per fit): engines on it
        find the settings already made, so they change nothing and give nothing back.
        """
        connection = new_database()
        engine = cls(connection)
        assert engine._shared is not None
        engine._shared.saved.clear()  # no caller's values to give back
        engine.cleanup()
        return connection

    def _apply_settings(self) -> None:
        if self.private and self.threads is None and self.memory_limit is None:
            return
        if self.threads is not None:
            self._set("threads", int(self.threads))
        if self.memory_limit is not None:
            try:
                self._set("memory_limit", str(self.memory_limit))
            except duckdb.Error as error:
                raise OptionError(
                    f"memory_limit {self.memory_limit!r} is not a size DuckDB reads, such as "
                    f"'4GB' or '500MB' ({one_line(error)})"
                ) from None
        # Histograms group (node, bin or code) pairs whose ranges are small; DuckDB's array-based
        # aggregate takes them up to 2^20 groups (its default, 2^12, leaves out most levels):
        # 3.9 s instead of 7.0 s for 17 histograms of 10M rows and 512 nodes.
        perfect_ht = int(self._setting("perfect_ht_threshold"))
        if perfect_ht < 20:
            self._set("perfect_ht_threshold", 20)
        # sqltree's joins put the large relation first and the small one (totals per node,
        # tests, routes) second, as the hash table. DuckDB's estimates of filtered window
        # output are far too low, so it would build on millions of cut points instead:
        # 2.65 s instead of 0.50 s in one level's threshold scan.
        disabled = [o for o in str(self._setting("disabled_optimizers")).split(",") if o]
        if _PROBE_SIDE_OPTIMIZER not in disabled:
            self._set("disabled_optimizers", ",".join([*disabled, _PROBE_SIDE_OPTIMIZER]))

    def _setting(self, name: str) -> Any:
        # fetchall, not fetchone: a result left unfinished blocks the connection's next
        # ``register`` (DuckDB's "unfinished result" error) when no statement follows.
        ((value,),) = self.connection.execute(
            self._sending(_CURRENT_SETTING), [name]
        ).fetchall()
        return value

    def _set(self, name: str, value: Any) -> None:
        """Change a setting of the connection for sqltree's work; ``cleanup`` restores it."""
        self._remember(name, self._setting(name))
        self.connection.execute(self._sending(_set_statement(name)), [value])

    def _restore_settings(self, saved: dict[str, Any]) -> None:
        for name, value in saved.items():
            self.connection.execute(self._sending(_set_statement(name)), [value])
            if self._setting(name) != value:
                self._restore_shown(name, value)

    def _restore_shown(self, name: str, shown: Any) -> None:
        """Give back a setting that DuckDB shows rounded and that its shown value does not set.

        ``memory_limit`` reads ``'18.8 GiB'`` for 80% of 23.5 GiB, and setting ``'18.8 GiB'``
        reads back ``'18.7 GiB'``. The caller had either the default, which ``RESET`` gives
        back exactly, or some amount that showed as the same digits, as the middle of the
        last digit's range does.
        """
        reset = exp.Command(this="RESET", expression=exp.to_identifier(name))
        self.connection.execute(self._sending(reset.sql("duckdb")))
        if self._setting(name) == shown:
            return
        match = re.fullmatch(r"(\d+)(\.\d+)? (\w+)", str(shown))
        if match is not None:
            number, fraction, unit = match.groups()
            middle = f"{number}{fraction or '.'}5 {unit}"
            self.connection.execute(self._sending(_set_statement(name)), [middle])

    def _interrupted(self, error: BaseException) -> bool:
        # DuckDB runs Python's SIGINT handler while a query runs; when it raises, DuckDB stops
        # the query and reports it as this RuntimeError (the KeyboardInterrupt is gone).
        # Connection.interrupt() from another thread raises duckdb.InterruptException instead.
        # A KeyboardInterrupt raised in Python code that DuckDB calls (the scan of a
        # registered table counts its rows) comes back as an error naming it.
        return (
            (type(error) is RuntimeError and str(error) == "Query interrupted")
            or (isinstance(error, duckdb.Error)
                and re.search(r"failed: KeyboardInterrupt\b", str(error)) is not None)
            or super()._interrupted(error)
        )

    def render(self, query: exp.Expression) -> str:
        # Without sqlglot's defensive copy: the generator's DuckDB preprocessing leaves
        # sqltree's queries as they were (checked over the DuckDB test suite), and copying
        # took a third of a small fit's rendering, about 18 ms of an iris fit.
        return query.sql(dialect=self.dialect, unsupported_level=ErrorLevel.RAISE, copy=False)

    def _run(self, sql: str) -> list[tuple[Any, ...]]:
        return self.connection.execute(self._sending(sql)).fetchall()

    def frame(self, query: exp.Expression) -> Any:
        self.begin()
        sql = self.render(self._attached(query))
        with self.counted(sql):
            out = self.connection.execute(self._sending(sql)).fetchdf()
        return out

    def float_batches(self, query: exp.Expression) -> Iterator[list[Any]]:
        # numpy arrays straight from DuckDB: a DataFrame needs pandas (90 MB of a process
        # that trains on a file), and each column is converted as the one before is let go
        self.begin()
        sql = self.render(self._attached(query))
        with self.counted(sql):
            result = self.connection.execute(self._sending(sql)).fetchnumpy()
        columns = []
        for name in list(result):
            columns.append(_as_float(result.pop(name)))
        yield columns

    def _run_columns(self, sql: str) -> list[tuple[str, str]]:
        rel = self.connection.sql(self._sending(sql))
        return [(name, str(dtype)) for name, dtype in zip(rel.columns, rel.types, strict=True)]

    def _create_temp_table(self, name: str, query: exp.Expression,
                           statistics: bool = True) -> None:
        create = temp_table_create(name, query)
        self.connection.execute(self._sending(self.render(create)))

    def _drop_temp_table(self, name: str) -> None:
        if name in self._loaded:
            self._loaded.discard(name)
            self.connection.unregister(name)
            return
        drop = exp.Drop(
            tables=[exp.Table(this=exp.to_identifier(name, quoted=True))],
            kind="TABLE",
            exists=True,
        )
        self.connection.execute(self._sending(self.render(drop)))

    def load_rows(
        self, hint: str, columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> exp.Table:
        """Register the rows as an Arrow table: no statement, no SQL text per row."""
        if self.plan != TABLES:  # the select plan writes them as literal rows
            return super().load_rows(hint, columns, types, rows)
        self.begin()
        name = self.temp_name(hint)
        self._loaded.add(name)
        self._temp.append(name)
        with self._statement():
            self.connection.register(name, arrow_rows(columns, types, rows))
        return exp.Table(this=exp.to_identifier(name, quoted=True))

    def relation_for_path(self, path: str) -> exp.Expression:
        lower = path.lower()
        if lower.endswith((".csv", ".csv.gz", ".tsv", ".txt")):
            # Booleans are not inferred: "yes"/"no" or "true"/"false" stay the labels in the file.
            return exp.Table(
                this=exp.func(
                    "read_csv",
                    exp.Literal.string(path),
                    exp.EQ(
                        this=exp.column("auto_type_candidates"),
                        expression=exp.Array(
                            expressions=[exp.Literal.string(t) for t in _CSV_TYPES]
                        ),
                    ),
                )
            )
        elif lower.endswith((".json", ".jsonl", ".ndjson")):
            reader = "read_json_auto"
        else:
            reader = "read_parquet"
        return exp.Table(this=exp.func(reader, exp.Literal.string(path)))

    def relation_for_dataframe(self, frame: Any) -> exp.Expression:
        self.begin()
        name = self.temp_name("frame")
        self._pending[name] = frame
        return exp.Table(this=exp.to_identifier(name, quoted=True))

    def _sending(self, sql: str) -> str:
        while self._pending:  # the DataFrames a statement may read, registered first
            name, frame = next(iter(self._pending.items()))
            self.connection.register(name, frame)
            self._registered.append(name)
            del self._pending[name]
        return super()._sending(sql)

    def frame_columns(self, frame: Any) -> list[tuple[str, exp.DataType]] | None:
        """The types DuckDB gives a DataFrame's columns, from their dtypes: numpy numbers
        and booleans (``_FRAME_TYPES``), and text (pandas strings, objects that are strings)
        as VARCHAR; None for a frame with any other column (or names that are not distinct
        strings), whose types the engine says (``columns``)."""
        import pandas as pd

        names = list(frame.columns)
        if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            return None
        out = []
        for name, dtype in zip(names, frame.dtypes, strict=True):
            if isinstance(dtype, np.dtype) and dtype.name in _FRAME_TYPES:
                text = _FRAME_TYPES[dtype.name]
            elif isinstance(dtype, pd.StringDtype) or (
                    isinstance(dtype, np.dtype) and dtype.kind == "O"
                    and pd.api.types.infer_dtype(frame[name], skipna=True) == "string"):
                text = "VARCHAR"
            else:
                return None
            out.append((name, parsed_type(text, self.dialect).copy()))
        return out

    def _drop_temporaries(self) -> None:
        self._pending.clear()  # never read by a statement: nothing to let go
        try:
            super()._drop_temporaries()
        finally:
            with self._statement():
                while self._registered:
                    self.connection.unregister(self._registered.pop())


_FRAME_TYPES = {
    "float64": "DOUBLE", "float32": "FLOAT", "int64": "BIGINT", "int32": "INTEGER",
    "int16": "SMALLINT", "int8": "TINYINT", "uint64": "UBIGINT", "uint32": "UINTEGER",
    "uint16": "USMALLINT", "uint8": "UTINYINT", "bool": "BOOLEAN",
}
"""DuckDB's type of a DataFrame column of a numpy dtype (by its name)."""


_CURRENT_SETTING = exp.select(exp.func("current_setting", exp.Placeholder())).sql("duckdb")


def _set_statement(name: str) -> str:
    """``SET name = ?``: the value is a parameter, so any Python value goes back as it was."""
    item = exp.SetItem(this=exp.EQ(this=exp.to_identifier(name), expression=exp.Placeholder()))
    return exp.Set(expressions=[item]).sql("duckdb")


def _as_float(column: Any) -> Any:
    """A column of ``fetchnumpy`` as float64, NaN for NULL (a masked entry); no copy where
    it is float64 without NULLs."""
    mask = np.ma.getmaskarray(column)  # all False for a plain array
    data = np.ma.getdata(column)
    if not mask.any():
        return np.asarray(data, dtype=np.float64)
    if data.dtype == object:  # a masked entry's placeholder may not convert
        data = np.where(mask, 0, data)
    out = np.array(data, dtype=np.float64)
    out[mask] = np.nan
    return out
