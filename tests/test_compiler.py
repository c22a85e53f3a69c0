"""The compiled scoring SQL: every dialect, deep and wide trees, NULL routing."""

from __future__ import annotations

import random
import sqlite3

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot

from sqltree import compiler
from sqltree.model import FeatureInfo, Model, render
from sqltree.tree import CONTINUOUS, NOMINAL, Node, Split

DIALECTS = ["duckdb", "sqlite", "postgres", "spark", "bigquery", "snowflake", "tsql", "mysql",
            "trino"]


def leaf(label: int, k: int = 2, node_id: int = 0) -> Node:
    proba = [0.0] * k
    proba[label] = 1.0
    return Node(counts=list(proba), proba=proba, node_id=node_id)


def chain_tree(depth: int) -> Node:
    """A caterpillar: x <= depth - i goes to a leaf, else deeper."""
    ids = iter(range(10**6))
    root = node = Node(counts=[1, 1], proba=[0.5, 0.5], node_id=next(ids))
    for i in range(depth):
        node.split = Split("x", CONTINUOUS, threshold=float(depth - i))
        node.shares = [0.5, 0.5]
        node.unknown_branch = 1
        last = i == depth - 1
        nxt = leaf(i % 2, node_id=next(ids)) if last else Node(
            counts=[1, 1], proba=[0.5, 0.5], node_id=next(ids))
        node.children = [nxt, leaf((i + 1) % 2, node_id=next(ids))]
        node.children.reverse()  # the deep side is the <= side: x <= depth - i
        node = nxt
    return root


def random_tree(leaves: int, seed: int = 0) -> Node:
    """A random binary tree over x0..x3 (continuous) and c (nominal) with given leaf count."""
    rng = random.Random(seed)
    ids = iter(range(10**6))
    root = leaf(0, k=3, node_id=next(ids))
    frontier = [root]
    count = 1
    while count < leaves:
        node = frontier.pop(rng.randrange(len(frontier)))
        if rng.random() < 0.2:
            pair = [["a", "b"], ["c", "it's"]]
            groups = pair if rng.random() < 0.5 else [["a"], ["b", "c", "it's"]]
            node.split = Split("c", NOMINAL, groups=groups)
        else:
            node.split = Split(f"x{rng.randrange(4)}", CONTINUOUS, threshold=round(rng.random(), 3))
        node.shares = [0.5, 0.5]
        node.unknown_branch = rng.randrange(2)
        node.children = [leaf(rng.randrange(3), 3, next(ids)), leaf(rng.randrange(3), 3, next(ids))]
        frontier.extend(node.children)
        count += 1
    return root


def model_of(root: Node, k: int) -> Model:
    return Model(root=root, classes=[f"class {i}" for i in range(k)], target="y",
                 features=[FeatureInfo("x", CONTINUOUS, "DOUBLE")])


def case_depth(expression) -> int:
    import sqlglot.expressions as exp

    def depth(e) -> int:
        inner = [depth(c) for c in e.iter_expressions()] or [0]
        return max(inner) + (1 if isinstance(e, exp.Case) else 0)

    return depth(expression)


def random_rows(n: int, seed: int = 1) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        rows.append({
            **{f"x{j}": (None if rng.random() < 0.05 else rng.random()) for j in range(4)},
            "x": rng.uniform(0, 1001),
            "c": rng.choice(["a", "b", "c", "it's", None]),
        })
    return pd.DataFrame(rows)


def check_engine_rows(model: Model, frame: pd.DataFrame, run) -> None:
    expected = [model.predict_row({k: (None if pd.isna(v) else v) for k, v in r.items()})
                for r in frame.to_dict("records")]
    assert run(model.to_sql) == expected


def duckdb_runner(frame):
    con = duckdb.connect()
    con.register("t", frame)
    return lambda to_sql: [r[0] for r in con.execute(
            f"SELECT {to_sql('duckdb')} FROM (SELECT *, row_number() OVER () AS rn FROM t) "
            "ORDER BY rn").fetchall()]


