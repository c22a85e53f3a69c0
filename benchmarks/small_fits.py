"""The fixed cost of a fit: sqltree's estimators against scikit-learn on small data.

Lines (median wall time of ``--repeat`` fits after one warm-up fit, and CPU time, which the
other processes of a shared machine disturb less):

- iris (150 rows, 4 continuous features): ``sqltree.DecisionTreeClassifier``,
  ``sqltree.C45Classifier`` and scikit-learn's ``DecisionTreeClassifier``;
- iris through ``sqltree.train`` on a DataFrame, on the memory and the tables plan (CART and
  C4.5);
- 10,000 rows (``--rows``) of the benchmark table (``generate.py``: 10 continuous and 6
  nominal features, NULLs), ``max_depth=10``: the estimators on the DataFrame (nominal
  columns as text), ``sqltree.train`` on the same DataFrame (the plan ``auto`` picks, and
  each plan asked for) and on its Parquet file, scikit-learn on the matrix (nominal columns
  ordinal-encoded);
- ``GridSearchCV`` of 20 settings x 5 folds on iris (101 fits), of CART (against
  scikit-learn's) and of ``C45Classifier``.

``--bound`` instead times C4.5's no-option call (no depth limit, J48's pruning) on the
benchmark table's DataFrame at each of ``--bound-rows``, on the memory and the tables plan
(alternately, ``--repeat`` times each), for the bound of ``plan="auto"``.

``--cancer`` instead prints sqltree / scikit-learn ratios on scikit-learn's
``load_breast_cancer`` (569 rows, 30 continuous features; issue 45 item 9): a
``GridSearchCV`` of 15 settings (``max_depth`` 2, 3, 4, 5, None x ``min_samples_leaf`` 1, 5,
10; for ``C45Classifier``, ``min_cases`` 1, 5, 10 against scikit-learn's entropy tree's
``min_samples_leaf``) x 5 folds, one fit of a 100-tree random forest, and one unlimited tree.
Each line's two sides run in this process, one after the other, ``--repeat`` times (3 by
default for ``--cancer``) after a warm-up run of each; medians of wall and CPU time.

Targets (issue "a true scikit-learn drop-in"): an iris fit within 20 ms, the grid search within
5 s. ``--profile`` prints where an iris fit's time goes (cProfile, top functions).

Usage::

    python benchmarks/small_fits.py
    python benchmarks/small_fits.py --repeat 50 --profile
    python benchmarks/small_fits.py --cancer
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the sqltree checkout this script belongs to

import generate  # noqa: E402

GRID = {
    "max_depth": [1, 2, 3, 4, 5],
    "criterion": ["gini", "entropy"],
    "min_samples_leaf": [1, 5],
}
"""20 settings."""

C45_GRID = {
    "cf": [0.05, 0.1, 0.25, 0.5],
    "min_cases": [1, 2, 5, 10, 20],
}
"""20 settings of ``C45Classifier``."""


def timed(fit: Callable[[], Any], repeat: int, warm: bool = True) -> tuple[float, float]:
    """Median wall and CPU seconds of ``repeat`` calls, after one warm-up call (``warm``)."""
    if warm:
        fit()
    wall, cpu = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fit()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def table(rows: int, data_dir: str) -> tuple[str, Any]:
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, f"train_{rows // 1000}k.parquet" if rows % 1_000_000 else
                        f"train_{rows // 1_000_000}m.parquet")
    if not os.path.exists(path):
        generate.generate(rows, path)
    import pandas as pd

    return path, pd.read_parquet(path)


def encoded(frame: Any) -> Any:
    """The frame as scikit-learn takes it: nominal columns as their value's code."""
    import numpy as np
    import pandas as pd

    columns = []
    for name in frame.columns:
        if frame[name].dtype.kind in "fiu":
            columns.append(frame[name].to_numpy(dtype=np.float64, na_value=np.nan))
        else:
            codes = pd.Categorical(frame[name]).codes
            columns.append(np.where(codes < 0, np.nan, codes).astype(np.float64))
    return np.column_stack(columns)


