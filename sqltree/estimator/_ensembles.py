"""Ensembles with scikit-learn's parameters: ``RandomForestClassifier``,
``RandomForestRegressor``, ``HistGradientBoostingClassifier`` and
``HistGradientBoostingRegressor``, trained by sqltree's learner (``train(algorithm=
"random-forest")`` or ``"gradient-boosting"``) and kept as an ``Ensemble`` (``model_``) that
compiles to SQL.

Where the forests differ from scikit-learn's, on purpose:

- ``random_state=None`` means 0: the same data gives the same forest (pass an integer to
  choose another; a ``RandomState`` gives the integer it draws first).
- Continuous features are cut into ``max_bins`` quantile bins (as scikit-learn's histogram
  boosting does) whose edges are values of the data; bootstrap counts are Poisson(1) draws
  per row and tree (Spark MLlib's bagging), from a hash of the row that every engine computes
  the same way.
- ``n_jobs`` and ``verbose`` are accepted and ignored (the engine decides its threads).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..algorithm_registry import GRADIENT_BOOSTING, RANDOM_FOREST
from ..api import train
from ..ensemble import Ensemble, TreeArrays
from ._base import fit_engine
from ._inputs import (
    frame_of,
    labels_of,
    nominal_columns,
    targets_of,
    unused_name,
    weights_of,
)


class _Ensemble(BaseEstimator):
    """What every ensemble estimator shares: inputs read as the tree estimators read them,
    training through ``train``, the model's SQL and file."""

    _task = "classification"
    _algorithm = RANDOM_FOREST

    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            return 0
        if isinstance(rs, (int, np.integer)) and not isinstance(rs, bool):
            return int(rs)
        return int(check_random_state(rs).randint(np.iinfo(np.int32).max))

    def _options(self) -> dict[str, Any]:
        raise NotImplementedError

    def _check_params(self) -> None:
        if self.warm_start:
            raise ValueError("warm_start=True is not supported: fit grows the whole forest")
        if self.max_leaf_nodes is not None:
            raise ValueError("only max_leaf_nodes=None is supported: the trees grow level by "
                             "level, all of them in the same scans")
        if self.ccp_alpha != 0.0:
            raise ValueError("only ccp_alpha=0.0 is supported")

    def _fit(self, X: Any, y: Any, sample_weight: Any) -> np.ndarray:
        self._check_params()
        label_name = getattr(y, "name", None)
        frame = frame_of(self, X, reset=True)
        targets = (labels_of if self._task == "classification" else targets_of)(
            self, y, len(frame))
        if self._task == "classification" and len(np.unique(targets)) < 2:
            raise ValueError(f"y holds one class ({targets[0]!r}); a classifier needs at "
                             "least two")
        weight = weights_of(sample_weight, len(frame))
        columns = list(frame.columns)
        nominal = nominal_columns(frame, getattr(self, "nominal", None))
        continuous = [c for c in columns if c not in nominal]
        named = isinstance(label_name, str) and label_name.strip() != ""
        target = unused_name(label_name if named else "y", columns)
        extra: dict[str, Any] = {target: targets}
        weight_column = None
        if weight is not None:
            weight_column = unused_name("weight", [*columns, target])
            extra[weight_column] = weight
        self.model_: Ensemble = train(
            frame.assign(**extra), target, algorithm=self._algorithm, task=self._task,
            connection=fit_engine(), features=[*nominal, *continuous], nominal=nominal,
            continuous=continuous, weight=weight_column, max_depth=self.max_depth,
            max_bins=self.max_bins, **self._options(),
        )
        self.n_outputs_ = 1
        oob = self.model_.stats.get("oob")
        if oob is not None:
            self.oob_score_ = float(oob["score"])
        return targets

    # -- what scikit-learn users read ------------------------------------------------------------
    @property
    def trees_(self) -> list[TreeArrays]:
        """Each tree as flat arrays (``sqltree.ensemble.TreeArrays``), in order."""
        check_is_fitted(self)
        return self.model_.trees

    @property
    def feature_importances_(self) -> np.ndarray:
        """Impurity decrease per feature, normalised per tree, averaged, summing to 1."""
        check_is_fitted(self)
        shares = self.model_.feature_importances("gain")
        return np.asarray([shares[c] for c in self._feature_columns])

    def _frame(self, X: Any) -> pd.DataFrame:
        check_is_fitted(self)
        return frame_of(self, X, reset=False)

    def to_sql(self, dialect: str = "duckdb", **options: Any) -> str:
        """The fitted forest as one scoring query or expression (``Ensemble.to_sql``)."""
        check_is_fitted(self)
        return self.model_.to_sql(dialect, **options)  # type: ignore[attr-defined]

    def save(self, path: Any) -> None:
        """Write the fitted forest as sqltree's ensemble model file."""
        check_is_fitted(self)
        self.model_.save(path)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        return tags


