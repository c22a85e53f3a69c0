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

from ...dataset import Feature
from ...grower import RouteRow, TestRow
from ..c45 import C45Strategy, score_options
from .c45_scores import branch_counts, distinct_values, observed_threshold, score
from .level import Histogram, Level, as_weight, partition
from .recount import RowsInMemory
from .stages import InMemoryStages


class MemoryC45Strategy(InMemoryStages, C45Strategy):
    """ID3 and C4.5 on the memory plan."""

    values: dict[int, np.ndarray] | None = None

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
        return score(hist, features, options)

    def read_branch_counts(self, engine: Any, hist: Histogram, tests: list[TestRow]
                           ) -> dict[int, dict[int, list[float]]]:
        return branch_counts(hist, {f.index: f for f in self.data.features}, tests)

    def materialize_partition(self, level: Level, tests: list[TestRow],
                              routes: list[RouteRow], ordered: bool) -> Level:
        if any(factor not in (0.0, 1.0) for *_, factor in routes):
            self.fractional = True
        return partition(level, tests, routes)

    def observed_thresholds(self, unresolved: list[tuple[int, int, float, float]]
                            ) -> dict[int, float]:
        assert self.values is not None
        return {node: observed_threshold(self.values[attr], mid)
                for node, attr, _, mid in unresolved}

    def close(self, engine: Any) -> None:
        """Nothing to drop."""
