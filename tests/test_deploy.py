"""Scoring SQL where people deploy it: ``unknown="majority"``, identifiers left unquoted, dbt
model files, and the ``sqltree sql`` flags that ask for them.

Every form is run on DuckDB, PostgreSQL, Spark and SQLite and compared, row by row, with the
Python walk that does the same (``predict_row`` / ``leaf_row`` with the same ``unknown``).
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import jinja2
import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.cli import main
from sqltree.errors import OptionError
from sqltree.model import FeatureInfo, Model
from sqltree.tree import CONTINUOUS, NOMINAL, Node, Split
from tests.helpers import GOLF, ROOT, mixed_table, read_csv
from tests.test_compiler import fractional_tree, model_of, python_rows, unknown_rows


# -- data -------------------------------------------------------------------------------------
def with_nulls(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    for i, name in enumerate(["a", "b", "c", "d", "e"]):
        frame.loc[frame.index % (3 + i) == 0, name] = None
    return frame


@pytest.fixture(scope="module")
def trained() -> Model:
    """A C4.5 tree whose tests spread unknown values over their branches."""
    model = sqltree.train(with_nulls(mixed_table(3000, seed=7)), target="label", max_depth=5)
    assert any(not n.is_leaf and n.unknown_branch is None for n in model.root.walk())
    return model


def scoring_rows(n: int = 600) -> pd.DataFrame:
    """Rows to score: NULLs in every feature, and nominal values no branch lists."""
    frame = with_nulls(mixed_table(n, seed=11))
    frame.loc[frame.index % 7 == 1, "d"] = "purple"
    frame.loc[frame.index % 11 == 2, "e"] = "w"
    return frame.assign(rid=range(n))


def run_sql(engine, text: str) -> list[tuple]:
    """Run SQL text as it is, on the engine's own connection."""
    engine.begin()
    return engine._run(text)


def by_rid(rows: list[tuple], rid_index: int) -> list[tuple]:
    return sorted(rows, key=lambda r: r[rid_index])


def walk(model: Model, frame: pd.DataFrame, unknown: str) -> tuple[list, list, np.ndarray]:
    rows = python_rows(frame)
    return ([model.predict_row(r, unknown=unknown) for r in rows],
            [model.leaf_row(r, unknown=unknown) for r in rows],
            np.array([model.predict_proba_row(r, unknown=unknown) for r in rows]))


def check_scored(model: Model, frame: pd.DataFrame, dialect: str, table: str, run,
                 unknown: str) -> None:
    """``to_sql(table=...)`` for labels with probabilities, and for leaves, equals the walk."""
    labels, leaves, proba = walk(model, frame, unknown)
    n = len(frame.columns)
    got = by_rid(run(model.to_sql(dialect, table=table, proba=True, unknown=unknown)), n - 1)
    assert [r[n] for r in got] == labels
    assert np.allclose(np.array([r[n + 1:] for r in got], dtype=float), proba, atol=1e-12)
    got = by_rid(run(model.to_sql(dialect, table=table, output="leaf", unknown=unknown)), n - 1)
    assert [r[n] for r in got] == leaves


# -- unknown="majority" -----------------------------------------------------------------------
@pytest.mark.parametrize("unknown", ["majority", "fractional"])
def test_scoring_sql_equals_the_python_walk_on_every_engine(engine_factory, trained, unknown):
    frame = scoring_rows()
    engine, source = engine_factory(frame, "to_score")
    check_scored(trained, frame, engine.dialect, source.sql(engine.dialect),
                 lambda text: run_sql(engine, text), unknown)
    scored = trained.predict(source, connection=engine, unknown=unknown).sort_values("rid")
    assert list(scored["prediction"]) == walk(trained, frame, unknown)[0]
    leaves = trained.predict(source, connection=engine, unknown=unknown, output="leaf",
                             column="leaf").sort_values("rid")
    assert [None if pd.isna(v) else int(v) for v in leaves["leaf"]] == walk(
        trained, frame, unknown)[1]


