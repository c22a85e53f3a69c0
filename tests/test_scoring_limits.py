"""Scoring SQL that stays within every engine's limits and agrees with the Python walk.

Every form sqltree emits (the label and leaf expressions, the query with probabilities, the
view, ``predict``) runs on a depth-1000 chain and on 4,000-leaf trees, with unknown values sent
down one branch and spread over all of them (C4.5's fractional cases), on DuckDB and SQLite
here and on PostgreSQL and Spark in marked tests, and gives the Python walk's label,
probabilities and leaf for every row. The largest SQL, a 4,000-leaf multiway fractional tree's
(it leaves SQLite's parser the least stack and DuckDB the longest plan), runs on every engine;
the binary fractional tree has 1,000 leaves, whose closed form already guards its long sums
(63 guards) and nests within 2 units of the 4,000-leaf binary tree's, at a quarter of the
compile and plan time. Also here: branches that list no value (CART), columns
named ``true`` and ``false``, columns named like sqltree's helpers, and the names of the
probability columns.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot
from sqlglot import exp

import sqltree
from sqltree import compiler
from sqltree.compiler.scoring import PREFIX
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.errors import DataError
from sqltree.model import FeatureInfo, Model, render
from sqltree.tree import CONTINUOUS, NOMINAL, Node, Split
from tests.test_compiler import fractional_tree, unknown_rows

DIALECTS = ["duckdb", "sqlite", "postgres", "spark", "bigquery", "snowflake", "tsql", "mysql",
            "trino"]


# -- trees and rows --------------------------------------------------------------------------
def _leaf_maker(rng: random.Random, k: int) -> Callable[[], Node]:
    ids = iter(range(10**7))

    def make() -> Node:
        raw = [rng.random() for _ in range(k)]
        proba = [r / sum(raw) for r in raw]
        return Node(counts=list(proba), proba=proba, node_id=next(ids))

    return make


def chain(depth: int, *, fractional: bool, seed: int = 0) -> Node:
    """A caterpillar on x: ``x <= depth - i`` goes deeper, ``x > depth - i`` to a leaf."""
    rng = random.Random(seed)
    new_leaf = _leaf_maker(rng, 2)
    root = node = new_leaf()
    for i in range(depth):
        node.split = Split("x", CONTINUOUS, threshold=float(depth - i))
        share = rng.uniform(0.05, 0.95)
        node.shares = [share, 1 - share]
        node.unknown_branch = None if fractional else i % 2
        node.children = [new_leaf(), new_leaf()]
        node = node.children[0]
    return root


def wide(leaves: int, *, fractional: bool, k: int, seed: int = 0) -> Node:
    """A random binary tree over x0..x3 (continuous) and c (nominal, two groups)."""
    rng = random.Random(seed)
    new_leaf = _leaf_maker(rng, k)
    root = new_leaf()
    frontier = [root]
    while len(frontier) < leaves:
        node = frontier.pop(rng.randrange(len(frontier)))
        if rng.random() < 0.2:
            groups = [["a", "b"], ["c", "it's"]] if rng.random() < 0.5 else [["a"], ["b", "c"]]
            node.split = Split("c", NOMINAL, groups=groups)
        else:
            node.split = Split(f"x{rng.randrange(4)}", CONTINUOUS,
                               threshold=round(rng.random(), 3))
        share = rng.uniform(0.05, 0.95)
        node.shares = [share, 1 - share]
        node.unknown_branch = None if fractional else rng.randrange(2)
        node.children = [new_leaf(), new_leaf()]
        frontier.extend(node.children)
    return root


def model_of(root: Node, k: int, classes: list[Any] | None = None) -> Model:
    return Model(root=root, classes=classes or [f"class {i}" for i in range(k)], target="y",
                 features=[FeatureInfo("x", CONTINUOUS, "DOUBLE")])


def chain_rows(depth: int, step: int) -> pd.DataFrame:
    """Values between thresholds, on thresholds, beyond both ends, and NULLs."""
    xs: list[float | None] = [i + 0.5 for i in range(-1, depth + 1, step)]
    xs += [float(t) for t in range(1, depth + 1, step)] + [None, None]
    return pd.DataFrame({"x": xs, "rid": range(len(xs))})


def wide_rows(n: int, seed: int = 1) -> pd.DataFrame:
    rng = random.Random(seed)
    return pd.DataFrame([
        {**{f"x{j}": (None if rng.random() < 0.1 else rng.random()) for j in range(4)},
         "c": rng.choice(["a", "b", "c", "it's", None, "zzz"]), "rid": i}
        for i in range(n)
    ])


def python_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if pd.isna(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]


def python_leaf(root: Node, row: dict[str, Any]) -> int | None:
    """The leaf a row's known values (and routed unknown values) reach; None where a
    fractional test meets an unknown value."""
    node = root
    while node.split is not None:
        branch = node.split.branch_of(row.get(node.split.feature))
        if branch is None:
            branch = node.unknown_branch
        if branch is None:
            return None
        node = node.children[branch]
    return node.node_id


# -- running every form ----------------------------------------------------------------------
class Runner:
    """One engine holding the rows as table ``t``; runs SQL text, returns rows by ``rid``."""

    def __init__(self, dialect: str, frame: pd.DataFrame) -> None:
        self.dialect = dialect
        if dialect == "sqlite":
            self.con: Any = sqlite3.connect(":memory:")
            frame.to_sql("t", self.con, index=False)
        else:
            self.con = duckdb.connect()
            self.con.register("frame", frame)
            self.con.execute("CREATE TABLE t AS SELECT * FROM frame")
            self.con.unregister("frame")

    def run(self, sql: str) -> list[tuple[Any, ...]]:
        return list(self.con.execute(sql).fetchall())

    def select(self, query: exp.Select) -> list[tuple[Any, ...]]:
        query = query.order_by(exp.column("rid", quoted=True), copy=False)
        return self.run(render(query, self.dialect))


def expression_form(model: Model, output: str, relation: str = "t") -> exp.Select:
    """``SELECT rid, <to_sql(output=...)> FROM relation``: the expression as a user embeds it."""
    return exp.Select(expressions=[
        exp.column("rid", quoted=True),
        exp.Alias(this=model.to_expression(output), alias=exp.to_identifier("p")),
    ]).from_(exp.to_table(relation), copy=False)


def check_forms(model: Model, frame: pd.DataFrame, runner: Runner) -> None:
    """The leaf, and the view with the label and probabilities, on every row, against Python.

    The view's label is the label expression itself (``to_expression("label")``, as
    ``test_the_views_label_is_the_label_expression`` checks), so one statement checks both: the
    largest trees' SQL is most of the time these tests take.
    """
    rows = python_rows(frame)
    labels = [model.predict_row(r) for r in rows]
    probas = np.array([model.predict_proba_row(r) for r in rows])
    leaves = [python_leaf(model.root, r) for r in rows]
    assert [p for _, p in runner.select(expression_form(model, "leaf"))] == leaves
    runner.run(model.to_sql(runner.dialect, table="t", view="v", proba=True))
    names = [*frame.columns, "prediction", *model.proba_columns()]
    got = pd.DataFrame(runner.select(exp.select("*").from_("v")), columns=names)
    assert list(got["prediction"]) == labels
    assert np.allclose(got[model.proba_columns()].to_numpy(dtype=float), probas, atol=1e-12)


DEEP = {
    "chain-1000": (lambda: model_of(chain(1000, fractional=False), 2), lambda: chain_rows(1000, 7)),
    "chain-1000-fractional": (lambda: model_of(chain(1000, fractional=True), 2),
                              lambda: chain_rows(1000, 7)),
    "leaves-4000": (lambda: model_of(wide(4000, fractional=False, k=3), 3),
                    lambda: wide_rows(400)),
}
WIDE_FRACTIONAL = {
    "leaves-1000-fractional": (lambda: model_of(wide(1000, fractional=True, k=2, seed=1), 2),
                               lambda: wide_rows(400, 2)),
    "multiway-2000-fractional": (lambda: model_of(fractional_tree(2000, 4), 3),
                                 lambda: unknown_rows(400, 5).assign(rid=range(400))),
}


@pytest.mark.parametrize("dialect", ["duckdb", "sqlite"])
@pytest.mark.parametrize("case", list(DEEP))
def test_deep_trees_every_form(case, dialect):
    make_model, make_rows = DEEP[case]
    model, frame = make_model(), make_rows()
    check_forms(model, frame, Runner(dialect, frame))


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["duckdb", "sqlite"])
@pytest.mark.parametrize("case", list(WIDE_FRACTIONAL))
def test_wide_fractional_trees_every_form(case, dialect):
    make_model, make_rows = WIDE_FRACTIONAL[case]
    model, frame = make_model(), make_rows()
    check_forms(model, frame, Runner(dialect, frame))


@pytest.mark.parametrize("case", ["chain-1000-fractional", "leaves-4000"])
def test_deep_trees_predict_on_duckdb(case):
    make_model, make_rows = DEEP[case]
    model, frame = make_model(), make_rows()
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    for expand in (True, False):  # copies that walk on, and the closed form in a query
        query = model.scoring_query(exp.to_table("t"), proba=True,
                                    source_columns=list(frame.columns), expand=expand)
        got = con.execute(render(query, "duckdb")).df().sort_values("rid")
        assert_scored_like_python(model, frame, got)


def assert_scored_like_python(model: Model, frame: pd.DataFrame, got: pd.DataFrame) -> None:
    rows = python_rows(frame)
    assert list(got["prediction"]) == [model.predict_row(r) for r in rows]
    want = np.array([model.predict_proba_row(r) for r in rows])
    assert np.allclose(got[model.proba_columns()].to_numpy(dtype=float), want, atol=1e-12)


def test_the_views_label_is_the_label_expression():
    model = model_of(fractional_tree(80, 6), 3)
    for proba in (False, True):
        query = model.scoring_query(exp.to_table("t"), proba=proba)
        assert query.selects[1].this == model.to_expression("label")


def test_nesting_stays_logarithmic():
    """SQLite's parser keeps about 90 units of stack: each form leaves most of it unused."""
    con = sqlite3.connect(":memory:")
    con.execute('CREATE TABLE t ("x", "x0", "x1", "x2", "x3", "c", "rid")')

    def headroom(sql: str) -> int:  # how many more parentheses the parser would take
        free = 0
        for k in (60, 40, 20, 10):
            wrapped = "(" * (free + k) + sql + ")" * (free + k)
            try:
                con.execute(f"SELECT {wrapped} FROM t LIMIT 0")
            except sqlite3.OperationalError as error:
                assert "parser stack overflow" in str(error)
                continue
            free += k
        return free

    for root, k in [(chain(1000, fractional=True), 2), (wide(1000, fractional=True, k=2), 2)]:
        model = model_of(root, k)
        assert headroom(model.to_sql("sqlite")) >= 40
        assert headroom(model.to_sql("sqlite", output="leaf")) >= 40
        for p in compiler.compile_proba(model.root, k):
            assert headroom(render(p, "sqlite")) >= 40


