"""A pytest plugin that prints tables the tests fill in, after the run (loaded by ``-p``).

Tests that compare sqltree with a reference record one row per case with ``record``; the
tables appear in the terminal summary, whatever the outcome of the tests and without ``-s``.
Nothing is printed for a table no test wrote to (for example when its tests were deselected).
"""

from __future__ import annotations

from collections.abc import Iterator
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


_KEY = "sqltree_report_row"
_running: list[pytest.Item] = []


def record(title: str, columns: tuple[str, ...], row: tuple[str, ...]) -> None:
    """Add ``row`` to the table ``title`` (made with ``columns`` on first use)."""
    if len(row) != len(columns):
        raise ValueError(f"table {title!r}: {len(row)} values for {len(columns)} columns")
    if _running:  # carried by the test's report: from a pytest-xdist worker to the main process
        _running[-1].user_properties.append((_KEY, (title, columns, row)))
    else:
        _add(title, columns, row)


def _add(title: str, columns: tuple[str, ...], row: tuple[str, ...]) -> None:
    table = TABLES.setdefault(title, Table(title, columns))
    if table.columns != columns:
        raise ValueError(f"table {title!r} has columns {table.columns}, not {columns}")
    table.rows.append(row)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The teardown report holds every row its test recorded (each phase's report repeats the
    # rows recorded so far).
    if report.when != "teardown":
        return
    for name, value in report.user_properties:
        if name == _KEY:
            title, columns, row = value
            _add(title, tuple(columns), tuple(row))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for table in TABLES.values():
        if not table.rows:
            continue
        terminalreporter.write_sep("=", table.title)
        for line in table.markdown():
            terminalreporter.write_line(line)
