"""C4.5 and ID3 on the memory plan: ``C45Strategy`` with its engine readings in numpy.

Besides the shared stages (``level``), the strategy reads the engine three more times: the
scoring query (``c45_scores.score``), the class counts per branch of the chosen tests
(``branch_counts``) and, at the end, the training value each continuous test prints
(``observed_threshold``, over the distinct values of level 0).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from sqlglot import exp

from ...dataset import Feature
from ...grower import RouteRow, TestRow
from ..c45.strategy import C45Strategy, score_options
from .c45_scores import branch_counts, distinct_values, observed_threshold, score
from .level import Histogram, Level, as_weight, read_level0
from .recount import RowsInMemory
from .routes import partition, row_keys
from .stacked import score_stacked
from .stages import InMemoryStages


class MemoryC45Strategy(InMemoryStages, C45Strategy):
    """ID3 and C4.5 on the memory plan."""

    values: dict[int, np.ndarray] | None = None
    keyed_rows: tuple[Level, set[TestRow], np.ndarray] | None = None
    """The last branch counts' level, tests and each row's key (``routes.row_keys``)."""

    def materialize_level0(self) -> Level:
        level = super().materialize_level0()
        if not self.bins:  # binned rows hold bin indexes; the tree's tests, edge values
            self.rows_in_memory = RowsInMemory(self.data, level)
        return level

    def materialize_histogram(self, level: Level, features: list[Feature], nodes: int
                              ) -> Histogram:
        self.hist_bits = self.weight_bits()
        return Histogram(level, features, self.n_classes, self.hist_bits)

    def read_counts(self, engine: Any, hist: Histogram) -> dict[int, list[float]]:
        nodes, _, sums = hist.totals()
        weights = as_weight(sums, self.hist_bits).tolist()
        return dict(zip(nodes.tolist(), weights, strict=True))

    def on_histogram(self, engine: Any, hist: Histogram, depth: int) -> None:
        if depth == 0 and not self.bins:
            self.values = distinct_values(hist, self.data.features)

    def score_rows(self, hist: Histogram, features: list[Feature]) -> list[Any]:
        options = replace(
            score_options(self.options),
            fractional=self.hist_bits is not None,
            bits=self.hist_bits,
            entropy_bits=self.entropy_bits,
        )
        return score_stacked(hist, features, lambda h, fs: score(h, fs, options, self.workers),
                             "c4.5")

    def read_branch_counts(self, engine: Any, hist: Histogram, tests: list[TestRow]
                           ) -> dict[int, dict[int, list[float]]]:
        # the partition keys the same rows for the same tests (or fewer)
        keys = row_keys(hist.level, tests, self.workers)
        self.keyed_rows = (hist.level, set(tests), keys)
        counts = branch_counts(hist, tests, keys, self.workers)
        hist.forget_terms()  # the level's last sums
        return counts

    def materialize_partition(self, level: Level, tests: list[TestRow],
                              routes: list[RouteRow], ordered: bool) -> Level:
        if any(factor not in (0.0, 1.0) for *_, factor in routes):
            self.fractional = True
        keyed, self.keyed_rows = self.keyed_rows, None
        keys = None
        if keyed is not None and keyed[0] is level and keyed[1].issuperset(tests):
            keys = keyed[2]
        return partition(level, tests, routes, keys, self.workers, by_node=True)

    def drop(self, table: Any) -> None:
        """The rows' keys go with their level."""
        if self.keyed_rows is not None and self.keyed_rows[0] is table:
            self.keyed_rows = None

    def observed_thresholds(self, unresolved: list[tuple[int, int, float, float]]
                            ) -> dict[int, float]:
        assert self.values is not None
        return {node: observed_threshold(self.values[attr], mid)
                for node, attr, _, mid in unresolved}

    def close(self, engine: Any) -> None:
        """Nothing to drop."""


DEEP_MEMORY_MAX_CELLS = 3_200_000
"""On the SQL plans, C4.5 and ID3 read a level's rows into memory and grow the rest of the
tree there once the rows of its open nodes, estimated from their weights, times the features
are at most this many (``DeepC45Strategy``), if the training rows were more than
``ENGINE_ONLY_MAX_CELLS``; 0: never."""