@pytest.mark.parametrize("unknown", ["majority", "fractional"])
def test_scoring_sql_equals_the_python_walk_on_sqlite(trained, unknown):
    frame = scoring_rows()
    con = sqlite3.connect(":memory:")
    frame.to_sql("t", con, index=False)
    check_scored(trained, frame, "sqlite", "t", lambda text: con.execute(text).fetchall(),
                 unknown)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_majority_on_trees_with_empty_and_tied_branches(seed):
    """Random C4.5-style trees: some shares 0, nominal tests with values no row lists."""
    model = model_of(fractional_tree(300, seed), 3)
    frame = unknown_rows(1500, seed).assign(rid=range(1500))
    con = duckdb.connect()
    con.register("t", frame)
    check_scored(model, frame, "duckdb", "t", lambda text: con.execute(text).fetchall(),
                 "majority")


def test_majority_takes_the_heaviest_branch_first_on_ties():
    def leaf(c: int) -> Node:
        return Node(counts=[1.0 - c, float(c)], proba=[1.0 - c, float(c)], node_id=c + 1)

    split = Split("x", NOMINAL, groups=[["a"], ["b"], ["c"]])
    root = Node([1.0, 1.0], [0.5, 0.5], split, [leaf(0), leaf(1), leaf(0)], [0.25, 0.5, 0.25])
    model = Model(root, ["n", "y"], "t", [FeatureInfo("x", NOMINAL, "TEXT")])
    assert model.predict_row({"x": None}, unknown="majority") == "y"
    assert model.leaf_row({"x": "zzz"}, unknown="majority") == 2
    assert model.leaf_row({"x": None}) is None  # the exact form spreads the row instead
    root.shares = [0.4, 0.2, 0.4]
    assert model.leaf_row({"x": None}, unknown="majority") == 1
    con = duckdb.connect()
    got = con.execute(f"SELECT {model.to_sql(output='leaf', unknown='majority')} "
                      "FROM (VALUES (NULL), ('zzz'), ('b')) t(x)").fetchall()
    assert got == [(1,), (1,), (2,)]


def test_majority_sql_is_a_plain_case(trained):
    exact = trained.to_sql()
    plain = trained.to_sql(unknown="majority")
    assert "COALESCE" in exact and "COALESCE" not in plain
    assert not re.search(r"e0\b", plain)  # no probability arithmetic
    assert len(plain) * 5 < len(exact)
    # a tree whose unknown values each take one branch: the same SQL either way
    cart = sqltree.train(with_nulls(mixed_table(1000)), target="label", algorithm="cart",
                         max_depth=4)
    assert cart.to_sql(unknown="majority") == cart.to_sql()


def test_unknown_must_be_a_known_route(trained):
    for call in (lambda: trained.to_sql(unknown="heaviest"),
                 lambda: trained.predict_row({}, unknown="drop"),
                 lambda: trained.to_dbt("sales", unknown="")):
        with pytest.raises(OptionError, match="unknown must be one of"):
            call()


# -- identifiers left unquoted ------------------------------------------------------------------
@pytest.fixture(scope="module")
def golf_upper() -> Model:
    """Golf with column names in mixed case, as a DataFrame or a quoted CREATE TABLE has them."""
    frame = read_csv(GOLF).rename(columns=str.capitalize)
    return sqltree.train(frame, target="Play")


@pytest.mark.parametrize(("dialect", "outlook", "table"), [
    ("snowflake", "OUTLOOK", "SALES"),   # folds unquoted names to upper case
    ("oracle", "OUTLOOK", "SALES"),
    ("postgres", "outlook", "sales"),    # folds to lower case
    ("duckdb", "outlook", "sales"),      # case-insensitive: sqlglot writes lower case
    ("bigquery", "outlook", "sales"),
    ("mysql", "Outlook", "Sales"),       # case-sensitive: as written
])
def test_unquoted_identifiers_are_folded_as_the_dialect_folds_them(golf_upper, dialect,
                                                                   outlook, table):
    sql = golf_upper.to_sql(dialect, table="Sales", proba=True, quote_identifiers=False)
    assert f"{outlook} = 'overcast'" in sql and sql.endswith(f"FROM {table}")
    assert '"' not in sql and "`" not in sql
    prediction = {"OUTLOOK": "PREDICTION", "outlook": "prediction", "Outlook": "prediction"}
    assert f"AS {prediction[outlook]}" in sql
    assert golf_upper.to_sql(dialect) == golf_upper.to_sql(dialect, quote_identifiers=True)


