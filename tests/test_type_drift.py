"""A source whose columns changed type between training and scoring: a clear error naming the
column before any scoring, or the right answers, never a silent wrong one."""

from __future__ import annotations

import sqlite3

import duckdb
import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.cli import main
from sqltree.errors import DataError
from tests.helpers import GOLF


@pytest.fixture(scope="module")
def golf_model() -> sqltree.Model:
    return sqltree.train(str(GOLF), target="play")


def _golf_table(con: duckdb.DuckDBPyConnection) -> None:
    # DuckDB reads windy and play as BOOLEAN; the model learnt them as text.
    con.execute(f"CREATE TABLE golf AS SELECT * FROM '{GOLF}'")


def test_evaluate_refuses_a_boolean_target_against_text_labels(golf_model) -> None:
    con = duckdb.connect()
    _golf_table(con)
    con.execute("CREATE TABLE golf_text_windy AS SELECT * REPLACE "
                "(lower(CAST(windy AS VARCHAR)) AS windy) FROM golf")
    with pytest.raises(DataError, match=r"target 'play' was text in training but is boolean "
                                        r"\(BOOLEAN\) in the source"):
        golf_model.evaluate("golf_text_windy", connection=con)


def test_scoring_refuses_a_feature_whose_type_changed(golf_model) -> None:
    con = duckdb.connect()
    _golf_table(con)
    message = r"column 'windy' was text \(TEXT\) in training but is boolean \(BOOLEAN\)"
    with pytest.raises(DataError, match=message):
        golf_model.predict("golf", connection=con)
    with pytest.raises(DataError, match=message):
        golf_model.evaluate("golf", connection=con)


def test_cli_evaluate_on_the_readme_table_is_one_clear_line(tmp_path, capsys) -> None:
    database = tmp_path / "shop.duckdb"
    with duckdb.connect(str(database)) as con:
        _golf_table(con)
    model = tmp_path / "golf.json"
    sqltree.train(str(GOLF), target="play").save(model)
    status = main(["evaluate", str(model), "golf", "--connect", str(database)])
    out, err = capsys.readouterr()
    assert status == 1 and out == ""
    assert "'windy' was text (TEXT) in training but is boolean (BOOLEAN)" in err
    assert len(err.strip().splitlines()) == 1


def _members(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    member = rng.random(n) < 0.5
    spend = rng.integers(0, 100, n)
    churn = np.where(member ^ (spend > 70), "stay", "leave")
    return pd.DataFrame({"is_member": member, "spend": spend, "churn": churn})


def test_booleans_stored_as_integers_by_sqlite_score_as_booleans() -> None:
    frame = _members()
    model = sqltree.train(frame, target="churn", algorithm="cart")
    assert any(n.split and n.split.feature == "is_member" for n in model.root.walk())
    lite = sqlite3.connect(":memory:")
    frame.to_sql("members", lite, index=False)  # is_member: INTEGER, 1 and 0
    expected = model.predict(frame)["prediction"].tolist()
    assert model.predict("members", connection=lite)["prediction"].tolist() == expected
    evaluation = model.evaluate("members", connection=lite)
    assert evaluation.accuracy == model.evaluate(frame).accuracy == 1.0


def test_text_booleans_against_sqlite_integers_are_refused() -> None:
    frame = _members().assign(is_member=lambda f: f["is_member"].astype(str))
    model = sqltree.train(frame, target="churn", algorithm="cart")
    lite = sqlite3.connect(":memory:")
    _members().to_sql("members", lite, index=False)
    with pytest.raises(DataError, match=r"column 'is_member' was text .* is number \(INTEGER\)"):
        model.predict("members", connection=lite)
    with pytest.raises(DataError, match="'is_member' was text"):
        model.evaluate("members", connection=lite)


def test_numbers_in_a_nominal_text_column_are_a_data_error(golf_model) -> None:
    frame = pd.read_csv(GOLF, dtype=str).assign(outlook=1)
    with pytest.raises(DataError, match=r"column 'outlook' was text .* is number"):
        golf_model.predict(frame)


def test_an_integer_target_for_text_classes_is_a_data_error(golf_model) -> None:
    frame = pd.read_csv(GOLF, dtype=str).assign(play=1)
    with pytest.raises(DataError, match=r"target 'play' was text in training but is number"):
        golf_model.evaluate(frame)


def test_a_text_target_for_a_regression_tree_is_a_data_error() -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": [1.0, 2.0, 3.0, 4.0]})
    model = sqltree.train(frame, target="y", task="regression")
    with pytest.raises(DataError, match=r"target 'y' was number in training but is text"):
        model.evaluate(frame.assign(y=frame["y"].astype(str)))


def test_classes_never_seen_in_training_are_named_not_folded_in_silently(golf_model) -> None:
    frame = pd.read_csv(GOLF, dtype=str)
    frame.loc[:2, "play"] = "maybe"
    with pytest.warns(UserWarning, match=r"3 rows hold classes the model was not trained on "
                                         r"\(maybe\)"):
        evaluation = golf_model.evaluate(frame)
    assert evaluation.unseen_classes == ["maybe"] and evaluation.unseen_weight == 3.0
    assert "Rows of classes not in the model          3 (maybe)" in str(evaluation)
    assert evaluation.to_dict()["unseen_classes"] == ["maybe"]


def test_journey_a_csv_model_on_sqlite_booleans_is_a_clear_error_or_right(golf_model) -> None:
    # pandas writes a boolean column to SQLite as INTEGER 1/0; the CSV model learnt 'true'
    frame = pd.read_csv(GOLF)  # windy read as bool by pandas
    assert frame["windy"].dtype == bool
    lite = sqlite3.connect(":memory:")
    frame.to_sql("golf", lite, index=False)
    for call in (golf_model.predict, golf_model.evaluate):
        with pytest.raises(DataError, match=r"column 'windy' was text \(TEXT\) in training but "
                                            r"is number \(INTEGER\)"):
            call("golf", connection=lite)
    # cast back to the training's text, the figures are right
    query = ("SELECT outlook, temperature, humidity, "
             "CASE windy WHEN 1 THEN 'true' ELSE 'false' END AS windy, play FROM golf")
    assert golf_model.evaluate(query, connection=lite).accuracy == 1.0


def test_an_all_null_sqlite_column_is_not_taken_for_text() -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0] * 5, "y": ["a", "a", "b", "b"] * 5})
    model = sqltree.train(frame, target="y", algorithm="cart")
    lite = sqlite3.connect(":memory:")
    frame.assign(x=np.nan).to_sql("batch", lite, index=False)  # declared REAL, every x NULL
    scored = model.predict("batch", connection=lite)
    assert len(scored) == 20


