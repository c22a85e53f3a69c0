"""What the estimators share: input checks, the fit pipeline's ends, prediction, SQL.

A fitted estimator is a ``Model`` underneath (``model_``): the tree that ``sqltree.train``
returns for the same data and options, with its SQL (``to_sql``), text, rules, DOT and file
format. Prediction walks the same tree in numpy (``_tree.FlatTree``), with the model's rules
for unknown values, so ``predict`` gives what the compiled SQL gives.
"""

from __future__ import annotations

import os
import threading
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy.sparse import csr_matrix
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..engines.duckdb import DuckDBEngine
from ..evaluation import Evaluation
from ..model import Model
from ..regression_evaluation import RegressionEvaluation
from ..tree import Node
from . import _tree
from ._inputs import (
    frame_of,
    labels_of,
    nominal_columns,
    targets_of,
    unused_name,
    weights_of,
)


class _Connections(threading.local):
    """One private in-memory DuckDB database per thread (and process), kept between fits.

    Opening a database costs about 12 ms, as much as a small tree's whole growth; sqltree
    drops every working table and unregisters the data after each fit, so the next fit finds
    the database empty. A process forked with a connection open makes its own.
    """

    def __init__(self) -> None:
        self.pid = -1
        self.connection: Any = None

    def get(self) -> Any:
        if self.connection is None or self.pid != os.getpid():
            self.connection = DuckDBEngine.private_connection()
            self.pid = os.getpid()
        return self.connection


_connections = _Connections()


def fit_engine() -> DuckDBEngine:
    """The engine an estimator trains with: DuckDB on this thread's private database."""
    return DuckDBEngine(_connections.get())


class TrainingData:
    """What ``fit`` hands the pipeline: the rows (features, target, weight) and the roles."""

    def __init__(self, frame: pd.DataFrame, target: str, weight: str | None,
                 nominal: list[str], continuous: list[str]) -> None:
        self.frame = frame
        self.target = target
        self.weight = weight
        self.features = [*nominal, *continuous]
        self.nominal = nominal
        self.continuous = continuous


