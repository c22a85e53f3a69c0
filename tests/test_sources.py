"""Every kind of source trains the same tree: files, globs, DataFrames, queries, tables, views."""

from __future__ import annotations

import duckdb

import sqltree
from tests.helpers import GOLF_NUMERIC, assert_same_tree, read_csv


def test_all_sources_train_the_same_tree(tmp_path):
    frame = read_csv(GOLF_NUMERIC)
    parquet = tmp_path / "golf.parquet"
    frame.to_parquet(parquet)
    con = duckdb.connect()
    con.execute(f"CREATE TABLE golf AS SELECT * FROM read_parquet('{parquet}')")
    con.execute("CREATE VIEW golf_view AS SELECT * FROM golf")
    sources = {
        "csv": (str(GOLF_NUMERIC), None),
        "parquet": (str(parquet), None),
        "glob": (str(tmp_path / "*.parquet"), None),
        "frame": (frame, None),
        "query": ("SELECT * FROM golf WHERE day <> 'none'", con),
        "table": ("golf", con),
        "view": ("golf_view", con),
    }
    trees = {
        name: sqltree.train(src, target="play", connection=c, features=["outlook", "humidity",
                                                                         "wind"]).root.to_dict()
        for name, (src, c) in sources.items()
    }
    for name, tree in trees.items():
        assert_same_tree(trees["csv"], tree, what=name)
