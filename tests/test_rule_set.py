"""C4.5rules (``Model.rule_set``): generalisation, selection, ordering, printing, SQL."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sqlite3
import warnings

import duckdb
import pandas as pd
import pytest
import sqlglot
from hypothesis import event, given, settings
from sqlglot import exp

import sqltree
from sqltree.criteria import add_errs
from sqltree.engines.duckdb import DuckDBEngine
from sqltree.model import FeatureInfo, Model
from sqltree.readers import read_arff
from sqltree.ruleset import Rule, RuleSet
from sqltree.ruleset.conditions import Condition, leaf_paths, without_redundant
from sqltree.ruleset.counts import MAX_COLUMNS, Counter
from sqltree.ruleset.generalise import default_error, pessimistic_rate
from sqltree.ruleset.selection import Coding, RuleUse, exception_bits
from sqltree.tree import Node, Split
from tests.conftest import ENGINES, SQLITE, EngineFactory
from tests.helpers import GOLF, ROOT
from tests.strategies import TableSpec, trained_cases
from tests.test_cli import refused, run
from tests.test_properties import duckdb_with, examples, sqlite_with
from tests.test_scoring_limits import model_of, python_rows, wide, wide_rows

DATA = ROOT / "tests" / "data"


def _leaf(counts: list[float], node_id: int) -> Node:
    total = sum(counts)
    return Node(counts=counts, proba=[c / total for c in counts], node_id=node_id)


def hand_model() -> tuple[Model, pd.DataFrame]:
    """Sixteen rows and the tree ``a = x: (b = p: + | b = q: -) | a = y: -``.

    ====  ====  ====  ====
    a     b     +     -
    ====  ====  ====  ====
    x     p     6     0
    x     q     0     2
    y     p     1     3
    y     q     0     4
    ====  ====  ====  ====
    """
    rows = ([("x", "p", "+")] * 6 + [("x", "q", "-")] * 2 + [("y", "p", "+")]
            + [("y", "p", "-")] * 3 + [("y", "q", "-")] * 4)
    frame = pd.DataFrame(rows, columns=["a", "b", "cls"])
    inner = Node(counts=[6.0, 2.0], proba=[0.75, 0.25],
                 split=Split("b", "nominal", groups=[["p"], ["q"]]),
                 children=[_leaf([6.0, 0.0], 3), _leaf([0.0, 2.0], 4)], shares=[0.75, 0.25],
                 node_id=1)
    root = Node(counts=[7.0, 9.0], proba=[7 / 16, 9 / 16],
                split=Split("a", "nominal", groups=[["x"], ["y"]]),
                children=[inner, _leaf([1.0, 7.0], 2)], shares=[0.5, 0.5], node_id=0)
    features = [FeatureInfo("a", "nominal", "VARCHAR", ["x", "y"]),
                FeatureInfo("b", "nominal", "VARCHAR", ["p", "q"])]
    return Model(root, ["+", "-"], "cls", features), frame


def texts(rule_set: sqltree.Model) -> list[tuple[list[str], str]]:
    return [([c.text() for c in r.conditions], rule_set.classes[r.label])
            for r in rule_set.rules]


# -- a hand-computed case ------------------------------------------------------------------------
def test_hand_computed_generalisation_selection_and_order() -> None:
    model, frame = hand_model()
    rule_set = model.rule_set(frame)
    # Pessimistic rate (E + add_errs(N, E)) / N at cf 0.25; add_errs(n, 0) = n (1 - 0.25^(1/n)).
    #
    # Rule A: a = x AND b = p -> +   covers 6, 0 wrong: (0 + 1.2378) / 6  = 0.2063
    #   without a = x  (b = p:  7 +, 3 -): (3 + 1.5624) / 10 = 0.4562
    #   without b = p  (a = x:  6 +, 2 -): (2 + 1.4446) / 8  = 0.4306  <- lowest, but above
    #   0.2063: A keeps both conditions (round 1).
    # Rule B: a = x AND b = q -> -   covers 2, 0 wrong: (0 + 1.0) / 2 = 0.5
    #   without a = x  (b = q:  0 +, 6 -): (0 + 1.2378) / 6  = 0.2063  <- dropped (round 1)
    #   without b = q  (a = x:  6 +, 2 -): (6 + ...) / 8 > 0.75
    #   round 2, b = q -> -: without b = q (every row: 7 +, 9 -): (7 + 1.8415) / 16 = 0.5526
    #   above 0.2063: B ends as b = q -> -.
    # Rule C: a = y -> -             covers 8, 1 wrong: (1 + 1.3712) / 8 = 0.2964
    #   without a = y (every row): 0.5526: C stays as it is.
    # Default errors: 1 - (7 + 1) / 18 = 0.5556 for +, 1 - (9 + 1) / 18 = 0.4444 for -: every
    # rule is below its class's.
    assert pessimistic_rate([6, 0], 0, 0.25, 1.0) == pytest.approx(0.2063, abs=5e-5)
    assert pessimistic_rate([7, 3], 0, 0.25, 1.0) == pytest.approx(0.4562, abs=5e-5)
    assert pessimistic_rate([6, 2], 0, 0.25, 1.0) == pytest.approx(0.4306, abs=5e-5)
    assert pessimistic_rate([0, 2], 1, 0.25, 1.0) == pytest.approx(0.5)
    assert pessimistic_rate([1, 7], 1, 0.25, 1.0) == pytest.approx(0.2964, abs=5e-5)
    assert pessimistic_rate([7, 9], 1, 0.25, 1.0) == pytest.approx(0.5526, abs=5e-5)
    assert default_error([7, 9], 1) == pytest.approx(1 - 10 / 18)
    assert rule_set.stats["rounds"] == 2 and rule_set.stats["dropped_conditions"] == 1
    # one query per round, one for the rule patterns, one for the coding of conditions
    assert rule_set.stats["queries"] == 4
    # Selection (each class has at most 10 rules: every subset tried). Coding: a's values
    # 8/8 cost 1 bit, b's 10/6 cost 0.9544; naming a feature costs the entropy of
    # (1, 0.9544) / 1.9544 = 0.9996 bits. A costs 1.9996 + 1.9540 + log2(2) - log2(2!) =
    # 3.9536 bits, B 1.9540, C 1.9996. Every rule is kept.
    # Order: + first (its rule has no false positive, - has C's (y, p) row), then -'s rules
    # by error rate (B 0.2063, then C 0.2964). Every row is covered: the default is the
    # class with more rows, -.
    assert texts(rule_set) == [(["a = x", "b = p"], "+"), (["b = q"], "-"), (["a = y"], "-")]
    assert [r.error for r in rule_set.rules] == pytest.approx([0.2063, 0.2063, 0.2964],
                                                              abs=5e-5)
    assert [(r.coverage, r.errors) for r in rule_set.rules] == [(6, 0), (6, 0), (8, 1)]
    assert rule_set.default_class == "-"
    t = rule_set.training
    assert (t.used, t.wrong, t.gain, t.loss) == ([6, 6, 4], [0, 0, 1], [6, 0, 0], [0, 0, 0])
    assert t.errors == 1 and t.rows == 16


def test_hand_computed_coding() -> None:
    coding = Coding.from_counts(16, {"a": [8, 8], "b": [10, 6]}, {})
    assert coding.value_bits == pytest.approx({"a": 1.0, "b": 0.954434})
    p = 1 / 1.954434
    assert coding.attribute_bits == pytest.approx(-p * math.log2(p) - (1 - p) * math.log2(1 - p))
    a_x, b_p = Condition("a", "in", values=("x",)), Condition("b", "in", values=("p",))
    assert coding.rule_bits([a_x, b_p]) == pytest.approx(
        2 * coding.attribute_bits + 1.0 + 0.954434 + 1 - 1)
    # 16 rows, a subset firing on 6 with no false positive and 3 false negatives among the
    # other 10: log2(16) + 0 (no false positive expected or found) + the 3 of 10 coded at
    # the rate 1.5 / 10: -3 log2(0.15) - 7 log2(0.85).
    assert exception_bits(16, 6, 0, 3) == pytest.approx(
        4 - 3 * math.log2(0.15) - 7 * math.log2(0.85))
    # covering more than half: the covered side coded at half the errors.
    assert exception_bits(16, 10, 2, 2) == pytest.approx(
        4 - 2 * math.log2(0.2) - 8 * math.log2(0.8) - 2 * math.log2(2 / 6) - 4 * math.log2(4 / 6))


def test_add_errs_is_the_one_in_criteria() -> None:
    from sqltree import pruning

    assert pruning.add_errs is add_errs


def test_redundant_path_conditions_are_left_out() -> None:
    le5, le3 = Condition("x", "<=", 5.0), Condition("x", "<=", 3.0)
    gt1 = Condition("x", ">", 1.0)
    assert without_redundant([le5, gt1, le3]) == (gt1, le3)
    assert without_redundant([le3, le3]) == (le3,)


# -- golf, labor ---------------------------------------------------------------------------------
def test_golf_matches_quinlans_c45rules() -> None:
    """Quinlan's golf data with numeric temperature and humidity: C4.5 release 8's rules are
    outlook = overcast -> Play [70.7%], outlook = rain AND windy = false -> Play [63.0%],
    outlook = sunny AND humidity > 75 -> Don't Play [63.0%], outlook = rain AND windy = true
    -> Don't Play [50.0%], default Play, no training error."""
    frame = read_arff(DATA / "weather.numeric.arff")
    model = sqltree.train(frame, target="play")
    rule_set = model.rule_set(frame)
    assert sorted(texts(rule_set)) == sorted([
        (["outlook = overcast"], "yes"), (["outlook = rainy", "windy = FALSE"], "yes"),
        (["outlook = sunny", "humidity > 75"], "no"), (["outlook = rainy", "windy = TRUE"], "no"),
    ])
    estimated = {tuple(c): round(100 * (1 - r.error), 1)
                 for (c, _), r in zip(texts(rule_set), rule_set.rules)}
    assert estimated == {("outlook = overcast",): 70.7, ("outlook = rainy", "windy = FALSE"): 63.0,
                         ("outlook = sunny", "humidity > 75"): 63.0,
                         ("outlook = rainy", "windy = TRUE"): 50.0}
    assert rule_set.default_class == "yes" and rule_set.training.errors == 0
    text = str(rule_set)
    assert "    ->  class yes  [70.7%]" in text and "Default class: yes" in text
    assert "Tested 14, errors 0 (0.0%)" in text


