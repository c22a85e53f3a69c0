"""Models of many trees: forests and boosting, trained by sqltree or imported from
scikit-learn, LightGBM and XGBoost, compiled to one scoring query per dialect.

``Ensemble`` (``model``) holds the trees as flat arrays (``trees.TreeArrays``) and the rule
that combines them; ``compile`` writes its SQL (see there for the API), ``importers`` reads
scikit-learn, LightGBM and XGBoost models, ``files`` opens model files.
"""

from __future__ import annotations

from .model import Ensemble
from .trees import TREE_LEAF, TreeArrays

__all__ = ["TREE_LEAF", "Ensemble", "TreeArrays"]
