"""C4.5 and ID3 on the memory plan: the model file of the tables plan, exactly.

Each case trains on DuckDB twice, on the tables plan and on the memory plan, and the two
models must be equal but for their statistics (tests, thresholds, counts, shares and pruning
to the last bit): J48's parity data sets (tests/data), the examples, fractional weights of
unknown values spread over branches, sample weights, every way of handling unknown values,
bins, J48's 1e-5 gap between values, pruning with subtree raising, and hostile tables (J48's
larger sets, glass, diabetes and breast-cancer, were compared once by hand: the same files).
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sqltree
from tests.helpers import WITHOUT_SPARK
from tests.strategies import TableSpec, trained_cases
from tests.test_properties import duckdb_with, free_name
from tests.weka import read_arff

ROOT = Path(__file__).resolve().parent.parent
DEEP_BOUND = "sqltree.algorithms.memory.c45.DEEP_MEMORY_MAX_CELLS"
ENGINE_ONLY = "sqltree.algorithms.memory.c45.ENGINE_ONLY_MAX_CELLS"


def same_model(a: Any, b: Any) -> None:
    """The two models' files are the same but for the statistics (times, plan)."""
    da, db = a.to_dict(), b.to_dict()
    da.pop("stats")
    db.pop("stats")
    assert da == db, f"\n{a.text()}\n{b.text()}"


def both_plans(source: Any, target: str, **options: Any) -> tuple[Any, Any]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NULL target")
        sql = sqltree.train(source, target, plan="tables", **options)
        memory = sqltree.train(source, target, plan="memory", **options)
    assert (sql.stats["plan"], memory.stats["plan"]) == ("tables", "memory")
    same_model(sql, memory)
    return sql, memory


ARFF_CASES = [
    ("labor", {"algorithm": "c4.5"}),  # mixed, unknowns in most columns, subtree raising
    ("vote", {"algorithm": "c4.5"}),  # nominal, 392 unknown values
    ("weather.numeric", {"algorithm": "id3"}),
    ("iris", {"algorithm": "c4.5", "max_bins": 6, "missing": "drop"}),
]


@pytest.mark.parametrize(("name", "options"), ARFF_CASES,
                         ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in ARFF_CASES])
def test_j48_data_sets(name, options):
    arff = read_arff(ROOT / "tests" / "data" / f"{name}.arff")
    both_plans(arff.frame, arff.target, **options)


@pytest.mark.parametrize(("name", "algorithm"), [("golf_numeric_humidity.csv", "c4.5"),
                                                  ("buys_computer.csv", "id3")])
def test_examples(name, algorithm):
    frame = pd.read_csv(ROOT / "examples" / "data" / name)
    both_plans(frame, frame.columns[-1], algorithm=algorithm)


def _unknowns() -> pd.DataFrame:
    """Three classes; unknown values in a nominal and a continuous feature (spread over the
    branches by fractional weights); sample weights; values 1e-5 apart (J48 cuts between
    values more than 1e-5 apart only)."""
    rng = np.random.default_rng(5)
    n = 240
    frame = pd.DataFrame({
        "colour": rng.choice(["red", "green", "blue", "grey", None], n, p=[.3, .3, .2, .1, .1]),
        "size": np.where(rng.random(n) < 0.15, np.nan, rng.normal(0, 1, n).round(2)),
        "close": 1.0 + rng.integers(0, 12, n) * 1e-5,
        "w": rng.uniform(0.2, 3.0, n).round(3),
    })
    frame["y"] = np.where(frame["colour"].isin(["red", "grey"]), "a",
                          np.where(frame["size"] > 0.2, "b", "c"))
    flip = rng.random(n) < 0.25
    frame.loc[flip, "y"] = rng.choice(["a", "b", "c"], flip.sum())
    frame.loc[frame["close"] > 1.00006, "y"] = "c"
    return frame