def lower_case_golf() -> pd.DataFrame:
    """Golf as a table created with unquoted names stores it on PostgreSQL: lower case."""
    return read_csv(GOLF).assign(rid=range(14))


def test_unquoted_sql_reads_a_table_made_with_unquoted_names(engine_factory, golf_upper):
    frame = lower_case_golf()
    engine, source = engine_factory(frame, "golf")
    table = source.sql(engine.dialect)
    quoted = golf_upper.to_sql(engine.dialect, table=table)
    unquoted = golf_upper.to_sql(engine.dialect, table=table, quote_identifiers=False)
    got = by_rid(run_sql(engine, unquoted), 5)
    assert [r[6] for r in got] == list(frame["play"])
    if engine.dialect == "postgres":  # "Outlook" names no column of that table
        with pytest.raises(Exception, match="Outlook"):
            run_sql(engine, quoted)


def test_unquoted_sql_on_sqlite(golf_upper):
    con = sqlite3.connect(":memory:")
    lower_case_golf().to_sql("golf", con, index=False)
    rows = con.execute(golf_upper.to_sql("sqlite", table="golf", quote_identifiers=False))
    assert [r[6] for r in rows] == list(read_csv(GOLF)["play"])


def one_feature_model(feature: str, label: str = "yes") -> Model:
    root = Node([1.0, 1.0], [0.5, 0.5], Split(feature, CONTINUOUS, threshold=1.0),
                [Node([1.0, 0.0], [1.0, 0.0], node_id=1), Node([0.0, 1.0], [0.0, 1.0], node_id=2)],
                [0.5, 0.5], unknown_branch=0)
    return Model(root, ["no", label], "y", [FeatureInfo(feature, CONTINUOUS, "DOUBLE")])


@pytest.mark.parametrize("name", ["it's", "a b", "1st", "größe", "select", "order", "user",
                                  "current_date", "table", ""])
def test_names_that_cannot_be_unquoted_are_refused(name):
    model = one_feature_model(name)
    assert model.to_sql("snowflake")  # quoted, any name is fine
    with pytest.raises(OptionError, match=re.escape(f"the column {name!r} cannot be written "
                                                   "unquoted")):
        model.to_sql("snowflake", quote_identifiers=False)


def test_output_and_table_names_that_cannot_be_unquoted_are_refused():
    model = one_feature_model("x", label="1.5")
    with pytest.raises(OptionError, match=r"output column 'proba_1\.5'"):
        model.to_sql("postgres", table="t", proba=True, quote_identifiers=False)
    with pytest.raises(OptionError, match="table name 'my table'"):
        model.to_sql("postgres", table='"my table"', quote_identifiers=False)
    assert "FROM T" in model.to_sql("snowflake", table="t", quote_identifiers=False)


# -- dbt model files ----------------------------------------------------------------------------
def render_dbt(text: str, tables: dict[str, str]) -> str:
    """What dbt makes of a model file: Jinja rendered, ``ref`` replaced by the relation."""
    return jinja2.Template(text).render(ref=lambda name: tables[name])


def test_dbt_model_file(trained):
    text = trained.to_dbt("sales", "snowflake", proba=True)
    assert text.startswith("-- label predicted by a sqltree c4.5 tree")
    assert "FROM {{ ref('sales') }}\n" in text and text.endswith("}}\n")
    sql = "\n".join(line for line in render_dbt(text, {"sales": "sales"}).splitlines()
                    if not line.startswith("--"))
    assert sql == trained.to_sql("snowflake", table="sales", proba=True, pretty=True)


@pytest.mark.parametrize("unknown", ["fractional", "majority"])
def test_dbt_model_runs_on_every_engine(engine_factory, trained, unknown):
    frame = scoring_rows(300)
    engine, source = engine_factory(frame, "to_score")
    text = trained.to_dbt("to_score", engine.dialect, unknown=unknown)
    rows = by_rid(run_sql(engine, render_dbt(text, {"to_score": source.sql(engine.dialect)})),
                  len(frame.columns) - 1)
    assert [r[-1] for r in rows] == walk(trained, frame, unknown)[0]


