"""The command line on bad input: one line on standard error, exit status 2, no traceback,
and no DuckDB database created by a mistyped path."""

from __future__ import annotations

import json
import subprocess
import sys

import duckdb
import pytest

import sqltree
from sqltree.cli import main
from tests.helpers import GOLF


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "golf.json"
    sqltree.train(str(GOLF), target="play").save(path)
    return path


@pytest.fixture(scope="module")
def cyclic_file(model_file):
    document = json.loads(model_file.read_text())
    document["tree"][2]["children"][0] = 0  # back to the root
    path = model_file.with_name("cyclic.json")
    path.write_text(json.dumps(document))
    return path


def run(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# -- --connect -------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["train", GOLF, "--target", "play", "-q"],
    ["predict", "MODEL", GOLF, "--into", "scored"],
    ["scores", GOLF, "--target", "play"],
])
def test_connect_to_a_missing_duckdb_file_is_refused(tmp_path, capsys, model_file, command):
    typo = tmp_path / "typo.duckdb"
    args = [model_file if a == "MODEL" else a for a in command]
    status, out, err = run(capsys, *args, "--connect", typo)
    assert status == 2 and out == ""
    line = one_error_line(err)
    assert str(typo) in line and "does not exist" in line and "--create-db" in line
    assert not typo.exists()


def test_create_db_creates_the_database(tmp_path, capsys, model_file):
    database = tmp_path / "new.duckdb"
    status, _, err = run(capsys, "predict", model_file, GOLF, "--into", "scored",
                         "--connect", database, "--create-db")
    assert status == 0, err
    with duckdb.connect(str(database)) as con:
        assert con.execute('SELECT count(*) FROM "scored"').fetchall() == [(14,)]
    # now that it exists, it is used without asking again
    status, out, err = run(capsys, "scores", "SELECT * EXCLUDE (prediction) FROM scored",
                           "--target", "play", "--connect", database)
    assert status == 0, err
    assert "outlook" in out


def test_connect_to_an_unknown_kind_of_url_is_refused(capsys):
    status, _, err = run(capsys, "train", GOLF, "-t", "play", "--connect", "mysql://db/x")
    assert status == 2
    assert "postgresql:// URL or a DuckDB database file" in one_error_line(err)


def test_connect_to_a_file_that_is_not_a_database(tmp_path, capsys):
    status, _, err = run(capsys, "train", GOLF, "-t", "play", "--connect", tmp_path)
    assert status == 2
    assert str(tmp_path) in one_error_line(err)


def test_in_memory_duckdb_needs_no_file(capsys):
    status, _, err = run(capsys, "scores", GOLF, "-t", "play", "--connect", ":memory:")
    assert status == 0, err


# -- model files -----------------------------------------------------------------------------------
MODEL_COMMANDS = [["show"], ["rules"], ["dot"], ["sql"], ["predict", "M", GOLF]]


@pytest.mark.parametrize("command", MODEL_COMMANDS, ids=lambda c: c[0])
def test_a_missing_model_file(tmp_path, capsys, command):
    missing = tmp_path / "missing.json"
    status, _, err = run(capsys, *command[:1], missing, *command[2:])
    assert status == 2
    assert one_error_line(err) == f"sqltree: error: {missing}: No such file or directory"


@pytest.mark.parametrize("command", MODEL_COMMANDS, ids=lambda c: c[0])
def test_a_cyclic_model_file(capsys, cyclic_file, command):
    # before: show walked the cycle until memory ran out
    status, _, err = run(capsys, *command[:1], cyclic_file, *command[2:])
    assert status == 2
    assert one_error_line(err) == (
        f"sqltree: error: {cyclic_file}: node 2: child 0 is the root: the tree would be a cycle"
    )