@pytest.mark.parametrize("options", [
    {"algorithm": "c4.5", "weight": "w"},
    {"algorithm": "c4.5", "weight": "w", "min_cases": 5, "subtree_raising": False},
    {"algorithm": "c4.5", "missing": "majority", "pruning": None, "min_cases": 1},
    {"algorithm": "c4.5", "missing": "drop", "max_depth": 3, "pruning": "pessimistic"},
], ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_fractional_unknowns_and_weights(options):
    both_plans(_unknowns(), "y", **options)


@given(case=trained_cases(TableSpec(max_rows=50), algorithm="c4.5"), id3=st.booleans())
@settings(max_examples=5, deadline=None)
def test_random_tables(case, id3):
    table, opts = case
    opts = {k: v for k, v in opts.items() if k != "algorithm"}
    algorithm = "id3" if id3 else "c4.5"
    with contextlib.closing(duckdb_with(table)) as con:
        source = "SELECT * FROM t"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                sql = sqltree.train(source, table.target, weight=table.weight, connection=con,
                                    algorithm=algorithm, plan="tables", **opts)
            except sqltree.SqlTreeError:
                return  # a table training refuses: the refusal tests cover it
            memory = sqltree.train(source, table.target, weight=table.weight, connection=con,
                                   algorithm=algorithm, plan="memory", **opts)
        assert memory.stats["plan"] == "memory"
        same_model(sql, memory)
        frame, column = table.frame(), free_name(table, "prediction")
        assert sql.predict(frame, column=column)[column].tolist() == \
            memory.predict(frame, column=column)[column].tolist()


@pytest.mark.parametrize("algorithm", ["c4.5", "id3"])
def test_auto_grows_a_small_dataframe_in_memory(algorithm):
    labor = read_arff(ROOT / "tests" / "data" / "labor.arff")
    model = sqltree.train(labor.frame, labor.target, algorithm=algorithm)
    assert model.stats["plan"] == "memory"
    assert "data in Python memory" in model.stats["plan_reason"]
    assert all(level["queries"] == 0 for level in model.stats["levels"])
    if algorithm == "c4.5":  # subtree raising recounts the rows in memory too
        assert model.stats["pruning"]["raised"] > 0
        assert model.stats["pruning"]["queries"] == 0


# On Spark, test_memory_plan.py's CART case reads level 0 the same way (one statement).
@WITHOUT_SPARK
def test_memory_plan_on_every_engine(engine_factory):
    """On any engine C4.5 on the memory plan reads level 0 with one statement (pruning
    recounts those rows), to the model of the tables plan on DuckDB."""
    frame = _unknowns()
    engine, source = engine_factory(frame, "unknowns")
    memory = sqltree.train(source, "y", connection=engine, plan="memory", algorithm="c4.5",
                           weight="w")
    sql = sqltree.train(frame, "y", plan="tables", algorithm="c4.5", weight="w")
    assert memory.stats["plan"] == "memory"
    assert sum(level["queries"] for level in memory.stats["levels"]) == 0
    assert memory.stats["pruning"]["queries"] == 0
    assert memory.to_dict()["tree"] == sql.to_dict()["tree"]


# Spark answers each statement in seconds, and this training sends some forty.
@WITHOUT_SPARK
def test_deep_levels_in_memory(engine_factory, monkeypatch):
    """On the tables plan, levels 3 and below grow in memory once their rows are few (read
    once, with their fractional weights), to the model with every level in DuckDB."""
    frame = _unknowns()
    engine, source = engine_factory(frame, "unknowns")
    sql = sqltree.train(frame, "y", plan="tables", algorithm="c4.5", weight="w")
    assert sql.stats["memory_from_level"] is None
    monkeypatch.setattr(DEEP_BOUND, 500)  # open rows <= 166 (3 features)
    monkeypatch.setattr(ENGINE_ONLY, 500)  # below 240 rows x 3 features
    deep = sqltree.train(source, "y", connection=engine, plan="tables", algorithm="c4.5",
                         weight="w")
    assert deep.stats["memory_from_level"] == 3
    levels = deep.stats["levels"]
    assert all(level["queries"] > 0 for level in levels[:3])
    assert all(level["queries"] == 0 for level in levels[3:]) and len(levels) > 4
    assert deep.to_dict()["tree"] == sql.to_dict()["tree"]


def test_auto_bound_of_classification(monkeypatch):
    """C4.5, ID3 and CART classification share the bound of ``plan="auto"``
    (``MEMORY_MAX_CELLS``): in memory up to it, in SQL beyond."""
    labor = read_arff(ROOT / "tests" / "data" / "labor.arff")
    cells = len(labor.frame) * (labor.frame.shape[1] - 1)
    for algorithm in ("c4.5", "id3", "cart"):
        monkeypatch.setattr("sqltree.algorithms.memory.MEMORY_MAX_CELLS", cells)
        model = sqltree.train(labor.frame, labor.target, algorithm=algorithm)
        assert model.stats["plan"] == "memory", algorithm
        assert f"at most {cells:,} cells" in model.stats["plan_reason"]
        monkeypatch.setattr("sqltree.algorithms.memory.MEMORY_MAX_CELLS", cells - 1)
        model = sqltree.train(labor.frame, labor.target, algorithm=algorithm)
        assert model.stats["plan"] == "tables", algorithm


def test_classification_bound_is_half_the_machines_memory(monkeypatch, tmp_path):
    """``MEMORY_MAX_CELLS``: half of the memory at 25 bytes a cell, never below 16M."""
    from sqltree.algorithms import memory

    per_cell = memory.MEMORY_BYTES_PER_CELL
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 1 << 20}  # 4 GiB
    monkeypatch.setattr(memory.os, "sysconf", pages.__getitem__)
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(memory, "CGROUP_MEMORY_MAX", str(limit))  # no such file: no limit
    assert memory._machine_bound() == (4 << 30) // 2 // per_cell
    limit.write_text("max\n")
    assert memory._machine_bound() == (4 << 30) // 2 // per_cell
    limit.write_text(f"{1 << 30}\n")  # a container of 1 GiB
    assert memory._machine_bound() == (1 << 30) // 2 // per_cell
    pages["SC_PHYS_PAGES"] = 1 << 16  # 256 MiB
    assert memory._machine_bound() == 16_000_000
    assert memory.MEMORY_MAX_CELLS >= 16_000_000


