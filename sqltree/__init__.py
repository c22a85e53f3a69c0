"""sqltree: train ID3, C4.5 and CART decision trees inside SQL engines.

The planner generates SQL (weighted class counts, entropy, gain, gain ratio, threshold scans),
the engine runs it where the data lives, and the finished tree compiles to one SQL expression.

Examples
--------
>>> import sqltree
>>> model = sqltree.train("examples/data/golf.csv", target="play")  # doctest: +SKIP
>>> print(model.to_sql())                                             # doctest: +SKIP

scikit-learn users switch with one import (needs scikit-learn; loaded on first use):

>>> from sqltree import DecisionTreeClassifier, DecisionTreeRegressor  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from . import progress
from .api import split_scores, train
from .crossval import CrossValidation, assign_folds, cross_validate, holdout
from .dataset import source
from .ensemble import Ensemble
from .ensemble.files import load
from .ensemble.importers import from_lightgbm, from_sklearn, from_xgboost
from .errors import (
    DataError,
    EngineConnectionError,
    ModelFileError,
    OptionError,
    SourceError,
    SqlTreeError,
    UnsupportedError,
    UnsupportedOptionError,
)
from .model import Model
from .permutation import PermutationImportance, permutation_importance
from .tree import Node, Split
from .version import __version__

_ESTIMATORS = (
    "C45Classifier", "DecisionTreeClassifier", "DecisionTreeRegressor",
    "RandomForestClassifier", "RandomForestRegressor",
    "HistGradientBoostingClassifier", "HistGradientBoostingRegressor",
)


def __getattr__(name: str) -> Any:
    # The estimators import scikit-learn, an optional extra that takes a second to load:
    # ``import sqltree`` (and every ``sqltree`` command) stays without it.
    if name in _ESTIMATORS:
        from . import estimator

        return getattr(estimator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "C45Classifier",
    "CrossValidation",
    "DataError",
    "DecisionTreeClassifier",
    "DecisionTreeRegressor",
    "EngineConnectionError",
    "Ensemble",
    "HistGradientBoostingClassifier",
    "HistGradientBoostingRegressor",
    "Model",
    "ModelFileError",
    "Node",
    "OptionError",
    "PermutationImportance",
    "RandomForestClassifier",
    "RandomForestRegressor",
    "SourceError",
    "Split",
    "SqlTreeError",
    "UnsupportedError",
    "UnsupportedOptionError",
    "__version__",
    "assign_folds",
    "cross_validate",
    "from_lightgbm",
    "from_sklearn",
    "from_xgboost",
    "holdout",
    "load",
    "permutation_importance",
    "progress",
    "source",
    "split_scores",
    "train",
]
