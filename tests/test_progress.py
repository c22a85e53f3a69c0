"""Watching long work: every phase reports its start, steps and end to the ``progress=``
callback, to ``logging`` and to the display of the command line; Spark keeps its console
quiet while sqltree works."""

from __future__ import annotations

import io
import logging

import pandas as pd
import pytest
from rich.console import Console

import sqltree
from sqltree import progress
from sqltree.cli import main
from tests.helpers import GOLF, mixed_table

MIXED = mixed_table(1_000)


def events_of(call, *args, **kwargs):
    """Run ``call`` with a listener; return its result and the events heard."""
    heard: list[progress.Event] = []
    with progress.listening(heard.append):
        result = call(*args, **kwargs)
    return result, heard


def kinds(events, phase):
    return [e.kind for e in events if e.phase == phase]


# -- the events ------------------------------------------------------------------------------------
def test_cross_validation_reports_each_fold_with_the_trainings_inside():
    fold_evaluations = []
    cv, heard = events_of(sqltree.cross_validate, MIXED, "label", folds=3, max_depth=2,
                          progress=fold_evaluations.append)
    folds = [e for e in heard if e.phase == "cross-validation"]
    assert [e.kind for e in folds] == ["start", "step", "step", "step", "end"]
    assert folds[0].total == 3 and folds[0].depth == 0
    assert [e.details["fold"] for e in folds[1:4]] == [1, 2, 3]
    assert folds[1].message.startswith("fold 1: ") and " leaves, " in folds[1].message
    assert folds[-1].details["accuracy"] == cv.pooled.accuracy
    # each fold's training nests inside: read, grow and prune, one level deeper
    assert sum(e.phase == "grow" and e.kind == "start" for e in heard) == 3
    assert all(e.depth == 1 for e in heard if e.phase != "cross-validation")
    assert fold_evaluations == cv.folds


def test_training_reports_reading_growth_and_pruning(engine_factory):
    engine, source = engine_factory(MIXED)
    heard: list[progress.Event] = []
    model = sqltree.train(source, target="label", connection=engine, progress=heard.append,
                          max_depth=3)
    phases = [e.phase for e in heard if e.kind == "start"]
    assert phases == ["read", "grow", "prune"]
    assert heard[-1].phase == "prune" and heard[-1].kind == "end"

    levels = [e for e in heard if e.phase == "grow" and e.kind == "step"]
    assert [e.details["depth"] for e in levels] == [lv["depth"] for lv in model.stats["levels"]]
    assert [e.step for e in levels] == list(range(1, len(levels) + 1))
    assert levels[0].details["weight"] == 1_000 and levels[0].details["nodes"] == 1
    assert levels[0].message.startswith("level 0: 1 node, 1,000 rows, 1 split, ")
    assert all(e.depth == 0 for e in heard)

    (read_end,) = [e for e in heard if e.phase == "read" and e.kind == "end"]
    assert read_end.message.startswith("read 1,000 rows, 5 features, 3 classes, ")
    (grown,) = [e for e in heard if e.phase == "grow" and e.kind == "end"]
    assert grown.details["leaves"] >= model.n_leaves and not grown.failed

    steps = [e for e in heard if e.phase == "prune" and e.kind == "step"]
    collapsed, rounds = steps[0], steps[1:]
    assert collapsed.message.startswith(
        f"collapsed {model.stats['pruning']['collapsed']} subtrees that fix no training error: "
    )
    assert rounds and rounds[0].message.startswith("pruning round 1: ")
    assert sum(e.details["pruned"] for e in rounds) == model.stats["pruning"]["pruned"]
    assert heard[-1].message.startswith(
        f"pruned: {model.stats['pruning']['leaves_before']:,} -> {model.n_leaves:,} leaves"
    )


def test_compiling_and_scoring_are_phases():
    model = sqltree.train(str(GOLF), target="play")
    sql, heard = events_of(model.to_sql, "postgres")
    assert kinds(heard, "compile") == ["start", "end"]
    assert heard[0].message == "compiling 5 leaves to postgres SQL"
    assert heard[1].message.startswith(f"compiled 5 leaves into {len(sql):,} characters of "
                                       "postgres SQL, ")
    scored, heard = events_of(model.predict, str(GOLF))
    assert len(scored) == 14
    assert kinds(heard, "score") == ["start", "end"]
    assert heard[0].message == f"scoring file {str(GOLF)!r} with 5 leaves"
    assert heard[-1].message.startswith("scored 14 rows, ") and heard[-1].details["rows"] == 14


