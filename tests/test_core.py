"""Core: criteria in SQL, the classic trees, sources, scoring SQL = Python, files, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import duckdb
import pandas as pd
import pytest

import sqltree
from sqltree import criteria
from tests.helpers import (
    BUYS,
    DATA,
    GOLF,
    GOLF_NUMERIC,
    assert_same_tree,
    mixed_table,
    python_predictions,
    read_csv,
)

WORKED_GOLF = {  # worked example 1: gain, split info, gain ratio
    "outlook": (0.246750, 1.577406, 0.156428),
    "temperature": (0.029223, 1.556657, 0.018773),
    "humidity": (0.151836, 1.000000, 0.151836),
    "windy": (0.048127, 0.985228, 0.048849),
}
WORKED_BUYS_GAIN = {"age": 0.246750, "income": 0.029223, "student": 0.151836,
                    "credit_rating": 0.048127}
WORKED_THRESHOLDS = {  # worked example 3
    65: (0.047709, 0.371232, 0.128516), 70: (0.014956, 0.863121, 0.017328),
    75: (0.045334, 0.940286, 0.048213), 78: (0.090276, 0.985228, 0.091630),
    80: (0.102244, 0.940286, 0.108737), 85: (0.025078, 0.863121, 0.029055),
    90: (0.010318, 0.591673, 0.017439), 95: (0.047709, 0.371232, 0.128516),
}


def branches_of(frame: pd.DataFrame, feature: str, target: str) -> list[list[float]]:
    table = pd.crosstab(frame[feature], frame[target])
    return [[float(x) for x in row] for row in table.to_numpy()]


def test_worked_example_1_golf_criteria():
    scores = sqltree.split_scores(str(GOLF), target="play").set_index("attribute")
    frame = read_csv(GOLF)
    for name, (gain, si, ratio) in WORKED_GOLF.items():
        row = scores.loc[name]
        exact = branches_of(frame, name, "play")
        assert row.gain == pytest.approx(criteria.information_gain(exact), abs=1e-9)
        assert row.split_info == pytest.approx(criteria.split_info(exact), abs=1e-9)
        assert row.gain_ratio == pytest.approx(criteria.gain_ratio(exact), abs=1e-9)
        assert (row.gain, row.split_info, row.gain_ratio) == pytest.approx(
            (gain, si, ratio), abs=5e-7
        )
    info_d = criteria.entropy([9, 5])
    assert info_d == pytest.approx(0.940286, abs=5e-7)


def test_worked_example_2_buys_computer_gains():
    scores = sqltree.split_scores(str(BUYS), target="buys_computer").set_index("attribute")
    frame = read_csv(BUYS)
    for name, gain in WORKED_BUYS_GAIN.items():
        exact = criteria.information_gain(branches_of(frame, name, "buys_computer"))
        assert scores.loc[name].gain == pytest.approx(exact, abs=1e-9)
        assert scores.loc[name].gain == pytest.approx(gain, abs=5e-7)
    assert scores.loc["income"].gain_ratio == pytest.approx(0.018773, abs=5e-7)


def test_worked_example_3_thresholds():
    scores = sqltree.split_scores(
        str(GOLF_NUMERIC), target="play", features=["humidity"]
    )
    frame = read_csv(GOLF_NUMERIC)
    assert list(scores.threshold) == sorted(WORKED_THRESHOLDS)
    for row in scores.itertuples():
        left = frame[frame.humidity <= row.threshold].play.value_counts()
        right = frame[frame.humidity > row.threshold].play.value_counts()
        exact = [[float(left.get(c, 0)) for c in ("No", "Yes")],
                 [float(right.get(c, 0)) for c in ("No", "Yes")]]
        assert row.gain == pytest.approx(criteria.information_gain(exact), abs=1e-9)
        assert row.split_info == pytest.approx(criteria.split_info(exact), abs=1e-9)
        assert row.gain_ratio == pytest.approx(criteria.gain_ratio(exact), abs=1e-9)
        assert (row.gain, row.split_info, row.gain_ratio) == pytest.approx(
            WORKED_THRESHOLDS[int(row.threshold)], abs=5e-7
        )


def test_worked_example_4_unknown_value_gain():
    frame = read_csv(GOLF_NUMERIC)
    frame.loc[frame.day == "D12", "outlook"] = None
    scores = sqltree.split_scores(frame, target="play", features=["outlook"])
    assert scores.gain[0] == pytest.approx(0.199041, abs=5e-7)
    known = frame.dropna(subset=["outlook"])
    exact = criteria.information_gain(
        branches_of(known, "outlook", "play"), unknown=[0.0, 1.0]
    )
    assert scores.gain[0] == pytest.approx(exact, abs=1e-9)


CLASSIC = """\
outlook = overcast: yes (4.0)
outlook = rainy
|   windy = false: yes (3.0)
|   windy = true: no (2.0)
outlook = sunny
|   humidity = high: no (3.0)
|   humidity = normal: yes (2.0)