def test_id3_staircase_scores_on_sqlite():
    """A 12-step staircase: ID3's tree is a chain whose unknown values spread at every step."""
    xs = [float(i) for i in range(12) for _ in range(3)]
    train = pd.DataFrame({"x": [*xs, None, None],
                          "y": [("a" if i % 2 else "b") for i in range(12) for _ in range(3)]
                          + ["a", "b"]})
    model = sqltree.train(train, target="y", algorithm="id3")
    assert model.depth >= 11 and compiler.has_fractional(model.root)
    frame = pd.DataFrame({"x": [*[i - 0.5 for i in range(14)], None], "rid": range(15)})
    check_forms(model, frame, Runner("sqlite", frame))


# -- engines in marked tests -----------------------------------------------------------------
@pytest.mark.postgres
@pytest.mark.parametrize("engine_factory", ["postgres"], indirect=True)
@pytest.mark.parametrize("case", ["chain-1000-fractional", "leaves-4000", *[
    pytest.param(case, marks=pytest.mark.slow) for case in WIDE_FRACTIONAL]])
def test_deep_trees_on_postgres(engine_factory, postgres_admin, case):
    make_model, make_rows = {**DEEP, **WIDE_FRACTIONAL}[case]
    model, frame = make_model(), make_rows()
    engine, source = engine_factory(frame, "deep")
    rows = python_rows(frame)
    query = expression_form(model, "leaf")  # the label: in the view (see check_forms)
    query.set("from_", exp.From(this=source.copy()))
    assert [p for _, p in sorted(engine.execute(query))] == [python_leaf(model.root, r)
                                                              for r in rows]
    view = exp.Table(this=exp.to_identifier("v"), db=source.args["db"].copy())
    postgres_admin.execute(model.to_sql("postgres", table=render(source, "postgres"),
                                        view=render(view, "postgres"), proba=True))
    got = engine.frame(exp.select("*").from_(view)).sort_values("rid")
    assert_scored_like_python(model, frame, got)
    got = model.predict(source, connection=engine, proba=True).sort_values("rid")
    assert_scored_like_python(model, frame, got)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("engine_factory", ["spark"], indirect=True)
