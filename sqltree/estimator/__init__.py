"""scikit-learn estimators that train through sqltree's SQL pipeline (DuckDB) and compile to SQL.

``DecisionTreeClassifier`` and ``DecisionTreeRegressor`` are CART with scikit-learn's
parameters; ``C45Classifier`` is C4.5 with Weka J48's options. All follow scikit-learn's
estimator contract (``check_estimator`` passes, ``tests/test_estimator_checks.py``; the one
deliberate difference, that an object column is a nominal feature rather than numbers to
convert, is documented there), work in pipelines and searches, and are a ``Model`` underneath
(``model_``, ``to_sql``, ``evaluate``, ``save``).

scikit-learn's ``export_text``, ``export_graphviz`` and ``plot_tree`` check that they are given
one of its own trees; importing this module registers the classifiers as virtual subclasses of
``sklearn.tree.DecisionTreeClassifier`` and the regressor of ``DecisionTreeRegressor``
(``ABCMeta.register``: no behaviour is inherited), so those functions accept them and read
``tree_``.

scikit-learn converts inputs to float32 before growing and predicting; sqltree keeps float64.
The two give identical trees on data that float32 represents exactly.
"""

from __future__ import annotations

try:
    import sklearn.tree as _sklearn_tree
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "sqltree's estimators need scikit-learn: pip install -e '.[sklearn]' in a clone of "
        "the sqltree repository"
    ) from error

from ._base import SQLTreeClassifier, SQLTreeEstimator, SQLTreeRegressor
from ._classes import C45Classifier, DecisionTreeClassifier, DecisionTreeRegressor
from ._ensembles import (
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from ._export import export_graphviz, export_text
from ._tree import TREE_LEAF, TREE_UNDEFINED, TreeArrays

_sklearn_tree.DecisionTreeClassifier.register(SQLTreeClassifier)
_sklearn_tree.DecisionTreeRegressor.register(SQLTreeRegressor)

__all__ = [
    "TREE_LEAF",
    "TREE_UNDEFINED",
    "C45Classifier",
    "DecisionTreeClassifier",
    "DecisionTreeRegressor",
    "HistGradientBoostingClassifier",
    "HistGradientBoostingRegressor",
    "RandomForestClassifier",
    "RandomForestRegressor",
    "SQLTreeClassifier",
    "SQLTreeEstimator",
    "SQLTreeRegressor",
    "TreeArrays",
    "export_graphviz",
    "export_text",
]
