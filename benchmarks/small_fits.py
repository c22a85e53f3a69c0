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

Targets (issue "a true scikit-learn drop-in"): an iris fit within 20 ms, the grid search within
5 s. ``--profile`` prints where an iris fit's time goes (cProfile, top functions).

Usage::

    python benchmarks/small_fits.py
    python benchmarks/small_fits.py --repeat 50 --profile
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
    args = p.parse_args(argv)
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
