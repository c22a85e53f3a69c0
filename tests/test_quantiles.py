"""Quantile bin edges (``sqltree.quantiles``): ``PERCENTILE_DISC``'s values, found by counting
cells instead of sorting, and the same on every engine."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree import quantiles
from sqltree.dataset import describe
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.quantiles import bin_edges
from tests.conftest import ENGINES, SQLITE
from tests.helpers import assert_same_model
from tests.test_engines import frame_of


def percentile_disc(values: Any, max_bins: int) -> list[float] | None:
    """The SQL standard's discrete quantiles at 1/max_bins, 2/max_bins, ... and the maximum:
    the ceil(i * n / max_bins)-th of the sorted known values."""
    x = np.sort(np.array(pd.Series(values).dropna(), dtype=float))
    n = len(x)
    if not n:
        return None
    return sorted({float(x[-(-i * n // max_bins) - 1]) for i in range(1, max_bins)}
                  | {float(x[-1])})


def awkward(n: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "uniform": rng.uniform(0, 1, n),
        "heavy tail": np.exp(rng.normal(0, 8, n)),  # most rows in one cell of an even grid
        "few values": rng.integers(0, 5, n).astype(float),
        "tiny negatives": -rng.exponential(1e-9, n),
        "near 1e15": rng.normal(1e15, 1, n),
        "infinite": np.where(rng.random(n) < 0.2, np.inf, rng.normal(size=n)),
        "half unknown": np.where(np.arange(n) % 2 == 1, np.nan, rng.normal(size=n)),
        "tight": 1 + rng.uniform(0, 1e-12, n),  # 48 bits of grid are not enough
        # the range overflows a double
        "widest": np.where(np.arange(n) % 3 == 0, 1.7976931348623157e308,
                           np.where(np.arange(n) % 3 == 1, -1.7976931348623157e308,
                                    rng.normal(size=n))),
        "label": rng.choice(["a", "b"], n),
    })


@pytest.mark.parametrize("engine_only", [False, True], ids=["numpy", "engine"])
@pytest.mark.parametrize(("n", "max_bins"), [(7, 64), (100, 10), (3_000, 64), (20_000, 256)])
def test_edges_are_percentile_disc(n: int, max_bins: int, engine_only: bool) -> None:
    """A DataFrame's edges sorted in numpy (``Dataset.frame``), and counted by the engine."""
    frame = awkward(n)
    data = describe(frame, DuckDBEngine(), "label")
    if engine_only:
        data = dataclasses.replace(data, frame=None)
    edges = bin_edges(data, max_bins)
    for f in data.features:
        assert edges.get(f.index) == percentile_disc(frame[f.name], max_bins), f.name


@pytest.mark.parametrize("max_depth", [1, 2, 4])
def test_finer_grids_find_the_same_edges(monkeypatch: Any, max_depth: int) -> None:
    """Cells of more than a few rows are counted again on finer grids, as far as
    ``MAX_DEPTH`` allows; then the rows of a cell are sorted."""
    monkeypatch.setattr(quantiles, "MAX_CELL_ROWS", 8)
    monkeypatch.setattr(quantiles, "MAX_DEPTH", max_depth)
    frame = awkward(5_000, seed=2)
    # the engine's counts, not the DataFrame's sort in numpy
    data = dataclasses.replace(describe(frame, DuckDBEngine(), "label"), frame=None)
    queries = []
    execute = data.engine.execute
    monkeypatch.setattr(data.engine, "execute", lambda q, *a, **k: (
        queries.append(q), execute(q, *a, **k))[1])
    edges = bin_edges(data, 64)
    for f in data.features:
        assert edges.get(f.index) == percentile_disc(frame[f.name], 64), f.name
    # the description, a count per grid, the sorted cells
    assert len(queries) == 1 + max_depth + 1


def test_one_value_needs_no_count() -> None:
    frame = pd.DataFrame({"x": [2.5] * 10, "label": ["a", "b"] * 5})
    data = describe(frame, DuckDBEngine(), "label")
    assert bin_edges(data, 64) == {0: [2.5]}


@pytest.mark.parametrize("engine_factory", [*ENGINES, SQLITE], indirect=True)
def test_every_engine_finds_the_same_edges(engine_factory: Any, monkeypatch: Any) -> None:
    """The edges, and so a binned tree, are the same on every engine, also where the grids
    are refined (a few rows per cell forced here)."""
    monkeypatch.setattr(quantiles, "MAX_CELL_ROWS", 16)
    frame = awkward(600, seed=3)
    engine, source = engine_factory(frame, "awkward")
    data = describe(source, engine, "label")
    reference = describe(frame, DuckDBEngine(), "label")
    assert bin_edges(data, 32) == bin_edges(reference, 32)


def test_sqlite_trains_binned_trees() -> None:
    import sqlite3

    frame = frame_of("iris")
    con = sqlite3.connect(":memory:")
    frame.to_sql("iris", con, index=False)
    for algorithm in ("c4.5", "cart"):
        got = sqltree.train("iris", "species", algorithm=algorithm, max_bins=8, connection=con)
        want = sqltree.train(frame, "species", algorithm=algorithm, max_bins=8)
        assert_same_model(got, want)