def test_depth_1000_chain_on_spark(engine_factory):
    """Spark parses deep expressions slowly and gives up on about 100 nested CASEs."""
    model = model_of(chain(1000, fractional=True), 2)
    frame = chain_rows(1000, 150)
    engine, source = engine_factory(frame, "chain")
    rows = python_rows(frame)
    query = expression_form(model, "label")
    query.set("from_", exp.From(this=source.copy()))
    assert [p for _, p in sorted(engine.execute(query))] == [model.predict_row(r) for r in rows]
    scored = engine.spark.sql(model.to_sql("spark", table=render(source, "spark"), proba=True))
    assert_scored_like_python(model, frame, scored.toPandas().sort_values("rid"))


# -- branches that list no value -------------------------------------------------------------
def test_cart_branch_of_unknown_values_only_has_no_empty_list():
    train = pd.DataFrame({"c": ["a"] * 10 + [None] * 10, "y": ["p"] * 10 + ["q"] * 10})
    model = sqltree.train(train, target="y", algorithm="cart")
    assert model.root.split is not None and [] in (model.root.split.groups or [])
    for dialect in DIALECTS:
        sql = model.to_sql(dialect, table="t", proba=True)
        assert "()" not in sql.replace(" ", "")
        assert sqlglot.parse_one(sql, read=dialect) is not None
    frame = pd.DataFrame({"c": ["a", None, "b", "a"], "rid": range(4)})
    for dialect in ("duckdb", "sqlite"):
        check_forms(model, frame, Runner(dialect, frame))
    assert [model.predict_row(r) for r in python_rows(frame)] == ["p", "q", "q", "p"]