# -- forests and boosting ----------------------------------------------------------------------
def _codes(n: int = 300) -> pd.DataFrame:
    """``code`` is text holding digits; the class follows it."""
    rng = np.random.default_rng(8)
    code = rng.choice(["1", "2", "3"], n)
    return pd.DataFrame({"code": code, "size": rng.integers(0, 10, n),
                         "kind": np.where(code == "3", "big", "small")})


@pytest.fixture(scope="module")
def code_forest() -> sqltree.Ensemble:
    forest = sqltree.train(_codes(), target="kind", algorithm="random-forest", n_estimators=4,
                           max_depth=3, random_state=0)
    assert forest.types_recorded and "code" in forest.used_features()
    return forest


def test_an_ensemble_refuses_a_text_feature_scored_as_integer(code_forest) -> None:
    con = duckdb.connect()
    con.register("codes", _codes())
    con.execute("CREATE TABLE drifted AS SELECT CAST(code AS INTEGER) AS code, size, kind "
                "FROM codes")
    message = r"column 'code' was text \(TEXT\) in training but is number \(INT\)"
    with pytest.raises(DataError, match=message):
        code_forest.predict("drifted", connection=con)
    with pytest.raises(DataError, match=message):
        code_forest.evaluate("drifted", connection=con)
    with pytest.raises(DataError, match=message):
        code_forest.permutation_importance("drifted", connection=con, n_repeats=1)
    assert code_forest.predict("codes", connection=con) is not None  # the same types: scored


def test_an_ensemble_evaluation_refuses_a_boolean_target_against_text_labels(code_forest
                                                                             ) -> None:
    frame = _codes().assign(kind=lambda f: f["kind"] == "big")
    with pytest.raises(DataError, match=r"target 'kind' was text in training but is boolean"):
        code_forest.evaluate(frame)
    code_forest.predict(frame)  # predict does not read the target


def test_an_ensemble_scores_sqlite_integer_booleans_as_booleans() -> None:
    frame = _members()
    forest = sqltree.train(frame, target="churn", algorithm="random-forest", n_estimators=4,
                           max_depth=4, random_state=0)
    assert "is_member" in forest.used_features()
    lite = sqlite3.connect(":memory:")
    frame.to_sql("members", lite, index=False)  # is_member: INTEGER, 1 and 0
    expected = forest.predict(frame)["prediction"].tolist()
    assert forest.predict("members", connection=lite)["prediction"].tolist() == expected
    assert forest.evaluate("members", connection=lite) == forest.evaluate(frame)


def test_an_imported_ensemble_checks_only_what_it_knows() -> None:
    ensemble = pytest.importorskip("sklearn.ensemble")
    frame = _members().assign(is_member=lambda f: f["is_member"].astype(int))
    fitted = ensemble.RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0).fit(
        frame[["is_member", "spend"]], frame["churn"])
    imported = sqltree.from_sklearn(fitted)
    assert not imported.types_recorded  # DOUBLE is the importer's guess, not the source's
    imported.predict(frame.assign(spend=frame["spend"].astype("int32")))  # any number
    with pytest.raises(DataError, match=r"column 'spend' was number in training but is text"):
        imported.predict(frame.assign(spend=frame["spend"].astype(str)))
    # a boolean column where the trees compare numbers: a DataError, not the engine's
    with pytest.raises(DataError, match=r"column 'is_member' was number in training but is "
                                        r"boolean"):
        imported.predict(frame.assign(is_member=frame["is_member"].astype(bool)))
