"""Shared test data and checks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest

from tests.conftest import ENGINES, SQLITE

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "examples" / "data"
GOLF = DATA / "golf.csv"
GOLF_NUMERIC = DATA / "golf_numeric_humidity.csv"
BUYS = DATA / "buys_computer.csv"

# Quinlan's tree for the weather data (golf.csv, windy as the text true/false), as J48 prints it.
GOLF_TREE = """\
outlook = overcast: yes (4.0)
outlook = rainy
|   windy = false: yes (3.0)
|   windy = true: no (2.0)
outlook = sunny
|   humidity = high: no (3.0)
|   humidity = normal: yes (2.0)

Number of Leaves  : \t5

Size of the tree : \t8
"""


def on_engines(
    *,
    exclude: tuple[str, ...] = (),
    xfail: dict[str, tuple[type[BaseException], str]] | None = None,
    sqlite: bool = False,
) -> pytest.MarkDecorator:
    """``engine_factory`` over every engine but ``exclude`` (and SQLite with ``sqlite``), with
    strict expected failures.

    ``xfail`` maps an engine to ``(exception, reason)``: the test must fail there with that
    exception (it is an error if it passes), and the reason says what the engine cannot do.
    """
    params = []
    for param in [*ENGINES, *([SQLITE] if sqlite else [])]:
        (name,) = param.values
        if name in exclude:
            continue
        marks = list(param.marks)
        if xfail and name in xfail:
            raises, reason = xfail[name]
            marks.append(pytest.mark.xfail(strict=True, raises=raises, reason=reason))
        params.append(pytest.param(name, id=param.id, marks=marks))
    return pytest.mark.parametrize("engine_factory", params, indirect=True)


# Spark answers each statement in seconds. Tests that train on thousands of rows, or whose
# behaviour on Spark another test already shows, run on DuckDB and PostgreSQL only, so that the
# whole suite stays within its time; the small cases run on Spark too.
WITHOUT_SPARK = on_engines(exclude=("spark",))


def read_csv(path: Path) -> pd.DataFrame:
    """A CSV as DuckDB reads it for training (booleans stay text)."""
    return duckdb.sql(
        f"SELECT * FROM read_csv('{path}', auto_type_candidates=['BIGINT','DOUBLE','VARCHAR'])"
    ).df()


def mixed_table(rows: int = 10_000, seed: int = 1) -> pd.DataFrame:
    """A deterministic table: 3 continuous, 3 nominal features (some NULLs), 3 noisy classes."""
    con = duckdb.connect()
    return con.sql(
        f"""
        WITH base AS (
          SELECT i,
            (hash(i * 64 + {seed}) % 10000) / 100.0 AS a,
            (hash(i * 64 + {seed} + 1) % 1000) / 10.0 AS b,
            CAST(hash(i * 64 + {seed} + 2) % 50 AS INTEGER) AS c,
            ['red', 'green', 'blue', 'it''s', 'select']
              [1 + CAST(hash(i * 64 + {seed} + 3) % 5 AS BIGINT)] AS d,
            ['x', 'y', 'z'][1 + CAST(hash(i * 64 + {seed} + 4) % 3 AS BIGINT)] AS e,
            hash(i * 64 + {seed} + 5) % 100 AS noise,
            hash(i * 64 + {seed} + 6) % 100 AS nulls
          FROM range({rows}) t(i)
        )
        SELECT
          CASE WHEN nulls < 3 THEN NULL ELSE a END AS a,
          b,
          c,
          CASE WHEN nulls BETWEEN 3 AND 5 THEN NULL ELSE d END AS d,
          e,
          CASE WHEN noise < 5 THEN ['p', 'q', 'r'][1 + CAST(hash(i) % 3 AS BIGINT)]
               WHEN a < 30 AND d IN ('red', 'blue') THEN 'p'
               WHEN b > 60 OR e = 'z' THEN 'q'
               WHEN c < 20 THEN 'r'
               ELSE 'p' END AS label
        FROM base ORDER BY i
        """
    ).df()


def python_predictions(model: Any, frame: pd.DataFrame) -> list[Any]:
    rows = frame.to_dict("records")
    return [model.predict_row(_clean(r)) for r in rows]


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            out[k] = None
        else:
            out[k] = v.item() if hasattr(v, "item") else v
    return out


def assert_same_tree(a: Any, b: Any, tol: float = 1e-9, what: str = "") -> None:
    """Two trees (Node.to_dict() form) are equal: same tests, thresholds and counts to tol."""
    assert _same(a, b, tol), f"trees differ{f' ({what})' if what else ''}:\n{a}\n{b}"


NODE_FACTS = ("n_samples", "impurity", "improvement", "tied", "value")
"""What scikit-learn's tree arrays hold of a node, besides its test."""


def comparable(model: Any) -> dict[str, Any]:
    """A model file's content that does not name its engine or plan (types, counts, times)."""
    import copy

    out = copy.deepcopy(model.to_dict())  # its feature records are the model's own
    del out["stats"]
    for f in out["features"]:
        del f["sql_type"]
    return out


