"""The memory plan: the level's rows read once into numpy, the tree grown there.

For data already in Python memory and small, a plan that sends SQL per level pays a statement's
fixed cost (parsing, planning, a temporary table) many times over for a few hundred rows. The
memory plan runs the level-0 query once, the same query the SQL plans store as their first
level table (so input checks, class weights, NULL handling and encodings are theirs), and
then runs the shared stages, histogram, scoring and partition, in numpy, with the strategy's
own choices: the same level loop (``grower.grow_with``), the same ``choose``, ``select`` and
``branchings``, the same pruning after growth. Only the stages move: a plug-in overrides the
strategy's ``materialize_*`` and ``score_rows`` hooks, and its scorer computes the scoring
query's rows with the query's arithmetic (``cart_scores``).

``MEMORY_STRATEGIES`` lists the algorithms that have an in-memory scorer; any other trains
on the SQL plan (``memory_strategy`` returns None).
"""

from __future__ import annotations

import os
from typing import Any

from sqlglot import exp

from ...algorithm_registry import C45, CART, CART_REGRESSION, ID3
from ...dataset import Dataset, Feature, is_pandas_frame
from ...engines.select_plan import PLANS as SQL_PLANS
from ...errors import OptionError
from ...grower import GrowOptions, Strategy
from ..cart import CARTStrategy
from ..cart.regression import RegressionStrategy
from ..cart.subsets import orders
from .c45 import DeepC45Strategy, MemoryC45Strategy
from .cart_scores import Rules, nominal_ranks, score
from .level import Histogram, Level, as_weight
from .stacked import score_stacked
from .stages import InMemoryStages

MEMORY = "memory"
SCAN = "scan"
PLANS = (*SQL_PLANS, SCAN, MEMORY)
"""The values of ``train(plan=...)``: the SQL plans, the level scan and memory."""


def check_train_plan(plan: str) -> str:
    """``plan`` if ``train`` takes it, else an ``OptionError`` listing the plans."""
    if plan not in PLANS:
        raise OptionError(f"plan must be one of {PLANS}, not {plan!r}")
    return plan


MEMORY_MAX_CELLS_REGRESSION = 500_000
"""``plan="auto"`` grows regression trees in memory for data of the process's own (a
DataFrame, an estimator's arrays, a file that sqltree's own DuckDB database reads) of at most
this many rows x features (see ``memory_reason``): their sums of moments are summed in row
order rather than counted, and the memory plan took 0.83 of the tables plan's time at 30,000
rows (480,000 cells) and 1.23 at 60,000 (the regression benchmark table, ``max_depth=10``,
the same run)."""


MEMORY_BYTES_PER_CELL = 25
"""Peak memory of a classification fit on the memory plan per row x feature of its data, at
scale, with a margin: 10M rows of the benchmark table peaked at 12-25 bytes a cell
(benchmarks/README.md: "C4.5 at 10M rows in memory" and the sections before it); a table of
distinct continuous values in every column keeps more."""


CGROUP_MEMORY_MAX = "/sys/fs/cgroup/memory.max"
"""A cgroup v2's memory limit (``max``: none), which a container's fit must stay within."""


def _machine_bound() -> int:
    """``MEMORY_MAX_CELLS`` for this machine: the cells whose fit takes at most half of its
    memory (the smaller of the physical memory and a cgroup's limit), at least 16M."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system that says
        return 16_000_000
    try:
        with open(CGROUP_MEMORY_MAX) as f:
            limit = f.read().strip()
        if limit.isdigit():
            memory = min(memory, int(limit))
    except OSError:
        pass
    return max(16_000_000, memory // 2 // MEMORY_BYTES_PER_CELL)


MEMORY_MAX_CELLS = _machine_bound()
"""``plan="auto"`` grows a classification tree (C4.5, ID3, CART) in memory for data of the
process's own of at most this many rows x features (see ``memory_reason``): half of this
machine's memory at ``MEMORY_BYTES_PER_CELL`` (on a 24 GB machine about 490M cells, 30M rows
of 16 features), at least 16M cells. The scorers keep the best candidates of a (node,
feature) only, a part of the level's nodes and a batch of candidates at a time, and grow
faster than the tables plan in less memory (benchmarks/README.md, "Exact CART in memory" and
"C4.5 at 10M rows in memory").
"""

LOCAL_FILE = "a file read by sqltree's own DuckDB database"
PYTHON_MEMORY = "data in Python memory"

HELD_BY = "sqltree_held_by"
"""Set in a query's ``meta`` to where its rows are held when they are this process's own
(``rows_held_by``): cross-validation's folds of a DataFrame, or of a file that its own DuckDB
database dealt, are queries of a table, and ``plan="auto"`` treats them as their source."""


def rows_held_by(source: Any, engine: Any) -> str | None:
    """Where the training rows are when they are this process's own (``memory_reason``):
    in Python memory, or in a file that sqltree's own DuckDB database reads; None when they
    are in a user's engine."""
    if isinstance(source, exp.Expression) and source.meta.get(HELD_BY):
        return str(source.meta[HELD_BY])
    if is_pandas_frame(source):
        return PYTHON_MEMORY
    if getattr(engine, "own_database", False):
        return LOCAL_FILE
    return None


