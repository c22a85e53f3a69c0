"""Permutation importance of forests and boosting (trained or imported): the rows shuffled by
the same hash as a tree's (``sqltree.permutation``), and each shuffle scored by one aggregate
query over the ensemble's compiled SQL."""

from __future__ import annotations

import hashlib
import math
import sqlite3

import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.dealing import FLOAT_MULTIPLIER
from tests.helpers import on_engines


def _signal_and_noise(n: int = 400, seed: int = 5) -> pd.DataFrame:
    """``label`` is decided by ``x`` alone (an integer), with a float and a text column of
    noise and a column that never varies."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 100, n)
    return pd.DataFrame({
        "x": x,
        "noise": np.round(rng.random(n) * 50, 2),
        "colour": rng.choice(["red", "green", "blue"], n),
        "constant": np.full(n, 7),
        "label": np.where(x > 60, "high", np.where(x > 30, "mid", "low")),
    })


FRAME = _signal_and_noise()


@pytest.fixture(scope="module")
def forest() -> sqltree.Ensemble:
    return sqltree.train(FRAME, target="label", algorithm="random-forest", n_estimators=8,
                         max_depth=5, random_state=0)


@pytest.fixture(scope="module")
def regression_frame() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    n = 400
    x = rng.random(n) * 10
    return pd.DataFrame({"x": x, "noise": rng.random(n),
                         "y": 3.0 * x + rng.normal(0, 0.1, n)})


@pytest.fixture(scope="module")
def boosting(regression_frame) -> sqltree.Ensemble:
    return sqltree.train(regression_frame, target="y", task="regression",
                         algorithm="gradient-boosting", max_iter=20, max_depth=3)


def test_the_feature_that_matters_drops_most_and_noise_about_nothing(forest):
    result = forest.permutation_importance(FRAME, n_repeats=3, seed=7)
    assert result.baseline == pytest.approx(forest.evaluate(FRAME)["accuracy"], abs=1e-12)
    assert set(result.importances) == set(forest.feature_names)
    assert max(result.mean, key=result.mean.get) == "x"
    assert result.mean["x"] > 0.3
    for name in ("noise", "colour"):
        assert abs(result.mean[name]) < 0.03, (name, result.mean)
    # a feature no tree tests is not shuffled at all
    assert "constant" not in forest.used_features()
    assert result.importances["constant"] == [0.0, 0.0, 0.0]


def test_regression_drops_r2(boosting, regression_frame):
    result = boosting.permutation_importance(regression_frame, n_repeats=2, seed=3)
    assert result.baseline == pytest.approx(boosting.evaluate(regression_frame)["r2"],
                                            abs=1e-9)
    assert result.mean["x"] > 1.0  # R² falls below zero when x is shuffled
    assert abs(result.mean["noise"]) < 0.01


def test_the_same_figures_on_duckdb_and_sqlite(forest, boosting, regression_frame):
    lite = sqlite3.connect(":memory:")
    FRAME.to_sql("frame", lite, index=False)
    regression_frame.to_sql("numbers", lite, index=False)
    on_sqlite = forest.permutation_importance("frame", connection=lite, n_repeats=2, seed=7)
    on_duckdb = forest.permutation_importance(FRAME, n_repeats=2, seed=7)
    assert on_sqlite.baseline == on_duckdb.baseline
    assert on_sqlite.importances == on_duckdb.importances  # counts of rows: exact
    r_sqlite = boosting.permutation_importance("numbers", connection=lite, n_repeats=2)
    r_duckdb = boosting.permutation_importance(regression_frame, n_repeats=2)
    assert r_sqlite.baseline == pytest.approx(r_duckdb.baseline, abs=1e-12)
    for name, drops in r_duckdb.importances.items():
        assert r_sqlite.importances[name] == pytest.approx(drops, abs=1e-12)


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def _hash_text(value) -> str:
    """``dealing.hash_text`` in Python, for integers, floats and text."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    scaled = float(value) * FLOAT_MULTIPLIER
    fraction = scaled - math.floor(scaled) if abs(scaled) < 2.0**52 else 0.0
    return str(math.floor(fraction * 2.0**31))


