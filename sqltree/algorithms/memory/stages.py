"""What every strategy on the memory plan shares: level 0 read once, the partition in numpy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...grower import RouteRow, TestRow
from ...parallel import engine_workers
from .level import Level, read_level0
from .routes import partition


class InMemoryStages:
    """The stages a strategy on the memory plan runs over numpy arrays instead of tables
    (mixed in before the strategy, whose ``build_level0`` it reads with)."""

    plan_name = "memory"
    plan_reason = "asked for"
    moments = False
    data: Any
    build_level0: Callable[[], Any]
    rows_in_memory: Any = None
    """The training rows as pruning recounts them (``recount.RowsInMemory``), where the
    strategy offers them."""

    @property
    def workers(self) -> int | None:
        """Threads scoring a level's features (``parallel.side_by_side``): the engine's own
        setting where it has one (DuckDB's ``threads``), else one per core."""
        return engine_workers(self.data.engine)

    def materialize_level0(self) -> Level:
        return read_level0(self.data, self.build_level0(), self.moments, ranked=True)

    def materialize_partition(self, level: Level, tests: list[TestRow],
                              routes: list[RouteRow], ordered: bool) -> Level:
        return partition(level, tests, routes, workers=self.workers, by_node=True)

    def drop(self, table: Any) -> None:
        """Nothing to drop: the arrays go with the last reference."""
