"""Forests and boosting trained by sqltree, scored by their compiled SQL: the SQL's
predictions equal the Python walk of the trees on every row, on every engine."""

from __future__ import annotations

import numpy as np
import pytest

import sqltree

from .helpers import mixed_table, on_engines


@pytest.fixture(scope="module")
def models():
    frame = mixed_table(3000)
    forest = sqltree.train(frame, "label", algorithm="random-forest", n_estimators=12,
                           max_depth=6, max_bins=32)
    boosted = sqltree.train(frame, "label", algorithm="gradient-boosting", max_iter=8,
                            max_leaf_nodes=8, max_bins=32)
    regression = sqltree.train(frame.assign(target=frame["b"] * 2 + frame["c"]), "target",
                               algorithm="gradient-boosting", loss="poisson", max_iter=5,
                               features=["a", "d", "e", "c"])
    return frame, {"forest": forest, "boosted": boosted, "poisson": regression}


@on_engines()
@pytest.mark.parametrize("name", ["forest", "boosted", "poisson"])
def test_the_sql_of_a_trained_ensemble_agrees_with_python(engine_factory, models, name):
    frame, fitted = models
    model = fitted[name]
    data = frame.assign(target=frame["b"] * 2 + frame["c"])
    engine, source = engine_factory(data)
    scored = model.predict(source, connection=engine, proba=not model.is_regression)
    # the engine may return rows in another order: match them on the features' values
    if model.is_regression:
        expected = model.predict_frame(scored)
        np.testing.assert_allclose(scored["prediction"].to_numpy(dtype=float), expected,
                                   rtol=1e-9)
        return
    expected = model.predict_proba_frame(scored)
    names = [c for c in scored.columns if c.startswith("proba_")]
    np.testing.assert_allclose(scored[names].to_numpy(dtype=float), expected, rtol=1e-9,
                               atol=1e-12)
    assert (scored["prediction"].to_numpy() == model.predict_frame(scored)).all()


def test_a_trained_forest_round_trips_its_file_and_evaluates(tmp_path, models):
    frame, fitted = models
    path = tmp_path / "forest.json"
    fitted["forest"].save(path)
    loaded = sqltree.load(path)
    np.testing.assert_array_equal(loaded.predict_proba_frame(frame),
                                  fitted["forest"].predict_proba_frame(frame))
    figures = loaded.evaluate(frame)
    assert figures["accuracy"] > 0.6
    assert figures["rows"] == len(frame)


@pytest.mark.parametrize("max_features", [None, "sqrt"])
def test_a_forest_level_runs_the_same_statements_for_any_number_of_trees(max_features):
    # Every tree's open nodes share a level's statements: a histogram, the pairs routed down
    # (and with features drawn per node, the table of each node's features).
    frame = mixed_table(3000)

    def levels(trees: int) -> list[tuple[int | None, int | None]]:
        forest = sqltree.train(frame, "label", algorithm="random-forest", n_estimators=trees,
                               max_depth=4, max_features=max_features, random_state=1,
                               plan="tables")
        assert forest.stats["batches"] == 1
        return [(lv["statements"], lv["scans"]) for lv in forest.stats["levels"]]

    few, many = levels(2), levels(12)
    assert few == many
    assert all(scans == (2 if i < len(few) - 1 else 1) for i, (_, scans) in enumerate(few))
    assert all(statements is not None and statements <= 5 for statements, _ in few)
