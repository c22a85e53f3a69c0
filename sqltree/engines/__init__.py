"""Engines: DuckDB (default), PostgreSQL, Spark SQL and SQLite behind one small contract."""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedError
from .base import Engine


def get_engine(connection: Any = None, **options: Any) -> Engine:
    """The engine for ``connection``.

    ``None`` gives a new in-memory DuckDB database; a DuckDB connection, a psycopg connection or
    a ``postgresql://`` URL, a SparkSession, or a ``sqlite3`` connection give the engine that
    drives it. An ``Engine`` is returned as it is.
    """
    if isinstance(connection, Engine):
        return connection
    if connection is None:
        from .duckdb import DuckDBEngine

        return DuckDBEngine(**options)
    module = type(connection).__module__
    if module.startswith("duckdb") or type(connection).__name__ == "DuckDBPyConnection":
        from .duckdb import DuckDBEngine

        return DuckDBEngine(connection, **options)
    if isinstance(connection, str) and connection.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresEngine

        # Made for this one call: the connection closes when the call cleans up.
        return PostgresEngine.connect(connection, close_on_cleanup=True)
    if module.startswith("psycopg"):
        from .postgres import PostgresEngine

        return PostgresEngine(connection)
    if module.startswith("sqlite3"):
        from .sqlite import SQLiteEngine

        return SQLiteEngine(connection)
    if module.startswith("pyspark"):
        from .spark import SparkEngine

        return SparkEngine(connection)
    raise UnsupportedError(
        f"cannot train on a connection of type {type(connection).__name__}: use a DuckDB "
        "connection, a psycopg connection or postgresql:// URL, a SparkSession, or a sqlite3 "
        "connection"
    )


__all__ = ["Engine", "get_engine"]
