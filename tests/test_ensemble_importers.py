"""Models of scikit-learn, LightGBM and XGBoost, imported and scored in every engine, equal
the library's own ``predict``/``predict_proba`` on every row (random data with NULLs and
categorical columns); files round-trip through ``sqltree.load`` and ``sqltree sql --from``.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import sqltree
from sqltree.ensemble.importers import float32_le, float32_lt

from .conftest import ENGINES, SQLITE

ALL_ENGINES = [*ENGINES, SQLITE]
N = 600


def data(seed: int = 0, n: int = N) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "a": rng.normal(size=n),
        "b b": rng.normal(size=n).round(2),
        "c": rng.uniform(size=n) * 1e3,
        "k": rng.integers(0, 6, n).astype(float),
    })
    frame.loc[rng.random(n) < 0.1, "a"] = np.nan
    frame.loc[rng.random(n) < 0.05, "k"] = np.nan
    return frame


def targets(frame: pd.DataFrame, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = len(frame)
    b, c, k = frame["b b"], frame["c"], frame["k"]
    return {
        "binary": ((b + rng.normal(size=n) + 2 * (k == 3) - (k == 1)) > 0).astype(int).to_numpy(),
        "multiclass": np.where(b + 0.3 * rng.normal(size=n) + (k == 2) > 0.5, 2,
                               np.where(c > 500, 1, 0)),
        "regression": (b * 2 + np.sin(c / 100) + rng.normal(size=n) * 0.1
                       + 3 * (k == 1)).to_numpy(),
    }


def score(model: sqltree.Ensemble, frame: pd.DataFrame, engine_factory) -> pd.DataFrame:
    table = frame.assign(rid=np.arange(len(frame)))
    engine, source = engine_factory(table, "rows")
    got = model.predict(source, connection=engine, proba=not model.is_regression)
    return got.sort_values("rid").reset_index(drop=True)


def assert_equal(model, got, est, frame, proba_frame=None, rtol=1e-12):
    library = proba_frame if proba_frame is not None else frame
    if model.is_regression:
        np.testing.assert_allclose(got["prediction"].to_numpy(float), est.predict(library),
                                   rtol=rtol, atol=0)
        return
    names = [f"proba_{c}" for c in model.classes]
    np.testing.assert_allclose(got[names].to_numpy(float), est.predict_proba(library),
                               rtol=rtol, atol=1e-300)
    assert got["prediction"].tolist() == est.predict(library).tolist()


def sklearn_models():
    from sklearn import ensemble, tree

    return {
        "tree": (tree.DecisionTreeClassifier(max_depth=6, random_state=0), "multiclass"),
        "forest": (ensemble.RandomForestClassifier(15, max_depth=7, random_state=0), "multiclass"),
        "extra": (ensemble.ExtraTreesClassifier(10, max_depth=6, random_state=0), "binary"),
        "forest_reg": (ensemble.RandomForestRegressor(10, max_depth=6, random_state=0),
                       "regression"),
        "gb": (ensemble.GradientBoostingClassifier(n_estimators=15, random_state=0), "binary"),
        "gb3": (ensemble.GradientBoostingClassifier(n_estimators=8, random_state=0),
                "multiclass"),
        "gb_reg": (ensemble.GradientBoostingRegressor(n_estimators=15, random_state=0),
                   "regression"),
        "hist": (ensemble.HistGradientBoostingClassifier(
            max_iter=15, categorical_features=[3], random_state=0), "binary"),
        "hist3": (ensemble.HistGradientBoostingClassifier(max_iter=8, random_state=0),
                  "multiclass"),
        "hist_poisson": (ensemble.HistGradientBoostingRegressor(
            max_iter=15, loss="poisson", categorical_features=[3], random_state=0),
            "regression"),
    }


SKLEARN = list(sklearn_models())


@pytest.mark.parametrize("engine_factory", ALL_ENGINES, indirect=True)
@pytest.mark.parametrize("name", SKLEARN)
def test_sklearn(engine_factory, name):
    est, task = sklearn_models()[name]
    frame = data()
    y = targets(frame)[task]
    if task == "regression" and name == "hist_poisson":
        y = np.exp(y / 4)
    if name.startswith("gb"):  # these take no missing values
        frame = frame.fillna(0.0)
    est.fit(frame, y)
    model = sqltree.from_sklearn(est)
    test = data(seed=5)
    if name.startswith("gb"):
        test = test.fillna(0.0)
    assert_equal(model, score(model, test, engine_factory), est, test)


def lightgbm_model(task: str, frame: pd.DataFrame, y: np.ndarray):
    lgb = pytest.importorskip("lightgbm")
    cls = lgb.LGBMRegressor if task == "regression" else lgb.LGBMClassifier
    return cls(n_estimators=25, num_leaves=15, verbose=-1, random_state=0).fit(
        frame, y, categorical_feature=["k"])


@pytest.mark.parametrize("engine_factory", ALL_ENGINES, indirect=True)
@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_lightgbm(engine_factory, task):
    frame = data()
    est = lightgbm_model(task, frame, targets(frame)[task])
    model = sqltree.from_lightgbm(est, feature_names=list(frame.columns))
    assert any(t.categories for t in model.trees)
    test = data(seed=6)
    assert_equal(model, score(model, test, engine_factory), est, test)


def zeros(seed: int, n: int = N) -> pd.DataFrame:
    """Columns where 0, values within 1e-35 of it and NULL are common, on both sides of the
    thresholds LightGBM learns."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({name: rng.normal(size=n) for name in ("p", "q", "r")})
    for name, share in (("p", 0.3), ("q", 0.5), ("r", 0.15)):
        frame.loc[rng.random(n) < share, name] = 0.0
        frame.loc[rng.random(n) < 0.05, name] = rng.choice([1e-36, -1e-36, 2e-35, -2e-35])
        frame.loc[rng.random(n) < 0.05, name] = np.nan
    return frame


