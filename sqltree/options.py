"""Every training option checked against the algorithm before the first query runs.

An option either means something to the chosen algorithm or is refused: a CART run given
C4.5's ``missing=`` or ``cf=`` (or a C4.5 run given ``criterion=``) would otherwise train
without a word and ignore it. Options the command line always passes at their default values
(``missing="fractional"``, ``cf=0.25``) are accepted wherever they do nothing.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from numbers import Integral, Real
from typing import Any

from .algorithm_registry import (
    ALGORITHMS,
    ALIASES,
    C45_PRUNING,
    CART,
    CLASSIFICATION_DEFAULT,
    REGRESSION_DEFAULT,
    facts,
)
from .errors import OptionError, UnsupportedOptionError

MISSING = ("fractional", "majority", "drop")
PRUNING = (C45_PRUNING, "pessimistic", "reduced-error")
CART_CRITERIA = ("gini", "entropy", "log_loss")
REGRESSION_CRITERIA = ("squared_error", "friedman_mse", "poisson")
TASKS = ("classification", "regression")
CART_OPTIONS = (
    "criterion", "min_samples_leaf", "min_weight_fraction_leaf", "min_impurity_decrease",
    "max_leaf_nodes", "class_weight", "ccp_alpha", "threshold_search",
)
THRESHOLD_SEARCH = ("auto", "bounded", "full")
DEFAULT_MISSING = "fractional"
DEFAULT_CF = 0.25


def normalise_algorithm(algorithm: Any) -> str:
    """``"C4.5"``, ``"c45"``, ``"J48"`` -> ``"c4.5"``; anything unknown is refused."""
    if not isinstance(algorithm, str):
        raise OptionError(f"algorithm must be one of {ALGORITHMS}, not {algorithm!r}")
    name = algorithm.strip().lower()
    name = ALIASES.get(name, name)
    if name not in ALGORITHMS:
        raise OptionError(f"algorithm must be one of {ALGORITHMS}, not {algorithm!r}")
    return name


def check_keywords(function: str, given: Iterable[str], known: Iterable[str]) -> None:
    """Refuse keyword arguments ``function`` does not take, suggesting the nearest known name
    (``max_dept`` -> ``max_depth``): a misspelt option would otherwise be ignored."""
    known = list(known)
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return
    hints = []
    for name in unknown:
        near = difflib.get_close_matches(name, known, n=1)
        hints.append(f"{name!r} (did you mean {near[0]!r}?)" if near else repr(name))
    raise UnsupportedOptionError(
        f"{function}() got unexpected keyword arguments: {', '.join(hints)}"
    )


def check_dialect(dialect: Any) -> str:
    """The name of a sqlglot dialect, or an ``OptionError`` naming the nearest one."""
    from sqlglot.dialects.dialect import Dialect

    try:
        Dialect.get_or_raise(dialect)
    except ValueError as error:
        raise OptionError(str(error)) from None
    return str(dialect)


def check_train_options(
    algorithm: str,
    *,
    target: str,
    features: Any,
    nominal: Any,
    continuous: Any,
    weight: str | None,
    min_cases: Any,
    max_depth: Any,
    min_samples_split: Any,
    min_gain: Any,
    missing: Any,
    max_bins: Any,
    pruning: Any,
    cf: Any,
    subtree_raising: Any,
    validation: Any,
    cart_options: Mapping[str, Any],
    task: str = "classification",
) -> None:
    """Raise ``OptionError`` for an option that is invalid, ``UnsupportedOptionError`` for one
    the algorithm does not use."""
    _check_columns(target, features, nominal, continuous, weight)
    if task not in TASKS:
        raise OptionError(f"task must be one of {TASKS}, not {task!r}")
    entry = facts(algorithm)
    if task == "regression" and not entry.regression:
        raise UnsupportedOptionError(
            f"regression trees are CART's (algorithm={CART!r}); {algorithm!r} grows "
            "classification trees only"
        )
    if min_cases is not None:
        _number("min_cases", min_cases, low=0.0)
    if max_depth is not None:
        _integer("max_depth", max_depth, low=1)
    _number("min_samples_split", min_samples_split, low=0.0)
    _number("min_gain", min_gain, low=0.0)
    if missing not in MISSING:
        raise OptionError(f"missing must be one of {MISSING}, not {missing!r}")
    if max_bins is not None:
        _integer("max_bins", max_bins, low=2)
    if pruning not in (*PRUNING, None, "default"):
        raise OptionError(f"pruning must be one of {PRUNING} or None, not {pruning!r}")
    _number("cf", cf, low=0.0, high=0.5, open_low=True)
    if not isinstance(subtree_raising, bool):
        raise OptionError(f"subtree_raising must be True or False, not {subtree_raising!r}")
    if (pruning == "reduced-error") != (validation is not None):
        raise OptionError("reduced-error pruning and a validation source go together")

    if entry.cart_options:
        _refuse_for_cart(min_cases, min_gain, missing, pruning, cf, subtree_raising)
        if task == "regression":
            _check_regression(cart_options)
        else:
            _check_cart(cart_options)
        return
    _check_search(cart_options)
    cart_only = sorted(name for name in cart_options if name != "threshold_search")
    if cart_only:
        raise UnsupportedOptionError(
            f"{cart_only} apply to algorithm={CART!r} only, not {algorithm!r}"
        )
    chosen = entry.default_pruning if pruning == "default" else pruning
    if chosen != C45_PRUNING and (cf != DEFAULT_CF or subtree_raising is not True):
        raise UnsupportedOptionError(
            "cf and subtree_raising apply to C4.5's error-based pruning only"
        )


def _check_columns(
    target: str, features: Any, nominal: Any, continuous: Any, weight: str | None
) -> None:
    if not isinstance(target, str) or not target:
        raise OptionError(f"target must be a column name, not {target!r}")
    if weight is not None and (not isinstance(weight, str) or not weight):
        raise OptionError(f"weight must be a column name, not {weight!r}")
    if weight == target:
        raise OptionError(f"the weight column {weight!r} is also the target")
    for what, names in (("features", features), ("nominal", nominal),
                        ("continuous", continuous)):
        if names is None:
            continue
        if isinstance(names, str):
            raise OptionError(f"{what} must be a list of column names, not the string {names!r}")
        roles = {target: "target", weight: "weight"}
        clash = [n for n in names if n in roles]
        if clash:
            raise OptionError(f"{what} lists the {roles[clash[0]]} column {clash[0]!r}")
        if len(set(names)) != len(list(names)):
            raise OptionError(f"{what} lists a column twice: {list(names)}")


def _refuse_for_cart(
    min_cases: Any, min_gain: Any, missing: Any, pruning: Any, cf: Any, subtree_raising: Any
) -> None:
    unused = [
        name for name, given in (
            ("min_cases", min_cases is not None),
            ("min_gain", min_gain != 0),
            ("missing", missing != DEFAULT_MISSING),
            ("pruning", pruning not in (None, "default")),
            ("cf", cf != DEFAULT_CF),
            ("subtree_raising", subtree_raising is not True),
        ) if given
    ]
    if unused:
        raise UnsupportedOptionError(
            f"{unused} do not apply to CART; its options follow scikit-learn "
            f"({', '.join(CART_OPTIONS)}, max_depth, min_samples_split), and it prunes by "
            "cost complexity (ccp_alpha)"
        )


def is_regression_criterion(criterion: Any) -> bool:
    """Whether ``criterion`` names a regression criterion (absolute_error and poisson too,
    so that a numeric target given them is read as a regression task and refused clearly)."""
    return criterion in (*REGRESSION_CRITERIA, "absolute_error")


def resolve_task(task: str | None, algorithm: Any, cart_options: Mapping[str, Any]
                 ) -> tuple[str, str]:
    """``train``'s defaults: regression when ``criterion`` is a regression criterion, else
    classification; CART for regression and C4.5 for classification."""
    if task is None:
        regression = (is_regression_criterion(cart_options.get("criterion"))
                      or cart_options.get("loss") in ("squared_error", "poisson"))
        task = "regression" if regression else "classification"
    if algorithm is None:
        algorithm = REGRESSION_DEFAULT if task == "regression" else CLASSIFICATION_DEFAULT
    return task, normalise_algorithm(algorithm)


def _check_regression(options: Mapping[str, Any]) -> None:
    criterion = options.get("criterion", "squared_error")
    if criterion == "absolute_error":
        raise UnsupportedOptionError(
            "criterion='absolute_error' is not supported: its leaves and split scores need the "
            "median of every candidate side, a sort of the target per node and cut, which the "
            "histogram's running sums cannot give; use 'squared_error', 'friedman_mse' or "
            "'poisson'"
        )
    if criterion not in REGRESSION_CRITERIA:
        raise OptionError(
            f"a regression tree's criterion must be one of {REGRESSION_CRITERIA}, "
            f"not {criterion!r}"
        )
    if options.get("class_weight") is not None:
        raise UnsupportedOptionError("class_weight applies to classification trees; a regression "
                               "tree weighs rows with weight=")
    _check_leaf_options(options)


def _check_cart(options: Mapping[str, Any]) -> None:
    criterion = options.get("criterion", "gini")
    if criterion not in CART_CRITERIA:
        raise OptionError(f"criterion must be one of {CART_CRITERIA}, not {criterion!r}")
    _check_leaf_options(options)
    _check_search(options)
    class_weight = options.get("class_weight")
    if class_weight is None or class_weight == "balanced":
        return
    if not isinstance(class_weight, Mapping):
        raise OptionError(
            f"class_weight must be None, 'balanced' or a dict, not {class_weight!r}"
        )
    for label, w in class_weight.items():
        _number(f"class_weight[{label!r}]", w, low=0.0)


def _check_search(options: Mapping[str, Any]) -> None:
    search = options.get("threshold_search", "auto")
    if search not in THRESHOLD_SEARCH:
        raise OptionError(f"threshold_search must be one of {THRESHOLD_SEARCH}, not {search!r}")


def _check_leaf_options(options: Mapping[str, Any]) -> None:
    leaf = options.get("min_samples_leaf", 1)
    if isinstance(leaf, float) and not isinstance(leaf, bool):
        _number("min_samples_leaf", leaf, low=0.0, high=1.0, open_low=True, open_high=True)
    else:
        _integer("min_samples_leaf", leaf, low=1)
    _number("min_weight_fraction_leaf", options.get("min_weight_fraction_leaf", 0.0),
            low=0.0, high=0.5)
    _number("min_impurity_decrease", options.get("min_impurity_decrease", 0.0), low=0.0)
    if options.get("max_leaf_nodes") is not None:
        _integer("max_leaf_nodes", options["max_leaf_nodes"], low=2)
    _number("ccp_alpha", options.get("ccp_alpha", 0.0), low=0.0)


def _number(
    name: str,
    value: Any,
    *,
    low: float,
    high: float = math.inf,
    open_low: bool = False,
    open_high: bool = False,
) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise OptionError(f"{name} must be a finite number, not {value!r}")
    if value < low or (open_low and value == low) or value > high or (
        open_high and value == high
    ):
        left = "(" if open_low else "["
        right = ")" if open_high or high == math.inf else "]"
        raise OptionError(f"{name} must be in {left}{low:g}, {high:g}{right}, not {value!r}")


def _integer(name: str, value: Any, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise OptionError(f"{name} must be a whole number, not {value!r}")
    if value < low:
        raise OptionError(f"{name} must be at least {low}, not {value!r}")