@pytest.mark.postgres
@pytest.mark.parametrize("engine_factory", ["postgres"], indirect=True)
def test_cart_branch_of_unknown_values_only_on_postgres(engine_factory, postgres_admin):
    train = pd.DataFrame({"c": ["a"] * 10 + [None] * 10, "y": ["p"] * 10 + ["q"] * 10})
    model = sqltree.train(train, target="y", algorithm="cart")
    frame = pd.DataFrame({"c": ["a", None, "b", "a"], "rid": range(4)})
    engine, source = engine_factory(frame, "cart")
    for output in ("label", "leaf"):
        query = expression_form(model, output)
        query.set("from_", exp.From(this=source.copy()))
        want = [(model.predict_row(r) if output == "label" else python_leaf(model.root, r))
                for r in python_rows(frame)]
        assert [p for _, p in sorted(engine.execute(query))] == want
    view = exp.Table(this=exp.to_identifier("v"), db=source.args["db"].copy())
    postgres_admin.execute(model.to_sql("postgres", table=render(source, "postgres"),
                                        view=render(view, "postgres"), proba=True))
    assert_scored_like_python(model, frame, engine.frame(exp.select("*").from_(view))
                              .sort_values("rid"))
    got = model.predict(source, connection=engine, proba=True).sort_values("rid")
    assert_scored_like_python(model, frame, got)


