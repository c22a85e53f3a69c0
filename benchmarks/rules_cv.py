"""C4.5rules against the pruned C4.5 tree: size and 10-fold cross-validated accuracy.

For each data set the folds are dealt in SQL as ``sqltree.cross_validate`` deals them
(stratified, seed 1); each fold trains the default C4.5 tree (J48's: cf 0.25, subtree
raising) on the other folds, builds its rule set (``Model.rule_set``, cf 0.25, seed 1) on
the same rows, and evaluates both on its own rows in the engine. Sizes are those of the tree
and the rule set made from all rows. Prints a markdown table (the one in ``docs/rules.md``).

    python benchmarks/rules_cv.py                      # the default data sets
    python benchmarks/rules_cv.py path/to/data.arff:class
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqltree  # noqa: E402
from sqltree.crossval import dealt, fold_rule  # noqa: E402
from sqltree.readers import read_arff  # noqa: E402
from sqltree.ruleset.conditions import leaf_paths  # noqa: E402

SHARED = Path(os.environ.get("SQLTREE_SHARED_DATA", "/work/shared/data"))
WEKA = Path("/usr/share/doc/weka/examples")
DEFAULTS = [
    (SHARED / "golf.csv", "play"),
    (SHARED / "golf_numeric_humidity.csv", "play"),
    (SHARED / "buys_computer.csv", "buys_computer"),
    (WEKA / "breast-cancer.arff", "Class"),
    (WEKA / "diabetes.arff", "class"),
    (WEKA / "labor.arff", "class"),
    (WEKA / "vote.arff", "Class"),
]


def load(path: Path):  # type: ignore[no-untyped-def]
    if path.suffix == ".arff":
        return read_arff(path)
    import pandas as pd

    return pd.read_csv(path)


def measure(path: Path, target: str, folds: int = 10) -> dict[str, object]:
    frame = load(path)
    model = sqltree.train(frame, target=target)
    rule_set = model.rule_set(frame)
    tree_conditions = sum(len(c) for _, c in leaf_paths(model.root))
    right = {"tree": 0.0, "rules": 0.0}
    total = 0.0
    started = time.perf_counter()
    with dealt(frame, target, fold_rule(folds), connection=None, stratified=True, seed=1,
               key=None, least_rows=folds) as parts:
        for i in range(folds):
            train_rows, test_rows = parts.rows(i, inside=False), parts.rows(i, inside=True)
            fold_model = sqltree.train(train_rows, target=target, connection=parts.connection)
            fold_rules = fold_model.rule_set(train_rows, connection=parts.connection)
            tree_eval = fold_model.evaluate(test_rows, connection=parts.connection)
            rules_eval = fold_rules.evaluate(test_rows, connection=parts.connection)
            right["tree"] += tree_eval.correct
            right["rules"] += rules_eval.correct
            total += tree_eval.total
    return {
        "data": path.stem, "rows": len(frame), "leaves": model.n_leaves,
        "tree_conditions": tree_conditions, "rules": rule_set.n_rules,
        "conditions": rule_set.n_conditions, "tree_acc": 100 * right["tree"] / total,
        "rules_acc": 100 * right["rules"] / total, "seconds": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sets", nargs="*", help="PATH:TARGET (default: the J48 examples)")
    parser.add_argument("--folds", type=int, default=10)
    args = parser.parse_args()
    sets = [(Path(s.rsplit(":", 1)[0]), s.rsplit(":", 1)[1]) for s in args.sets] or [
        (p, t) for p, t in DEFAULTS if p.exists()]
    print("| data set | rows | tree leaves | tree conditions | rules | rule conditions "
          f"| tree accuracy ({args.folds}-fold) | rules accuracy ({args.folds}-fold) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for path, target in sets:
        m = measure(path, target, args.folds)
        print(f"| {m['data']} | {m['rows']} | {m['leaves']} | {m['tree_conditions']} "
              f"| {m['rules']} | {m['conditions']} | {m['tree_acc']:.2f}% "
              f"| {m['rules_acc']:.2f}% |", flush=True)


if __name__ == "__main__":
    main()