class _Classifier(ClassifierMixin):
    """``fit``, ``predict_proba`` and ``predict`` of the ensemble classifiers."""

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> Any:
        """Train on (X, y); returns ``self``."""
        labels = self._fit(X, y, sample_weight)  # type: ignore[attr-defined]
        self.classes_ = np.unique(labels)
        self.n_classes_ = len(self.classes_)
        trained = [_plain(c) for c in self.model_.classes]  # type: ignore[attr-defined]
        if trained != [_plain(c) for c in self.classes_]:
            raise ValueError(f"every class needs a positive total weight; trained on "
                             f"{trained}, y holds {self.classes_.tolist()}")
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities of each row, columns in ``classes_`` order."""
        frame = self._frame(X)  # type: ignore[attr-defined]
        return self.model_.predict_proba_frame(frame)  # type: ignore[attr-defined]

    def predict_log_proba(self, X: Any) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each row (ties to the first in ``classes_``)."""
        check_is_fitted(self)  # type: ignore[arg-type]
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


class _Regressor(RegressorMixin):
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> Any:
        """Train on (X, y); returns ``self``."""
        self._fit(X, y, sample_weight)  # type: ignore[attr-defined]
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The predicted value of each row."""
        frame = self._frame(X)  # type: ignore[attr-defined]
        return self.model_.predict_frame(frame).astype(np.float64)  # type: ignore[attr-defined]


class _Forest(_Ensemble):
    """The forests' options."""

    @property
    def estimators_(self) -> list[TreeArrays]:
        """Each tree as flat arrays (``sqltree.ensemble.TreeArrays``), in order."""
        return self.trees_

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "n_estimators": self.n_estimators, "criterion": self.criterion,
            "min_samples_leaf": self.min_samples_leaf,
            "min_samples_split": self.min_samples_split,
            "min_weight_fraction_leaf": self.min_weight_fraction_leaf,
            "max_features": self.max_features,
            "min_impurity_decrease": self.min_impurity_decrease,
            "bootstrap": self.bootstrap, "max_samples": self.max_samples,
            "random_state": self._seed(), "oob_score": bool(self.oob_score),
        }
        if self._task == "classification":
            options["class_weight"] = self.class_weight
        return options