def iris_lines(repeat: int) -> list[tuple[str, float, float]]:
    from sklearn import datasets
    from sklearn.tree import DecisionTreeClassifier as SKTree

    import sqltree

    X, y = datasets.load_iris(return_X_y=True)
    frame = datasets.load_iris(as_frame=True).frame
    lines = [
        (name, *timed(lambda make=make: make().fit(X, y), repeat))
        for name, make in (
            ("iris: sqltree DecisionTreeClassifier", sqltree.DecisionTreeClassifier),
            ("iris: sqltree C45Classifier", sqltree.C45Classifier),
            ("iris: scikit-learn DecisionTreeClassifier", SKTree),
        )
    ]
    for algorithm in ("cart", "c4.5"):
        for plan in ("memory", "tables"):
            lines.append((
                f"iris: sqltree.train ({algorithm}) on the DataFrame, plan={plan!r}",
                *timed(lambda plan=plan, algorithm=algorithm: sqltree.train(
                    frame, target="target", algorithm=algorithm, plan=plan), repeat),
            ))
    return lines


def table_lines(rows: int, repeat: int, data_dir: str) -> list[tuple[str, float, float]]:
    from sklearn.tree import DecisionTreeClassifier as SKTree

    import sqltree

    path, frame = table(rows, data_dir)
    features, target = frame.drop(columns="y"), frame["y"]
    matrix = encoded(features)
    size = f"{rows:,} rows"
    cases: list[tuple[str, Callable[[], Any]]] = [
        (f"{size}: sqltree DecisionTreeClassifier",
         lambda: sqltree.DecisionTreeClassifier(max_depth=10).fit(features, target)),
        (f"{size}: sqltree C45Classifier",
         lambda: sqltree.C45Classifier(max_depth=10).fit(features, target)),
        (f"{size}: sqltree.train (CART) on the DataFrame (plan 'auto')",
         lambda: sqltree.train(frame, target="y", algorithm="cart", max_depth=10)),
        (f"{size}: sqltree.train (CART) on the Parquet file",
         lambda: sqltree.train(path, target="y", algorithm="cart", max_depth=10)),
        (f"{size}: scikit-learn DecisionTreeClassifier",
         lambda: SKTree(max_depth=10).fit(matrix, target)),
    ]
    if rows <= 100_000:  # each plan asked for (auto picks the tables plan above that)
        cases[3:3] = [
            (f"{size}: sqltree.train (CART) on the DataFrame, plan={plan!r}",
             lambda plan=plan: sqltree.train(frame, target="y", algorithm="cart",
                                             max_depth=10, plan=plan))
            for plan in ("tables", "memory")
        ]
    # Large tables are timed once, without a warm-up fit: a fit's fixed cost is lost in them.
    warm = rows <= 100_000
    return [(name, *timed(fit, repeat, warm)) for name, fit in cases]


def search_lines() -> list[tuple[str, float, float]]:
    from sklearn import datasets
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier as SKTree

    import sqltree

    X, y = datasets.load_iris(return_X_y=True)
    out = []
    for name, est, grid in (
        ("GridSearchCV 20 x 5 on iris: sqltree", sqltree.DecisionTreeClassifier(), GRID),
        ("GridSearchCV 20 x 5 on iris: scikit-learn", SKTree(), GRID),
        ("GridSearchCV 20 x 5 on iris: sqltree C45Classifier", sqltree.C45Classifier(),
         C45_GRID),
    ):
        search = GridSearchCV(est, grid, cv=5)
        out.append((name, *timed(lambda search=search: search.fit(X, y), 1)))
    return out


CANCER_GRID = {"max_depth": [2, 3, 4, 5, None], "min_samples_leaf": [1, 5, 10]}
"""15 settings of CART (sqltree's and scikit-learn's ``DecisionTreeClassifier``)."""

CANCER_C45_GRID = {"max_depth": [2, 3, 4, 5, None], "min_cases": [1, 5, 10]}
"""15 settings of ``C45Classifier`` (J48's ``-M`` in ``min_samples_leaf``'s place)."""