def test_a_failed_phase_ends_as_failed():
    heard: list[progress.Event] = []
    with progress.listening(heard.append), pytest.raises(sqltree.DataError):
        sqltree.train(str(GOLF), target="nope")
    assert [(e.phase, e.kind, e.failed) for e in heard] == [
        ("read", "start", False), ("read", "end", True)]


def test_a_loop_reports_its_own_steps_around_nested_phases():
    """What cross-validation does: a phase of folds, each fold a training."""
    heard: list[progress.Event] = []
    with progress.listening(heard.append), progress.phase(
        "cross-validation", "3-fold cross-validation", total=3
    ) as folds:
        for fold in range(3):
            sqltree.train(str(GOLF), target="play")
            folds.step(f"fold {fold + 1}/3 done", fold=fold + 1)
        folds.done("3 folds done")
    outer = [e for e in heard if e.phase == "cross-validation"]
    assert [(e.kind, e.step, e.total) for e in outer] == [
        ("start", 0, 3), ("step", 1, 3), ("step", 2, 3), ("step", 3, 3), ("end", 3, 3)]
    assert outer[-1].message == "3 folds done"
    assert {e.depth for e in heard if e.phase != "cross-validation"} == {1}
    assert {e.depth for e in outer} == {0}


def test_events_go_to_logging(caplog):
    with caplog.at_level(logging.INFO, logger="sqltree"):
        sqltree.train(str(GOLF), target="play")
    messages = [r.getMessage() for r in caplog.records if r.name == "sqltree"]
    assert messages[0].startswith("read 14 rows")
    assert any(m.startswith("level 1: ") for m in messages)
    assert messages[-1].startswith("pruned: 5 -> 5 leaves")
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "sqltree")
    assert all(isinstance(r.sqltree_event, progress.Event) for r in caplog.records
               if r.name == "sqltree")


def test_a_callback_stops_training_by_raising():
    class Enough(Exception):
        pass

    def stop_at_level_1(event):
        if event.phase == "grow" and event.kind == "step" and event.details["depth"] == 1:
            raise Enough

    with pytest.raises(Enough):
        sqltree.train(str(GOLF), target="play", progress=stop_at_level_1)


# -- the display -----------------------------------------------------------------------------------
def test_progress_true_writes_a_plain_line_per_step_when_not_a_terminal(capsys):
    sqltree.train(str(GOLF), target="play", progress=True, plan="tables")
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == ""
    assert lines[0].startswith("read 14 rows, 4 features, 2 classes, ")
    assert lines[1].startswith("level 0: 1 node, 14 rows, 1 split, 5 queries, ")
    assert lines[3].startswith("grown: 5 leaves, 2 levels, ")
    assert lines[-1].startswith("pruned: 5 -> 5 leaves, ")
    assert not any(line.startswith(("reading", "growing", "pruning 5")) for line in lines)


def test_one_display_however_many_ask(capsys):
    with progress.shown():
        sqltree.train(str(GOLF), target="play", progress=True)
    err = capsys.readouterr().err
    assert err.count("level 0:") == 1


def test_nested_phases_are_indented(capsys):
    with progress.shown(), progress.phase("cross-validation", "folds", total=1) as folds:
        sqltree.train(str(GOLF), target="play")
        folds.step("fold 1/1 done")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("  read 14 rows") and "fold 1/1 done" in lines
    assert lines[-1].startswith("cross-validation took ")


def test_the_live_display_on_a_terminal():
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120, color_system=None)
    with progress.listening(progress.Display(console=console)):
        sqltree.train(str(GOLF), target="play")
    text = screen.getvalue()
    for line in ("read 14 rows", "level 0: 1 node, 14 rows", "level 1: 2 nodes, 10 rows",
                 "grown: 5 leaves", "pruned: 5 -> 5 leaves"):
        assert line in text
    assert "growing a c4.5 tree on 14 rows" in text  # the live line, while it ran
    assert "0/?" not in text  # no count where the total is unknown
    assert text.index("\x1b[?25l") < text.index("pruned: 5") < text.rindex("\x1b[?25h")


def test_the_live_line_fits_the_terminal_at_a_word_end():
    assert progress.fit("growing a c4.5 tree on 14 rows (memory plan: few rows)", 34) == (
        "growing a c4.5 tree on 14 rows …")
    assert progress.fit("reading the query SELECT * FROM sales on DuckDB", 30) == (
        "reading the query SELECT *…")
    assert progress.fit("short", 30) == "short"
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=80, color_system=None)
    query = f"SELECT * FROM '{GOLF}' WHERE outlook IS NOT NULL AND temperature IS NOT NULL"
    with progress.listening(progress.Display(console=console)):
        sqltree.train(query, target="play")
    live = [line for line in screen.getvalue().split("\r") if "reading the query" in line]
    assert live and all("…" in line for line in live)