class SQLTreeEstimator(BaseEstimator):
    """Base class of sqltree's estimators (not for direct use).

    Subclasses say how to read ``y`` (``_targets``), how to train (``_train``: data ->
    ``Model`` plus per-node facts) and which impurity their nodes report (``_impurity``).
    """

    _impurity: ClassVar[str] = "entropy"

    # -- fitting -------------------------------------------------------------------------------
    def _fit_rows(self, X: Any, y: Any, sample_weight: Any) -> tuple[Model, np.ndarray]:
        """Check the inputs, train, and keep the tree; returns the model and ``y`` as read."""
        self._check_params()
        label_name = getattr(y, "name", None)
        frame = frame_of(self, X, reset=True)
        targets = self._targets(y, len(frame))
        self._check_targets(targets)
        weight = weights_of(sample_weight, len(frame))
        columns = list(frame.columns)
        nominal = nominal_columns(frame, getattr(self, "nominal", None))
        continuous = [c for c in columns if c not in nominal]
        # The model's target column: y's own name (a Series'), so that its SQL and
        # evaluation read the table the data came from; "y" otherwise.
        named = isinstance(label_name, str) and label_name.strip() != ""
        target = unused_name(label_name if named else "y", columns)
        extra = {target: targets}
        weight_column = None
        if weight is not None:
            weight_column = unused_name("weight", [*columns, target])
            extra[weight_column] = weight
        rows = frame.assign(**extra)
        data = TrainingData(rows, target, weight_column, nominal, continuous)
        model, order, facts = self._train(data)
        self.n_outputs_ = 1
        self.model_ = model
        self._set_tree(order, frame, weight, facts)
        return model, targets

    def _targets(self, y: Any, n_rows: int) -> np.ndarray:
        raise NotImplementedError

    def _check_targets(self, targets: np.ndarray) -> None:
        """Refuse a ``y`` the estimator cannot learn from (before training)."""

    def _set_tree(self, order: list[Node], frame: pd.DataFrame, weight: np.ndarray | None,
                  facts: dict[str, Any]) -> None:
        self._domains = {
            f.name: list(f.values) for f in self.model_.features if f.kind == "nominal"
        }
        self._order = order
        self._flat = _tree.flatten(order, self._feature_columns, self._domains)
        n_samples = facts.get("n_samples")
        if n_samples is None:
            n_samples = _tree.samples_per_node(self._flat, self._encode(frame), weight)
        self._n_samples = np.asarray(n_samples, dtype=np.intp)
        self._impurities = self._node_impurities(order)
        self._tree_arrays = _tree.tree_arrays(
            self._flat, self._impurities, n_samples, self.n_features_in_, facts.get("tied")
        )

    def _criterion_name(self) -> str:
        return self._impurity

    def _node_impurities(self, order: list[Node]) -> np.ndarray:
        return _tree.impurities(self._flat, self._criterion_name())

    def _check_params(self) -> None:
        """Refuse parameter values the estimator cannot use (subclasses add theirs)."""

    def _train(self, data: TrainingData) -> tuple[Model, list[Node], dict[str, Any]]:
        raise NotImplementedError

    # -- the fitted tree -----------------------------------------------------------------------
    @property
    def tree_(self) -> _tree.TreeArrays:
        """The tree in scikit-learn's array layout (what its exporters and ``plot_tree`` read).

        Only binary trees have one: a C4.5 test of a nominal feature has a branch per value,
        and scikit-learn's arrays give every test two children. ``model_`` holds every tree
        (``model_.text()``, ``model_.graphviz()``).
        """
        check_is_fitted(self)
        if self._tree_arrays is None:
            raise AttributeError(
                "tree_: this tree tests a nominal feature with more than two branches, which "
                "scikit-learn's tree arrays (two children per test) cannot hold; use "
                "model_.text(), model_.graphviz() or sqltree.estimator.export_graphviz"
            )
        return self._tree_arrays

    def to_arrays(self) -> dict[str, np.ndarray]:
        """``tree_``'s parallel arrays by name, as scikit-learn's ``Tree`` holds them."""
        t = self.tree_
        names = ("children_left", "children_right", "feature", "threshold", "value",
                 "impurity", "n_node_samples", "weighted_n_node_samples", "missing_go_to_left")
        return {name: getattr(t, name) for name in names}

    @property
    def feature_importances_(self) -> np.ndarray:
        """Normalised total impurity decrease per feature (scikit-learn's definition)."""
        check_is_fitted(self)
        return _tree.feature_importances(self._flat, self._impurities, self.n_features_in_)

    def get_depth(self) -> int:
        check_is_fitted(self)
        return self.model_.depth

    def get_n_leaves(self) -> int:
        check_is_fitted(self)
        return self.model_.n_leaves

    # -- prediction ----------------------------------------------------------------------------
    def _encode(self, frame: pd.DataFrame) -> np.ndarray:
        """Rows as float64: continuous values, and nominal values as their code in the
        training domain (NaN for a missing value or one the training data never held)."""
        if not self._domains and all(k in "fiu" for k in frame.dtypes.map(lambda d: d.kind)):
            return frame.to_numpy(dtype=np.float64, na_value=np.nan)
        out = np.empty(frame.shape, dtype=np.float64)
        for j, column in enumerate(frame.columns):
            domain = self._domains.get(column)
            if domain is None:
                out[:, j] = frame[column].to_numpy(dtype=np.float64, na_value=np.nan)
                continue
            codes = pd.Index(domain).get_indexer(frame[column])
            out[:, j] = np.where(codes < 0, np.nan, codes)
        return out

    def _matrix(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self._encode(frame_of(self, X, reset=False))

    def apply(self, X: Any) -> np.ndarray:
        """The index (in ``tree_``'s numbering) of the leaf each row reaches; a row spread
        over a C4.5 test's branches is counted in its largest branch."""
        x = self._matrix(X)
        rows, nodes, _ = _tree.walk(self._flat, x, spread=False)
        out = np.empty(len(x), dtype=np.intp)
        out[rows] = nodes
        return out

    def decision_path(self, X: Any) -> csr_matrix:
        """A sparse (rows x nodes) indicator of the nodes each row passes through, in
        ``tree_``'s numbering (the path ``apply`` follows)."""
        x = self._matrix(X)
        rows, nodes = _tree.decision_path(self._flat, x)
        indptr = np.zeros(len(x) + 1, dtype=np.intp)
        np.cumsum(np.bincount(rows, minlength=len(x)), out=indptr[1:])
        data = np.ones(len(nodes), dtype=np.intp)
        return csr_matrix((data, nodes, indptr), shape=(len(x), self._flat.node_count))

    # -- SQL and the model ---------------------------------------------------------------------
    def to_sql(
        self,
        dialect: str = "duckdb",
        *,
        table: str | None = None,
        view: str | None = None,
        **options: Any,
    ) -> str:
        """The fitted tree as SQL (``Model.to_sql``): a ``CASE`` expression; with ``table``,
        a query adding the ``prediction`` column; with ``view`` too, ``CREATE VIEW``.

        Fitted on an array, the SQL reads columns ``x0``, ``x1``...; on a DataFrame, its
        column names.
        """
        check_is_fitted(self)
        return self.model_.to_sql(dialect, table=table, view=view, **options)

    def evaluate(
        self, X: Any, y: Any = None, *, sample_weight: Any = None, **options: Any
    ) -> Evaluation | RegressionEvaluation:
        """Score rows in the engine with the compiled SQL and measure the model
        (``Model.evaluate``: for classes the confusion matrix, accuracy, kappa, per-class
        figures and log loss; for numbers RMSE, MAE and R²).

        ``evaluate(X, y)`` takes data as ``fit`` does (``sample_weight`` weighs the rows);
        ``evaluate(source)`` takes a table, query, path or DataFrame that holds the target
        column (``model_.target``: y's name, or ``y``) and the feature columns. ``options``
        go to ``Model.evaluate`` (``connection``, ``weight``, ``title``).
        """
        check_is_fitted(self)
        if y is None:
            if sample_weight is not None:
                raise ValueError("sample_weight goes with X and y; a source names a weight=")
            return self.model_.evaluate(X, **options)
        frame = frame_of(self, X, reset=False)
        extra: dict[str, Any] = {self.model_.target: self._targets(y, len(frame))}
        weight = weights_of(sample_weight, len(frame))
        options.setdefault("weight", False)  # the training weight column is not in X
        if weight is not None:
            options["weight"] = unused_name("weight", [*frame.columns, *extra])
            extra[options["weight"]] = weight
        return self.model_.evaluate(frame.assign(**extra), **options)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the fitted model as sqltree's JSON model file (``sqltree.load`` reads it)."""
        check_is_fitted(self)
        self.model_.save(path)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        return tags


class SQLTreeClassifier(ClassifierMixin, SQLTreeEstimator):
    """Base class of sqltree's classifiers (not for direct use)."""

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> SQLTreeClassifier:
        """Train the tree on (X, y) through sqltree's pipeline in DuckDB; returns ``self``.

        Parameters
        ----------
        X : DataFrame or array-like of shape (n_samples, n_features)
            Numeric columns are continuous features; text, boolean, categorical and object
            columns (and those listed in ``nominal``) are nominal. NaN (or None) is a missing
            value.
        y : array-like of shape (n_samples,)
            Class labels.
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative row weights; every count is a sum of weights.
        """
        model, labels = self._fit_rows(X, y, sample_weight)
        classes = np.unique(labels)
        if [_plain(c) for c in model.classes] != [_plain(c) for c in classes]:
            raise ValueError(
                f"every class needs a positive total weight; trained on {model.classes}, "
                f"y holds {classes.tolist()}"
            )
        self.classes_ = classes
        self.n_classes_ = len(classes)
        return self

    def _targets(self, y: Any, n_rows: int) -> np.ndarray:
        return labels_of(self, y, n_rows)

    def _check_targets(self, targets: np.ndarray) -> None:
        classes = np.unique(targets)
        if len(classes) < 2:
            raise ValueError(
                f"y holds one class ({classes[0]!r}); a classifier needs at least two"
            )

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities of each row, columns in ``classes_`` order.

        A row whose value is unknown at a C4.5 test gets the branches' probabilities weighted
        by their training shares, as the compiled SQL gives them.
        """
        x = self._matrix(X)
        return _tree.predict_proba(self._flat, x)

    def predict_log_proba(self, X: Any) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each row (ties to the first in ``classes_``)."""
        check_is_fitted(self)
        return self.classes_[_tree.best_class(self.predict_proba(X))]



class SQLTreeRegressor(RegressorMixin, SQLTreeEstimator):
    """Base class of sqltree's regressors (not for direct use)."""

    _impurity: ClassVar[str] = "squared_error"

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> SQLTreeRegressor:
        """Train the tree on (X, y) through sqltree's pipeline in DuckDB; returns ``self``.

        ``X`` and ``sample_weight`` as for ``SQLTreeClassifier.fit``; ``y`` holds the numeric
        target values.
        """
        self._fit_rows(X, y, sample_weight)
        return self

    def _targets(self, y: Any, n_rows: int) -> np.ndarray:
        return targets_of(self, y, n_rows)

    def _node_impurities(self, order: list[Node]) -> np.ndarray:
        return np.asarray([n.impurity or 0.0 for n in order], dtype=np.float64)

    def predict(self, X: Any) -> np.ndarray:
        """The predicted value of each row: its leaf's weighted mean target."""
        x = self._matrix(X)
        return _tree.predict_value(self._flat, x)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value the engine gives back (``np.str_`` -> ``str``)."""
    return value.item() if isinstance(value, np.generic) else value
