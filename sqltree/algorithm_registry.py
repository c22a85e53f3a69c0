"""The algorithms ``train`` knows: each name spelt once, with the facts the rest of the package
asks of it.

Code that behaves differently for an algorithm asks its record (``facts(name).gain_ratio``)
rather than comparing its name, so that a fact lives in one row of ``REGISTRY`` and a new
algorithm is one more row. Which class grows it is ``sqltree.algorithms``'s registry, keyed by
these names.
"""

from __future__ import annotations

from dataclasses import dataclass

C45 = "c4.5"
ID3 = "id3"
CART = "cart"
RANDOM_FOREST = "random-forest"
GRADIENT_BOOSTING = "gradient-boosting"

CART_REGRESSION = "cart-regression"
"""The strategy of CART's regression trees (``GrowOptions.strategy_name``): not a name
``train`` takes, since a regression tree is CART's with ``task="regression"``."""

C45_PRUNING = C45
"""J48's error-based pruning goes by its algorithm's name (``train(pruning=...)``,
``--pruning``, the model file's ``pruning``)."""


@dataclass(frozen=True)
class Algorithm:
    """What the package needs to know about an algorithm besides the class that grows it.

    Attributes
    ----------
    name : str
        ``train(algorithm=...)``'s value, and the model file's ``options.algorithm``.
    aliases : tuple of str
        Other spellings ``train`` takes, lower case (``"j48"`` for C4.5).
    ensemble : bool
        Many trees (``sqltree.ensembles``), with options of their own.
    regression : bool
        Grows regression trees too (``task="regression"``).
    cart_options : bool
        Takes CART's scikit-learn options (``options.CART_OPTIONS``; ``criterion`` chooses the
        impurity its nodes report) and refuses C4.5's.
    gain_ratio : bool
        Scores and chooses as J48 does: its least split weight, the MDL correction of
        continuous cuts, and the best gain ratio among candidates of at least average gain
        (else the highest gain).
    nominal_once : bool
        Tests a nominal feature at most once on a path (ID3).
    default_pruning : str, optional
        The pruning ``train`` runs when none is named.
    collapse_unpruned : bool
        Left unpruned, still collapses subtrees that fix no training error (J48 ``-U``).
    min_cases : float
        ``min_cases`` when none is given (J48 ``-M``).
    """

    name: str
    aliases: tuple[str, ...] = ()
    ensemble: bool = False
    regression: bool = False
    cart_options: bool = False
    gain_ratio: bool = False
    nominal_once: bool = False
    default_pruning: str | None = None
    collapse_unpruned: bool = False
    min_cases: float = 2.0


REGISTRY: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm(C45, aliases=("c45", "j48"), gain_ratio=True, default_pruning=C45_PRUNING,
              collapse_unpruned=True),
    Algorithm(ID3, nominal_once=True, min_cases=1.0),
    Algorithm(CART, regression=True, cart_options=True),
    Algorithm(RANDOM_FOREST, aliases=("rf", "random_forest", "randomforest", "forest"),
              ensemble=True, regression=True),
    Algorithm(GRADIENT_BOOSTING, aliases=("gbt", "gbm", "boosting", "gradient_boosting"),
              ensemble=True, regression=True),
)}
"""Every algorithm by name, in the order error messages list them."""

ALGORITHMS = tuple(REGISTRY)
TREES = tuple(name for name, a in REGISTRY.items() if not a.ensemble)
ENSEMBLES = tuple(name for name, a in REGISTRY.items() if a.ensemble)
ALIASES = {alias: a.name for a in REGISTRY.values() for alias in a.aliases}
CLASSIFICATION_DEFAULT = C45
REGRESSION_DEFAULT = CART
"""``train``'s algorithm, when none is named, for each task."""


def facts(name: str) -> Algorithm:
    """The record of the algorithm ``name`` (a registry name, not an alias)."""
    return REGISTRY[name]