def test_progress_lines_count_in_words():
    frame = pd.read_csv(GOLF, dtype=str)[["outlook", "play"]]
    _, events = events_of(sqltree.train, frame, target="play", plan="tables", max_depth=1)
    lines = [e.message for e in events]
    assert any(m.startswith("read 14 rows, 1 feature, 2 classes, ") for m in lines), lines
    assert any(m.startswith("level 0: 1 node, 14 rows, 1 split, ") for m in lines), lines
    assert not any(" 1 queries" in m or " 1 leaves" in m or " 1 features" in m for m in lines)


# -- the command line ------------------------------------------------------------------------------
def test_cli_train_shows_progress_and_quiet_shows_nothing(tmp_path, capsys):
    assert main(["train", str(GOLF), "-t", "play", "-o", str(tmp_path / "m.json")]) == 0
    out, err = capsys.readouterr()
    assert "outlook = overcast" in out
    lines = err.splitlines()
    expected = ["read 14 rows", "level 0: ", "level 1: ", "grown: 5 leaves", "pruning round 1: ",
                "pruning round 2: ", "pruned: 5 -> 5 leaves", f"saved {tmp_path}/m.json"]
    assert len(lines) == len(expected)
    assert all(line.startswith(start) for line, start in zip(lines, expected)), lines
    assert main(["train", str(GOLF), "-t", "play", "-q", "-o", str(tmp_path / "q.json")]) == 0
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("command", [["sql"], ["predict", "MODEL", GOLF]], ids=["sql", "predict"])
def test_cli_compile_and_score_show_progress(tmp_path, capsys, command):
    model = tmp_path / "m.json"
    sqltree.train(str(GOLF), target="play").save(model)
    args = [str(model if a == "MODEL" else a) for a in command]
    if command[0] == "sql":
        args.insert(1, str(model))
    assert main(args) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("compiled 5 leaves into " if command[0] == "sql" else "scored 14 ")
    assert main([*args, "-q"]) == 0
    assert capsys.readouterr().err == ""


# -- Spark -----------------------------------------------------------------------------------------
@pytest.mark.spark
def test_spark_is_quiet_while_training_and_as_before_after(spark):
    from sqltree.engines.spark import _log_level, _start_progress_bar, _stop_progress_bar

    context = spark.sparkContext
    assert _log_level(context) == "ERROR"  # the fixture's
    context.setLogLevel("WARN")
    _start_progress_bar(context)  # as a session built with spark.ui.showConsoleProgress=true
    seen = []

    def look(event):
        if event.phase == "grow" and event.kind == "step":
            seen.append((_log_level(context), context._jsc.sc().progressBar().isDefined()))

    view = "golf_for_quiet_console"
    spark.createDataFrame(pd.read_csv(GOLF, dtype=str)).createOrReplaceTempView(view)
    try:
        model = sqltree.train(view, target="play", connection=spark, progress=look)
        assert model.n_leaves == 5
        assert seen and set(seen) == {("ERROR", False)}
        assert _log_level(context) == "WARN"
        assert context._jsc.sc().progressBar().isDefined()
    finally:
        spark.catalog.dropTempView(view)
        _stop_progress_bar(context)
        context.setLogLevel("ERROR")


def test_a_long_statement_is_noted_inside_its_step(monkeypatch, capsys):
    """A statement over ``SLOW_STATEMENT`` seconds gets a line of its own (every statement,
    with the limit at 0), indented under the level or round under way; steps are unchanged."""
    monkeypatch.setattr(progress, "SLOW_STATEMENT", 0.0)
    _, heard = events_of(sqltree.train, str(GOLF), target="play", progress=True,
                         plan="tables")
    notes = [e for e in heard if e.kind == "note"]
    levels = [e for e in heard if e.phase == "grow" and e.kind == "step"]
    assert [e.step for e in levels] == [1, 2]
    assert {e.phase for e in notes} == {"read", "grow", "prune"}
    grown = [e for e in notes if e.phase == "grow"]
    assert grown[0].step == 0 and grown[0].message.startswith("  grow: stored level_0, ")
    assert sum(e.step == 0 for e in grown) == levels[0].details["queries"] + 1  # + level 0
    assert all(e.details["seconds"] >= 0 and e.details["statement"] for e in notes)
    lines = capsys.readouterr().err.splitlines()
    assert lines.index(levels[0].message) == len([e for e in heard[:heard.index(levels[0])]
                                                  if e.kind != "start"])
    assert sum(line.startswith("  grow: ") for line in lines) == len(grown)