def sqlite_runner(frame):
    con = sqlite3.connect(":memory:")
    frame.to_sql("t", con, index=False)
    return lambda to_sql: [r[0] for r in con.execute(
        f"SELECT {to_sql('sqlite')} FROM t ORDER BY rowid")]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_dialect_renders_and_parses_back(dialect):
    root = random_tree(60)
    model = model_of(root, 3)
    sql = model.to_sql(dialect)
    parsed = sqlglot.parse_one(f"SELECT {sql} FROM t", read=dialect)
    assert parsed is not None
    query = model.to_sql(dialect, table="t", view="scored")
    assert sqlglot.parse_one(query, read=dialect) is not None


def test_depth_1000_chain_nests_once():
    model = model_of(chain_tree(1000), 2)
    expression = model.to_expression()
    assert case_depth(expression) <= 2
    frame = pd.DataFrame({"x": [i + 0.5 for i in range(0, 1001, 7)] + [None]})
    check_engine_rows(model, frame, duckdb_runner(frame))
    check_engine_rows(model, frame, sqlite_runner(frame))


def test_4000_leaves_nest_by_log_leaves():
    model = model_of(random_tree(4000), 3)
    expression = model.to_expression()
    assert case_depth(expression) <= 13  # log2(4000) ~ 12
    frame = random_rows(2000)
    check_engine_rows(model, frame, duckdb_runner(frame))
    check_engine_rows(model, frame, sqlite_runner(frame))


def test_unknown_branch_routing_in_sql():
    root = Node(counts=[2, 2], proba=[0.5, 0.5], node_id=0,
                split=Split("x", CONTINUOUS, threshold=1.0),
                children=[leaf(0, node_id=1), leaf(1, node_id=2)],
                shares=[0.5, 0.5], unknown_branch=0)
    model = model_of(root, 2)
    frame = pd.DataFrame({"x": [0.0, 2.0, None]})
    check_engine_rows(model, frame, duckdb_runner(frame))
    assert model.predict_row({"x": None}) == "class 0"


def test_fractional_probability_is_closed_form():
    root = Node(counts=[3, 1], proba=[0.75, 0.25], node_id=0,
                split=Split("c", NOMINAL, groups=[["a"], ["b"]]),
                children=[Node(counts=[2, 0], proba=[1.0, 0.0], node_id=1),
                          Node(counts=[1, 1], proba=[0.5, 0.5], node_id=2)],
                shares=[0.5, 0.5])
    model = model_of(root, 2)
    probs = compiler.compile_proba(root, 2)
    con = duckdb.connect()
    con.register("t", pd.DataFrame({"c": ["a", "b", None, "zzz"]}))
    got = con.execute(
        "SELECT " + ", ".join(p.sql("duckdb") for p in probs) + " FROM t").fetchall()
    assert got == [(1.0, 0.0), (0.5, 0.5), (0.75, 0.25), (0.75, 0.25)]
    assert model.predict_proba_row({"c": None}) == [0.75, 0.25]


DEEP_CASES = {
    "chain-1000": lambda: (model_of(chain_tree(1000), 2),
                           pd.DataFrame({"x": [i + 0.5 for i in range(0, 1001, 5)] + [None]})),
    "leaves-4000": lambda: (model_of(random_tree(4000), 3), random_rows(1000)),
}


@pytest.mark.parametrize("case", list(DEEP_CASES))
def test_deep_and_wide_trees_score_on_every_engine(engine_factory, case):
    """A depth-1000 chain and a 4000-leaf tree: the compiled SQL runs and equals Python."""
    model, frame = DEEP_CASES[case]()
    frame = frame.assign(rid=range(len(frame)))
    engine, source = engine_factory(frame, case)
    query = sqlglot.exp.select(
        sqlglot.exp.column("rid", quoted=True), model.to_expression().as_("p")
    ).from_(source)
    got = [p for _, p in sorted(engine.execute(query))]
    expected = [
        model.predict_row({k: (None if pd.isna(v) else v) for k, v in r.items()})
        for r in frame.to_dict("records")
    ]
    assert got == expected


