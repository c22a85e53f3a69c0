"""DuckDB, the default engine: embedded, reads Parquet, CSV and pandas DataFrames directly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import duckdb
from sqlglot import exp

from .base import Engine

_CSV_TYPES = ("BIGINT", "DOUBLE", "VARCHAR")
_PROBE_SIDE_OPTIMIZER = "build_side_probe_side"


class DuckDBEngine(Engine):
    """Run queries on a DuckDB connection (a new in-memory database when none is given).

    Parameters
    ----------
    connection : duckdb.DuckDBPyConnection, optional
        An open connection; sqltree only creates and drops its own temporary tables in it.
    threads, memory_limit : optional
        Applied with ``SET`` when given (e.g. ``threads=2``, ``memory_limit="4GB"``).
    """

    dialect: ClassVar[str] = "duckdb"
    MAX_CASE_DEPTH: ClassVar[int] = 990
    SUPPORTS_ASOF_JOIN: ClassVar[bool] = True
    SUPPORTS_ROW_SAMPLE: ClassVar[bool] = True
    SUPPORTS_ORDERED_SCAN: ClassVar[bool] = True
    KEEPS_ROW_ORDER: ClassVar[bool] = True
    VECTORIZED: ClassVar[bool] = True

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection | None = None,
        *,
        threads: int | None = None,
        memory_limit: str | None = None,
    ) -> None:
        super().__init__()
        self._loaded: set[str] = set()
        self.owns_connection = connection is None
        self.connection = connection if connection is not None else duckdb.connect()
        if threads is not None:
            self.connection.execute(f"SET threads = {int(threads)}")
        if memory_limit is not None:
            self.connection.execute("SET memory_limit = ?", [str(memory_limit)])
        self._restore: dict[str, Any] = {}
        # Histograms group (node, bin or code) pairs whose ranges are small; DuckDB's array-based
        # aggregate takes them up to 2^20 groups (its default, 2^12, leaves out most levels):
        # 3.9 s instead of 7.0 s for 17 histograms of 10M rows and 512 nodes.
        perfect_ht = int(self._setting("perfect_ht_threshold"))
        self._set("perfect_ht_threshold", max(perfect_ht, 20))
        # sqltree's joins put the large relation first and the small one (totals per node,
        # tests, routes) second, as the hash table. DuckDB's estimates of filtered window
        # output are far too low, so it would build on millions of cut points instead:
        # 2.65 s instead of 0.50 s in one level's threshold scan.
        disabled = [o for o in str(self._setting("disabled_optimizers")).split(",") if o]
        if _PROBE_SIDE_OPTIMIZER not in disabled:
            self._set("disabled_optimizers", ",".join([*disabled, _PROBE_SIDE_OPTIMIZER]))

    def _setting(self, name: str) -> Any:
        (value,) = self.connection.execute("SELECT current_setting(?)", [name]).fetchone()
        return value

    def _set(self, name: str, value: Any) -> None:
        """Change a setting of the connection for sqltree's work; ``cleanup`` restores it."""
        self._restore.setdefault(name, self._setting(name))
        self.connection.execute(f"SET {name} = ?", [value])

    def _run(self, sql: str) -> list[tuple[Any, ...]]:
        return self.connection.execute(sql).fetchall()

    def frame(self, query: exp.Expression) -> Any:
        sql = self.render(query)
        with self.counted(sql):
            out = self.connection.execute(sql).fetchdf()
        return out

    def _run_columns(self, sql: str) -> list[tuple[str, str]]:
        rel = self.connection.sql(sql)
        return [(name, str(dtype)) for name, dtype in zip(rel.columns, rel.types, strict=True)]

    def _create_temp_table(self, name: str, query: exp.Expression) -> None:
        self.connection.execute(
            f"CREATE TEMP TABLE {self.render(exp.to_identifier(name, quoted=True))} AS "
            + self.render(query)
        )

    def _drop_temp_table(self, name: str) -> None:
        if name in self._loaded:
            self._loaded.discard(name)
            self.connection.unregister(name)
            return
        self.connection.execute(
            f"DROP TABLE IF EXISTS {self.render(exp.to_identifier(name, quoted=True))}"
        )

    def load_rows(
        self,
        hint: str,
        columns: Sequence[str],
        types: Sequence[str],
        rows: Sequence[Sequence[Any]],
    ) -> exp.Table:
        """Register the rows as an Arrow table: no statement, no SQL text per row."""
        import pyarrow as pa

        arrow_types = {"BIGINT": pa.int64(), "INT": pa.int32(), "DOUBLE": pa.float64()}
        arrays = [
            pa.array([r[i] for r in rows], type=arrow_types[t.upper()])
            for i, t in enumerate(types)
        ]
        name = self.temp_name(hint)
        self.connection.register(name, pa.table(arrays, names=list(columns)))
        self._loaded.add(name)
        self._temp.append(name)
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
        name = self.temp_name("frame")
        self.connection.register(name, frame)
        self._registered = getattr(self, "_registered", [])
        self._registered.append(name)
        return exp.Table(this=exp.to_identifier(name, quoted=True))

    def cleanup(self) -> None:
        super().cleanup()
        for name, value in self._restore.items():
            self.connection.execute(f"SET {name} = ?", [value])
        self._restore = {}
        for name in getattr(self, "_registered", []):
            self.connection.unregister(name)
        self._registered = []