class RandomForestClassifier(_Classifier, _Forest):
    """A random forest classifier with scikit-learn's parameters (see the module's notes);
    ``max_bins`` cuts continuous features into quantile bins, ``nominal`` names columns to
    treat as nominal."""

    def __init__(
        self,
        n_estimators: int = 100,
        *,
        criterion: str = "gini",
        max_depth: int | None = None,
        min_samples_split: float = 2,
        min_samples_leaf: float = 1,
        min_weight_fraction_leaf: float = 0.0,
        max_features: Any = "sqrt",
        max_leaf_nodes: int | None = None,
        min_impurity_decrease: float = 0.0,
        bootstrap: bool = True,
        oob_score: bool = False,
        n_jobs: int | None = None,
        random_state: Any = None,
        verbose: int = 0,
        warm_start: bool = False,
        class_weight: Any = None,
        ccp_alpha: float = 0.0,
        max_samples: float | int | None = None,
        max_bins: int = 255,
        nominal: list[str] | None = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.max_features = max_features
        self.max_leaf_nodes = max_leaf_nodes
        self.min_impurity_decrease = min_impurity_decrease
        self.bootstrap = bootstrap
        self.oob_score = oob_score
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start
        self.class_weight = class_weight
        self.ccp_alpha = ccp_alpha
        self.max_samples = max_samples
        self.max_bins = max_bins
        self.nominal = nominal



class RandomForestRegressor(_Regressor, _Forest):
    """A random forest regressor with scikit-learn's parameters (see the module's notes)."""

    _task = "regression"

    def __init__(
        self,
        n_estimators: int = 100,
        *,
        criterion: str = "squared_error",
        max_depth: int | None = None,
        min_samples_split: float = 2,
        min_samples_leaf: float = 1,
        min_weight_fraction_leaf: float = 0.0,
        max_features: Any = 1.0,
        max_leaf_nodes: int | None = None,
        min_impurity_decrease: float = 0.0,
        bootstrap: bool = True,
        oob_score: bool = False,
        n_jobs: int | None = None,
        random_state: Any = None,
        verbose: int = 0,
        warm_start: bool = False,
        ccp_alpha: float = 0.0,
        max_samples: float | int | None = None,
        max_bins: int = 255,
        nominal: list[str] | None = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.max_features = max_features
        self.max_leaf_nodes = max_leaf_nodes
        self.min_impurity_decrease = min_impurity_decrease
        self.bootstrap = bootstrap
        self.oob_score = oob_score
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start
        self.ccp_alpha = ccp_alpha
        self.max_samples = max_samples
        self.max_bins = max_bins
        self.nominal = nominal



class _Boosting(_Ensemble):
    """The histogram boosting estimators' options."""

    _algorithm = GRADIENT_BOOSTING

    def _check_params(self) -> None:
        if self.warm_start:
            raise ValueError("warm_start=True is not supported: fit trains every round")
        if self.interaction_cst is not None or self.monotonic_cst is not None:
            raise ValueError("interaction_cst and monotonic_cst are not supported")
        if self.max_features != 1.0:
            raise ValueError("only max_features=1.0 is supported")

    def _options(self) -> dict[str, Any]:
        return {
            "loss": self.loss, "learning_rate": self.learning_rate, "max_iter": self.max_iter,
            "max_leaf_nodes": self.max_leaf_nodes, "min_samples_leaf": self.min_samples_leaf,
            "l2_regularization": self.l2_regularization,
            "early_stopping": self.early_stopping,
            "validation_fraction": self.validation_fraction,
            "n_iter_no_change": self.n_iter_no_change, "tol": self.tol,
            "random_state": self._seed(),
            **({"class_weight": self.class_weight} if self._task == "classification" else {}),
        }

    @property
    def n_iter_(self) -> int:
        """The rounds trained (fewer than ``max_iter`` when stopped early)."""
        check_is_fitted(self)
        return int(self.model_.stats["n_iter"])

    @property
    def train_score_(self) -> np.ndarray:
        """The mean training loss after each round."""
        check_is_fitted(self)
        return np.asarray([r["train_loss"] for r in self.model_.stats["rounds"]])

    @property
    def validation_score_(self) -> np.ndarray:
        """The mean validation loss after each round (empty without early stopping)."""
        check_is_fitted(self)
        return np.asarray([r["validation_loss"] for r in self.model_.stats["rounds"]
                           if r["validation_loss"] is not None])


def _boosting_init(self: Any, loss: str, learning_rate: float, max_iter: int,
                   max_leaf_nodes: int | None, max_depth: int | None, min_samples_leaf: int,
                   l2_regularization: float, max_bins: int, categorical_features: Any,
                   monotonic_cst: Any, interaction_cst: Any, warm_start: bool,
                   early_stopping: Any, scoring: Any, validation_fraction: float,
                   n_iter_no_change: int, tol: float, verbose: int, random_state: Any,
                   nominal: list[str] | None) -> None:
    self.loss = loss
    self.learning_rate = learning_rate
    self.max_iter = max_iter
    self.max_leaf_nodes = max_leaf_nodes
    self.max_depth = max_depth
    self.min_samples_leaf = min_samples_leaf
    self.l2_regularization = l2_regularization
    self.max_bins = max_bins
    self.categorical_features = categorical_features
    self.monotonic_cst = monotonic_cst
    self.interaction_cst = interaction_cst
    self.warm_start = warm_start
    self.early_stopping = early_stopping
    self.scoring = scoring
    self.validation_fraction = validation_fraction
    self.n_iter_no_change = n_iter_no_change
    self.tol = tol
    self.verbose = verbose
    self.random_state = random_state
    self.nominal = nominal


class HistGradientBoostingClassifier(_Classifier, _Boosting):
    """Histogram gradient boosting with scikit-learn's parameters (binary and multiclass log
    loss; one tree per class per round for more than two classes). Text, boolean and
    categorical columns are nominal features whatever ``categorical_features`` says;
    ``scoring`` is the loss."""

    def __init__(self, loss: str = "log_loss", *, learning_rate: float = 0.1,
                 max_iter: int = 100, max_leaf_nodes: int | None = 31,
                 max_depth: int | None = None, min_samples_leaf: int = 20,
                 l2_regularization: float = 0.0, max_features: float = 1.0,
                 max_bins: int = 255, categorical_features: Any = "from_dtype",
                 monotonic_cst: Any = None, interaction_cst: Any = None,
                 warm_start: bool = False, early_stopping: Any = "auto",
                 scoring: Any = "loss", validation_fraction: float = 0.1,
                 n_iter_no_change: int = 10, tol: float = 1e-7, verbose: int = 0,
                 random_state: Any = None, class_weight: Any = None,
                 nominal: list[str] | None = None) -> None:
        _boosting_init(self, loss, learning_rate, max_iter, max_leaf_nodes, max_depth,
                       min_samples_leaf, l2_regularization, max_bins, categorical_features,
                       monotonic_cst, interaction_cst, warm_start, early_stopping, scoring,
                       validation_fraction, n_iter_no_change, tol, verbose, random_state,
                       nominal)
        self.max_features = max_features
        self.class_weight = class_weight



class HistGradientBoostingRegressor(_Regressor, _Boosting):
    """Histogram gradient boosting with scikit-learn's parameters (squared error, Poisson)."""

    _task = "regression"

    def __init__(self, loss: str = "squared_error", *, quantile: float | None = None,
                 learning_rate: float = 0.1, max_iter: int = 100,
                 max_leaf_nodes: int | None = 31, max_depth: int | None = None,
                 min_samples_leaf: int = 20, l2_regularization: float = 0.0,
                 max_features: float = 1.0, max_bins: int = 255,
                 categorical_features: Any = "from_dtype", monotonic_cst: Any = None,
                 interaction_cst: Any = None, warm_start: bool = False,
                 early_stopping: Any = "auto", scoring: Any = "loss",
                 validation_fraction: float = 0.1, n_iter_no_change: int = 10,
                 tol: float = 1e-7, verbose: int = 0, random_state: Any = None,
                 nominal: list[str] | None = None) -> None:
        _boosting_init(self, loss, learning_rate, max_iter, max_leaf_nodes, max_depth,
                       min_samples_leaf, l2_regularization, max_bins, categorical_features,
                       monotonic_cst, interaction_cst, warm_start, early_stopping, scoring,
                       validation_fraction, n_iter_no_change, tol, verbose, random_state,
                       nominal)
        self.quantile = quantile
        self.max_features = max_features



def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
