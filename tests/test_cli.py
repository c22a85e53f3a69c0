"""The command line on bad input: one line on standard error and no traceback; exit status 2
when the command line is wrong, 1 when its input cannot be used, 130 after a Ctrl-C; no file
or DuckDB database left behind by a mistake."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import duckdb
import pandas as pd
import pytest

import sqltree
from sqltree import progress
from sqltree.cli import main
from tests.helpers import GOLF

USAGE, DATA, INTERRUPTED = 2, 1, 130


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


def refused(capsys, status: int, *args) -> str:
    """Run the command; check it failed with ``status``, printing one error line only."""
    got, out, err = run(capsys, *args)
    assert got == status and out == "", (got, out, err)
    line = one_error_line(err)
    assert line.startswith("sqltree") and ": error: " in line
    return line


# -- --connect -------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["train", GOLF, "--target", "play", "-q", "-o", "OUT"],
    ["predict", "MODEL", GOLF, "--into", "scored"],
    ["scores", GOLF, "--target", "play"],
])
def test_connect_to_a_missing_duckdb_file_is_refused(tmp_path, capsys, model_file, command):
    typo = tmp_path / "typo.duckdb"
    names = {"MODEL": model_file, "OUT": tmp_path / "m.json"}
    line = refused(capsys, DATA, *[names.get(a, a) for a in command], "--connect", typo)
    assert str(typo) in line and "does not exist" in line and "--create-db" in line
    assert not typo.exists() and not (tmp_path / "m.json").exists()


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
    line = refused(capsys, USAGE, "train", GOLF, "-t", "play", "--connect", "mysql://db/x")
    assert "a postgresql:// URL, a sqlite:/// URL or a DuckDB database file" in line


@pytest.mark.parametrize("form", ["url", "file"])
def test_connect_to_a_sqlite_database(tmp_path, capsys, form):
    import sqlite3

    database = tmp_path / "shop.db"
    with contextlib.closing(sqlite3.connect(database)) as lite:
        pd.read_csv(GOLF, dtype=str).to_sql("golf", lite, index=False)
        lite.commit()
    connect = f"sqlite:///{database}" if form == "url" else str(database)
    model = tmp_path / "m.json"
    status, _, err = run(capsys, "train", "golf", "-t", "play", "-q", "-o", model,
                         "--connect", connect)
    assert status == 0, err
    assert sqltree.load(model).stats["engine"] == "sqlite"
    status, _, err = run(capsys, "predict", model, "golf", "--into", "scored", "--connect",
                         connect)
    assert status == 0, err
    with contextlib.closing(sqlite3.connect(database)) as lite:
        assert lite.execute("SELECT count(*) FROM scored").fetchall() == [(14,)]
    status, out, err = run(capsys, "evaluate", model, "golf", "--connect", connect)
    assert status == 0 and "Correctly Classified Instances          14" in out, err


def test_connect_to_a_missing_sqlite_file_is_refused(tmp_path, capsys):
    typo = tmp_path / "typo.db"
    line = refused(capsys, DATA, "scores", GOLF, "-t", "play", "--connect", f"sqlite:///{typo}")
    assert f"SQLite database {str(typo)!r} does not exist" in line and not typo.exists()


def test_connect_to_a_file_that_is_not_a_database(tmp_path, capsys):
    line = refused(capsys, DATA, "train", GOLF, "-t", "play", "--connect", tmp_path)
    assert f"DuckDB cannot open {str(tmp_path)!r}" in line


def test_in_memory_duckdb_needs_no_file(capsys):
    status, _, err = run(capsys, "scores", GOLF, "-t", "play", "--connect", ":memory:")
    assert status == 0, err


@pytest.mark.postgres
def test_connect_to_a_server_that_refuses(capsys, tmp_path):
    # Port 1 on this machine: nothing listens there, so the connection is refused at once.
    line = refused(capsys, DATA, "train", GOLF, "-t", "play", "-o", tmp_path / "m.json",
                   "--connect", "postgresql://nobody:secret@127.0.0.1:1/x")
    assert "PostgreSQL: cannot connect to postgresql://nobody@127.0.0.1:1/x" in line
    assert "refused" in line and "secret" not in line


@pytest.mark.postgres
def test_a_mistyped_table_on_postgres(capsys, tmp_path, postgres_url):
    line = refused(capsys, DATA, "train", "no_such_table", "-t", "play",
                   "-o", tmp_path / "m.json", "--connect", postgres_url)
    assert line == (
        "sqltree: error: PostgreSQL cannot read table 'no_such_table': relation "
        '"no_such_table" does not exist. (SQLSTATE 42P01)'
    )


# -- model files -----------------------------------------------------------------------------------
MODEL_COMMANDS = [["show"], ["rules"], ["dot"], ["sql"], ["predict", "M", GOLF]]


@pytest.mark.parametrize("command", MODEL_COMMANDS, ids=lambda c: c[0])
def test_a_missing_model_file(tmp_path, capsys, command):
    missing = tmp_path / "missing.json"
    line = refused(capsys, DATA, *command[:1], missing, *command[2:])
    assert line == f"sqltree: error: {missing}: No such file or directory"


@pytest.mark.parametrize("command", MODEL_COMMANDS, ids=lambda c: c[0])
def test_a_cyclic_model_file(capsys, cyclic_file, command):
    # before: show walked the cycle until memory ran out
    line = refused(capsys, DATA, *command[:1], cyclic_file, *command[2:])
    assert line == (
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
    line = refused(capsys, DATA, "show", path)
    assert line.startswith(f"sqltree: error: {path}: ") and message in line


def test_a_folder_as_model_file(tmp_path, capsys):
    line = refused(capsys, DATA, "show", tmp_path)
    assert line == f"sqltree: error: {tmp_path}: Is a directory"


# -- sources ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("command, message", [
    (["train", "missing.csv", "-t", "play"], "no file matches 'missing.csv'"),
    (["train", "no_such_table", "-t", "play"],
     "DuckDB cannot read table 'no_such_table': Catalog Error: Table with name no_such_table "
     "does not exist!"),
    (["train", "SELECT nope FROM read_csv('GOLF')", "-t", "play"],
     "DuckDB cannot read the query \"SELECT nope FROM read_csv('"),
    (["train", "SELECT * FROM", "-t", "play"], "SELECT * FROM"),
    (["train", GOLF, "-t", "nope"], "target column 'nope' is not in the source"),
    (["train", GOLF, "-t", "play", "--features", "nope"], "columns not in the source: ['nope']"),
    (["predict", "M", "missing.csv"], "no file matches 'missing.csv'"),
    (["predict", "M", "no_such_table"], "DuckDB cannot read table 'no_such_table'"),
    (["scores", "missing.csv", "-t", "play"], "no file matches 'missing.csv'"),
], ids=["csv", "table", "column", "query", "target", "feature", "predict-csv", "predict-table",
        "scores-csv"])
def test_a_missing_source_or_column(tmp_path, capsys, model_file, command, message):
    names = {"M": str(model_file)}
    args = [names.get(str(a), str(a).replace("GOLF", str(GOLF))) for a in command]
    if command[0] == "train":
        args += ["-q", "-o", tmp_path / "m.json"]
    line = refused(capsys, DATA, *args)
    assert message in line
    assert not (tmp_path / "m.json").exists()


def test_a_name_that_is_a_table_and_a_folder_is_refused(tmp_path, capsys, monkeypatch):
    # before: the folder wine/ in the working directory was read instead of the table wine
    monkeypatch.chdir(tmp_path)
    database = tmp_path / "shop.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute(f"CREATE TABLE wine AS SELECT * FROM read_csv('{GOLF}')")
        con.execute(f"COPY wine TO '{tmp_path}/golf.parquet'")
    (tmp_path / "wine").mkdir()
    os.replace(tmp_path / "golf.parquet", tmp_path / "wine" / "golf.parquet")
    line = refused(capsys, USAGE, "train", "wine", "-t", "play", "--connect", database)
    assert "write table:wine for the table or file:wine for the folder" in line
    trees = []
    for source in ("table:wine", "file:wine", "wine/"):
        status, out, err = run(capsys, "train", source, "-t", "play", "--connect", database)
        assert status == 0, err
        trees.append(out)
    assert "outlook = overcast: True (4.0)" in trees[0] and trees.count(trees[0]) == 3


# -- options ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, message", [
    (["--max-depth", "x"], "argument --max-depth: invalid int value: 'x'"),
    (["--max-depth", "-1"], "max_depth must be at least 1, not -1"),
    (["--max-depth", "0"], "max_depth must be at least 1, not 0"),
    (["--cf", "7"], "cf must be in (0, 0.5], not 7.0"),
    (["--cf", "0"], "cf must be in (0, 0.5], not 0.0"),
    (["--max-bins", "1"], "max_bins must be at least 2, not 1"),
    (["--max-bins", "0"], "max_bins must be at least 2, not 0"),
    (["--algorithm", "c5"], "argument --algorithm/-a: invalid choice: 'c5'"),
    (["--criterion", "gini"], "['criterion'] apply to algorithm='cart' only"),
    (["-a", "cart", "--cf", "0.1"], "['cf'] do not apply to CART"),
    (["--threads", "0"], "threads must be a whole number of at least 1, not 0"),
    (["--memory-limit", "lots"], "memory_limit 'lots' is not a size DuckDB reads"),
    (["--connect", "postgresql://nobody@127.0.0.1:1/x", "--threads", "2"],
     "--threads and --memory-limit apply to DuckDB only"),
], ids=lambda v: v if isinstance(v, str) and v.startswith("-") else None)
def test_bad_training_options(tmp_path, capsys, options, message):
    output = tmp_path / "m.json"
    line = refused(capsys, USAGE, "train", GOLF, "-t", "play", "-q", "-o", output, *options)
    assert message in line
    assert not output.exists()


@pytest.mark.parametrize("args, message", [
    # argparse alone reported the --target it then missed, not the flag that was misspelt
    (["train", GOLF, "--taget", "play"],
     "'--taget' is not known (did you mean '--target'?); the following arguments are required"),
    (["train", GOLF, "-t", "play", "--prunning=none"],
     "'--prunning' is not known (did you mean '--pruning'?)"),
    (["trian", GOLF], "'trian' is not known (did you mean 'train'?); argument COMMAND"),
    (["sql", "m.json", "--dialcet", "duckdb"],
     "'--dialcet' is not known (did you mean '--dialect'?)"),
    # argparse's abbreviations took --max-dept for --max-depth without a word
    (["train", GOLF, "-t", "play", "--max-dept", "2"],
     "'--max-dept' is not known (did you mean '--max-depth'?)"),
    (["train", GOLF, "-t", "play", "--max", "2"], "unrecognized arguments: --max 2"),
], ids=["flag", "flag=value", "command", "sql flag", "abbreviation", "prefix"])
def test_a_misspelt_flag_or_command_is_named(capsys, args, message):
    assert message in refused(capsys, USAGE, *args)


@pytest.mark.parametrize("output, message", [
    ("out.xlsx", "models are written as .json files"),
    ("/nonexistent-folder/m.json", "the folder '/nonexistent-folder' does not exist"),
    (".", "it is a folder"),
])
def test_train_output_checked_before_training(capsys, output, message):
    assert message in refused(capsys, USAGE, "train", GOLF, "-t", "play", "-o", output)


def test_features_is_repeatable_and_names_a_column_with_a_comma(tmp_path, capsys):
    source = tmp_path / "golf.csv"
    pd.read_csv(GOLF, dtype=str).rename(columns={"humidity": "humidity, %"}).to_csv(
        source, index=False)
    model = tmp_path / "m.json"
    status, _, err = run(capsys, "train", source, "-t", "play", "-q", "-o", model,
                         "--features", "humidity\\, %", "--features", "outlook,windy")
    assert status == 0, err
    assert sqltree.load(model).feature_names == ["humidity, %", "outlook", "windy"]


def _choices(command: str, flag: str) -> list[str]:
    from sqltree.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a.choices, dict)]
    (action,) = [a for a in sub.choices[command]._actions if flag in a.option_strings]
    return list(action.choices)


def test_every_criterion_offered_trains(capsys, tmp_path):
    from tests.helpers import GOLF_NUMERIC

    offered = _choices("train", "--criterion")
    assert "absolute_error" not in offered
    for criterion in offered:
        regression = criterion in ("squared_error", "friedman_mse", "poisson")
        args = (["-t", "humidity", "--task", "regression", "--features", "outlook,temperature"]
                if regression else ["-t", "play", "-a", "cart"])
        status, _, err = run(capsys, "train", GOLF_NUMERIC, *args, "--criterion", criterion,
                             "-q", "-o", tmp_path / "m.json")
        assert status == 0, (criterion, err)


def test_split_scores_task_is_checked():
    # split_scores(task=...) used to raise a plain TypeError; a task it does not know is an
    # OptionError, and a regression task needs a numeric target
    with pytest.raises(sqltree.OptionError, match="task must be one of"):
        sqltree.split_scores(str(GOLF), target="play", task="regresion")
    with pytest.raises(sqltree.DataError, match="a regression target must be numeric; 'play'"):
        sqltree.split_scores(str(GOLF), target="play", task="regression")


def test_scores_task_regression_prints_the_variance_decrease(capsys):
    from tests.helpers import GOLF_NUMERIC

    status, out, err = run(capsys, "scores", GOLF_NUMERIC, "-t", "humidity", "--task",
                           "regression")
    assert status == 0, err
    expected = sqltree.split_scores(str(GOLF_NUMERIC), target="humidity", task="regression")
    assert out == expected.to_string(index=False) + "\n"
    assert out.split()[:6] == ["attribute", "kind", "threshold", "left", "right",
                               "unknown_left"]
    assert "variance_decrease" in out.splitlines()[0]


@pytest.mark.parametrize("args, status, message", [
    # a regression task needs a numeric target
    (["-t", "play", "--task", "regression"], DATA, "a regression target must be numeric"),
    # a measurement scored as classes points to --task regression
    (["-t", "humidity", "--task", "classification"], DATA, "(--task regression)"),
    (["-t", "humidity", "--task", "variance"], USAGE,
     "argument --task: invalid choice: 'variance'"),
])
def test_scores_task_refuses_what_does_not_go_together(capsys, tmp_path, args, status,
                                                       message):
    numbers = tmp_path / "numbers.csv"
    pd.read_csv(GOLF).assign(humidity=[70.5 + i for i in range(14)]).to_csv(numbers,
                                                                             index=False)
    assert message in refused(capsys, status, "scores", numbers, *args)


def test_quiet_without_output_is_refused(capsys):
    # it used to train, print nothing and throw the model away
    line = refused(capsys, USAGE, "train", GOLF, "-t", "play", "-q")
    assert "without --output the trained model would be lost: add -o MODEL.json" in line


@pytest.mark.parametrize("quiet_first", [True, False], ids=["-q first", "-q last"])
@pytest.mark.parametrize("options, message", [
    (["--cf", "7"], "cf must be in (0, 0.5], not 7.0"),
    (["--max-depth", "0"], "max_depth must be at least 1, not 0"),
    (["--max-bins", "1"], "max_bins must be at least 2, not 1"),
    (["-a", "cart", "--ccp-alpha", "-1"], "ccp_alpha must be in [0, inf), not -1.0"),
    (["--criterion", "gini"], "['criterion'] apply to algorithm='cart' only"),
    (["--max-samples", "0.5"], "--max-samples apply to --forest or --boost"),
    (["--forest", "0"], "n_estimators must be a positive integer, not 0"),
    (["--forest", "3", "--max-features", "most"], "--max-features takes sqrt, log2, all"),
    (["--boost", "3", "--learning-rate", "-1"], "learning_rate must be positive"),
    (["-o", "model.xlsx"], "models are written as .json files"),
], ids=lambda v: v if isinstance(v, str) and v.startswith("-") else None)
def test_a_bad_option_value_is_reported_before_quiet_without_output(capsys, options, message,
                                                                     quiet_first):
    # -q without -o used to be refused first, and the real mistake only on the next run
    args = ["-q", *options] if quiet_first else [*options, "-q"]
    line = refused(capsys, USAGE, "train", GOLF, "-t", "play", *args)
    assert message in line and "--quiet" not in line


def test_quiet_without_output_is_refused_before_the_source_is_read(capsys, monkeypatch):
    from sqltree import api

    def unread(*args, **kwargs):
        raise AssertionError("the source was read")

    monkeypatch.setattr(api, "describe", unread)
    for args in (["-q"], ["-q", "-a", "cart", "--max-depth", "2"], ["--forest", "2", "-q"]):
        line = refused(capsys, USAGE, "train", GOLF, "-t", "play", *args)
        assert "without --output the trained model would be lost" in line


def test_quiet_with_an_evaluation_prints_the_evaluation_only(capsys):
    status, out, err = run(capsys, "train", GOLF, "-t", "play", "-q", "--folds", "2")
    assert status == 0 and err == ""
    assert "outlook" not in out and "Correctly Classified Instances" in out


@pytest.mark.parametrize("options, message", [
    (["--dialect", "postgress"], "Unknown dialect 'postgress'. Did you mean postgres?"),
    (["--dialect", "nonsense"], "Unknown dialect 'nonsense'"),
    (["--view", "v"], "--view needs --table"),
    (["--proba"], "--proba needs --table"),
])
def test_bad_sql_options(capsys, model_file, options, message):
    assert message in refused(capsys, USAGE, "sql", model_file, *options)


@pytest.mark.parametrize("output, message", [
    ("out.xlsx", "scored rows are written as .csv or .parquet files"),
    ("/nonexistent-folder/p.csv", "the folder '/nonexistent-folder' does not exist"),
])
def test_predict_output_checked_before_scoring(capsys, model_file, output, message):
    assert message in refused(capsys, USAGE, "predict", model_file, GOLF, "-o", output)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".CSV"])
def test_predict_writes_the_kind_its_name_says(tmp_path, capsys, model_file, suffix):
    output = tmp_path / f"scored{suffix}"
    status, _, err = run(capsys, "predict", model_file, GOLF, "-o", output, "-q")
    assert status == 0 and err == ""
    assert (output.read_bytes()[:4] == b"PAR1") == (suffix == ".parquet")
    assert os.listdir(tmp_path) == [output.name]  # no temporary file left


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.parametrize("name", ["m.json", "scored.csv", "scored.parquet"])
def test_written_files_respect_the_umask(tmp_path, capsys, model_file, umask_022, name):
    output = tmp_path / name
    if name.endswith(".json"):
        args = ["train", GOLF, "-t", "play", "-q", "-o", output]
    else:
        args = ["predict", model_file, GOLF, "-o", output]
    assert run(capsys, *args)[0] == 0
    assert output.stat().st_mode & 0o777 == 0o644
    output.chmod(0o640)  # overwritten, a file keeps its mode, as open() keeps it
    assert run(capsys, *args)[0] == 0
    assert output.stat().st_mode & 0o777 == 0o640


def test_usage_errors_are_one_line(capsys):
    for args in ([], ["bogus"], ["show"], ["train", GOLF]):
        status, _, err = run(capsys, *args)
        assert status == USAGE
        assert one_error_line(err).endswith("--help)")


# -- --debug, faults and Ctrl-C --------------------------------------------------------------------
@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_adds_the_traceback(capsys, where):
    args = ["show", "missing.json"]
    args = ["--debug", *args] if where == "before" else [*args, "--debug"]
    status, out, err = run(capsys, *args)
    assert status == DATA and out == ""
    assert "Traceback (most recent call last)" in err and "FileNotFoundError" in err
    assert err.rstrip().splitlines()[-1] == (
        "sqltree: error: missing.json: No such file or directory"
    )


def test_help_lists_the_commands_and_options(capsys):
    status, out, _ = run(capsys, "--help")
    assert status == 0
    for word in ("train", "predict", "sql", "show", "rules", "dot", "scores", "examples:",
                 "--debug"):
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
    assert status == INTERRUPTED and one_error_line(err) == "sqltree: interrupted"


def test_interrupted_training_cleans_up(tmp_path, capsys):
    database = tmp_path / "shop.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute(f"CREATE TABLE golf AS SELECT * FROM read_csv('{GOLF}')")
    output = tmp_path / "m.json"

    def ctrl_c_after_level_0(event):
        if event.phase == "grow" and event.kind == "step":
            raise KeyboardInterrupt

    with progress.listening(ctrl_c_after_level_0):
        status, out, err = run(capsys, "train", "golf", "-t", "play", "-o", output,
                               "--connect", database)
    assert status == INTERRUPTED and out == ""
    assert err.strip().splitlines()[-1] == "sqltree: interrupted" and "Traceback" not in err
    assert not output.exists()
    with duckdb.connect(str(database)) as con:
        assert con.execute("SELECT table_name FROM duckdb_tables()").fetchall() == [("golf",)]


def test_ctrl_c_in_the_process(tmp_path):
    """A real SIGINT while a level is being grown: status 130, one line, no model file."""
    data = tmp_path / "big.parquet"
    with duckdb.connect() as con:
        con.execute(
            # a target that takes several levels (an exclusive or of two features' tests,
            # 8% of it flipped): the signal arrives while levels are still to grow, where a
            # target independent of the features ended the training at level 0
            f"COPY (SELECT i % 97 AS a, (i * 7919) % 1009 AS b, i % 13 AS c, "
            f"CASE WHEN ((((i * 7919) % 1009) % 7 < 3) != ((i % 97) % 5 < 2)) "
            f"!= ((i * 31) % 101 < 8) THEN 'x' ELSE 'y' END AS y "
            f"FROM range(300000) t(i)) TO '{data}'"
        )
    output = tmp_path / "m.json"
    child = subprocess.Popen(
        # the tables plan: a level's statements take long enough to be interrupted
        [sys.executable, "-m", "sqltree.cli", "train", str(data), "-t", "y", "-o", str(output),
         "--plan", "tables", "--max-depth", "6"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    lines = []
    for line in child.stderr:
        lines.append(line)
        if line.startswith("level 0:"):
            child.send_signal(signal.SIGINT)
            break
    rest = child.stderr.read()
    assert child.wait(timeout=300) == INTERRUPTED, "".join(lines) + rest
    assert rest.rstrip().splitlines()[-1] == "sqltree: interrupted"
    assert "Traceback" not in rest
    assert not output.exists() and os.listdir(tmp_path) == ["big.parquet"]


def test_the_process_exits_with_one_line(tmp_path, cyclic_file):
    for args, status in ((["show", str(cyclic_file)], DATA),
                         (["train", str(GOLF), "-t", "play", "--connect",
                           str(tmp_path / "t.duckdb")], DATA),
                         (["train", str(GOLF), "-t", "play", "--max-depth", "-1"], USAGE)):
        done = subprocess.run([sys.executable, "-m", "sqltree.cli", *args],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == status and done.stdout == ""
        one_error_line(done.stderr)
    assert not (tmp_path / "t.duckdb").exists()