@pytest.mark.parametrize("engine_factory", ALL_ENGINES, indirect=True)
def test_lightgbm_zero_as_missing(engine_factory):
    lgb = pytest.importorskip("lightgbm")
    frame = zeros(2)
    rng = np.random.default_rng(3)
    y = ((frame["p"].fillna(0) == 0) * 1.5 + frame["q"].fillna(-1) + (frame["r"] > 0.2)
         + rng.normal(size=N) * 0.3 > 0.8).astype(int)
    est = lgb.LGBMClassifier(n_estimators=20, num_leaves=8, zero_as_missing=True, verbose=-1,
                             random_state=0).fit(frame, y)
    kinds = {n.get("missing_type") for t in est.booster_.dump_model()["tree_info"]
             for n in _internal_nodes(t["tree_structure"])}
    assert "Zero" in kinds
    model = sqltree.from_lightgbm(est, feature_names=list(frame.columns))
    test = zeros(7)
    assert_equal(model, score(model, test, engine_factory), est, test)
    np.testing.assert_allclose(model.predict_proba_frame(test), est.predict_proba(test),
                               rtol=1e-12, atol=1e-300)


def _internal_nodes(node: dict) -> list[dict]:
    if "split_feature" not in node:
        return []
    return [node, *_internal_nodes(node["left_child"]), *_internal_nodes(node["right_child"])]


def xgboost_model(task: str, frame: pd.DataFrame, y: np.ndarray):
    xgb = pytest.importorskip("xgboost")
    cls = xgb.XGBRegressor if task == "regression" else xgb.XGBClassifier
    return cls(n_estimators=25, max_depth=4, enable_categorical=True, tree_method="hist",
               max_cat_to_onehot=1, random_state=0).fit(categorical(frame), y)


