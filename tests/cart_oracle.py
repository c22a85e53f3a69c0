"""Tie-aware comparison of sqltree's CART trees with scikit-learn's."""

from __future__ import annotations

import numpy as np


def compare_trees(sk, st, atol: float = 1e-9) -> str:
    """"identical", "identical up to ties" or the first difference.

    Nodes are matched from the root. Where sqltree found several candidates within its tie
    tolerance and scikit-learn chose another one, the two subtrees may differ legitimately
    (scikit-learn breaks ties at random): they are not compared further.
    """
    a, b = sk.tree_, st.tree_
    tied_seen = False

    def walk(i: int, j: int) -> str | None:
        nonlocal tied_seen
        if a.n_node_samples[i] != b.n_node_samples[j]:
            return f"node {i}: samples {a.n_node_samples[i]} vs {b.n_node_samples[j]}"
        if not np.isclose(a.weighted_n_node_samples[i], b.weighted_n_node_samples[j], rtol=1e-9):
            return f"node {i}: weight"
        if not np.allclose(a.value[i], b.value[j], atol=atol):
            return f"node {i}: value"
        leaf_a = a.children_left[i] == -1
        leaf_b = b.children_left[j] == -1
        same_split = (
            not leaf_a
            and not leaf_b
            and a.feature[i] == b.feature[j]
            and (
                (np.isinf(a.threshold[i]) and np.isinf(b.threshold[j]))
                or abs(a.threshold[i] - b.threshold[j]) <= atol
            )
        )
        if leaf_a and leaf_b:
            return None
        if not same_split:
            if b.tied[j]:
                # a genuine tie: scikit-learn's split decreases impurity as much as ours
                if not leaf_a and not leaf_b and not np.isclose(
                    _decrease(a, i), _decrease(b, j), rtol=0, atol=1e-9
                ):
                    return f"node {i}: sklearn's split is better than sqltree's"
                tied_seen = True
                return None
            what = "leaf" if leaf_a else f"x{a.feature[i]} <= {a.threshold[i]!r}"
            got = "leaf" if leaf_b else f"x{b.feature[j]} <= {b.threshold[j]!r}"
            return f"node {i}: sklearn {what}, sqltree {got}"
        if not leaf_a and a.missing_go_to_left[i] != b.missing_go_to_left[j]:
            return f"node {i}: missing_go_to_left"
        return walk(a.children_left[i], b.children_left[j]) or walk(
            a.children_right[i], b.children_right[j]
        )

    diff = walk(0, 0)
    if diff is not None:
        return diff
    if tied_seen:
        return "identical up to ties"
    if a.node_count != b.node_count:
        return "node count"
    return "identical"


def _decrease(t, i: int) -> float:
    """Impurity decrease per unit weight of node ``i``'s split."""
    left, right = t.children_left[i], t.children_right[i]
    w = t.weighted_n_node_samples
    return float(
        t.impurity[i]
        - w[right] / w[i] * t.impurity[right]
        - w[left] / w[i] * t.impurity[left]
    )


def same_arrays(sk, st, atol: float = 1e-9) -> bool:
    a, b = sk.tree_, st.tree_
    if a.node_count != b.node_count:
        return False
    for name in ("children_left", "children_right", "feature", "n_node_samples"):
        if not np.array_equal(getattr(a, name), getattr(b, name)):
            return False
    both_inf = np.isinf(a.threshold) & np.isinf(b.threshold)
    with np.errstate(invalid="ignore"):
        close = np.abs(np.where(both_inf, 0.0, a.threshold - b.threshold)) <= atol
    return bool(
        close.all()
        and np.allclose(a.impurity, b.impurity, atol=atol)
        and np.allclose(a.value, b.value, atol=atol)
        and np.allclose(a.weighted_n_node_samples, b.weighted_n_node_samples, rtol=1e-9)
    )


def sklearn_match(make_sklearn, X, y, st, sample_weight=None, seeds: int = 30):
    """Compare with scikit-learn; if ties make the trees differ, look for a random_state
    whose tie-breaking grows exactly sqltree's tree. Returns (verdict, seed or None)."""
    sk = make_sklearn(0).fit(X, y, sample_weight=sample_weight)
    verdict = compare_trees(sk, st)
    if verdict == "identical" and same_arrays(sk, st):
        return "identical", 0
    if verdict not in ("identical", "identical up to ties"):
        return verdict, None
    for seed in range(1, seeds):
        sk = make_sklearn(seed).fit(X, y, sample_weight=sample_weight)
        if same_arrays(sk, st):
            return "identical", seed
    # the same tree numbered differently (best-first turns that tie) counts as a tie
    return "identical up to ties", None