def _empty_group_trees() -> dict[str, Node]:
    """Nominal tests with a branch that lists no value, in every position and routing."""

    def leaf(p: float, node_id: int) -> Node:
        return Node(counts=[p, 1 - p], proba=[p, 1 - p], node_id=node_id)

    def test(groups: list[list[str]], children: list[Node], unknown: int | None,
             node_id: int, feature: str = "c") -> Node:
        n = len(children)
        return Node(counts=[1, 1], proba=[0.5, 0.5], split=Split(feature, NOMINAL, groups=groups),
                    children=children, shares=[1 / n] * n, unknown_branch=unknown,
                    node_id=node_id)

    def inner(node_id: int) -> Node:
        return test([["u"], ["v"]], [leaf(0.9, node_id + 1), leaf(0.2, node_id + 2)], None,
                    node_id, "d")

    return {
        "routed-to-empty": test([["a"], []], [leaf(1.0, 1), leaf(0.0, 2)], 1, 0),
        "routed-elsewhere": test([[], ["a", "b"]], [leaf(1.0, 1), leaf(0.3, 2)], 1, 0),
        "empty-unreached": test([["a"], []], [leaf(1.0, 1), leaf(0.0, 2)], 0, 0),
        "empty-largest": test([["a"], []], [leaf(1.0, 1), inner(2)], 1, 0),
        "fractional-empty": test([["a"], [], ["b"]], [leaf(1.0, 1), inner(2), leaf(0.4, 5)],
                                 None, 0),
        "fractional-empty-largest": test([["a"], []], [leaf(0.7, 1), inner(2)], None, 0),
        "nothing-listed": test([[], []], [leaf(0.6, 1), inner(2)], None, 0),
    }


@pytest.mark.parametrize("case", list(_empty_group_trees()))
def test_branch_listing_no_value_routes_as_python(case):
    model = model_of(_empty_group_trees()[case], 2)
    frame = pd.DataFrame({"c": ["a", "b", None, "zzz", "a", "b"],
                          "d": ["u", "v", None, "u", "w", None], "rid": range(6)})
    for dialect in ("duckdb", "sqlite"):
        check_forms(model, frame, Runner(dialect, frame))
    con = duckdb.connect()
    con.register("t", frame)
    for expand in (True, False):
        query = model.scoring_query(exp.to_table("t"), proba=True,
                                    source_columns=list(frame.columns), expand=expand)
        assert_scored_like_python(model, frame, con.execute(render(query, "duckdb")).df()
                                  .sort_values("rid"))


# -- TRUE and FALSE --------------------------------------------------------------------------
def boolean_model() -> Model:
    """C4.5 on a boolean feature with a boolean label, with unknown values (fractional)."""
    train = pd.DataFrame({
        "b": [True] * 6 + [False] * 6 + [None] * 2,
        "e": ["x", "y"] * 7,
        "y": [True] * 5 + [False] + [False] * 5 + [True] + [True, False],
    })
    model = sqltree.train(train, target="y", features=["b", "e"], pruning=None)
    assert model.root.split is not None and model.root.split.feature == "b"
    return model


def boolean_rows() -> pd.DataFrame:
    # Values in "true" and "false" that would flip every test that read them instead.
    return pd.DataFrame({"b": [True, False, None, True, False], "e": ["x", "y", "x", None, "y"],
                         "true": [0, 0, 0, 0, 0], "false": [1, 1, 1, 1, 1], "rid": range(5)})


@pytest.mark.parametrize("dialect", ["duckdb", "sqlite"])
def test_columns_named_true_and_false_are_not_read_as_booleans(dialect):
    model = boolean_model()
    assert "TRUE" not in model.to_sql(dialect) and "FALSE" not in model.to_sql(dialect)
    check_forms(model, boolean_rows(), Runner(dialect, boolean_rows()))


