"""The estimators: CART with scikit-learn's parameters (classification and regression), C4.5
with J48's."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np
from sklearn.utils import Bunch
from sklearn.utils.validation import check_is_fitted

from ..algorithm_registry import C45, C45_PRUNING, CART
from ..api import train
from ..model import Model
from ..pruning.cost_complexity import cost_complexity_pruning_path, node_numbering
from ..tree import Node
from ._base import SQLTreeClassifier, SQLTreeRegressor, TrainingData, fit_engine


class _CART:
    """What CART's classifier and regressor share: training with scikit-learn's parameters,
    its node numbering, and the pruning path."""

    _task: ClassVar[str]

    def _check_params(self) -> None:
        if self.splitter != "best":
            raise ValueError(f"only splitter='best' is supported, not {self.splitter!r}")
        if self.max_features is not None:
            raise ValueError(f"only max_features=None is supported, not {self.max_features!r}")

    def _cart_options(self) -> dict[str, Any]:
        return {
            "criterion": self.criterion,
            "min_samples_leaf": self.min_samples_leaf,
            "min_weight_fraction_leaf": self.min_weight_fraction_leaf,
            "min_impurity_decrease": self.min_impurity_decrease,
            "max_leaf_nodes": self.max_leaf_nodes,
            "ccp_alpha": self.ccp_alpha,
        }

    def _train(self, data: TrainingData) -> tuple[Model, list[Node], dict[str, Any]]:
        model = train(
            data.frame,
            data.target,
            algorithm=CART,
            task=self._task,
            connection=fit_engine(),
            features=data.features,
            nominal=data.nominal,
            continuous=data.continuous,
            weight=data.weight,
            max_depth=self.max_depth,
            min_samples_split=self.min_samples_split,
            max_bins=self.max_bins,
            **self._cart_options(),
        )
        # scikit-learn's numbering (best-first trees in creation order), and what CART's
        # nodes keep from growth: row counts and ties.
        order = node_numbering(model.root, self.max_leaf_nodes, self.ccp_alpha)
        facts = {
            "n_samples": np.asarray([n.n_samples or 0 for n in order]),
            "tied": np.asarray([bool(n.tied) for n in order]),
        }
        return model, order, facts

    # -- what test_cart and scikit-learn users read ---------------------------------------------
    @property
    def root_(self) -> Node:
        """The fitted tree's root node (``model_.root``)."""
        check_is_fitted(self)
        return self.model_.root

    def strategy_nodes(self, root: Node | None = None) -> list[Node]:
        """The fitted tree's nodes (or ``root``'s, grown by this fit) in scikit-learn's
        numbering, as ``cost_complexity_pruning_path`` and ``prune_ccp`` take them."""
        check_is_fitted(self)
        if root is None:
            return list(self._order)
        return node_numbering(root, self.max_leaf_nodes, self.ccp_alpha)

    def cost_complexity_pruning_path(
        self, X: Any, y: Any, sample_weight: Any = None
    ) -> Bunch:
        """Effective alphas and total leaf impurities, as scikit-learn's method returns them."""
        params = self.get_params() | {"ccp_alpha": 0.0}
        est = type(self)(**params).fit(X, y, sample_weight=sample_weight)
        path = cost_complexity_pruning_path(
            est.root_, est._criterion_name(), est.strategy_nodes()
        )
        return Bunch(**{k: np.asarray(v) for k, v in path.items()})


