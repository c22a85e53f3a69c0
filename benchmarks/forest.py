"""Random forests: sqltree in DuckDB (the SQL level scan, or the memory plan) against
scikit-learn's ``RandomForestClassifier`` on the benchmark table (``generate.py``).

Each side runs in its own process on the same Parquet file and reports its wall time (read,
encode and fit for scikit-learn; the whole ``train`` call for sqltree), its peak RSS and the
accuracy on the held-out file; sqltree also reports its levels (seconds, nodes, statements).
The trees are alike on both sides: ``max_depth``, ``max_features="sqrt"``, bootstrap;
scikit-learn sorts exact values where sqltree cuts ``--max-bins`` quantile bins.
scikit-learn sees each nominal column as its category's ordinal code; sqltree splits it as
a nominal feature (CART's subsets by class order), unless ``--nominal-as-codes`` gives it
the same ordinal codes as continuous features: the forests then differ only in binning.

Usage::

    python benchmarks/forest.py --rows 1000000 --trees 100
    python benchmarks/forest.py --rows 1000000 --trees 10 --sides sqltree --plan memory
    python benchmarks/forest.py --rows 1000000 --trees 100 --sides sqltree --nominal-as-codes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

from run import (  # noqa: E402
    DEFAULT_DATA,
    NOMINAL,
    TARGET,
    ensure_data,
    human_rows,
    ordinal_matrix,
    peak_rss_mb,
)


def sklearn_worker(args: argparse.Namespace) -> dict[str, Any]:
    import pandas as pd
    from sklearn.ensemble import RandomForestClassifier

    start = time.perf_counter()
    frame = pd.read_parquet(args.train)
    categories = {c: sorted(frame[c].dropna().unique()) for c in NOMINAL}
    x, y = ordinal_matrix(frame, categories), frame[TARGET].to_numpy()
    del frame
    forest = RandomForestClassifier(n_estimators=args.trees, max_depth=args.max_depth,
                                    max_features="sqrt", n_jobs=args.threads, random_state=0)
    forest.fit(x, y)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    test = pd.read_parquet(args.test)
    accuracy = float((forest.predict(ordinal_matrix(test, categories)) == test[TARGET]).mean())
    return {"side": "scikit-learn", "seconds": seconds, "peak_rss_mb": rss,
            "accuracy": accuracy,
            "leaves": int(sum(t.get_n_leaves() for t in forest.estimators_))}


def sqltree_worker(args: argparse.Namespace) -> dict[str, Any]:
    import duckdb
    import pandas as pd

    import sqltree
    from sqltree.engines.duckdb import DuckDBEngine

    connection = duckdb.connect()
    engine = DuckDBEngine(connection, threads=args.threads)
    start = time.perf_counter()
    source, test_frame = args.train, pd.read_parquet(args.test)
    if args.nominal_as_codes:
        # scikit-learn's features: each category's place in the sorted categories, NULL kept
        categories = {c: [r[0] for r in connection.execute(
            f"SELECT DISTINCT {c} FROM read_parquet(?) WHERE {c} IS NOT NULL ORDER BY 1",
            [args.train]).fetchall()] for c in NOMINAL}
        codes = ", ".join(f"CAST(list_position(?, {c}) - 1 AS DOUBLE) AS {c}" for c in NOMINAL)
        connection.execute(f"CREATE TABLE train AS SELECT * REPLACE ({codes}) "
                           "FROM read_parquet(?)", [*categories.values(), args.train])
        source = "train"
        for c in NOMINAL:
            test_frame[c] = pd.Categorical(test_frame[c], categories=categories[c]).codes
            test_frame[c] = test_frame[c].where(test_frame[c] >= 0).astype("float64")
    forest = sqltree.train(source, TARGET, algorithm="random-forest",
                           n_estimators=args.trees, max_depth=args.max_depth,
                           max_bins=args.max_bins, connection=engine, plan=args.plan,
                           random_state=0)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    accuracy = float((forest.predict_frame(test_frame) == test_frame[TARGET].to_numpy()).mean())
    levels = forest.stats["levels"]
    return {"side": f"sqltree ({forest.stats['plan']})", "seconds": seconds,
            "peak_rss_mb": rss, "accuracy": accuracy, "leaves": forest.n_leaves,
            "batches": forest.stats["batches"],
            "levels": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in lv.items()}
                       for lv in levels]}


def run_side(side: str, args: argparse.Namespace, train: str, test: str) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--train", train,
           "--test", test, "--trees", str(args.trees), "--max-depth", str(args.max_depth),
           "--max-bins", str(args.max_bins), "--threads", str(args.threads),
           "--plan", args.plan] + (["--nominal-as-codes"] if args.nominal_as_codes else [])
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    base = next((r for r in results if r["side"] == "scikit-learn"), None)
    lines = [f"{human_rows(args.rows)} rows, {args.trees} trees, depth {args.max_depth}, "
             f"max_features=sqrt, {args.threads} threads",
             "", "| side | seconds | peak MB | held-out accuracy | leaves | time ratio |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        ratio = f"{r['seconds'] / base['seconds']:.2f}x" if base else ""
        lines.append(f"| {r['side']} | {r['seconds']:.1f} | {r['peak_rss_mb']:,.0f} | "
                     f"{r['accuracy']:.4f} | {r['leaves']:,} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--max-depth", type=int, default=10)
    p.add_argument("--max-bins", type=int, default=255)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--plan", default="tables", choices=["tables", "memory"])
    p.add_argument("--sides", default="sqltree,sklearn")
    p.add_argument("--nominal-as-codes", action="store_true",
                   help="sqltree sees the nominal columns as scikit-learn does: ordinal codes")
    p.add_argument("--data-dir", default=DEFAULT_DATA)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--train", help=argparse.SUPPRESS)
    p.add_argument("--test", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker = sqltree_worker if args.worker == "sqltree" else sklearn_worker
        print(json.dumps(worker(args)))
        return
    train, test = ensure_data(args.rows, args.data_dir)
    results = [run_side(side, args, train, test) for side in args.sides.split(",")]
    print(markdown(results, args))
    for r in results:
        for level in r.get("levels", []):
            print(json.dumps(level), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
