"""ID3 and C4.5 trees: the classic golf tree, observed thresholds, weights as repeated rows,
on every engine."""

from __future__ import annotations

import pandas as pd
import pytest

import sqltree
from sqltree.algorithms import grow
from sqltree.dataset import describe
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.grower import GrowOptions
from tests.helpers import (
    DATA,
    GOLF,
    GOLF_NUMERIC,
    GOLF_TREE,
    WITHOUT_SPARK,
    assert_same_tree,
    read_csv,
)

# Spark grows these two data sets in test_engines (against DuckDB's trees, which these tests
# hold to the textbook); here they run on DuckDB and PostgreSQL.


@WITHOUT_SPARK
@pytest.mark.parametrize("algorithm", ["id3", "c4.5"])
def test_golf_is_the_classic_tree(engine_factory, algorithm):
    engine, source = engine_factory(read_csv(GOLF), "golf")
    model = sqltree.train(source, target="play", algorithm=algorithm, connection=engine)
    assert model.text() == GOLF_TREE
    assert (model.n_leaves, model.n_nodes, model.depth) == (5, 8, 2)
    assert model.classes == ["no", "yes"]
    assert model.root.split.feature == "outlook"


@WITHOUT_SPARK
def test_continuous_humidity_tree(engine_factory):
    engine, source = engine_factory(read_csv(GOLF_NUMERIC), "golf")
    model = sqltree.train(
        source, target="play", features=["outlook", "temperature", "humidity", "wind"],
        connection=engine,
    )
    sunny = model.root.children[model.root.split.groups.index(["Sun"])]
    assert sunny.split.feature == "humidity"
    assert sunny.split.threshold == 75.0  # an observed value, not a midpoint


def test_weights_equal_duplicated_rows(engine_factory):
    """A weight column grows the tree of the rows repeated as often as their weight. The
    repeated rows grow in DuckDB only: every engine grows DuckDB's tree from the same rows
    (tests/test_determinism.py, tests/test_engines.py)."""
    frame = read_csv(GOLF_NUMERIC)
    weighted = frame.assign(w=[1.0 + (i % 3) for i in range(len(frame))])
    duplicated = pd.concat(
        [frame.iloc[[i] * int(w)] for i, w in enumerate(weighted.w)], ignore_index=True
    )
    features = ["outlook", "temperature", "humidity", "wind"]
    engine, source = engine_factory(weighted, "weighted")
    a = sqltree.train(source, target="play", weight="w", features=features, connection=engine)
    b = sqltree.train(duplicated, target="play", features=features)
    assert_same_tree(a.root.to_dict(), b.root.to_dict())


def test_c45_and_id3_unchanged_on_golf():
    for algorithm in ("id3", "c4.5"):
        data = describe(str(DATA / "golf.csv"), DuckDBEngine(), "play")
        root, _ = grow(data, GrowOptions(algorithm=algorithm))
        assert root.split is not None and root.split.feature == "outlook"
        text = {root.split.describe(i): c for i, c in enumerate(root.children)}
        assert text["outlook = overcast"].is_leaf
        assert text["outlook = sunny"].split.feature == "humidity"
        assert text["outlook = rainy"].split.feature == "windy"