# -- C4.5's fractional unknowns: the walk stops, the slow path spreads -------------------------
def fractional_tree(leaves: int, seed: int = 0, k: int = 3) -> Node:
    """A random C4.5-style tree: unknown values go down every branch by share (some 0),
    binary tests on x0..x3, multiway tests on c, pure leaves and leaves with near-ties.

    Grown mostly level by level, so it is about as deep as a C4.5 tree with these leaves: the
    closed form nests once per level, and SQLite's parser takes about 8.
    """
    rng = random.Random(seed)
    ids = iter(range(10**6))

    def new_leaf() -> Node:
        if rng.random() < 0.1:  # pure: the closed form of the other classes skips it
            proba = [0.0] * k
            proba[rng.randrange(k)] = 1.0
        elif rng.random() < 0.1:  # within the 1e-9 tie margin, either way round
            a = rng.random() / 2
            proba = [a, a + rng.choice([-5e-10, 5e-10]), 1 - 2 * a - 5e-10][:k]
        else:
            raw = [rng.random() for _ in range(k)]
            proba = [r / sum(raw) for r in raw]
        return Node(counts=list(proba), proba=proba, node_id=next(ids))

    root = new_leaf()
    frontier = [root]
    count = 1
    while count < leaves:
        node = frontier.pop(rng.randrange(min(len(frontier), 4)))
        if rng.random() < 0.25:
            values = ["a", "b", "c", "it's"]
            node.split = Split("c", NOMINAL, groups=[[v] for v in values])
        else:
            node.split = Split(f"x{rng.randrange(4)}", CONTINUOUS, threshold=round(rng.random(), 3))
        m = len(node.split.groups or [0, 0])
        shares = [0.0 if rng.random() < 0.15 else rng.random() for _ in range(m)]
        shares[rng.randrange(m)] += 0.5
        node.shares = [s / sum(shares) for s in shares]
        node.children = [new_leaf() for _ in range(m)]
        frontier.extend(node.children)
        count += m - 1
    return root


def unknown_rows(n: int, seed: int = 1) -> pd.DataFrame:
    """Rows with NULLs in every feature and nominal values no branch lists."""
    rng = random.Random(seed)
    return pd.DataFrame([
        {**{f"x{j}": (None if rng.random() < 0.15 else rng.random()) for j in range(4)},
         "c": rng.choice(["a", "b", "c", "it's", None, "zzz"])}
        for _ in range(n)
    ])