def test_golf_nominal_generalises_a_leaf() -> None:
    model = sqltree.train(str(GOLF), target="play")
    rule_set = model.rule_set(str(GOLF))
    # outlook = sunny AND humidity = normal -> yes (2 rows, 50.0%) loses outlook: humidity =
    # normal covers 7 rows with 1 error, (1 + add_errs(7, 1)) / 7 = 33.5%.
    assert (["humidity = normal"], "yes") in texts(rule_set)
    assert rule_set.n_rules == 5 and rule_set.n_conditions == 8
    assert rule_set.evaluate(str(GOLF)).accuracy == 1.0


def test_labor_rule_set_is_smaller_and_scores_as_printed() -> None:
    frame = read_arff(DATA / "labor.arff")
    model = sqltree.train(frame, target="class")
    con = duckdb.connect()
    con.register("labor", frame)
    rule_set = model.rule_set("labor", connection=con)
    assert rule_set.n_rules <= model.n_leaves
    leaf_conditions = sum(len(c) for c in (r.conditions for r in rule_set.rules))
    assert leaf_conditions == rule_set.n_conditions
    assert rule_set.stats["queries"] == rule_set.stats["rounds"] + 2
    evaluation = rule_set.evaluate("labor", connection=con)
    assert evaluation.matrix == rule_set.training.matrix
    predicted = rule_set.predict("labor", connection=con)["prediction"].tolist()
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    assert predicted == [rule_set.predict_row(r) for r in rows]