def test_dbt_keeps_jinja_like_text_from_jinja():
    model = one_feature_model("x", label="{{ boom }} {% if %}")
    text = model.to_dbt("t")
    assert "{% raw %}" in text and "{{ ref('t') }}" in text
    sql = render_dbt(text, {"t": "(VALUES (0.5), (2.0)) AS t(x)"})
    got = duckdb.connect().execute(sql).fetchall()
    assert got == [(0.5, "no"), (2.0, "{{ boom }} {% if %}")]


@pytest.mark.parametrize("ref", ["", "sales; drop", "it's", "a.b", "{{ x }}"])
def test_dbt_ref_must_name_a_model(trained, ref):
    with pytest.raises(OptionError, match="a dbt ref names a model"):
        trained.to_dbt(ref)


def sqltree_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "sqltree.cli", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, check=True)


DBT_PROJECT = "name: scoring\nversion: '1.0'\nprofile: scoring\nconfig-version: 2\n"
DBT_PROFILE = """scoring:
  target: dev
  outputs:
    dev:
      type: duckdb
      path: {path}
      threads: 1
"""


@pytest.mark.slow
def test_dbt_duckdb_runs_the_model_files(tmp_path, trained):
    """``sqltree sql --dbt`` files, built by dbt-duckdb on the seed-like model they ref."""
    frame = scoring_rows(400)
    frame.to_parquet(tmp_path / "rows.parquet", index=False)
    models = tmp_path / "models"
    models.mkdir()
    (tmp_path / "dbt_project.yml").write_text(DBT_PROJECT)
    (tmp_path / "profiles.yml").write_text(DBT_PROFILE.format(path=tmp_path / "dbt.duckdb"))
    (models / "sales.sql").write_text(f"select * from read_parquet('{tmp_path}/rows.parquet')")
    trained.save(tmp_path / "model.json")
    sqltree_cli("sql", "model.json", "--dbt", "--source-ref", "sales", "--proba",
                "-o", "models/scored.sql", cwd=tmp_path)
    sqltree_cli("sql", "model.json", "--dbt", "--source-ref", "sales", "--unknown", "majority",
                "--leaf", "-o", "models/scored_leaf.sql", cwd=tmp_path)
    env = {**os.environ, "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    run = subprocess.run(
        [sys.executable, "-c", "from dbt.cli.main import cli; cli()", "run",
         "--project-dir", str(tmp_path), "--profiles-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    con = duckdb.connect(str(tmp_path / "dbt.duckdb"), read_only=True)
    labels, _, proba = walk(trained, frame, "fractional")
    scored = con.execute("SELECT * FROM scored ORDER BY rid").df()
    assert list(scored["prediction"]) == labels
    assert np.allclose(scored[trained.proba_columns()].to_numpy(dtype=float), proba,
                       atol=1e-12)
    leaves = con.execute("SELECT leaf FROM scored_leaf ORDER BY rid").fetchall()
    assert [r[0] for r in leaves] == walk(trained, frame, "majority")[1]


# -- sqltree sql ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_file(tmp_path_factory, trained):
    path = tmp_path_factory.mktemp("models") / "mixed.json"
    trained.save(path)
    return path


def cli(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_sql_flags_give_what_to_sql_gives(capsys, model_file, trained):
    status, out, err = cli(capsys, "sql", model_file, "--unknown", "majority")
    assert (status, out) == (0, trained.to_sql(unknown="majority") + "\n")
    assert err.startswith(f"compiled {trained.n_leaves} leaves into ")
    assert cli(capsys, "sql", model_file, "--unknown", "majority", "-q")[2] == ""
    status, out, _ = cli(capsys, "sql", model_file, "--leaf", "--table", "t", "-d", "postgres")
    assert status == 0
    assert out == trained.to_sql("postgres", output="leaf", table="t", column="leaf") + "\n"
    assert out.rstrip().endswith('AS "leaf" FROM t')
    _, out, _ = cli(capsys, "sql", model_file, "--no-quote", "-d", "snowflake", "--table", "t")
    assert out == trained.to_sql("snowflake", table="t", quote_identifiers=False) + "\n"
    _, out, _ = cli(capsys, "sql", model_file, "--dbt", "--source-ref", "sales", "--proba")
    assert out == trained.to_dbt("sales", proba=True)


def test_sql_writes_a_file(capsys, model_file, trained, tmp_path):
    target = tmp_path / "scored.sql"
    status, out, err = cli(capsys, "sql", model_file, "--dbt", "--source-ref", "sales",
                           "-o", target)
    assert (status, out, err.splitlines()[-1]) == (0, "", f"wrote {target}")
    assert target.read_text() == trained.to_dbt("sales")


@pytest.mark.parametrize(("flags", "message"), [
    (["--dbt"], "--dbt needs --source-ref NAME"),
    (["--source-ref", "sales"], "--source-ref names the ref of a dbt model file: add --dbt"),
    (["--dbt", "--source-ref", "sales", "--table", "t"], "--table does not go with --dbt"),
    (["--dbt", "--source-ref", "sales", "--view", "v"], "--view does not go with --dbt"),
    (["--dbt", "--source-ref", "a-b"], "a dbt ref names a model"),
    (["--no-quote", "--table", "my table"], "cannot be written unquoted"),
    (["--unknown", "spread"], "invalid choice: 'spread'"),
    (["-o", "/nonexistent/folder/x.sql"], "does not exist"),
])
def test_sql_flag_errors_are_one_line(capsys, model_file, flags, message):
    status, out, err = cli(capsys, "sql", model_file, *flags)
    assert status == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_evaluate_the_sql_that_is_deployed(trained):
    frame = scoring_rows()
    for unknown in ("majority", "fractional"):
        labels = walk(trained, frame, unknown)[0]
        evaluation = trained.evaluate(frame, unknown=unknown)
        expected = np.mean([a == b for a, b in zip(frame["label"], labels)])
        assert evaluation.accuracy == pytest.approx(expected)


def test_a_regression_tree_deployed():
    frame = with_nulls(mixed_table(800).assign(t=lambda d: d.c * 3.0).drop(columns=["label"]))
    model = sqltree.train(frame, target="t", algorithm="cart", criterion="squared_error",
                          max_depth=4)
    rows = frame.assign(rid=range(len(frame)))
    con = duckdb.connect()
    con.register("t_rows", rows)
    text = render_dbt(model.to_dbt("rows", quote_identifiers=False, unknown="majority"),
                      {"rows": "t_rows"})
    got = [r[-1] for r in by_rid(con.execute(text).fetchall(), len(rows.columns) - 1)]
    assert got == [model.predict_row(r, unknown="majority") for r in python_rows(frame)]
    assert model.to_sql(unknown="majority") == model.to_sql()


# -- the check a deployment runs ---------------------------------------------------------------
def test_check_sql_returns_no_rows_while_the_table_matches_and_names_what_drifted():
    model = sqltree.train(str(GOLF), target="play")
    con = duckdb.connect()
    con.execute(f"CREATE TABLE golf AS SELECT * FROM read_csv('{GOLF}', all_varchar = true)")
    assert con.execute(model.check_sql("golf")).fetchall() == []
    con.execute("UPDATE golf SET outlook = 'foggy' WHERE temperature = 'hot'")
    assert con.execute(model.check_sql("golf")).fetchall() == [("outlook", 4, "foggy")]


def test_check_sql_catches_booleans_stored_as_integers():
    frame = pd.DataFrame({"is_member": [True, False] * 20, "spend": range(40),
                          "churn": ["stay", "leave"] * 20})
    model = sqltree.train(frame.astype({"is_member": str}), target="churn", algorithm="cart")
    lite = sqlite3.connect(":memory:")
    frame.to_sql("members", lite, index=False)  # 1 and 0, where the model learnt 'True'
    rows = lite.execute(model.check_sql("members", "sqlite")).fetchall()
    assert rows == [("is_member", 40, "0")]


def test_cli_sql_check(tmp_path, capsys):
    path = tmp_path / "golf.json"
    sqltree.train(str(GOLF), target="play").save(path)
    assert main(["sql", str(path), "--check", "--table", "sales", "-d", "postgres", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("SELECT 'outlook' AS \"column\"") and "FROM sales" in out
    assert main(["sql", str(path), "--check"]) == 2
    assert "--check needs --table" in capsys.readouterr().err