def _numbered(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """The rows in the order ``permutation_importance`` numbers them: the MD5 of the seed and
    the row's values, ties broken by the values (none here)."""
    keys = [_md5("|".join([str(seed), *(_hash_text(v) for v in row)]))
            for row in frame.itertuples(index=False)]
    return frame.iloc[np.argsort(keys, kind="stable")].reset_index(drop=True)


def _shuffle(numbered: pd.DataFrame, feature: str, salt: str) -> pd.DataFrame:
    """Row number ``k`` gets the value of the row that comes ``k``-th in the order of
    ``MD5(salt || number)``, as ``permutation._shuffled`` joins them."""
    numbers = range(1, len(numbered) + 1)
    order = sorted(numbers, key=lambda n: (_md5(f"{salt}{n}"), n))
    out = numbered.copy()
    out[feature] = numbered[feature].to_numpy()[[n - 1 for n in order]]
    return out


def test_the_same_drops_as_numpy_on_the_same_shuffles(forest):
    seed, repeats = 7, 2
    result = forest.permutation_importance(FRAME, n_repeats=repeats, seed=seed)
    numbered = _numbered(FRAME, seed)

    def accuracy(rows: pd.DataFrame) -> float:
        return float(np.mean(forest.predict_frame(rows) == rows["label"].to_numpy()))

    baseline = accuracy(numbered)
    assert result.baseline == pytest.approx(baseline, abs=1e-12)
    for feature in forest.used_features():
        expected = [baseline - accuracy(_shuffle(numbered, feature, f"{seed}|{r}|{feature}|"))
                    for r in range(repeats)]
        assert result.importances[feature] == pytest.approx(expected, abs=1e-12), feature


def test_a_weight_column_weighs_the_score(forest):
    weighted = FRAME.assign(w=np.where(FRAME["label"] == "high", 3.0, 1.0))
    plain = forest.permutation_importance(weighted, n_repeats=1, weight=False)
    heavy = forest.permutation_importance(weighted, n_repeats=1, weight="w")
    predicted = forest.predict_frame(weighted) == weighted["label"].to_numpy()
    assert heavy.baseline == pytest.approx(
        float((weighted["w"] * predicted).sum() / weighted["w"].sum()), abs=1e-12)
    assert plain.baseline == pytest.approx(float(predicted.mean()), abs=1e-12)
    with pytest.raises(sqltree.DataError, match="1 rows have a NULL or negative weight"):
        forest.permutation_importance(weighted.assign(w=[-1.0, *weighted["w"][1:]]),
                                      n_repeats=1, weight="w")


def test_options_and_columns_are_checked(forest):
    with pytest.raises(sqltree.OptionError, match="n_repeats must be a whole number >= 1"):
        forest.permutation_importance(FRAME, n_repeats=0)
    with pytest.raises(sqltree.DataError, match=r"not in the source: \['x'\]"):
        forest.permutation_importance(FRAME.drop(columns="x"), n_repeats=1)
    with pytest.raises(sqltree.DataError, match="'x' was number"):
        forest.permutation_importance(FRAME.assign(x=FRAME["x"].astype(str)), n_repeats=1)


def test_an_imported_forest(forest):
    ensemble = pytest.importorskip("sklearn.ensemble")
    features = ["x", "noise", "constant"]
    fitted = ensemble.RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0).fit(
        FRAME[features], FRAME["label"])
    imported = sqltree.from_sklearn(fitted)
    assert not imported.types_recorded
    imported.target = "label"  # an imported model's target is called "target"
    result = imported.permutation_importance(FRAME, n_repeats=2, seed=1)
    assert result.baseline == pytest.approx(fitted.score(FRAME[features], FRAME["label"]))
    assert max(result.mean, key=result.mean.get) == "x"
    assert abs(result.mean["noise"]) < 0.03
    same = sqltree.permutation_importance(imported, FRAME, n_repeats=2, seed=1)
    assert same.importances == result.importances


def test_cli_permutation_importances_of_an_ensemble(tmp_path, capsys, forest):
    from sqltree.cli import main

    path, data = tmp_path / "forest.json", tmp_path / "rows.parquet"
    forest.save(path)
    FRAME.to_parquet(data)
    assert main(["importances", str(path), "--kind", "permutation", "--source", str(data),
                 "--repeats", "2", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    expected = forest.permutation_importance(str(data), n_repeats=2, seed=7).mean
    assert out.startswith("x ") and f"{expected['x']:.6f}" in out
    assert len(out.strip().splitlines()) == len(forest.feature_names)


@on_engines(sqlite=True)
def test_the_same_figures_on_every_engine(engine_factory, forest):
    small = FRAME.head(120)
    engine, source = engine_factory(small)
    got = forest.permutation_importance(source, connection=engine, n_repeats=1, seed=2)
    expected = forest.permutation_importance(small, n_repeats=1, seed=2)
    assert got.baseline == expected.baseline
    assert got.importances == expected.importances