# -- unknown values ------------------------------------------------------------------------------
def test_an_unknown_value_satisfies_no_condition() -> None:
    model, frame = hand_model()
    rule_set = model.rule_set(frame)
    # (NULL, p) fails a = x and a = y: no rule fires on it -> the default class
    # (x, NULL) fails b = p: A does not fire; B (b = q) does not either; a = y fails too.
    # ('z', q): a value the tree never saw satisfies neither a = x nor a = y; b = q fires.
    new = pd.DataFrame({"a": [None, "x", "z"], "b": ["p", None, "q"], "cls": ["+", "+", "-"]})
    expected = [rule_set.default_class, rule_set.default_class, "-"]
    assert [rule_set.predict_row(r) for r in new.to_dict("records")] == expected
    assert rule_set.predict(new)["prediction"].tolist() == expected
    with contextlib.closing(duckdb.connect()) as con:
        con.register("new", new)
        got = con.execute(rule_set.to_sql("duckdb", table="new")).fetchall()
    assert [r[-1] for r in got] == expected


# -- SQL -----------------------------------------------------------------------------------------
DIALECTS = ["duckdb", "postgres", "spark", "sqlite", "snowflake", "bigquery", "mysql", "tsql",
            "trino", "oracle"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_ordered_case_compiles_and_parses_back_in_every_dialect(dialect: str) -> None:
    frame = read_arff(DATA / "labor.arff")
    rule_set = sqltree.train(frame, target="class").rule_set(frame)
    sql = rule_set.to_sql(dialect, table="labor")
    parsed = sqlglot.parse_one(sql, read=dialect)
    case = parsed.find(sqlglot.exp.Case)
    assert case is not None and len(case.args["ifs"]) == rule_set.n_rules


@pytest.mark.parametrize("engine_factory", [*ENGINES, SQLITE], indirect=True)
def test_every_engine_counts_the_same_rule_set(engine_factory: EngineFactory) -> None:
    frame = read_arff(DATA / "weather.numeric.arff")
    model = sqltree.train(frame, target="play")
    expected = model.rule_set(frame)
    engine, source = engine_factory(frame, "weather")
    got = model.rule_set(source, connection=engine)
    assert str(got) == str(expected)
    assert got.evaluate(source, connection=engine).matrix == expected.training.matrix


def test_refusals() -> None:
    model, frame = hand_model()
    with pytest.raises(sqltree.OptionError):
        model.rule_set(frame, cf=0)
    with pytest.raises(sqltree.DataError):
        model.rule_set(frame.drop(columns=["b"]))
    regression = sqltree.train(pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0],
                                             "y": [1.0, 2.0, 3.0, 5.0]}), target="y",
                               task="regression")
    with pytest.raises(sqltree.UnsupportedError):
        regression.rule_set(pd.DataFrame({"x": [1.0], "y": [1.0]}))


