"""ARFF sources: Weka's files read into the engine (nominal declarations kept as DuckDB ENUMs,
``?`` as NULL, quoted names), training the same tree as a CSV of the same rows."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

import sqltree
from sqltree.cli import main
from sqltree.dataset import Dataset, describe
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.readers import read_arff
from tests.conftest import ENGINES, unavailable
from tests.helpers import assert_same_tree
from tests.weka import DATA as LOCAL_ARFF
from tests.weka import EXAMPLES

# Trained from both files and compared: the small copies in tests/data. The other data sets
# (larger, or installed with the Debian weka package) are compared by what training reads
# from them: the same rows give the same description, and the same description the same tree.
TRAINED = ["weather.nominal", "weather.numeric", "contact-lenses", "iris", "labor",
           "breast-cancer", "vote"]
DESCRIBED = ["glass", "diabetes"]
FROM_WEKA = ["credit-g", "segment-challenge", "soybean", "ionosphere", "cpu.with.vendor",
             "unbalanced"]


def arff_path(name: str) -> Path:
    local = LOCAL_ARFF / f"{name}.arff"
    if local.exists():
        return local
    path = EXAMPLES / f"{name}.arff"
    if not path.exists():
        unavailable(f"Weka's example {path} is missing (apt-get install weka)")
    return path


def nominal_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if isinstance(frame[c].dtype, pd.CategoricalDtype)]


def arff_and_csv(name: str, tmp_path: Path) -> tuple[str, str, str, dict]:
    """The ARFF path, a CSV of its rows, the target (Weka's default class: the last
    attribute), and the roles the CSV needs: a CSV holds no declarations, so its nominal
    columns are named (a domain such as {'1','2','3'} would read as numbers)."""
    path = arff_path(name)
    frame = read_arff(path)
    target = frame.columns[-1]
    csv = tmp_path / f"{name}.csv"
    frame.to_csv(csv, index=False)
    return str(path), str(csv), target, {"nominal": [c for c in nominal_columns(frame)
                                                     if c != target]}


def _text_values(nodes: list[dict]) -> list[dict]:
    """Nominal values as the ARFF side has them: text."""
    for node in nodes:
        split = node.get("split")
        if split and "groups" in split:
            split["groups"] = [[str(v) for v in g] for g in split["groups"]]
    return nodes


def what_training_reads(data: Dataset) -> tuple:
    return (data.n_rows, [str(c) for c in data.classes], data.class_weights,
            [(f.name, f.kind, [str(v) for v in f.values]) for f in data.features])


@pytest.mark.parametrize("name", TRAINED)
def test_the_same_tree_as_from_a_csv(name, tmp_path):
    path, csv, target, roles = arff_and_csv(name, tmp_path)
    from_arff = sqltree.train(path, target=target)
    from_csv = sqltree.train(csv, target=target, **roles)
    assert from_arff.text() == from_csv.text()
    assert_same_tree(from_arff.root.to_dict(), _text_values(from_csv.root.to_dict()))


def check_same_description(name: str, tmp_path: Path) -> None:
    path, csv, target, roles = arff_and_csv(name, tmp_path)
    engine = DuckDBEngine()
    try:
        from_arff = describe(path, engine, target)
        from_csv = describe(csv, engine, target, **roles)
    finally:
        engine.cleanup()
    assert what_training_reads(from_arff) == what_training_reads(from_csv)


@pytest.mark.parametrize("name", DESCRIBED)
def test_training_reads_the_same_as_from_a_csv(name, tmp_path):
    check_same_description(name, tmp_path)


@pytest.mark.weka
@pytest.mark.parametrize("name", FROM_WEKA)
def test_training_reads_the_same_as_from_a_csv_on_wekas_other_examples(name, tmp_path):
    check_same_description(name, tmp_path)


def test_declarations_nulls_and_quoted_names(tmp_path):
    path = tmp_path / "odd.arff"
    path.write_text(
        "% a comment\n"
        "@relation 'odd one'\n"
        "@attribute 'my attr' {b, 'a c', z} % z never occurs\n"
        "@attribute \"it's\" numeric\n"
        "@attribute n integer\n"
        "@attribute class {yes,no}\n"
        "@data\n"
        "b,1.5,2,yes\n"
        "'a c',?,?,no\n"
        "?,-3,4,yes\n"
    )
    frame = read_arff(path)
    assert list(frame.columns) == ["my attr", "it's", "n", "class"]
    con = duckdb.connect()
    con.register("t", frame)
    types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE t)").fetchall())
    assert types == {"my attr": "ENUM('b', 'a c', 'z')", "it's": "DOUBLE", "n": "BIGINT",
                     "class": "ENUM('yes', 'no')"}
    assert con.execute('SELECT * FROM t').fetchall() == [
        ("b", 1.5, 2, "yes"), ("a c", None, None, "no"), (None, -3.0, 4, "yes")]
    model = sqltree.train(str(path), target="class", min_cases=1)
    assert model.features[0].values == ["a c", "b"]  # the values that occur, as from a CSV
    assert model.features[0].sql_type == "ENUM('b', 'a c', 'z')"  # the declaration, kept


@pytest.mark.weka
def test_a_comment_after_a_declaration():
    """Weka's supermarket example ends a declaration with a comment, which liac-arff alone
    refuses (``@attribute 'total' { low, high} % low < 100``)."""
    frame = read_arff(arff_path("supermarket"))
    assert frame.shape == (4627, 217)
    assert list(frame["total"].cat.categories) == ["low", "high"]


def test_a_comment_after_a_declaration_in_a_file_of_ours(tmp_path):
    frame = read_arff(arff_path("weather.nominal"))
    text = arff_path("weather.nominal").read_text().replace(
        "@attribute play {yes, no}", "@attribute play {yes, no} % the class")
    assert "% the class" in text
    (tmp_path / "w.arff").write_text(text)
    pd.testing.assert_frame_equal(read_arff(tmp_path / "w.arff"), frame)


@pytest.fixture(params=ENGINES)
def connection(request):
    """A connection of each engine, for training on an ARFF path there."""
    if request.param == "duckdb":
        return duckdb.connect()
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return request.getfixturevalue("spark")


@pytest.mark.parametrize("name", ["labor"])  # nominal and numeric, with unknown values
def test_an_arff_file_trains_on_every_engine(connection, name):
    path = arff_path(name)
    frame = read_arff(path)
    target = frame.columns[-1]
    # Two levels of CART: the file's reading is what differs by engine (whole trees, C4.5's
    # pruned ones included, are compared across engines in test_engines; on Spark each level
    # of the tables plan is a score of jobs)
    options = {"algorithm": "cart", "max_depth": 2}
    model = sqltree.train(str(path), target=target, connection=connection, **options)
    reference = sqltree.train(str(path), target=target, **options)
    assert model.text() == reference.text()
    scored = model.predict(str(path), connection=connection)
    assert list(scored["prediction"]) == list(reference.predict(str(path))["prediction"])


@pytest.mark.parametrize(("write", "message"), [
    ("@relation x\n@attribute a {p,q\n@data\np\n", "is not an ARFF file sqltree can read"),
    ("@relation x\n@attribute a date\n@data\n2020-01-01\n", "is not an ARFF file sqltree"),
    ("@relation x\n@attribute a numeric\n@attribute a numeric\n@data\n1,2\n",
     "name a at line 3, this name is already in use"),
])
def test_files_that_are_not_arff(tmp_path, write, message):
    path = tmp_path / "bad.arff"
    path.write_text(write)
    with pytest.raises(sqltree.DataError, match=message):
        sqltree.train(str(path), target="a")


def test_an_arff_source_is_one_file(tmp_path, monkeypatch):
    with pytest.raises(sqltree.DataError, match=r"no file 'nosuch\.arff'"):
        sqltree.train("nosuch.arff", target="a")
    with pytest.raises(sqltree.DataError, match=r"is one file, not a glob"):
        sqltree.train(str(LOCAL_ARFF / "*.arff"), target="a")
    monkeypatch.setitem(sys.modules, "arff", None)
    with pytest.raises(sqltree.UnsupportedError, match=r"needs liac-arff: pip install -e "
                                                       r"'\.\[arff\]' in a clone"):
        sqltree.train(str(arff_path("iris")), target="class")


def test_the_command_line_trains_on_an_arff_file(tmp_path, capsys):
    out_file = tmp_path / "m.json"
    status = main(["train", str(arff_path("weather.nominal")), "-t", "play", "-o",
                   str(out_file)])
    out, _ = capsys.readouterr()
    assert status == 0 and out.startswith("outlook = overcast: yes (4.0)")
    assert sqltree.load(out_file).features[0].sql_type == "ENUM('sunny', 'overcast', 'rainy')"


def test_a_sparse_file(tmp_path):
    """Weka's sparse rows list the values that are not 0 (a nominal's first value)."""
    path = tmp_path / "sparse.arff"
    path.write_text(
        "@relation s\n@attribute x numeric\n@attribute c {off, on}\n@attribute y {a, b}\n"
        "@data\n{0 2.5, 1 on}\n{2 b}\n{0 ?, 1 on, 2 b}\n"
    )
    frame = read_arff(path)
    assert frame.astype(object).where(frame.notna(), None).values.tolist() == [
        [2.5, "on", "a"], [0.0, "off", "b"], [None, "on", "b"]]