def _many_cuts() -> pd.DataFrame:
    """3,000 rows, three classes, continuous values with many repeats and near ties, a
    nominal feature and unknown values (fractional weights below the first split)."""
    rng = np.random.default_rng(11)
    n = 3000
    frame = pd.DataFrame({
        "a": rng.integers(0, 60, n) / 4.0,
        "b": rng.normal(size=n).round(2),
        "c": rng.choice(list("pqrstu"), n),
    })
    frame["y"] = np.where(frame["a"] + 4 * frame["b"] > 8, "x",
                          np.where(frame["c"].isin(["p", "q"]), "y", "z"))
    flip = rng.random(n) < 0.15
    frame.loc[flip, "y"] = rng.choice(["x", "y", "z"], flip.sum())
    frame.loc[rng.random(n) < 0.05, "a"] = np.nan
    frame.loc[rng.random(n) < 0.05, "c"] = None
    return frame


def test_cuts_screened_with_numpy_log_give_the_same_model():
    """The memory plan screens a continuous feature's cuts with numpy's logarithm and
    computes again only those near the best with the C library's: on a table where most of
    the level's cuts are screened out (thousands per node), the model of the tables plan,
    to the last bit, with and without pruning."""
    frame = _many_cuts()
    both_plans(frame, "y", algorithm="c4.5")
    both_plans(frame, "y", algorithm="c4.5", pruning=None, min_cases=1)


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_cuts_screened_a_chunk_at_a_time_give_the_same_model(monkeypatch, chunk):
    """A level's cuts are screened ``CUT_CHUNK`` at a time, each chunk keeping only the cuts
    near its own best of a node while every valid cut is counted (the MDL correction); with
    chunks of a few cuts, nodes whose cuts straddle chunks and chunks of no valid cut: the
    model of the tables plan, to the last bit, unpruned and pruned."""
    from sqltree.algorithms.memory import c45_scores

    monkeypatch.setattr(c45_scores, "CUT_CHUNK", chunk)
    feature_at_a_time(monkeypatch)
    frame = _many_cuts()
    both_plans(frame, "y", algorithm="c4.5", pruning=None, min_cases=1)
    both_plans(frame, "y", algorithm="c4.5")


def feature_at_a_time(patch: Any) -> None:
    """Score each feature of a level on its own (no ``stacked.STACK_CELLS``): the small
    tables here are otherwise scored stacked (``algorithms.memory.stacked``), past the
    feature's own paths (parts, chunks, bands) that a test forces."""
    from sqltree.algorithms.memory import stacked

    patch.setattr(stacked, "STACK_CELLS", {})


def counted_node_chunks(patch: Any, rows: int) -> list[int]:
    """Parts of about ``rows`` rows (``NODE_CHUNK_ROWS``, set through ``patch``), and the
    list that the parts made per level are counted into."""
    from sqltree.algorithms.memory import level

    made: list[int] = []
    chunks = level.Histogram.node_chunks

    def counted(self: Any) -> Any:
        out = chunks(self)
        made.append(len(out))
        return out

    patch.setattr(level, "NODE_CHUNK_ROWS", rows)
    patch.setattr(level.Histogram, "node_chunks", counted)
    return made