Number of Leaves  : \t5

Size of the tree : \t8"""


@pytest.mark.parametrize("algorithm", ["id3", "c4.5"])
def test_golf_is_the_classic_tree(algorithm):
    model = sqltree.train(str(GOLF), target="play", algorithm=algorithm)
    assert model.text() == CLASSIC + "\n"
    assert (model.n_leaves, model.n_nodes, model.depth) == (5, 8, 2)
    assert model.classes == ["no", "yes"]
    assert model.root.split.feature == "outlook"


def test_continuous_humidity_tree():
    model = sqltree.train(
        str(GOLF_NUMERIC), target="play", features=["outlook", "temperature", "humidity", "wind"]
    )
    sunny = model.root.children[model.root.split.groups.index(["Sun"])]
    assert sunny.split.feature == "humidity"
    assert sunny.split.threshold == 75.0  # an observed value, not a midpoint


def scoring_matches_python(model, source, connection=None):
    scored = model.predict(source, connection=connection)
    expected = python_predictions(model, scored.drop(columns=["prediction"]))
    assert list(scored["prediction"]) == expected
    return scored


@pytest.mark.parametrize("path", sorted(DATA.glob("*.csv")), ids=lambda p: p.stem)
@pytest.mark.parametrize("algorithm", ["id3", "c4.5"])
def test_scoring_sql_equals_python_on_examples(path, algorithm):
    target = read_csv(path).columns[-1]
    model = sqltree.train(str(path), target=target, algorithm=algorithm)
    scored = scoring_matches_python(model, str(path))
    assert len(scored) == len(read_csv(path))


@pytest.mark.parametrize("missing", ["fractional", "majority", "drop"])
def test_scoring_sql_equals_python_on_10k_mixed_rows(missing):
    frame = mixed_table(10_000)
    model = sqltree.train(frame, target="label", missing=missing, max_depth=6)
    assert model.n_leaves > 10
    scored = scoring_matches_python(model, frame)
    accuracy = (scored.prediction == scored.label).mean()
    assert accuracy > 0.8
    proba = model.predict(frame, proba=True)
    cols = model.proba_columns()
    assert proba[cols].sum(axis=1).round(9).eq(1.0).all()


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
        assert_same_tree(trees["csv"], tree), name


def test_save_load_round_trip(tmp_path):
    frame = mixed_table(2_000)
    model = sqltree.train(frame, target="label", max_depth=4)
    path = tmp_path / "m.json"
    model.save(path)
    again = sqltree.load(path)
    assert again.to_dict() == model.to_dict()
    assert again.to_sql("postgres") == model.to_sql("postgres")
    data = json.loads(path.read_text())
    assert data["format"] == "sqltree-model" and data["version"] == 1


def test_load_rejects_other_files(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"format": "other"}')
    with pytest.raises(sqltree.ModelFileError):
        sqltree.load(path)
    path.write_text("not json")
    with pytest.raises(sqltree.ModelFileError):
        sqltree.load(path)


def test_stats_count_queries_and_scans():
    model = sqltree.train(mixed_table(3_000), target="label", max_depth=5)
    stats = model.stats
    assert stats["queries"] > 0 and stats["rows"] == 3_000
    for level in stats["levels"]:
        assert level["scans"] <= 2
        assert level["queries"] <= 7


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "sqltree.cli", *args], capture_output=True, text=True, cwd=cwd
    )


def test_cli_train_predict_sql_round_trip(tmp_path):
    model_path = tmp_path / "golf.json"
    out = run_cli("train", str(GOLF), "--target", "play", "-o", str(model_path))
    assert out.returncode == 0, out.stderr
    assert CLASSIC in out.stdout
    assert "level 0" in out.stderr  # progress
    pred = run_cli("predict", str(model_path), str(GOLF))
    assert pred.returncode == 0, pred.stderr
    lines = pred.stdout.strip().splitlines()
    assert lines[0].endswith(",prediction") and len(lines) == 15
    assert all(line.split(",")[-1] == line.split(",")[-2] for line in lines[1:])
    sql = run_cli("sql", str(model_path), "--dialect", "snowflake")
    # the walk over known values, then C4.5's closed form for rows it leaves NULL
    assert sql.returncode == 0 and sql.stdout.startswith("COALESCE(CASE WHEN")
    bad = run_cli("train", str(GOLF), "--target", "nope")
    assert bad.returncode == 2 and "nope" in bad.stderr
    help_text = run_cli("--help").stdout
    assert "train" in help_text and "predict" in help_text and "examples:" in help_text


def test_weights_equal_duplicated_rows():
    frame = read_csv(GOLF_NUMERIC)
    weighted = frame.assign(w=[1.0 + (i % 3) for i in range(len(frame))])
    duplicated = pd.concat(
        [frame.iloc[[i] * int(w)] for i, w in enumerate(weighted.w)], ignore_index=True
    )
    features = ["outlook", "temperature", "humidity", "wind"]
    a = sqltree.train(weighted, target="play", weight="w", features=features)
    b = sqltree.train(duplicated, target="play", features=features)
    assert_same_tree(a.root.to_dict(), b.root.to_dict())


def test_many_nulls_scoring_sql_equals_python():
    frame = mixed_table(4_000, seed=7)
    for i, name in enumerate(["a", "b", "c", "d", "e"]):
        frame.loc[frame.index % (3 + i) == 0, name] = None
    model = sqltree.train(frame, target="label", max_depth=5)
    assert any(n.split is not None and n.unknown_branch is None for n in model.root.walk())
    scored = model.predict(frame, proba=True)
    expected = python_predictions(model, frame)
    assert list(scored["prediction"]) == expected
    rows = frame.to_dict("records")
    for i in range(0, len(rows), 97):
        want = model.predict_proba_row({k: (None if pd.isna(v) else v) for k, v in rows[i].items()})
        got = scored.loc[i, model.proba_columns()].tolist()
        assert got == pytest.approx(want, abs=1e-12)


def test_scoring_a_table_in_place():
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE golf AS SELECT * FROM read_csv(?, auto_type_candidates="
        "['BIGINT','DOUBLE','VARCHAR'])", [str(GOLF)],
    )
    model = sqltree.train("golf", target="play", connection=con)
    con.execute(model.to_sql("duckdb", table="golf", view="scored_golf"))
    from_view = con.execute("SELECT play, prediction FROM scored_golf").fetchall()
    assert all(play == prediction for play, prediction in from_view) and len(from_view) == 14
    assert model.predict("golf", connection=con, into="golf_scored") is None
    assert con.execute("SELECT count(*) FROM golf_scored WHERE play = prediction").fetchone() == (
        14,
    )
    with pytest.raises(sqltree.DataError, match="prediction"):
        model.predict("golf_scored", connection=con)