def memory_reason(plan: str, local: str | None, rows: int, features: int,
                  algorithm: str = CART) -> str | None:
    """Why a fit asked for ``plan`` grows on the memory plan, or None if it stays in SQL.

    ``"memory"`` always (where the algorithm has an in-memory scorer); ``"auto"`` only for
    rows that are this process's own (``local`` says where they are: ``PYTHON_MEMORY`` for a
    DataFrame or an estimator's arrays, ``LOCAL_FILE`` for a file or query that sqltree's own
    DuckDB database reads; None for a user's connection, whose tables stay in their engine)
    and not too many (``MEMORY_MAX_CELLS``; for regression ``MEMORY_MAX_CELLS_REGRESSION``).
    """
    if plan == MEMORY:
        return "asked for"
    if plan != "auto" or local is None:
        return None
    bound = MEMORY_MAX_CELLS_REGRESSION if algorithm == CART_REGRESSION else MEMORY_MAX_CELLS
    cells = rows * max(features, 1)
    if cells > bound:
        return None
    return f"{local}, {rows:,} rows x {features:,} features (at most {bound:,} cells)"


class _InMemory(InMemoryStages, CARTStrategy):
    """CART's stages of the level loop over numpy arrays (the regression strategy takes
    them too: it is CART's with moments in the class columns' place)."""

    def materialize_histogram(self, level: Level, features: list[Feature], nodes: int
                              ) -> Histogram:
        return Histogram(level, features, self.n_classes, self.hist_bits, self.moments,
                         self.criterion == "poisson")

    def _measure_density(self, engine: Any, hist: Any) -> None:
        """No density probe: it chooses how SQL histograms group rows."""

    def read_counts(self, engine: Any, hist: Histogram) -> dict[int, list[float]]:
        nodes, n, sums = hist.totals()
        weights = as_weight(sums, self.hist_bits)
        return self.take_counts(
            (int(i), int(c), *row) for i, c, row in zip(nodes.tolist(), n.tolist(),
                                                        weights.tolist(), strict=True)
        )

    def score_rows(self, hist: Histogram, features: list[Feature]) -> list[Any]:
        r = self.resolved
        assert r is not None
        rules = Rules(self.criterion, r.min_samples_leaf, r.min_weight_leaf, self.tie_tolerance)
        return score_stacked(hist, features, lambda h, fs: score(h, fs, h.totals(), rules,
                                                                 self.workers), "cart")

    def nominal_ranks(self, engine: Any, hist: Histogram, pairs: list[tuple[int, int]]
                      ) -> dict[tuple[int, int], list[tuple[int, int, int, int]]]:
        by = self.nominal_orders
        features = {f.index: f for f in self.data.features}
        return nominal_ranks(hist, features, pairs, orders(self.n_classes) if by is None else by)


class MemoryCARTStrategy(_InMemory, CARTStrategy):
    """CART classification on the memory plan."""


class MemoryRegressionStrategy(_InMemory, RegressionStrategy):
    """CART regression on the memory plan."""

    moments = True


MEMORY_STRATEGIES: dict[str, type[Strategy]] = {
    CART: MemoryCARTStrategy,
    CART_REGRESSION: MemoryRegressionStrategy,
    C45: MemoryC45Strategy,
    ID3: MemoryC45Strategy,
}
"""Algorithm name (``GrowOptions.strategy_name``) -> its strategy on the memory plan."""

DEEP_STRATEGIES: dict[str, type[Strategy]] = {
    C45: DeepC45Strategy,
    ID3: DeepC45Strategy,
}
"""Algorithm name -> its strategy on the SQL plans that grows the deep levels in memory
(``c45.DEEP_MEMORY_MAX_CELLS``)."""

NO_MEMORY_CRITERIA: tuple[str, ...] = ()
"""Criteria whose histogram and gains the in-memory scorer does not compute: they train on
the SQL plan (none now; CART's and the regression criteria all have one)."""


def memory_strategy(data: Dataset, options: GrowOptions, reason: str) -> Strategy | None:
    """The strategy that grows ``options.algorithm`` in memory, or None if there is none."""
    found = MEMORY_STRATEGIES.get(options.strategy_name)
    if found is None or options.criterion in NO_MEMORY_CRITERIA:
        return None
    strategy = found(data, options)
    strategy.plan_reason = reason
    return strategy