class DecisionTreeClassifier(_CART, SQLTreeClassifier):
    """CART with scikit-learn's parameters and meanings, trained by SQL in DuckDB.

    The tree is the one ``sklearn.tree.DecisionTreeClassifier`` grows on the same data (ties
    broken deterministically, see ``sqltree.algorithms.cart``), and the fitted estimator is a
    ``Model`` underneath: ``model_``, ``to_sql()``, ``save()``.

    Parameters
    ----------
    criterion : {"gini", "entropy", "log_loss"}, default="gini"
    splitter : {"best"}, default="best"
        Only the exhaustive splitter exists.
    max_depth, min_samples_split, min_samples_leaf, min_weight_fraction_leaf, max_leaf_nodes,
    min_impurity_decrease, class_weight, ccp_alpha
        As in ``sklearn.tree.DecisionTreeClassifier``.
    max_features : None, default=None
        Every feature is considered at every node.
    random_state : ignored
        sqltree breaks ties deterministically.
    nominal : list of str, optional
        Columns to treat as nominal (binary subset splits); text, boolean, categorical and
        object columns are nominal anyway.
    max_bins : int, optional
        Cut continuous features into at most this many quantile bins (large data).
    threshold_search : {"auto", "full", "bounded"}, default="auto"
        Exact mode: scan every value, or only the quantile bins whose gain bound can reach
        the best cut (docs/exact-search.md); the same tree. ``"auto"``: bounded on DuckDB for
        classification while a level's nodes hold enough values to pay, else full.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> clf = DecisionTreeClassifier().fit(X, ["a", "a", "b", "b"])
    >>> clf.predict([[0.5], [2.5]]).tolist()
    ['a', 'b']
    >>> print(clf.to_sql())
    CASE WHEN "x0" > 1.5 OR "x0" IS NULL THEN 'b' ELSE 'a' END
    """

    _impurity: ClassVar[str] = "gini"
    _task: ClassVar[str] = "classification"

    def __init__(
        self,
        *,
        criterion: str = "gini",
        splitter: str = "best",
        max_depth: int | None = None,
        min_samples_split: int | float = 2,
        min_samples_leaf: int | float = 1,
        min_weight_fraction_leaf: float = 0.0,
        max_features: Any = None,
        random_state: Any = None,
        max_leaf_nodes: int | None = None,
        min_impurity_decrease: float = 0.0,
        class_weight: Any = None,
        ccp_alpha: float = 0.0,
        nominal: list[str] | None = None,
        max_bins: int | None = None,
        threshold_search: str = "auto",
    ) -> None:
        self.criterion = criterion
        self.splitter = splitter
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.max_features = max_features
        self.random_state = random_state
        self.max_leaf_nodes = max_leaf_nodes
        self.min_impurity_decrease = min_impurity_decrease
        self.class_weight = class_weight
        self.ccp_alpha = ccp_alpha
        self.nominal = nominal
        self.max_bins = max_bins
        self.threshold_search = threshold_search

    def _criterion_name(self) -> str:
        return "gini" if self.criterion == "gini" else "entropy"

    def _cart_options(self) -> dict[str, Any]:
        return {**super()._cart_options(), "class_weight": self.class_weight,
                "threshold_search": self.threshold_search}


class DecisionTreeRegressor(_CART, SQLTreeRegressor):
    """CART regression trees with scikit-learn's parameters, trained by SQL in DuckDB.

    The tree is the one ``sklearn.tree.DecisionTreeRegressor`` grows on the same data (ties
    broken deterministically), and the fitted estimator is a ``Model`` underneath:
    ``model_``, ``to_sql()`` (a numeric ``CASE``), ``save()``, ``evaluate()`` (RMSE, MAE, R²).

    Parameters
    ----------
    criterion : {"squared_error", "friedman_mse", "poisson"}, default="squared_error"
        ``friedman_mse`` grows squared error's splits with Friedman's improvement
        (``min_impurity_decrease`` compares with it), as scikit-learn defined it up to 1.8;
        ``poisson`` needs ``y >= 0`` with a positive sum. ``absolute_error`` is refused.
    splitter : {"best"}, default="best"
        Only the exhaustive splitter exists.
    max_depth, min_samples_split, min_samples_leaf, min_weight_fraction_leaf, max_leaf_nodes,
    min_impurity_decrease, ccp_alpha
        As in ``sklearn.tree.DecisionTreeRegressor``.
    max_features : None, default=None
        Every feature is considered at every node.
    random_state : ignored
        sqltree breaks ties deterministically.
    nominal : list of str, optional
        Columns to treat as nominal (binary splits of values ordered by mean target); text,
        boolean, categorical and object columns are nominal anyway.
    max_bins : int, optional
        Cut continuous features into at most this many quantile bins (large data).
    threshold_search : {"auto", "full", "bounded"}, default="auto"
        Exact mode: scan every value, or only the quantile bins whose gain bound can reach
        the best cut (docs/exact-search.md); the same tree. ``"auto"``: bounded on DuckDB for
        classification while a level's nodes hold enough values to pay, else full.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> reg = DecisionTreeRegressor(max_depth=1).fit(X, [1.0, 1.0, 5.0, 7.0])
    >>> reg.predict([[0.5], [2.5]]).tolist()
    [1.0, 6.0]
    >>> print(reg.to_sql())
    CASE WHEN "x0" > 1.5 OR "x0" IS NULL THEN 6.0e0 ELSE 1.0e0 END
    """

    _task: ClassVar[str] = "regression"

    def __init__(
        self,
        *,
        criterion: str = "squared_error",
        splitter: str = "best",
        max_depth: int | None = None,
        min_samples_split: int | float = 2,
        min_samples_leaf: int | float = 1,
        min_weight_fraction_leaf: float = 0.0,
        max_features: Any = None,
        random_state: Any = None,
        max_leaf_nodes: int | None = None,
        min_impurity_decrease: float = 0.0,
        ccp_alpha: float = 0.0,
        nominal: list[str] | None = None,
        max_bins: int | None = None,
    ) -> None:
        # scikit-learn's contract: __init__ stores each parameter as given, nothing else
        for name, value in locals().items():
            if name != "self":
                setattr(self, name, value)

    def _criterion_name(self) -> str:
        return str(self.criterion)


