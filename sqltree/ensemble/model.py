"""A model of many trees: a forest (mean of the trees' value vectors) or boosting
(``base_score`` plus the sum of the trees, through a link function).

The trees are ``TreeArrays``. Training (the forest and boosting learners) and the importers
(scikit-learn, LightGBM, XGBoost) produce an ``Ensemble``; the compiler
(``sqltree.ensemble.compile``) turns it into one scoring query per dialect, and
``predict_frame`` scores a pandas DataFrame in numpy by the same rules, in the same order of
additions, so the two agree to the last bit wherever the engine's ``EXP`` does.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlglot import exp

from ..algorithm_registry import ENSEMBLES
from ..errors import DataError, ModelFileError, OptionError, UnsupportedError
from ..model import FeatureInfo
from ..source_check import check_features, check_source
from ..tree import CONTINUOUS, NOMINAL, Value
from .trees import TreeArrays

if TYPE_CHECKING:
    import pandas

    from ..evaluation import Evaluation
    from ..permutation import PermutationImportance
    from ..regression_evaluation import RegressionEvaluation


FORMAT = "sqltree-ensemble"
FORMAT_VERSION = 1
TASKS = ("classification", "regression")
AGGREGATIONS = ("mean", "sum")
LINKS = ("identity", "sigmoid", "softmax", "exp")
PRECISIONS = ("double", "float32")


@dataclass
class Ensemble:
    """Many trees and the rule that combines them.

    Attributes
    ----------
    trees : list of TreeArrays
        The trees, in the order their outputs are added.
    features : list of FeatureInfo
        The features; a tree's ``feature`` indexes this list.
    target : str
        The target column.
    task : {"classification", "regression"}
    classes : list
        Class labels (classification), in the order of the probability columns.
    aggregation : {"mean", "sum"}
        "mean": the average of the trees' value vectors (a forest; for classification each
        leaf holds its class probabilities). "sum": ``base_score`` plus the trees (boosting).
    base_score : list of float
        One per output (the raw score before any tree, "sum" only).
    link : {"identity", "sigmoid", "softmax", "exp"}
        Applied to the raw sum: "sigmoid" has one output, the log-odds of ``classes[1]``;
        "softmax" one per class; "exp" (Poisson, Gamma, Tweedie) gives the mean.
    options, stats : dict
        Where the model came from and how it was trained.
    precision : {"double", "float32"}
        "float32": every addition and the link are rounded to float32, as XGBoost computes.
    """

    trees: list[TreeArrays]
    features: list[FeatureInfo]
    target: str
    task: str = "classification"
    classes: list[Value] = field(default_factory=list)
    aggregation: str = "mean"
    base_score: list[float] = field(default_factory=list)
    link: str = "identity"
    options: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    precision: str = "double"

    # -- shape -------------------------------------------------------------------------------
    @property
    def is_regression(self) -> bool:
        return self.task == "regression"

    @property
    def n_trees(self) -> int:
        return len(self.trees)

    @property
    def n_leaves(self) -> int:
        return sum(t.n_leaves for t in self.trees)

    @property
    def depth(self) -> int:
        return max((t.depth for t in self.trees), default=0)

    @property
    def n_outputs(self) -> int:
        """Raw scores per row: the trees' value columns (mean) or ``base_score``'s (sum)."""
        if self.aggregation == "sum":
            return len(self.base_score)
        return int(self.trees[0].value.shape[1]) if self.trees else len(self.classes)

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    @property
    def types_recorded(self) -> bool:
        """Whether ``features`` hold the training source's SQL types and nominal values (an
        ensemble sqltree trained); an imported one's (scikit-learn, LightGBM, XGBoost) are
        the importer's assumptions, DOUBLE for numbers, and nothing is known of the source."""
        return self.options.get("algorithm") in ENSEMBLES

    def used_features(self) -> list[str]:
        """The features some test reads, in the model's order."""
        used: set[int] = set()
        for t in self.trees:
            used.update(int(f) for f in t.feature[~t.is_leaf])
        return [f.name for i, f in enumerate(self.features) if i in used]

    def validate(self) -> None:
        """Raise ``ModelFileError`` unless the parts fit together (see ``TreeArrays.validate``
        for each tree)."""
        if self.task not in TASKS:
            raise ModelFileError(f"task {self.task!r} is not one of {TASKS}")
        if self.aggregation not in AGGREGATIONS:
            raise ModelFileError(f"aggregation {self.aggregation!r} is not one of {AGGREGATIONS}")
        if self.link not in LINKS:
            raise ModelFileError(f"link {self.link!r} is not one of {LINKS}")
        if self.precision not in PRECISIONS:
            raise ModelFileError(f"precision {self.precision!r} is not one of {PRECISIONS}")
        if not self.trees:
            raise ModelFileError("an ensemble has at least one tree")
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ModelFileError("feature names repeat")
        for f in self.features:
            if f.kind not in (CONTINUOUS, NOMINAL):
                raise ModelFileError(f"feature {f.name!r}: kind {f.kind!r} is neither "
                                     f"{CONTINUOUS!r} nor {NOMINAL!r}")
        k = len(self.classes)
        if self.is_regression:
            if self.classes:
                raise ModelFileError("a regression model has no classes")
            if self.link in ("sigmoid", "softmax"):
                raise ModelFileError(f"a regression model has no {self.link} link")
        elif k < 2 and not (k == 1 and self.aggregation == "mean"):
            raise ModelFileError("a classifier has at least two classes")
        elif len(set(map(_key, self.classes))) != k:
            raise ModelFileError("class labels repeat")
        n_out = self.n_outputs
        expected = self._expected_outputs()
        if n_out != expected:
            raise ModelFileError(f"{n_out} outputs; a {self.task} model with aggregation "
                                 f"{self.aggregation!r} and link {self.link!r} has {expected}")
        if self.aggregation == "mean":
            if self.base_score:
                raise ModelFileError("a mean of trees has no base_score")
            if self.link != "identity":
                raise ModelFileError("a mean of trees has the identity link")
        if not all(isinstance(b, (int, float)) and math.isfinite(b) for b in self.base_score):
            raise ModelFileError("base_score holds finite numbers")
        for i, t in enumerate(self.trees):
            try:
                if t.output is None:
                    t.validate(len(self.features), n_out)
                else:
                    t.validate(len(self.features), 1)
                    if not 0 <= t.output < n_out:
                        raise ModelFileError(f"output {t.output} is out of range")
                    if self.aggregation == "mean":
                        raise ModelFileError("a tree of a mean adds to every output")
                for node in t.categories:
                    if self.features[t.feature[node]].kind == CONTINUOUS:
                        raise ModelFileError(f"node {node}: a categorical test on a "
                                             "continuous feature")
            except ModelFileError as e:
                raise ModelFileError(f"tree {i}: {e}") from None

    def _expected_outputs(self) -> int:
        if self.is_regression:
            return 1
        k = len(self.classes)
        if self.aggregation == "mean" or self.link == "softmax":
            return k
        return 1 if self.link == "sigmoid" else k

    # -- prediction in numpy -------------------------------------------------------------------
    def _columns(self, frame: pandas.DataFrame) -> tuple[list[np.ndarray], list[np.ndarray]]:
        import pandas as pd

        missing_cols = [f.name for f in self.features
                        if f.name in self.used_features() and f.name not in frame.columns]
        if missing_cols:
            raise OptionError(f"columns the trees test are not in the frame: {missing_cols}")
        columns, missing = [], []
        for f in self.features:
            if f.name not in frame.columns:
                columns.append(np.zeros(len(frame)))
                missing.append(np.ones(len(frame), dtype=bool))
                continue
            raw = frame[f.name]
            miss = pd.isna(raw).to_numpy()
            if f.kind == CONTINUOUS:
                values = pd.to_numeric(raw).to_numpy(dtype=np.float64, na_value=np.nan)
            else:
                values = raw.to_numpy(dtype=object)
            columns.append(values)
            missing.append(miss)
        return columns, missing

    def raw_frame(self, frame: pandas.DataFrame) -> np.ndarray:
        """Raw scores, shape (rows, n_outputs): the mean of the trees, or ``base_score`` plus
        the trees added in order (rounded to float32 after each addition with
        ``precision="float32"``), before the link."""
        columns, missing = self._columns(frame)
        n = len(frame)
        f32 = self.precision == "float32"
        dtype = np.float32 if f32 else np.float64
        if self.aggregation == "sum":
            out = np.tile(np.asarray(self.base_score, dtype=dtype), (n, 1))
        else:
            out = np.zeros((n, self.n_outputs), dtype=dtype)
        for t in self.trees:
            leaf = t.apply(columns, missing)
            value = t.value[leaf].astype(dtype)
            if t.output is None:
                out += value
            else:
                out[:, t.output] += value[:, 0]
        if self.aggregation == "mean":
            out /= self.n_trees
        return out.astype(np.float64)

    def predict_proba_frame(self, frame: pandas.DataFrame) -> np.ndarray:
        """Class probabilities, shape (rows, classes), as the compiled SQL computes them."""
        if self.is_regression:
            raise UnsupportedError("a regression model predicts a number, not probabilities")
        raw = self.raw_frame(frame)
        return link_numpy(raw, self.link, self.precision)

    def predict_frame(self, frame: pandas.DataFrame) -> np.ndarray:
        """Predictions for each row of a DataFrame: the most probable class (the first on
        ties) or the regression value."""
        if self.is_regression:
            return link_numpy(self.raw_frame(frame), self.link, self.precision)[:, 0]
        proba = self.predict_proba_frame(frame)
        return np.asarray(self.classes, dtype=object)[np.argmax(proba, axis=1)]

    # -- SQL ---------------------------------------------------------------------------------------
    def scoring_query(
        self,
        relation: exp.Expression,
        columns: Sequence[str] | None = None,
        *,
        column: str = "prediction",
        proba: bool = False,
        raw: bool = False,
        form: str = "auto",
        dialect: str | None = None,
        ordered: bool = False,
    ) -> exp.Select:
        """``SELECT <columns>, <prediction> [, proba_<class>...] FROM relation`` as a sqlglot
        query (see ``sqltree.ensemble.compile``); ``columns`` default to the model's
        features. ``ordered`` returns the rows in the relation's order whatever the form
        (``predict`` asks for it; the table form then sorts them)."""
        from .compile import build_ensemble_query

        return build_ensemble_query(self, relation, columns, column_name=column, proba=proba,
                                    raw=raw, form=form, dialect=dialect, ordered=ordered).query

    def to_sql(
        self,
        dialect: str = "duckdb",
        *,
        table: str = "data",
        columns: Sequence[str] | None = None,
        column: str = "prediction",
        proba: bool = False,
        raw: bool = False,
        view: str | None = None,
        form: str = "auto",
        pretty: bool = False,
        report: dict[str, Any] | None = None,
    ) -> str:
        """Scoring SQL for any sqlglot dialect: one query over ``table``.

        The query keeps ``columns`` of the table (default: the model's features) and adds the
        prediction (the first most probable class, or the regression value), with ``proba``
        one ``proba_<class>`` column per class and with ``raw`` the raw scores before the
        link. ``view`` wraps it in ``CREATE VIEW``. ``form`` is "expression" (the trees as
        CASE expressions summed in steps), "table" (the leaves as a table of intervals joined
        to the rows) or "auto" (by size). A dict passed as ``report`` receives the form, the
        reason for it and the SQL's length (``bytes_per_leaf`` too).
        """
        from ..model import render
        from ..options import check_dialect
        from .compile import build_ensemble_query, sql_report

        check_dialect(dialect)
        relation = exp.to_table(table, dialect=dialect)
        compiled = build_ensemble_query(self, relation, columns, column_name=column,
                                        proba=proba, raw=raw, form=form, dialect=dialect)
        query: exp.Expression = compiled.query
        if view is not None:
            query = exp.Create(this=exp.to_table(view, dialect=dialect), kind="VIEW",
                               expression=query)
        sql = render(query, dialect, pretty)
        if report is not None:
            report.update(sql_report(self, compiled, sql, dialect))
        return sql

    def to_dbt(
        self,
        ref: str,
        dialect: str = "duckdb",
        *,
        columns: Sequence[str] | None = None,
        column: str = "prediction",
        proba: bool = False,
        form: str = "auto",
        pretty: bool = True,
    ) -> str:
        """A dbt model file scoring the dbt model ``ref`` (``{{ ref('...') }}`` kept for
        Jinja); the options are ``to_sql``'s."""
        from ..deploy import dbt_model, dbt_ref
        from ..model import render
        from ..options import check_dialect
        from .compile import build_ensemble_query

        check_dialect(dialect)
        relation = dbt_ref(ref)
        compiled = build_ensemble_query(self, relation, columns, column_name=column,
                                        proba=proba, form=form, dialect=dialect)
        header = (f"{self.target} predicted by {self.n_trees:,} trees "
                  f"({self.options.get('source', 'sqltree')}, {self.n_leaves:,} leaves), "
                  f"compiled for {dialect}")
        return dbt_model(render(compiled.query, dialect, pretty), relation, header)

    def predict(
        self,
        source: Any,
        *,
        connection: Any = None,
        proba: bool = False,
        raw: bool = False,
        column: str = "prediction",
        into: str | None = None,
        form: str = "auto",
    ) -> pandas.DataFrame | None:
        """Score ``source`` (a table, query, file or DataFrame, as ``Model.predict`` takes) in
        the engine with the compiled SQL: the source's columns plus the prediction (and
        ``proba_<class>`` columns) in the source's row order, whatever the ``form``, or with
        ``into`` a table written and None (its rows in no particular order, as
        ``Model.predict`` writes them).

        Before any scoring, a column the trees test whose type family (number, text,
        boolean) differs from training's raises ``DataError`` naming it, as ``Model.predict``
        does, where the types are known: an ensemble sqltree trained recorded them
        (``types_recorded``); an imported one (scikit-learn, LightGBM, XGBoost) never saw its
        source's types, so only its continuous features are checked (they must be numbers,
        which its thresholds compare)."""
        from ..dataset import resolve_relation
        from ..engines import get_engine

        engine = get_engine(connection)
        try:
            relation = resolve_relation(source, engine)
            schema = engine.columns(relation)
            names = [n for n, _ in schema]
            self._check_source(dict(schema), engine)
            query = self.scoring_query(relation, names, column=column, proba=proba, raw=raw,
                                       form=form, dialect=engine.dialect,
                                       ordered=into is None)
            from ..compiler import collector_paused

            with collector_paused():
                if into is not None:
                    engine.create_table(into, query)
                    return None
                return engine.frame(query)
        finally:
            engine.cleanup()

    def _check_source(self, types: dict[str, exp.DataType], engine: Any, *,
                      target: bool = False) -> None:
        """Refuse a scoring source without a column the trees test, or where such a column
        (with ``target``, the target too) holds another type family than in training
        (``source_check.check_source``), as ``Model.predict`` refuses it.

        Only what is known is checked: an ensemble sqltree trained recorded each feature's
        type and values (``types_recorded``); an imported one only says that its thresholds
        compare numbers, so its continuous features must be numbers, and its nominal features
        and its target are not checked."""
        used = self.used_features()
        absent = [f for f in used if f not in types]
        if absent:
            raise DataError(f"columns the trees test are not in the source: {absent}")
        if target and self.target not in types:
            raise DataError(f"the source has no target column {self.target!r}")
        if self.types_recorded:
            check_source(self, types, engine, target=target, tested=used)
            return
        numbers = [FeatureInfo(f.name, CONTINUOUS, "") for f in self.features
                   if f.kind == CONTINUOUS]
        check_features(numbers, used, types, engine.dialect,
                       integer_booleans=bool(engine.BOOLEANS_AS_INTEGERS))

    def evaluate(
        self,
        source: Any,
        *,
        connection: Any = None,
        weight: str | bool = True,
        title: str = "Evaluation",
        threshold: float | None = None,
    ) -> Evaluation | RegressionEvaluation:
        """Evaluate the model on ``source`` (which holds the target) in the engine, as
        ``Model.evaluate`` evaluates a tree, by the same aggregate over the compiled SQL
        (``sqltree.ensemble.evaluation``).

        A classifier's ``Evaluation`` has the confusion matrix, accuracy, Cohen's kappa,
        per-class precision, recall, F1, ROC and precision-recall areas, MCC, balanced
        accuracy and log loss; ``str()`` prints Weka's block, ``to_dict()`` every figure. Weka's
        relative errors compare with the training class weights a forest or boosting trained
        by sqltree records (``stats["class_weights"]``); an imported model's are unknown
        (``None``). A regression model's ``RegressionEvaluation`` has RMSE, MAE, R² and the
        count. Both read like the dict this method used to return: ``evaluation["accuracy"]``,
        ``["log_loss"]``, ``["rows"]``, and for regression ``["rmse"]``, ``["mae"]``,
        ``["r2"]``.

        ``weight``: True counts each row with the training weight column (if the model was
        trained with one), False counts rows, a column name weighs by that column.
        ``threshold`` (two classes): the second class is predicted where its probability is at
        least this. The features' and the target's types are checked first, as ``predict``
        checks them (where they are known: ``types_recorded``)."""
        from .evaluation import evaluate_ensemble

        return evaluate_ensemble(self, source, connection=connection, weight=weight,
                                 title=title, threshold=threshold)

    # -- importances ---------------------------------------------------------------------------
    def permutation_importance(
        self,
        source: Any,
        *,
        connection: Any = None,
        n_repeats: int = 5,
        seed: int = 1,
        weight: str | bool = True,
    ) -> PermutationImportance:
        """Each feature's drop in accuracy (R² for regression) when its values are shuffled
        among the rows of ``source`` in the engine, ``n_repeats`` times by a hash of
        ``seed``: ``sqltree.permutation_importance``, the same shuffles as a tree's, scored
        by one aggregate query over the compiled SQL per shuffle (``weight``: True the
        training weight column, if any, False every row 1, or a column)."""
        from ..permutation import permutation_importance

        return permutation_importance(self, source, connection=connection,
                                      n_repeats=n_repeats, seed=seed, weight=weight)

    def feature_importances(self, kind: str = "gain") -> dict[str, float]:
        """Each feature's share of the trees' total gain (``kind="gain"``, normalised to add
        up to 1; per tree first for a mean of trees, as scikit-learn's forests do), or the
        number of tests on it (``kind="split"``)."""
        totals = np.zeros(len(self.features))
        for t in self.trees:
            inner = ~t.is_leaf
            per = np.zeros(len(self.features))
            weights = t.gain[inner] if kind == "gain" else np.ones(int(inner.sum()))
            np.add.at(per, t.feature[inner], weights)
            if kind == "gain" and self.aggregation == "mean" and per.sum() > 0:
                per /= per.sum()
            totals += per
        if kind == "gain":
            if totals.sum() > 0:
                totals /= totals.sum()
        elif kind != "split":
            raise OptionError(f"kind is 'gain' or 'split', not {kind!r}")
        return {f.name: float(v) for f, v in zip(self.features, totals)}

    # -- text ----------------------------------------------------------------------------------
    def summary(self) -> str:
        source = self.options.get("source", "sqltree")
        lines = [
            f"Ensemble of {self.n_trees:,} trees from {source}: {self.task} of {self.target!r}",
            f"  combining: {self.aggregation}" + (
                f" from base {self.base_score}, link {self.link}"
                if self.aggregation == "sum" else ""),
            f"  leaves: {self.n_leaves:,}, deepest tree: {self.depth}, features used: "
            f"{len(self.used_features())} of {len(self.features)}",
        ]
        if not self.is_regression:
            lines.insert(1, f"  classes: {self.classes}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        what = (f"classes={self.classes!r}, " if not self.is_regression else "")
        return (f"Ensemble(target={self.target!r}, task={self.task!r}, {what}"
                f"n_trees={self.n_trees}, aggregation={self.aggregation!r}, "
                f"link={self.link!r}, n_leaves={self.n_leaves})")

    # -- files -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "target": self.target,
            "task": self.task,
            "classes": list(self.classes),
            "features": [f.to_dict() for f in self.features],
            "aggregation": self.aggregation,
            "base_score": [float(b) for b in self.base_score],
            "link": self.link,
            "precision": self.precision,
            "options": dict(self.options),
            "stats": dict(self.stats),
            "trees": [t.to_dict() for t in self.trees],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Ensemble:
        """The ensemble of a ``to_dict`` document; anything else raises ``ModelFileError``."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ModelFileError(f"not a sqltree ensemble file (format {FORMAT!r})")
        version = data.get("version")
        if version != FORMAT_VERSION:
            raise ModelFileError(f"ensemble file version {version!r} is not supported "
                                 f"(this sqltree reads version {FORMAT_VERSION})")
        for key in ("target", "features", "trees"):
            if key not in data:
                raise ModelFileError(f"ensemble file: missing field {key!r}")
        if not isinstance(data["trees"], list) or not isinstance(data["features"], list):
            raise ModelFileError("trees and features are lists")
        try:
            features = [FeatureInfo(**f) for f in data["features"]]
        except TypeError as e:
            raise ModelFileError(f"a feature is not name, kind, sql_type, values: {e}") from None
        trees = []
        for i, t in enumerate(data["trees"]):
            try:
                trees.append(TreeArrays.from_dict(t))
            except ModelFileError as e:
                raise ModelFileError(f"tree {i}: {e}") from None
        model = cls(
            trees=trees, features=features, target=data["target"],
            task=data.get("task", "classification"), classes=list(data.get("classes", [])),
            aggregation=data.get("aggregation", "mean"),
            base_score=list(data.get("base_score", [])), link=data.get("link", "identity"),
            options=dict(data.get("options", {})), stats=dict(data.get("stats", {})),
            precision=data.get("precision", "double"),
        )
        model.validate()
        return model

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model as JSON (floats written exactly, so loading round-trips)."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, ensure_ascii=False, separators=(",", ":"))
            fh.write("\n")


def link_numpy(raw: np.ndarray, link: str, precision: str = "double") -> np.ndarray:
    """The link applied to raw scores, in the SQL's order of operations; a sigmoid's one
    output becomes two probabilities, ``1 - p`` and ``p``."""
    if precision == "float32":
        return _link_float32(raw, link)
    if link == "identity":
        return raw
    if link == "exp":
        return np.exp(raw)
    if link == "sigmoid":
        p = 1.0 / (1.0 + np.exp(-raw[:, 0]))
        return np.column_stack([1.0 - p, p])
    if link == "softmax":
        shifted = np.exp(raw - raw.max(axis=1, keepdims=True))
        total = shifted[:, 0].copy()
        for c in range(1, shifted.shape[1]):  # left to right, as the SQL adds
            total += shifted[:, c]
        return shifted / total[:, None]
    raise OptionError(f"unknown link {link!r}")


def _link_float32(raw: np.ndarray, link: str) -> np.ndarray:
    """XGBoost's float32 links: each operation rounded to float32, ``exp`` correctly
    rounded (computed in double, then rounded)."""
    f = np.float32
    x = raw.astype(f)
    if link == "identity":
        return x.astype(np.float64)
    if link == "exp":
        return np.exp(x.astype(np.float64)).astype(f).astype(np.float64)
    if link == "sigmoid":
        e = np.exp(-x[:, 0].astype(np.float64)).astype(f)
        p = (f(1.0) / (e + f(1.0))).astype(f)
        return np.column_stack([f(1.0) - p, p]).astype(np.float64)
    if link == "softmax":
        shifted = np.exp((x - x.max(axis=1, keepdims=True)).astype(np.float64)).astype(f)
        total = shifted[:, 0].copy()
        for c in range(1, shifted.shape[1]):
            total = (total + shifted[:, c]).astype(f)
        return (shifted / total[:, None]).astype(f).astype(np.float64)
    raise OptionError(f"unknown link {link!r}")


def _key(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)