# -- the command line ----------------------------------------------------------------------------
def test_cli_rules_simplify(tmp_path, capsys) -> None:
    model_file = tmp_path / "golf.json"
    sqltree.train(str(GOLF), target="play").save(model_file)
    status, out, _ = run(capsys, "rules", model_file, "--simplify", GOLF)
    assert status == 0 and "Default class: yes" in out and "Evaluation on training data" in out
    status, out, _ = run(capsys, "rules", model_file, "--simplify", GOLF, "--sql", "sqlite")
    assert status == 0 and out.startswith("CASE")
    refused(capsys, 2, "rules", model_file, "--sql", "duckdb")
    refused(capsys, 2, "rules", model_file, "--simplify", GOLF, "--ids")


# -- property: SQL and Python agree --------------------------------------------------------------
RULE_CASES = trained_cases(TableSpec(max_rows=80, max_features=4, weights=False,
                                     infinities=(), nominal_infinities=False,
                                     binned_extremes=False))


@given(case=RULE_CASES)
@settings(max_examples=examples(40))
def test_rule_set_sql_is_the_python_evaluation_on_duckdb_and_sqlite(case) -> None:
    table, opts = case
    with contextlib.closing(duckdb_with(table)) as con, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NULL targets are left out with a warning
        model = sqltree.train("t", target=table.target, connection=con, **opts)
        if model.is_regression:
            return
        rule_set = model.rule_set("t", connection=con)
        event(f"rules: {min(rule_set.n_rules, 3)} (3: three or more)")
        rows = table.rows()
        expected = [rule_set.predict_row(r) for r in rows]
        duck = [r[-1] for r in con.execute(rule_set.to_sql("duckdb", table="t")).fetchall()]
        assert duck == expected
        for r in rule_set.rules:  # the engine's counts are the Python counts
            covered = [row for row in rows if row[table.target] is not None
                       and all(c.holds(row) for c in r.conditions)]
            label = rule_set.classes[r.label]
            assert r.coverage == len(covered)
            assert r.errors == sum(1 for row in covered if row[table.target] != label)
    with contextlib.closing(sqlite_with(table)) as lite:
        got = [r[-1] for r in lite.execute(rule_set.to_sql("sqlite", table="t")).fetchall()]
        booleans = any(isinstance(c, bool) for c in rule_set.classes)
        assert got == ([None if v is None else int(v) for v in expected] if booleans
                       else expected)
        built = model.rule_set("t", connection=lite)
        assert [dataclasses.astuple(r) for r in built.rules] == [
            dataclasses.astuple(r) for r in rule_set.rules]


