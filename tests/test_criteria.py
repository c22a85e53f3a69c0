"""Split criteria computed in SQL (``sqltree.split_scores``) against the worked examples and
against ``sqltree.criteria`` in Python, on every engine."""

from __future__ import annotations

import pandas as pd
import pytest

import sqltree
from sqltree import criteria
from tests.helpers import BUYS, GOLF, GOLF_NUMERIC, read_csv

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


def test_worked_example_1_golf_criteria(engine_factory):
    frame = read_csv(GOLF)
    engine, source = engine_factory(frame, "golf")
    scores = sqltree.split_scores(source, target="play", connection=engine)
    scores = scores.set_index("attribute")
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


def test_worked_example_2_buys_computer_gains(engine_factory):
    frame = read_csv(BUYS)
    engine, source = engine_factory(frame, "buys_computer")
    scores = sqltree.split_scores(source, target="buys_computer", connection=engine)
    scores = scores.set_index("attribute")
    for name, gain in WORKED_BUYS_GAIN.items():
        exact = criteria.information_gain(branches_of(frame, name, "buys_computer"))
        assert scores.loc[name].gain == pytest.approx(exact, abs=1e-9)
        assert scores.loc[name].gain == pytest.approx(gain, abs=5e-7)
    assert scores.loc["income"].gain_ratio == pytest.approx(0.018773, abs=5e-7)


def test_worked_example_3_thresholds(engine_factory):
    frame = read_csv(GOLF_NUMERIC)
    engine, source = engine_factory(frame, "golf")
    scores = sqltree.split_scores(source, target="play", features=["humidity"], connection=engine)
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


def test_worked_example_4_unknown_value_gain(engine_factory):
    frame = read_csv(GOLF_NUMERIC)
    frame.loc[frame.day == "D12", "outlook"] = None
    engine, source = engine_factory(frame, "golf")
    scores = sqltree.split_scores(source, target="play", features=["outlook"], connection=engine)
    assert scores.gain[0] == pytest.approx(0.199041, abs=5e-7)
    known = frame.dropna(subset=["outlook"])
    exact = criteria.information_gain(
        branches_of(known, "outlook", "play"), unknown=[0.0, 1.0]
    )
    assert scores.gain[0] == pytest.approx(exact, abs=1e-9)


def test_predicted_class_is_the_first_class_within_the_tie_tolerance():
    assert criteria.predicted_class([0.25, 0.75]) == 1
    assert criteria.predicted_class([0.5, 0.5 + 1e-12]) == 0  # equal up to rounding: the first
    assert criteria.predicted_class([0.3, 0.3 + 2 * criteria.PROBA_TIE, 0.1]) == 1
    assert criteria.predicted_class([0.4, 0.2, 0.4]) == 0


def test_one_predicted_class_rule_for_text_python_and_sql(engine_factory):
    # A leaf whose probabilities tie up to a rounding error names its first class in the
    # text, in predict_row and in the compiled SQL alike.
    from sqltree.model import FeatureInfo, Model
    from sqltree.tree import CONTINUOUS, Node, Split

    near_tie = Node([1.0, 1.0], [0.5, 0.5 + 1e-12], node_id=1)
    root = Node([2.0, 2.0], [0.5, 0.5], split=Split("x", CONTINUOUS, threshold=0.5),
                children=[near_tie, Node([0.5, 1.5], [0.25, 0.75], node_id=2)],
                shares=[0.5, 0.5], unknown_branch=0)
    model = Model(root=root, classes=["a", "b"], target="y",
                  features=[FeatureInfo("x", CONTINUOUS, "DOUBLE")])
    assert near_tie.label == 0
    assert "x <= 0.5: a (2.0/1.0)" in model.text()
    assert [model.predict_row({"x": x}) for x in (0.0, 1.0)] == ["a", "b"]
    engine, source = engine_factory(pd.DataFrame({"x": [0.0, 1.0]}), "rows")
    assert list(model.predict(source, connection=engine)["prediction"]) == ["a", "b"]
