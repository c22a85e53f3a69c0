"""A trained model's summary: what it was trained on, how, and what came of it.

``summary(model)`` is what ``Model.summary()`` and ``sqltree show --summary`` print: the source's
shape, the class balance, the options that mean something to the algorithm, the tree's size,
the training's time and queries, and the sqltree version that trained it.
"""

from __future__ import annotations

import math
from typing import Any

from .algorithm_registry import C45, C45_PRUNING, CART, ID3
from .export import weka_number
from .tree import CONTINUOUS, NOMINAL, format_value
from .version import __version__

__all__ = ["summary"]

_TREE_OPTIONS = ("max_depth", "min_samples_split", "max_bins", "weight")
OPTIONS_SHOWN: dict[str, tuple[str, ...]] = {
    C45: ("min_cases", *_TREE_OPTIONS, "min_gain", "missing", "pruning", "cf",
          "subtree_raising"),
    ID3: ("min_cases", *_TREE_OPTIONS, "min_gain", "missing", "pruning"),
    CART: (*_TREE_OPTIONS, "criterion", "min_samples_leaf", "min_weight_fraction_leaf",
             "min_impurity_decrease", "max_leaf_nodes", "class_weight", "ccp_alpha"),
}
"""The options each algorithm uses, in the order the summary lists them (unset ones are left
out, so are ``cf`` and ``subtree_raising`` without C4.5's pruning)."""


def _number(x: Any) -> str:
    return weka_number(float(x), 2) if isinstance(x, int | float) else str(x)


def _options(model: Any) -> str:
    options = model.options
    algorithm = options.get("algorithm", "?")
    shown = []
    for name in OPTIONS_SHOWN.get(algorithm, ()):
        value = options.get(name)
        if name in ("cf", "subtree_raising") and options.get("pruning") != C45_PRUNING:
            continue
        if value is not None or name == "pruning":
            shown.append(f"{name}={value}")
    return f"{algorithm}" + (f": {', '.join(shown)}" if shown else "")


def _source(model: Any) -> str:
    stats = model.stats
    kinds = [f.kind for f in model.features]
    parts = [f"{kinds.count(k)} {k}" for k in (CONTINUOUS, NOMINAL) if kinds.count(k)]
    rows = stats.get("rows")
    rows_text = f"{rows:,}" if isinstance(rows, int) else "?"
    text = f"{rows_text} rows, {len(kinds)} features ({', '.join(parts)})"
    if stats.get("source"):
        text = f"{stats['source']}: {text}"
    if stats.get("rows_null_target"):
        text += f"; {stats['rows_null_target']} rows with a NULL target left out"
    if stats.get("training_weight") is not None and model.options.get("weight"):
        text += f"; weight column {model.options['weight']!r}, total "
        text += _number(stats["training_weight"])
    return text


def _target_values(model: Any) -> str:
    """A regression tree's training target: its weighted mean and standard deviation."""
    root = model.root
    text = f"mean {_number(root.value)}" if root.value is not None else "mean not recorded"
    if root.impurity is not None:
        text += f", sd {_number(math.sqrt(max(root.impurity, 0.0)))}"
    return text


def _balance(model: Any) -> str:
    counts = model.root.counts
    total = sum(counts) or 1.0
    return ", ".join(f"{format_value(c)} {_number(w)} ({100 * w / total:.1f}%)"
                     for c, w in zip(model.classes, counts))


def _tree(model: Any) -> str:
    used: list[str] = []
    for node in model.root.walk():
        if node.split is not None and node.split.feature not in used:
            used.append(node.split.feature)
    text = f"{model.n_leaves} leaves, {model.n_nodes} nodes, depth {model.depth}"
    return text + (f"; tests {', '.join(used)}" if used else "")


def _training(model: Any) -> str:
    stats = model.stats
    if "seconds" not in stats:
        return "not recorded"
    text = f"{stats['seconds']:.2f} s on {stats.get('engine', '?')}"
    facts = [f"{stats[k]} {label}" for k, label in (("queries", "queries"),
                                                     ("scans", "full scans")) if k in stats]
    if stats.get("levels") is not None:
        facts.append(f"{len(stats['levels'])} levels")
    pruning = stats.get("pruning")
    if isinstance(pruning, dict) and pruning.get("queries"):
        facts.append(f"pruning {pruning['queries']} queries")
    return text + (f": {', '.join(facts)}" if facts else "")


def _version(model: Any) -> str:
    trained = model.stats.get("sqltree_version")
    if trained is None:
        return f"{__version__} (the version that trained it was not recorded)"
    if trained == __version__:
        return f"{trained}"
    return f"trained with {trained}, read by {__version__}"


def summary(model: Any) -> str:
    """A few lines on a trained model: target and classes, source shape, class balance (a
    regression tree: the target's mean and standard deviation), algorithm and options, tree
    size, training time and queries, sqltree version.

    >>> print(summary(model))                                      # doctest: +SKIP
    target         play (2 classes)
    source         file 'golf.csv': 14 rows, 4 features (4 nominal)
    class balance  no 5 (35.7%), yes 9 (64.3%)
    ...
    """
    regression = not model.classes
    rows = [
        ("target", f"{model.target} (regression)" if regression
         else f"{model.target} ({len(model.classes)} classes)"),
        ("source", _source(model)),
        ("target values", _target_values(model)) if regression
        else ("class balance", _balance(model)),
        ("algorithm", _options(model)),
        ("tree", _tree(model)),
        ("training", _training(model)),
        ("sqltree", _version(model)),
    ]
    width = max(len(k) for k, _ in rows) + 2
    return "\n".join(f"{k:<{width}}{v}" for k, v in rows) + "\n"