@pytest.mark.parametrize("content, message", [
    (b"[1, 2]", "the JSON document is a list"),
    (b'{"format": "sqltree-model", "vers', "is the file truncated?"),
    (b"\xff\xfe{\x00}\x00", "not UTF-8 text"),
    (b"", "the file is empty"),
], ids=["list", "truncated", "utf-16", "empty"])
def test_model_files_that_are_not_models(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    status, _, err = run(capsys, "show", path)
    assert status == 2
    line = one_error_line(err)
    assert line.startswith(f"sqltree: error: {path}: ") and message in line


def test_a_folder_as_model_file(tmp_path, capsys):
    status, _, err = run(capsys, "show", tmp_path)
    assert status == 2
    assert one_error_line(err) == f"sqltree: error: {tmp_path}: Is a directory"


# -- sources and options ---------------------------------------------------------------------------
@pytest.mark.parametrize("command, message", [
    (["train", "missing.csv", "-t", "play"], "missing.csv"),
    (["train", "no_such_table", "-t", "play"], "no_such_table"),
    (["train", "SELECT * FROM", "-t", "play"], "SELECT * FROM"),
    (["train", GOLF, "-t", "nope"], "nope"),
    (["predict", "M", "missing.csv"], "missing.csv"),
    (["predict", "M", "no_such_table"], "no_such_table"),
    (["scores", "missing.csv", "-t", "play"], "missing.csv"),
], ids=["csv", "table", "query", "target", "predict-csv", "predict-table", "scores-csv"])
def test_a_missing_source(capsys, model_file, command, message):
    args = [model_file if a == "M" else a for a in command]
    status, out, err = run(capsys, *args, *(["-q"] if command[0] == "train" else []))
    assert status == 2 and out == ""
    assert message in one_error_line(err)


@pytest.mark.parametrize("options, message", [
    (["--max-depth", "x"], "argument --max-depth: invalid int value: 'x'"),
    (["--max-depth", "-1"], "max_depth"),
    (["--cf", "7"], "cf"),
    (["--max-bins", "1"], "max_bins"),
    (["--algorithm", "c5"], "argument --algorithm/-a: invalid choice: 'c5'"),
    (["--criterion", "gini"], "criterion"),
    (["--threads", "0"], "thread"),
    (["--memory-limit", "lots"], "Memory"),
    (["--features", "nope"], "nope"),
    (["-o", "/nonexistent-folder/m.json"], "the folder '/nonexistent-folder' does not exist"),
    (["--connect", "postgresql://nobody@127.0.0.1:1/x", "--threads", "2"],
     "--threads and --memory-limit apply to DuckDB only"),
])
def test_bad_training_options(capsys, options, message):
    status, out, err = run(capsys, "train", GOLF, "-t", "play", "-q", *options)
    assert status == 2 and out == ""
    assert message in one_error_line(err)


@pytest.mark.parametrize("options, message", [
    (["--dialect", "nonsense"], "nonsense"),
    (["--view", "v"], "--view needs --table"),
    (["--proba"], "--proba needs --table"),
])
def test_bad_sql_options(capsys, model_file, options, message):
    status, out, err = run(capsys, "sql", model_file, *options)
    assert status == 2 and out == ""
    assert message in one_error_line(err)


def test_predict_into_a_missing_folder(capsys, model_file):
    status, _, err = run(capsys, "predict", model_file, GOLF, "-o", "/nonexistent-folder/p.csv")
    assert status == 2
    assert "does not exist" in one_error_line(err)


def test_usage_errors_are_one_line(capsys):
    for args in ([], ["bogus"], ["show"], ["train", GOLF]):
        status, _, err = run(capsys, *args)
        assert status == 2
        assert one_error_line(err).endswith("--help)")


# -- what stays as it was --------------------------------------------------------------------------
def test_help_lists_the_commands_and_options(capsys):
    status, out, _ = run(capsys, "--help")
    assert status == 0
    for word in ("train", "predict", "sql", "show", "rules", "dot", "scores", "examples:"):
        assert word in out
    status, out, _ = run(capsys, "predict", "--help")
    assert status == 0 and "--connect" in out and "--create-db" in out


def test_a_fault_of_sqltree_keeps_its_traceback(monkeypatch, capsys, model_file):
    # only bad input is cut to one line; a bug must still show where it is
    def broken(path):
        raise RuntimeError("a bug")

    monkeypatch.setattr(sqltree, "load", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["show", str(model_file)])


def test_interrupted(monkeypatch, capsys, model_file):
    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(sqltree, "load", interrupted)
    status, _, err = run(capsys, "show", model_file)
    assert status == 130 and one_error_line(err) == "sqltree: interrupted"


def test_the_process_exits_2_without_a_traceback(tmp_path, cyclic_file):
    for args in (["show", str(cyclic_file)],
                 ["train", str(GOLF), "-t", "play", "--connect", str(tmp_path / "t.duckdb")]):
        done = subprocess.run([sys.executable, "-m", "sqltree.cli", *args],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and done.stdout == ""
        one_error_line(done.stderr)
    assert not (tmp_path / "t.duckdb").exists()