def categorical(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    out["k"] = pd.Categorical(frame["k"].astype("Int64"), categories=range(6))
    return out


@pytest.mark.parametrize("engine_factory", ALL_ENGINES, indirect=True)
@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_xgboost(engine_factory, task):
    frame = data()
    est = xgboost_model(task, frame, targets(frame)[task])
    model = sqltree.from_xgboost(est)
    assert any(t.categories for t in model.trees)
    test = data(seed=7)
    got = score(model, test, engine_factory)
    xgb = pytest.importorskip("xgboost")
    margin = est.get_booster().predict(xgb.DMatrix(categorical(test), enable_categorical=True),
                                       output_margin=True)
    # the sums are XGBoost's to the bit; its sigmoid and softmax use the C library's expf,
    # which is off the correctly rounded exp (the engines') by one float32 unit on a few rows
    np.testing.assert_array_equal(model.raw_frame(test).reshape(margin.shape), margin)
    assert_equal(model, got, est, test, proba_frame=categorical(test),
                 rtol=0 if task == "regression" else 2.5e-7)


def test_float32_thresholds_are_exact():
    rng = np.random.default_rng(0)
    for t in [*rng.normal(size=200).astype(np.float32).astype(float).tolist(), 0.1, -3.3]:
        d = float32_le(t)
        for x in (d, np.nextafter(d, np.inf), d - 1e-9, d + 1e-9):
            assert (float(x) <= d) == (float(np.float32(x)) <= t)
        s = float(np.float32(t))
        d = float32_lt(s)
        for x in (d, np.nextafter(d, np.inf)):
            assert (float(x) <= d) == (np.float32(x) < np.float32(s))


def test_save_and_load(tmp_path):
    frame = data()
    est = lightgbm_model("multiclass", frame, targets(frame)["multiclass"])
    model = sqltree.from_lightgbm(est, feature_names=list(frame.columns))
    path = tmp_path / "model.json"
    model.save(path)
    again = sqltree.load(path)
    assert isinstance(again, sqltree.Ensemble)
    assert again.to_sql("duckdb", table="t") == model.to_sql("duckdb", table="t")


@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_cli_sql_from_library_file(tmp_path, library):
    frame = data()
    if library == "lightgbm":
        est = lightgbm_model("binary", frame, targets(frame)["binary"])
        path = tmp_path / "model.txt"
        est.booster_.save_model(str(path))
        model = sqltree.from_lightgbm(est)  # the file's names: ``b b`` is ``b_b``
    else:
        est = xgboost_model("binary", frame, targets(frame)["binary"])
        path = tmp_path / "model.json"
        est.get_booster().save_model(str(path))
        model = sqltree.from_xgboost(str(path.read_text()))
    out = subprocess.run([sys.executable, "-m", "sqltree.cli", "sql", "--from", str(path),
                          "--table", "events", "--proba"], capture_output=True, text=True,
                         check=True)
    assert "form" in out.stderr and "bytes per leaf" in out.stderr
    import duckdb

    con = duckdb.connect()
    test = data(seed=9)
    if library == "lightgbm":
        test = test.rename(columns={"b b": "b_b"})
    con.register("events", test)
    got = con.sql(out.stdout).df()
    np.testing.assert_allclose(got[["proba_0", "proba_1"]].to_numpy(),
                               model.predict_proba_frame(test), rtol=1e-12)


def test_a_missing_library_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightgbm", None)
    with pytest.raises(sqltree.UnsupportedError, match=r"pip install -e '\.\[lightgbm\]'"):
        sqltree.from_lightgbm("tree\n")


def test_dbt_model_and_evaluate():
    frame = data()
    y = targets(frame)["multiclass"]
    est = lightgbm_model("multiclass", frame, y)
    model = sqltree.from_lightgbm(est, feature_names=list(frame.columns))
    text = model.to_dbt("customers", "snowflake", proba=True)
    assert "{{ ref('customers') }}" in text and text.startswith("-- target predicted by 75 trees")
    scored = frame.assign(target=y)
    result = model.evaluate(scored)
    assert result["rows"] == len(frame)
    assert result["accuracy"] == pytest.approx(float(np.mean(est.predict(frame) == y)))


def test_cli_refuses_an_ensemble_where_it_takes_a_tree(tmp_path):
    from sqltree.cli import main

    frame = data()
    est = lightgbm_model("binary", frame, targets(frame)["binary"])
    path = tmp_path / "ensemble.json"
    sqltree.from_lightgbm(est, feature_names=list(frame.columns)).save(path)
    assert main(["show", str(path), "--summary"]) == 0
    assert main(["show", str(path)]) != 0
    assert main(["sql", str(path), "--table", "t", "-q"]) == 0