@pytest.mark.parametrize("rows", [1, 50, 700])
def test_nodes_scored_a_part_at_a_time_give_the_same_model(monkeypatch, rows):
    """A level's features are grouped and scored a part of its nodes at a time
    (``Histogram.node_chunks``, about ``NODE_CHUNK_ROWS`` rows each); with parts of one
    node, of a few and of hundreds of rows, fractional rows included: the model of the
    tables plan, to the last bit, unpruned and pruned. Parts were made, more than one a
    level."""
    made = counted_node_chunks(monkeypatch, rows)
    feature_at_a_time(monkeypatch)
    frame = _many_cuts()
    both_plans(frame, "y", algorithm="c4.5", pruning=None, min_cases=1)
    both_plans(frame, "y", algorithm="c4.5")
    assert max(made) > 1


@pytest.mark.parametrize("block", [1, 13, 500])
def test_rows_keyed_and_routed_a_block_at_a_time_give_the_same_model(monkeypatch, block):
    """A level's rows are keyed for their nodes' tests, counted by branch and routed to the
    next level ``ROW_BLOCK`` rows at a time; with blocks of one row, of a few and of
    hundreds, fractional rows and looked-up nominal codes included: the model of the
    tables plan, to the last bit, unpruned and with subtree raising (whose recounts key
    rows the same way). Levels were keyed in more than one block."""
    from sqltree.algorithms.memory import level, routes

    keyed = routes._Tests.keys
    blocks: list[int] = []

    def counted(self: Any, rows: Any, lo: int, hi: int) -> Any:
        blocks.append(lo)
        return keyed(self, rows, lo, hi)

    monkeypatch.setattr(routes, "ROW_BLOCK", block)
    monkeypatch.setattr(routes._Tests, "keys", counted)
    monkeypatch.setattr(level, "RANK_WHOLE_MAX", 2)
    frame = _many_cuts()
    both_plans(frame, "y", algorithm="c4.5", pruning=None, min_cases=1)
    both_plans(frame, "y", algorithm="c4.5", subtree_raising=True)
    assert max(blocks) > 0


@pytest.mark.parametrize(("band", "chunk"), [(1, 1 << 17), (40, 7), (400, 1 << 17)])
def test_a_large_node_grouped_a_band_of_values_at_a_time(monkeypatch, band, chunk):
    """A part of the level that is one node of more than ``BAND_ROWS`` rows is grouped a
    band of neighbouring values at a time, the running sums going on from band to band and
    a cut between bands; with bands of one row (a group each), of a few dozen rows and of
    hundreds, cuts screened a few at a time or all at once: the model of the tables plan,
    to the last bit, unpruned and pruned. Bands were made, more than one a node."""
    from sqltree.algorithms.memory import c45_scores

    made: list[int] = []
    band_cuts = c45_scores._band_cuts

    def listed(bands: Any, block: int) -> Any:
        bands = list(bands)
        made.append(len(bands))
        return band_cuts(iter(bands), block)

    monkeypatch.setattr(c45_scores, "BAND_ROWS", band)
    monkeypatch.setattr(c45_scores, "CUT_CHUNK", chunk)
    monkeypatch.setattr(c45_scores, "_band_cuts", listed)
    feature_at_a_time(monkeypatch)
    frame = _many_cuts()
    both_plans(frame, "y", algorithm="c4.5", pruning=None, min_cases=1)
    both_plans(frame, "y", algorithm="c4.5")
    assert max(made) > 1


def test_rows_keyed_by_ranks_where_codes_are_not_ranks(monkeypatch):
    """Growth keeps ranks, not values: a test's threshold becomes a rank, and a nominal
    code that is not its own rank (a domain of more than ``RANK_WHOLE_MAX`` codes, here
    forced from 2) is looked up. The model of the tables plan, to the last bit, with
    subtree raising (whose recounts key the rows the same way)."""
    from sqltree.algorithms.memory import level

    monkeypatch.setattr(level, "RANK_WHOLE_MAX", 2)
    frame = _many_cuts()
    frame["d"] = (frame["b"] * 3).round().astype("Int64")  # whole numbers, some negative
    # a value of "c" only on rows without a class: its code is in the domain, not the rows
    frame.loc[frame.index[:5], ["c", "y"]] = ["a", None]
    both_plans(frame, "y", algorithm="c4.5")
    both_plans(frame, "y", algorithm="c4.5", pruning=None, min_cases=1)
