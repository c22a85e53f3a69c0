"""CART: binary splits scored by Gini or entropy, grown and pruned as scikit-learn does.

The strategy plugs into the level-wise grower (``sqltree.grower``). Per level, one scoring query
over the histogram evaluates every candidate split of every frontier node and feature in SQL
and returns the best candidate per (node, feature); Python only picks among those rows.

Candidates (all scored in SQL):

- continuous ``a <= t``: one candidate between each pair of adjacent distinct values ``a < b``
  of the node with ``b > a + 1e-7`` (scikit-learn's ``FEATURE_THRESHOLD``); ``t = a/2 + b/2``,
  or ``a`` when that rounds to ``b``;
- nominal, two classes: values ordered by the proportion of the second class (ties by value)
  and every cut of that order scanned; for two classes this finds the best two-way partition
  exactly (Breiman et al. 1984, theorem 4.5);
- nominal, more classes: every two-way partition when the node holds at most
  ``EXACT_SUBSETS_MAX`` values (the highest-ranked value stays on the right, so each partition
  is scored once); above that a heuristic: for each class ``c``, values ordered by the
  proportion of ``c`` and every cut scanned (k orderings, each exact for the one-vs-rest
  problem of class ``c``);
- unknown values (NULL) as scikit-learn >= 1.3 does: every cut is scored with the unknown rows
  on the right and on the left, and one more candidate sends all known rows left and the
  unknown rows right. At prediction, unknown values follow the side learnt; a node that saw no
  unknown values sends them to the child with more training rows.

Ties: scikit-learn visits features in a random order and keeps the first strictly better
split. sqltree is deterministic: candidates whose impurity decrease is within ``TIE_TOLERANCE``
of the best tie, and the tie goes to the first feature in column order, then unknown values to
the right before the left, then the lowest threshold.

Stopping rules, ``min_impurity_decrease``, best-first growth for ``max_leaf_nodes`` and
cost-complexity pruning (``ccp_alpha``) follow scikit-learn's ``_tree.pyx``.

Growth stays level-wise for ``max_leaf_nodes``: scikit-learn splits nodes in the order of the
lowest improvement on their path, so a node with ``max_leaf_nodes - 1`` better-ranked nodes
already known can never be split; every other node of the level is split speculatively, and
after growth the tree is cut back to the first ``max_leaf_nodes - 1`` splits
(``sqltree.pruning.cost_complexity.cut_back``), as scikit-learn prunes after building.

Known differences from scikit-learn: it converts features to float32 before growing and
predicting (sqltree keeps float64, so the trees agree on data float32 represents exactly);
ties are broken as described above, not at random.

Modules: ``strategy`` (the plug-in of the level loop: stopping rules, choice, best-first
selection, the plan of a split), ``scores`` (the scoring query, stage by stage), ``subsets``
(nominal values ranked, ordered and enumerated as bit masks). The histogram, level 0 and the
partition are the shared stages of ``sqltree.queries``; pruning is ``sqltree.pruning``'s.
"""

from __future__ import annotations

from ...pruning.cost_complexity import (
    CRITERIA,
    best_first_numbering,
    cost_complexity_pruning_path,
    criterion_of,
    impurity,
    node_numbering,
    prune_ccp,
)
from .scores import SCORE_COLUMNS, CARTScoreRow, build_cart_scores, build_impurity
from .strategy import (
    EPSILON,
    INFINITE_THRESHOLD,
    CARTStrategy,
    midpoint,
    resolve_options,
    split_scores,
)
from .subsets import EXACT_SUBSETS_MAX, build_nominal_ranks

__all__ = [  # cost-complexity pruning is re-exported: CART's pruning API is found here too
    "CRITERIA",
    "EPSILON",
    "EXACT_SUBSETS_MAX",
    "INFINITE_THRESHOLD",
    "SCORE_COLUMNS",
    "CARTScoreRow",
    "CARTStrategy",
    "best_first_numbering",
    "build_cart_scores",
    "build_impurity",
    "build_nominal_ranks",
    "cost_complexity_pruning_path",
    "criterion_of",
    "impurity",
    "midpoint",
    "node_numbering",
    "prune_ccp",
    "resolve_options",
    "split_scores",
]