@pytest.mark.postgres
@pytest.mark.parametrize("engine_factory", ["postgres"], indirect=True)
def test_columns_named_true_and_false_on_postgres(engine_factory):
    model = boolean_model()
    frame = boolean_rows()
    engine, source = engine_factory(frame, "booleans")
    got = model.predict(source, connection=engine, proba=True).sort_values("rid")
    assert_scored_like_python(model, frame, got)
    query = expression_form(model, "label")
    query.set("from_", exp.From(this=source.copy()))
    rows = python_rows(frame)
    assert [p for _, p in sorted(engine.execute(query))] == [model.predict_row(r) for r in rows]


# -- columns named like sqltree's helpers ----------------------------------------------------
def helper_names(model: Model, columns: list[str]) -> set[str]:
    """Every helper name the scoring queries use for this model."""
    names: set[str] = set()
    for expand in (True, False):
        query = model.scoring_query(exp.to_table("t"), proba=True, source_columns=columns,
                                    expand=expand)
        names |= {i.name for i in query.find_all(exp.Identifier)
                  if i.name.startswith(PREFIX)}
    return names


def captured_rows(model: Model, upper: bool) -> pd.DataFrame:
    frame = unknown_rows(300, 3)
    helpers = sorted(helper_names(model, [*frame.columns, "rid"]))
    assert {"__sqltree_entry", "__sqltree_at", "__sqltree_fast", "__sqltree_row"} <= set(helpers)
    extra = {(h.upper() if upper else h): [(-1, 0, 1)[i % 3] for i in range(300)]
             for h in helpers}
    return frame.assign(rid=range(300), **extra)


@pytest.mark.parametrize("upper", [False, True], ids=["same-case", "upper-case"])
def test_columns_named_like_helpers_are_not_captured(upper):
    """Every helper name as a column of the scored table, which is named like a helper too."""
    model = model_of(fractional_tree(80, 6), 3)
    frame = captured_rows(model, upper)
    con = duckdb.connect(config={"memory_limit": "1GB"})  # a captured walk grew without bound
    con.register("frame", frame)
    con.execute('CREATE TABLE "__sqltree_walk" AS SELECT * FROM frame')
    scored = [model.predict("__sqltree_walk", connection=DuckDBEngine(con), proba=True)]
    query = model.scoring_query(exp.to_table('"__sqltree_walk"'), proba=True,
                                source_columns=list(frame.columns))  # the closed form
    scored.append(con.execute(render(query, "duckdb")).df())
    for got in scored:
        got = got.sort_values("rid")
        assert_scored_like_python(model, frame, got)
        assert got[list(frame.columns)].reset_index(drop=True).equals(frame)


@pytest.mark.postgres
@pytest.mark.parametrize("engine_factory", ["postgres"], indirect=True)
def test_columns_named_like_helpers_on_postgres(engine_factory):
    model = model_of(fractional_tree(80, 6), 3)
    frame = captured_rows(model, False)
    engine, source = engine_factory(frame, "__sqltree_spread")
    got = model.predict(source, connection=engine, proba=True).sort_values("rid")
    assert_scored_like_python(model, frame, got)


# -- probability columns ---------------------------------------------------------------------
def test_labels_that_differ_only_in_case_are_refused_by_name():
    model = model_of(_empty_group_trees()["routed-to-empty"], 2, classes=["YES", "yes"])
    with pytest.raises(DataError, match="'YES' and 'yes'"):
        model.proba_columns()
    with pytest.raises(DataError, match="proba_YES"):
        model.to_sql(table="t", proba=True)
    frame = pd.DataFrame({"c": ["a", None]})
    with pytest.raises(DataError, match="'YES' and 'yes'"):
        model.predict(frame, proba=True)
    assert list(model.predict(frame)["prediction"]) == ["YES", "yes"]


def test_probability_columns_are_named_after_labels():
    model = model_of(_empty_group_trees()["routed-to-empty"], 2, classes=["no", 1.5])
    assert model.proba_columns() == ["proba_no", "proba_1.5"]
    with pytest.raises(ValueError, match="proba_no"):
        model.to_sql(table="t", proba=True, column="PROBA_NO")