class C45Classifier(SQLTreeClassifier):
    """C4.5 as Weka's J48 builds it, with J48's options, trained by SQL in DuckDB.

    The tree is the one ``sqltree.train(..., algorithm="c4.5")`` grows (J48's tree on Weka's
    data sets), and the fitted estimator is that ``Model`` underneath: ``model_.text()``
    prints J48's text, ``to_sql()`` compiles it (unknown values spread over the branches in
    the SQL too).

    Parameters
    ----------
    cf : float, default=0.25
        J48 ``-C``: confidence of the error-based pruning, in (0, 0.5] (``train``'s ``cf``,
        the command line's ``--cf``).
    min_cases : float, default=2
        J48 ``-M``: least weight in at least two branches of a split (``train``'s
        ``min_cases``, ``--min-cases``).
    unpruned : bool, default=False
        J48 ``-U``: no pruning (subtrees that fix no training error still collapse).
    subtree_raising : bool, default=True
        J48 without ``-S``: a node may be replaced by its largest branch while pruning.
    pruning : {"c4.5", "pessimistic"}, default="c4.5"
        J48's error-based pruning, or Quinlan's pessimistic pruning (unless ``unpruned``).
    missing : {"fractional", "majority", "drop"}, default="fractional"
        Unknown values in training: C4.5's fractional cases, the heaviest branch, or ignored.
    max_depth : int, optional
        Deepest test level (J48 has none).
    min_gain : float, default=0.0
        Least information gain of a split.
    nominal : list of str, optional
        Columns to treat as nominal (a branch per value); text, boolean, categorical and
        object columns are nominal anyway.
    max_bins : int, optional
        Cut continuous features into at most this many quantile bins (large data).
    threshold_search : {"auto", "full", "bounded"}, default="auto"
        Exact mode: scan every value, or only the quantile bins whose gain bound can reach
        each feature's best cut (docs/exact-search.md); the same tree. ``"auto"``: the full
        scan.
    confidence_factor, min_objects : deprecated
        The former names of ``cf`` and ``min_cases``: still taken, with a FutureWarning.

    Notes
    -----
    ``criterion`` is ``"entropy"``: the impurity the nodes report (C4.5 chooses by gain
    ratio). ``tree_`` exists when every test has two branches (continuous features, nominal
    features of two values).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]])
    >>> clf = C45Classifier(min_cases=1).fit(X, ["no", "no", "no", "yes", "yes", "yes"])
    >>> print(clf.model_.text().splitlines()[0])
    x0 <= 3: no (3.0)
    """

    criterion: ClassVar[str] = "entropy"

    def __init__(
        self,
        *,
        cf: float = 0.25,
        min_cases: float = 2,
        unpruned: bool = False,
        subtree_raising: bool = True,
        pruning: str = C45_PRUNING,
        missing: str = "fractional",
        max_depth: int | None = None,
        min_gain: float = 0.0,
        nominal: list[str] | None = None,
        max_bins: int | None = None,
        threshold_search: str = "auto",
        confidence_factor: float | str = "deprecated",
        min_objects: float | str = "deprecated",
    ) -> None:
        self.cf = cf
        self.min_cases = min_cases
        self.unpruned = unpruned
        self.subtree_raising = subtree_raising
        self.pruning = pruning
        self.missing = missing
        self.max_depth = max_depth
        self.min_gain = min_gain
        self.nominal = nominal
        self.max_bins = max_bins
        self.threshold_search = threshold_search
        self.confidence_factor = confidence_factor
        self.min_objects = min_objects

    def _option(self, name: str, old: str) -> Any:
        """A parameter's value, from its deprecated name when that was set."""
        value = getattr(self, old)
        if isinstance(value, str) and value == "deprecated":
            return getattr(self, name)
        warnings.warn(f"C45Classifier({old}=) is deprecated: use {name}= (the name train() "
                      "and the command line use)", FutureWarning, stacklevel=4)
        return value

    def _check_params(self) -> None:
        if self.pruning not in (C45_PRUNING, "pessimistic"):
            raise ValueError(
                f"pruning must be {C45_PRUNING!r} or 'pessimistic', not {self.pruning!r}")
        if not isinstance(self.unpruned, (bool, np.bool_)):
            raise ValueError(f"unpruned must be True or False, not {self.unpruned!r}")

    def _train(self, data: TrainingData) -> tuple[Model, list[Node], dict[str, Any]]:
        pruning = None if self.unpruned else self.pruning
        error_based = pruning == C45_PRUNING
        model = self._train_c45(data, pruning, error_based)
        return model, list(model.root.walk()), {}

    def _train_c45(self, data: TrainingData, pruning: str | None, error_based: bool) -> Model:
        return train(
            data.frame,
            data.target,
            algorithm=C45,
            task="classification",
            connection=fit_engine(),
            features=data.features,
            nominal=data.nominal,
            continuous=data.continuous,
            weight=data.weight,
            min_cases=self._option("min_cases", "min_objects"),
            max_depth=self.max_depth,
            min_gain=self.min_gain,
            missing=self.missing,
            max_bins=self.max_bins,
            pruning=pruning,
            cf=self._option("cf", "confidence_factor") if error_based else 0.25,
            subtree_raising=bool(self.subtree_raising) if error_based else True,
            threshold_search=self.threshold_search,
        )