def cancer_lines(repeat: int) -> None:
    """sqltree against scikit-learn on breast cancer: each line's sides alternately,
    ``repeat`` times after a warm-up, and the ratio of the medians."""
    from sklearn import datasets
    from sklearn.ensemble import RandomForestClassifier as SKForest
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier as SKTree

    import sqltree

    X, y = datasets.load_breast_cancer(return_X_y=True)

    def search(est: Any, grid: dict[str, list[Any]]) -> Callable[[], Any]:
        return lambda: GridSearchCV(est, grid, cv=5).fit(X, y)

    sk_grid = CANCER_GRID
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        ("GridSearchCV 15 x 5: DecisionTreeClassifier",
         search(sqltree.DecisionTreeClassifier(), CANCER_GRID), search(SKTree(), sk_grid)),
        ("GridSearchCV 15 x 5: C45Classifier (scikit-learn: entropy)",
         search(sqltree.C45Classifier(), CANCER_C45_GRID),
         search(SKTree(criterion="entropy"), sk_grid)),
        ("RandomForestClassifier, 100 trees",
         lambda: sqltree.RandomForestClassifier(n_estimators=100, random_state=0).fit(X, y),
         lambda: SKForest(n_estimators=100, random_state=0).fit(X, y)),
        ("DecisionTreeClassifier, one fit (no depth limit)",
         lambda: sqltree.DecisionTreeClassifier().fit(X, y), lambda: SKTree().fit(X, y)),
    ]
    print("| breast cancer (569 rows x 30) | sqltree s | scikit-learn s | ratio "
          "| sqltree CPU s | scikit-learn CPU s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, ours, theirs in cases:
        ours(), theirs()  # warm-up
        wall: dict[str, list[float]] = {"ours": [], "theirs": []}
        cpu: dict[str, list[float]] = {"ours": [], "theirs": []}
        for _ in range(repeat):
            for side, fit in (("ours", ours), ("theirs", theirs)):
                w, c = time.perf_counter(), time.process_time()
                fit()
                wall[side].append(time.perf_counter() - w)
                cpu[side].append(time.process_time() - c)
        a, b = statistics.median(wall["ours"]), statistics.median(wall["theirs"])
        print(f"| {name} | {a:.3f} | {b:.3f} | {a / b:.1f}x | "
              f"{statistics.median(cpu['ours']):.3f} | {statistics.median(cpu['theirs']):.3f} |",
              flush=True)


def bound_lines(rows_list: list[int], repeat: int, data_dir: str) -> None:
    """C4.5's no-option call on the memory and the tables plan, and their ratio, per size."""
    import sqltree

    print("| rows | memory s | tables s | memory / tables |")
    print("| --- | --- | --- | --- |")
    for rows in rows_list:
        _, frame = table(rows, data_dir)
        seconds: dict[str, list[float]] = {"memory": [], "tables": []}
        for _ in range(repeat):
            for plan in seconds:
                started = time.perf_counter()
                model = sqltree.train(frame, target="y", algorithm="c4.5", plan=plan)
                seconds[plan].append(time.perf_counter() - started)
                assert model.stats["plan"] == plan
        memory, tables = (statistics.median(seconds[p]) for p in ("memory", "tables"))
        shown = {p: ", ".join(f"{s:.2f}" for s in seconds[p]) for p in seconds}
        print(f"| {rows:,} | {shown['memory']} | {shown['tables']} | {memory / tables:.2f} |",
              flush=True)


def profile(repeat: int) -> None:
    import cProfile
    import pstats

    from sklearn import datasets

    import sqltree

    X, y = datasets.load_iris(return_X_y=True)
    sqltree.DecisionTreeClassifier().fit(X, y)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeat):
        sqltree.DecisionTreeClassifier().fit(X, y)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20, help="fits per line (the table: a quarter)")
    p.add_argument("--rows", type=int, default=10_000, help="rows of the generated table")
    p.add_argument("--only-table", action="store_true", help="only the table's lines")
    p.add_argument("--data-dir", default=os.environ.get(
        "SQLTREE_BENCH_DATA", os.path.join(tempfile.gettempdir(), "sqltree-bench")))
    p.add_argument("--profile", action="store_true", help="profile iris fits instead")
    p.add_argument("--bound", action="store_true",
                   help="C4.5's memory / tables time per size instead")
    p.add_argument("--bound-rows", default="1000,10000,30000,100000")
    p.add_argument("--cancer", action="store_true",
                   help="sqltree / scikit-learn ratios on breast cancer instead")
    args = p.parse_args(argv)
    if args.cancer:
        cancer_lines(args.repeat if "--repeat" in (argv or sys.argv) else 3)
        return
    if args.profile:
        profile(args.repeat)
        return
    if args.bound:
        rows = [int(r) for r in args.bound_rows.split(",")]
        bound_lines(rows, args.repeat, args.data_dir)
        return
    print("| fit | wall ms (median) | CPU ms (median) |")
    print("| --- | --- | --- |")
    found = [] if args.only_table else iris_lines(args.repeat)
    found += table_lines(args.rows, max(1, args.repeat // 4), args.data_dir)
    found += [] if args.only_table else search_lines()
    for name, wall, cpu in found:
        print(f"| {name} | {wall * 1000:.1f} | {cpu * 1000:.1f} |", flush=True)


if __name__ == "__main__":
    main()
