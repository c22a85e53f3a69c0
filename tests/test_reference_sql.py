"""The reference SQL in sql/ is what sqltree generates, and every file parses back."""

from __future__ import annotations

import sqlite3

import duckdb
import numpy as np
import pytest
import sqlglot

import sqltree
from sqltree.reference import ENSEMBLES, SQL_DIR, reference_files
from tests.helpers import DATA, GOLF, GOLF_NUMERIC, python_predictions, read_csv

FILES = reference_files()


@pytest.mark.parametrize("rel", sorted(FILES))
def test_reference_file_is_current(rel):
    path = SQL_DIR / rel
    assert path.exists(), f"{rel} missing: run python -m sqltree.reference"
    assert path.read_text(encoding="utf-8") == FILES[rel], (
        f"generated SQL changed for {rel}: review it and run python -m sqltree.reference"
    )


def test_no_stale_reference_files():
    on_disk = {str(p.relative_to(SQL_DIR)) for p in SQL_DIR.rglob("*.sql")}
    assert on_disk == set(FILES)


@pytest.mark.parametrize("rel", sorted(FILES))
def test_reference_file_parses(rel):
    dialect = rel.split(".")[-2] if rel.count(".") == 2 else "duckdb"
    body = "\n".join(
        line for line in FILES[rel].splitlines() if not line.startswith("-- Generated")
    ).rstrip().rstrip(";")
    if "dbt" in rel:  # a dbt model file: its comments, and the relation dbt puts for ref()
        body = "\n".join(line for line in body.splitlines() if not line.startswith("--"))
        body = body.replace("{{ ref('golf') }}", "golf")
    if "scoring" in rel:
        body = f"SELECT {body} AS prediction FROM t"
    parsed = sqlglot.parse_one(body, read=dialect)
    # The file is one statement that reads back to itself: nothing is dropped or reinterpreted.
    assert " ".join(parsed.sql(dialect, pretty=True).split()) == " ".join(body.split())


def test_sqlite_scoring_file_runs_and_agrees():
    frame = read_csv(GOLF)
    model = sqltree.train(str(GOLF), target="play")
    con = sqlite3.connect(":memory:")
    frame.to_sql("golf", con, index=False)
    expression = model.to_sql("sqlite")
    got = [r[0] for r in con.execute(f"SELECT {expression} FROM golf")]
    assert got == python_predictions(model, frame)
    assert (DATA / "golf.csv").exists()


@pytest.mark.parametrize("dialect", ["duckdb", "sqlite"])
@pytest.mark.parametrize("name", sorted(ENSEMBLES))
def test_ensemble_file_runs_and_agrees(name, dialect):
    """Each ensemble file, run as it is on its engine over the golf_numeric table, gives the
    numpy scoring of the model it was written from."""
    _, options = ENSEMBLES[name]
    model = sqltree.train(str(GOLF_NUMERIC), target="play",
                          features=["outlook", "temperature", "humidity", "wind"], **options)
    frame = read_csv(GOLF_NUMERIC)
    sql = (SQL_DIR / "ensemble" / f"{name}.{dialect}.sql").read_text(encoding="utf-8")
    if dialect == "sqlite":
        con = sqlite3.connect(":memory:")
        frame.to_sql("golf_numeric", con, index=False)
        rows = con.execute(sql).fetchall()
    else:
        duck = duckdb.connect()
        duck.register("golf_numeric", frame)
        rows = duck.execute(sql).fetchall()
    assert [r[4] for r in rows] == list(model.predict_frame(frame))
    np.testing.assert_allclose([r[5:] for r in rows], model.predict_proba_frame(frame),
                               rtol=1e-12, atol=0)