# -- engine limits -------------------------------------------------------------------------------
def every_leaf(model: Model) -> RuleSet:
    """The largest rule set a tree can give: every leaf's path, none generalised."""
    rules = [Rule(conditions, leaf.label, 0.5, 0.0, 0.0, leaf.node_id)
             for leaf, conditions in leaf_paths(model.root) if conditions]
    use = RuleUse([0.0] * len(rules), [0.0] * len(rules), [0.0] * len(rules),
                  [0.0] * len(rules), [[0.0] * len(model.classes)] * len(model.classes), 0, 0)
    return RuleSet(rules, 0, model.classes, model.target, 0.25, use)


def test_four_thousand_rules_score_as_python_on_duckdb_and_sqlite() -> None:
    model = model_of(wide(4000, fractional=False, k=3), 3)
    rule_set = every_leaf(model)
    assert rule_set.n_rules == 4000
    frame = wide_rows(300)
    expected = [rule_set.predict_row(r) for r in python_rows(frame)]
    with contextlib.closing(duckdb.connect()) as con:
        con.register("t", frame)
        got = con.execute(rule_set.to_sql("duckdb", table="t")).fetchall()
        assert [r[-1] for r in got] == expected
    with contextlib.closing(sqlite3.connect(":memory:")) as lite:
        frame.to_sql("t", lite, index=False)
        got = lite.execute(rule_set.to_sql("sqlite", table="t")).fetchall()
        assert [r[-1] for r in got] == expected
    for dialect in ("postgres", "spark"):
        sqlglot.parse_one(rule_set.to_sql(dialect, table="t"), read=dialect)


def test_a_rule_of_1200_conditions_nests_by_their_logarithm_on_sqlite() -> None:
    """SQLite refuses expressions nested deeper than 1,000; the AND of a rule's conditions is
    balanced, so 1,200 conditions nest about 11 deep."""
    conditions = tuple(c for j in range(600) for c in (
        Condition(f"c{j}", ">", float(-j - 1)), Condition(f"c{j}", "<=", float(j + 1))))
    rule_set = RuleSet([Rule(conditions, 1, 0.1, 1.0, 0.0, 0)], 0, ["no", "yes"], "y", 0.25,
                       RuleUse([0.0], [0.0], [0.0], [0.0], [[0.0, 0.0], [0.0, 0.0]], 0, 0))
    frame = pd.DataFrame({f"c{j}": [0.0, float(j + 2), None] for j in range(600)})
    expected = [rule_set.predict_row(r) for r in python_rows(frame)]
    assert expected == ["yes", "no", "no"]
    with contextlib.closing(sqlite3.connect(":memory:")) as lite:
        frame.to_sql("t", lite, index=False)
        got = lite.execute(rule_set.to_sql("sqlite", table="t")).fetchall()
    assert [r[-1] for r in got] == expected


