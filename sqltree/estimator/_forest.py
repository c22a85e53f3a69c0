"""Random forests with scikit-learn's parameters: ``RandomForestClassifier`` and
``RandomForestRegressor``, trained by sqltree's learner (``train(algorithm="random-forest")``)
and kept as an ``Ensemble`` (``model_``) that compiles to SQL.

Where they differ from scikit-learn's forests, on purpose:

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


class _Forest(BaseEstimator):
    """What the classifier and the regressor share."""

    _task = "classification"

    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            return 0
        if isinstance(rs, (int, np.integer)) and not isinstance(rs, bool):
            return int(rs)
        return int(check_random_state(rs).randint(np.iinfo(np.int32).max))

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
        options: dict[str, Any] = {
            "n_estimators": self.n_estimators, "criterion": self.criterion,
            "min_samples_leaf": self.min_samples_leaf,
            "min_weight_fraction_leaf": self.min_weight_fraction_leaf,
            "max_features": self.max_features,
            "min_impurity_decrease": self.min_impurity_decrease,
            "bootstrap": self.bootstrap, "max_samples": self.max_samples,
            "random_state": self._seed(), "oob_score": bool(self.oob_score),
        }
        if self._task == "classification":
            options["class_weight"] = self.class_weight
        self.model_: Ensemble = train(
            frame.assign(**extra), target, algorithm="random-forest", task=self._task,
            connection=fit_engine(), features=[*nominal, *continuous], nominal=nominal,
            continuous=continuous, weight=weight_column, max_depth=self.max_depth,
            min_samples_split=self.min_samples_split, max_bins=self.max_bins, **options,
        )
        self.n_outputs_ = 1
        oob = self.model_.stats.get("oob")
        if oob is not None:
            self.oob_score_ = float(oob["score"])
        return targets

    # -- what scikit-learn users read ------------------------------------------------------------
    @property
    def estimators_(self) -> list[TreeArrays]:
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


class RandomForestClassifier(ClassifierMixin, _Forest):
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

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> RandomForestClassifier:
        """Grow the forest on (X, y); returns ``self``."""
        labels = self._fit(X, y, sample_weight)
        self.classes_ = np.unique(labels)
        self.n_classes_ = len(self.classes_)
        trained = [_plain(c) for c in self.model_.classes]
        if trained != [_plain(c) for c in self.classes_]:
            raise ValueError(f"every class needs a positive total weight; trained on "
                             f"{trained}, y holds {self.classes_.tolist()}")
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """The mean of the trees' class probabilities, columns in ``classes_`` order."""
        frame = self._frame(X)
        return self.model_.predict_proba_frame(frame)

    def predict_log_proba(self, X: Any) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each row (ties to the first in ``classes_``)."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


class RandomForestRegressor(RegressorMixin, _Forest):
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

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> RandomForestRegressor:
        """Grow the forest on (X, y); returns ``self``."""
        self._fit(X, y, sample_weight)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The mean of the trees' predictions."""
        frame = self._frame(X)
        return self.model_.predict_frame(frame).astype(np.float64)


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