def python_rows(frame: pd.DataFrame) -> list[dict]:
    return [{k: (None if pd.isna(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fractional_tree_in_one_expression_equals_python(seed):
    model = model_of(fractional_tree(300, seed), 3)
    frame = unknown_rows(1500, seed)
    check_engine_rows(model, frame, duckdb_runner(frame))
    shallow = model_of(fractional_tree(100, seed), 3)
    check_engine_rows(shallow, frame, sqlite_runner(frame))
    con = duckdb.connect()
    con.register("t", frame)
    probs = compiler.compile_proba(model.root, 3)
    got = con.execute("SELECT " + ", ".join(p.sql("duckdb") for p in probs) + " FROM t").fetchall()
    want = [model.predict_proba_row(r) for r in python_rows(frame)]
    assert np.allclose(np.array(got, dtype=float), np.array(want), atol=1e-12)


@pytest.mark.parametrize("expand", [True, False], ids=["expansion", "closed-form"])
@pytest.mark.parametrize("seed", [0, 1])
def test_scoring_queries_equal_python_in_row_order(seed, expand):
    model = model_of(fractional_tree(400, seed), 3)
    frame = unknown_rows(3000, seed + 10).assign(rid=range(3000))
    con = duckdb.connect()
    con.register("t", frame)
    query = model.scoring_query(sqlglot.exp.to_table("t"), proba=True,
                                source_columns=list(frame.columns), expand=expand)
    got = con.execute(query.sql("duckdb")).df()
    assert list(got["rid"]) == list(range(3000))
    rows = python_rows(frame)
    assert list(got["prediction"]) == [model.predict_row(r) for r in rows]
    want = np.array([model.predict_proba_row(r) for r in rows])
    assert np.allclose(got[model.proba_columns()].to_numpy(dtype=float), want, atol=1e-12)


def test_walk_stops_only_where_the_rows_path_meets_an_unknown():
    # x <= 0.5: leaf 1; else c = a: leaf 3, c = b: leaf 4 (unknown c spreads)
    root = Node(counts=[2, 2], proba=[0.5, 0.5], node_id=0,
                split=Split("x", CONTINUOUS, threshold=0.5), shares=[0.5, 0.5],
                children=[leaf(0, node_id=1),
                          Node(counts=[1, 1], proba=[0.5, 0.5], node_id=2,
                               split=Split("c", NOMINAL, groups=[["a"], ["b"]]),
                               shares=[0.5, 0.5], children=[leaf(0, node_id=3),
                                                            leaf(1, node_id=4)])])
    frame = pd.DataFrame({"x": [0.1, 0.1, 0.9, 0.9, 0.9, None],
                          "c": [None, "zzz", "a", None, "zzz", "b"]})
    con = duckdb.connect()
    con.register("t", frame)
    got = [r[0] for r in con.execute(
        f"SELECT {compiler.compile_leaf(root).sql('duckdb')} FROM t").fetchall()]
    assert got == [1, 1, 3, None, None, None]


def test_expansion_query_grows_linearly():
    sizes = []
    for leaves in (1000, 4000):
        model = model_of(fractional_tree(leaves, 3), 3)
        query = model.scoring_query(sqlglot.exp.to_table("t"), source_columns=["x0"],
                                    expand=True)
        sizes.append(len(render(query, "duckdb")) / model.n_leaves)
    assert sizes[1] < 1.3 * sizes[0]


def test_a_wide_fractional_nominal_test_compiles_in_linear_time(monkeypatch):
    """An ID3 test over 10,000 values with unknown values spread (52 s before): the largest
    branch of each test is found once per test, not once per branch."""
    from sqltree.compiler.walk import Layout

    k, n = 3, 10_000
    root = Node(counts=[1.0] * k, proba=[1 / k] * k, node_id=0)
    root.split = Split("c", NOMINAL, groups=[[f"v{i}"] for i in range(n)])
    root.children = [leaf(i % k, k, node_id=i + 1) for i in range(n)]
    root.shares = [1 / n] * n
    calls = []
    heavy = Layout.heavy
    monkeypatch.setattr(Layout, "heavy", lambda self, node: calls.append(1) or heavy(self, node))
    sql = model_of(root, k).to_sql()
    assert len(calls) <= 4 * k and "'v9999'" in sql


@pytest.mark.parametrize("case", ["fractional-400"])
def test_fractional_tree_predicts_as_python_on_every_engine(engine_factory, case):
    """model.predict on each engine: DuckDB spreads by copies, the others in closed form."""
    model = model_of(fractional_tree(400, 5), 3)
    frame = unknown_rows(800, 7).assign(rid=range(800))
    engine, source = engine_factory(frame, case)
    got = model.predict(source, connection=engine, proba=True).sort_values("rid")
    rows = python_rows(frame)
    assert list(got["prediction"]) == [model.predict_row(r) for r in rows]
    want = np.array([model.predict_proba_row(r) for r in rows])
    assert np.allclose(got[model.proba_columns()].to_numpy(dtype=float), want, atol=1e-12)