ENGINE_ONLY_MAX_CELLS = 3_200_000
"""Training rows times features up to this many grow wholly in their engine on the SQL plans:
small tables keep every level in SQL."""


class DeepC45Strategy(MemoryC45Strategy):
    """C4.5 and ID3 on a SQL plan whose deep levels grow in memory (PLANET's in-memory build).

    The upper levels, where nodes are few and large, run in the engine; once the rows of the
    open nodes are few (``DEEP_MEMORY_MAX_CELLS``), the next level's table is read once, with
    its node ids and fractional weights, and every later stage runs in numpy with the same
    scorer. Each stage takes the form of its input: a table (SQL) or arrays (numpy). The
    printed thresholds and pruning stay in the engine, which holds the values and the rows.
    """

    plan_name = None
    switched_at: int | None = None
    """The first level grown in memory, None while all run in the engine."""

    def __init__(self, data: Any, options: Any) -> None:
        super().__init__(data, options)
        self.depth = 0

    def materialize_level0(self) -> Any:
        return C45Strategy.materialize_level0(self)

    def materialize_histogram(self, level: Any, features: list[Feature], nodes: int) -> Any:
        if isinstance(level, Level):
            return super().materialize_histogram(level, features, nodes)
        return C45Strategy.materialize_histogram(self, level, features, nodes)

    def read_counts(self, engine: Any, hist: Any) -> dict[int, list[float]]:
        if isinstance(hist, Histogram):
            return super().read_counts(engine, hist)
        return C45Strategy.read_counts(self, engine, hist)

    def on_histogram(self, engine: Any, hist: Any, depth: int) -> None:
        self.depth = depth
        if not isinstance(hist, Histogram):
            C45Strategy.on_histogram(self, engine, hist, depth)

    def score_rows(self, hist: Any, features: list[Feature]) -> list[Any]:
        if isinstance(hist, Histogram):
            return super().score_rows(hist, features)
        return C45Strategy.score_rows(self, hist, features)

    def read_branch_counts(self, engine: Any, hist: Any, tests: list[TestRow]
                           ) -> dict[int, dict[int, list[float]]]:
        if isinstance(hist, Histogram):
            return super().read_branch_counts(engine, hist, tests)
        return C45Strategy.read_branch_counts(self, engine, hist, tests)

    def materialize_partition(self, level: Any, tests: list[TestRow],
                              routes: list[RouteRow], ordered: bool) -> Any:
        if isinstance(level, Level):
            return super().materialize_partition(level, tests, routes, ordered)
        table = C45Strategy.materialize_partition(self, level, tests, routes, ordered)
        if not self._few_rows(routes):
            return table
        data = self.data
        columns = ["node", "w", "y", *[f.column for f in data.features]]
        rows = read_level0(data, exp.select(*columns).from_(table), False, ranked=True)
        data.engine.drop(table)
        self.switched_at = self.depth + 1
        return rows

    def _few_rows(self, routes: list[RouteRow]) -> bool:
        """Whether the next level's rows are few enough, estimated from its weight (the
        routed branch counts; a row weighs on average the training weight per row); never
        for data that is small from the start (a table stays in its engine unless the memory
        plan is asked for)."""
        data = self.data
        features = max(len(data.features), 1)
        if data.n_rows * features <= ENGINE_ONLY_MAX_CELLS:
            return False
        weight = 0.0
        for node, key, _, factor in routes:
            weight += factor * sum(self.branch_counts.get(node, {}).get(int(key), ()))
        total = sum(data.class_weights)
        rows = weight * data.n_rows / total if total > 0 else float(data.n_rows)
        return rows * features <= DEEP_MEMORY_MAX_CELLS

    def drop(self, table: Any) -> None:
        if isinstance(table, (Level, Histogram)):
            super().drop(table)
        else:
            self.data.engine.drop(table)

    def observed_thresholds(self, unresolved: list[tuple[int, int, float, float]]
                            ) -> dict[int, float]:
        return C45Strategy.observed_thresholds(self, unresolved)

    def close(self, engine: Any) -> None:
        C45Strategy.close(self, engine)