def assert_same_model(a: Any, b: Any, tol: float = 1e-9) -> None:
    """Two models grow the same tree (``assert_same_tree``) with the same ``NODE_FACTS`` at
    every node, floats to ``tol``."""
    assert_same_tree(a.root.to_dict(), b.root.to_dict(), tol, a.text())
    for x, y in zip(a.root.walk(), b.root.walk(), strict=True):
        for fact in NODE_FACTS:
            u, v = getattr(x, fact, None), getattr(y, fact, None)
            if isinstance(u, float) and isinstance(v, float):
                assert math.isclose(u, v, rel_tol=tol, abs_tol=tol), (fact, u, v)
            else:
                assert u == v, (fact, u, v)


def _same(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(a)))
    return a == b


def close(a: Any, b: Any, rel: float = 1e-9) -> bool:
    """Documents (dicts, lists, numbers) equal up to floats within ``rel`` of each other: sums
    an engine adds in parallel may differ in their last bits from run to run."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            close(a[k], b[k], rel) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(
            close(x, y, rel) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)
    return a == b


def assert_figures_are_scikit_learns(evaluation: Any, actual: Any, predicted: Any, proba: Any,
                                     weights: Any = None) -> None:
    """Every figure of a classifier's ``Evaluation`` equals scikit-learn's metrics of the
    labelled rows' classes, predictions and probabilities (in ``score_classes`` order), and
    Weka's absolute and squared errors computed from them (a tree's or an ensemble's)."""
    import numpy as np
    from sklearn import metrics

    labels = evaluation.classes
    assert evaluation.rows == len(actual)
    assert np.allclose(evaluation.matrix, metrics.confusion_matrix(
        actual, predicted, labels=labels, sample_weight=weights))
    assert evaluation.accuracy == pytest.approx(
        metrics.accuracy_score(actual, predicted, sample_weight=weights), abs=1e-12)
    assert evaluation.kappa == pytest.approx(
        metrics.cohen_kappa_score(actual, predicted, sample_weight=weights), abs=1e-12)
    assert evaluation.log_loss == pytest.approx(metrics.log_loss(
        actual, proba, labels=evaluation.score_classes, sample_weight=weights), abs=1e-9)
    assert evaluation.matthews_correlation == pytest.approx(
        metrics.matthews_corrcoef(actual, predicted, sample_weight=weights), abs=1e-9)
    assert evaluation.balanced_accuracy == pytest.approx(
        metrics.balanced_accuracy_score(actual, predicted, sample_weight=weights), abs=1e-9)
    _assert_ranking_figures_are_scikit_learns(evaluation, actual, proba, weights)
    p, r, f, s = metrics.precision_recall_fscore_support(
        actual, predicted, labels=labels, sample_weight=weights, zero_division=0)
    mine = evaluation.per_class()
    assert [c.precision for c in mine] == pytest.approx(p, abs=1e-12)
    assert [c.recall for c in mine] == pytest.approx(r, abs=1e-12)
    assert [c.f1 for c in mine] == pytest.approx(f, abs=1e-12)
    assert [c.support for c in mine] == pytest.approx(s, abs=1e-9)
    for average, figures in (("weighted", evaluation.weighted_average()),
                             ("macro", evaluation.macro_average())):
        p, r, f, _ = metrics.precision_recall_fscore_support(
            actual, predicted, average=average, sample_weight=weights, zero_division=0)
        assert (figures.precision, figures.recall, figures.f1) == pytest.approx(
            (p, r, f), abs=1e-12), average
    # Weka's error measures, from the probabilities
    truth = np.array([[float(a == c) for c in evaluation.score_classes] for a in actual])
    w = np.ones(len(actual)) if weights is None else weights
    k = len(labels)
    assert evaluation.mean_absolute_error == pytest.approx(
        np.average(np.abs(proba - truth).sum(axis=1) / k, weights=w), abs=1e-9)
    assert evaluation.root_mean_squared_error == pytest.approx(
        math.sqrt(np.average(((proba - truth) ** 2).sum(axis=1) / k, weights=w)), abs=1e-9)


def _assert_ranking_figures_are_scikit_learns(evaluation: Any, actual: Any, proba: Any,
                                              weights: Any) -> None:
    import numpy as np
    from sklearn import metrics

    labels = evaluation.score_classes
    onehot = np.array([[a == c for c in labels] for a in actual])
    if len(labels) == 2:
        expected = metrics.roc_auc_score(onehot[:, 1], proba[:, 1], sample_weight=weights)
        assert evaluation.roc_auc == pytest.approx(expected, abs=1e-9)
        expected = metrics.average_precision_score(onehot[:, 1], proba[:, 1],
                                                   sample_weight=weights)
        assert evaluation.pr_auc == pytest.approx(expected, abs=1e-9)
    else:
        assert evaluation.roc_auc == pytest.approx(metrics.roc_auc_score(
            actual, proba, multi_class="ovr", average="weighted", labels=labels,
            sample_weight=weights), abs=1e-9)
        assert evaluation.pr_auc == pytest.approx(metrics.average_precision_score(
            onehot, proba, average="weighted", sample_weight=weights), abs=1e-9)
    for c, label in enumerate(labels):
        assert evaluation.roc_auc_by_class()[label] == pytest.approx(
            metrics.roc_auc_score(onehot[:, c], proba[:, c], sample_weight=weights), abs=1e-9)
        assert evaluation.pr_auc_by_class()[label] == pytest.approx(
            metrics.average_precision_score(onehot[:, c], proba[:, c], sample_weight=weights),
            abs=1e-9)