def test_counts_of_many_rules_take_a_few_queries_and_equal_python() -> None:
    """400 rules of about 10 conditions each: over ``MAX_COLUMNS`` aggregates, the round's
    counts take a few queries, and every count is the Python count."""
    model = model_of(wide(400, fractional=False, k=2), 2, ["a", "b"])
    paths = [c for _, c in leaf_paths(model.root) if c]
    frame = wide_rows(200).assign(y=lambda f: ["a" if i % 3 else "b" for i in f["rid"]])
    with contextlib.closing(duckdb.connect()) as con:
        con.register("t", frame)
        engine = DuckDBEngine(con)
        counter = Counter(engine, exp.to_table("t"), "y", ["a", "b"])
        counts, totals = counter.round_counts(paths)
        engine.cleanup()
    assert counter.queries == math.ceil(sum(len(c) + 1 for c in paths) / MAX_COLUMNS)
    rows = python_rows(frame)
    assert totals == [sum(r["y"] == "a" for r in rows), sum(r["y"] == "b" for r in rows), 0]
    for conditions, per_d in zip(paths, counts):
        for d in range(len(conditions) + 1):
            kept = [c for j, c in enumerate(conditions, start=1) if j != d]
            hit = [r for r in rows if all(c.holds(r) for c in kept)]
            assert per_d[d] == [sum(r["y"] == "a" for r in hit),
                                sum(r["y"] == "b" for r in hit), 0]


def test_more_than_ten_rules_are_searched_by_seeded_hill_climbing() -> None:
    frame = read_arff(DATA / "diabetes.arff")
    model = sqltree.train(frame, target="class")
    first, again = model.rule_set(frame, seed=1), model.rule_set(frame, seed=1)
    assert first.stats["search"]["tested_negative"].startswith("hill climbing")
    assert first.stats["search"]["tested_positive"] == "exhaustive"
    assert str(first) == str(again)
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    assert first.predict(frame)["prediction"].tolist() == [first.predict_row(r) for r in rows]


def test_exhaustive_search_is_never_beaten_by_hill_climbing() -> None:
    import random

    import numpy as np

    from sqltree.ruleset.selection import Patterns, _Cover

    rng = random.Random(3)
    groups = [(rng.randrange(2), rng.getrandbits(8), float(rng.randint(1, 5)))
              for _ in range(60)]
    patterns = Patterns.of(groups, 8)
    bits = np.array([rng.uniform(2, 9) for _ in range(8)])
    exhaustive = _Cover(patterns, 0, bits, patterns.fires)
    exhaustive.exhaustive()
    climbing = _Cover(patterns, 0, bits, patterns.fires)
    climbing.spot_search(random.Random(1))
    assert exhaustive.evaluations == 256
    assert exhaustive.best_value <= climbing.best_value + 1e-9


@pytest.mark.parametrize("engine_factory", [*ENGINES, SQLITE], indirect=True)
def test_two_thousand_rules_predict_as_python_on_every_engine(engine_factory: EngineFactory
                                                              ) -> None:
    """The benchmark's 1M-row tree has 2,167 leaves of at most 10 conditions: a rule set of
    2,000 unsimplified paths is about as large as its rule set could be."""
    model = model_of(wide(2000, fractional=False, k=3), 3)
    rule_set = every_leaf(model)
    frame = wide_rows(150)
    engine, source = engine_factory(frame, "wide")
    got = rule_set.predict(source, connection=engine)
    order = got.sort_values("rid")
    expected = {r["rid"]: rule_set.predict_row(r) for r in python_rows(frame)}
    assert order["prediction"].tolist() == [expected[i] for i in order["rid"]]
