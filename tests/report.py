"""A pytest plugin that prints tables the tests fill in, after the run (loaded by ``-p``).

Tests that compare sqltree with a reference record one row per case with ``record``; the
tables appear in the terminal summary, whatever the outcome of the tests and without ``-s``.
Nothing is printed for a table no test wrote to (for example when its tests were deselected).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest


@dataclass
class Table:
    """A markdown table: its title, column names and rows in the order they were recorded."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)

    def markdown(self) -> list[str]:
        lines = ["| " + " | ".join(self.columns) + " |", "|" + " --- |" * len(self.columns)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return lines


TABLES: dict[str, Table] = {}


def record(title: str, columns: tuple[str, ...], row: tuple[str, ...]) -> None:
    """Add ``row`` to the table ``title`` (made with ``columns`` on first use)."""
    table = TABLES.setdefault(title, Table(title, columns))
    if table.columns != columns:
        raise ValueError(f"table {title!r} has columns {table.columns}, not {columns}")
    if len(row) != len(columns):
        raise ValueError(f"table {title!r}: {len(row)} values for {len(columns)} columns")
    table.rows.append(row)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for table in TABLES.values():
        if not table.rows:
            continue
        terminalreporter.write_sep("=", table.title)
        for line in table.markdown():
            terminalreporter.write_line(line)
