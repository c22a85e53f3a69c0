"""Benchmark the level scan on DuckDB against LightGBM's one round and the tables plan.

sqltree trains binned CART (depth 10) on a table in a user's DuckDB connection, where its rows
stay in the engine: on the level scan (``plan="scan"``, what ``plan="auto"`` takes there) and
on the tables plan. The peer is LightGBM's first round on the same rows, read out of the same
table: one tree per class (multiclass), the same depth, leaves up to ``2**depth``, the same
bins, ``min_data_in_leaf=1``, 2 threads; its seconds are given with and without the read.

Usage::

    python benchmarks/level_scan.py --rows 1000000 --bins 64 256
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the sqltree checkout this script belongs to

from run import DEFAULT_DATA, NOMINAL, TARGET, ensure_data, human_rows, peak_rss_mb  # noqa: E402


def connection(path: str, threads: int) -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {int(threads)}")
    con.execute("CREATE TABLE bench AS SELECT * FROM read_parquet(?)", [path])
    return con


def sqltree_side(con: Any, bins: int, depth: int, plan: str, test: str,
                 routing: str | None = None) -> dict[str, Any]:
    """``routing``: the level scan's ``Engine.SCAN_ROUTING`` for this run (None: DuckDB's)."""
    import pandas as pd

    import sqltree
    from sqltree.engines.duckdb import DuckDBEngine

    own = DuckDBEngine.SCAN_ROUTING
    DuckDBEngine.SCAN_ROUTING = routing or own
    try:
        start = time.perf_counter()
        model = sqltree.train("bench", TARGET, connection=con, algorithm="cart",
                              max_depth=depth, max_bins=bins, plan=plan)
        seconds = time.perf_counter() - start
    finally:
        DuckDBEngine.SCAN_ROUTING = own
    held = pd.read_parquet(test)
    accuracy = float((model.predict(held)["prediction"] == held[TARGET]).mean())
    levels = model.stats["levels"]
    routed = f", routing by {routing}" if routing else ""
    return {"side": f"sqltree CART binned {bins}, {model.stats['plan']} plan{routed}",
            "seconds": round(seconds, 2), "accuracy": round(accuracy, 4),
            "leaves": model.n_leaves, "queries": model.stats["queries"],
            "level_seconds": [round(lv["seconds"], 2) for lv in levels]}


def lightgbm_side(con: Any, bins: int, depth: int, threads: int, test: str) -> dict[str, Any]:
    import lightgbm as lgb
    import pandas as pd

    start = time.perf_counter()
    frame = con.execute("SELECT * FROM bench WHERE y IS NOT NULL").df()
    for c in NOMINAL:
        frame[c] = frame[c].astype("category")
    labels = sorted(frame[TARGET].unique())
    y = frame[TARGET].map({c: i for i, c in enumerate(labels)}).to_numpy()
    x = frame.drop(columns=[TARGET])
    read = time.perf_counter() - start
    params = {"objective": "multiclass", "num_class": len(labels), "num_leaves": 2**depth,
              "max_depth": depth, "max_bin": bins - 1, "min_data_in_leaf": 1,
              "min_sum_hessian_in_leaf": 0.0, "learning_rate": 1.0, "num_threads": threads,
              "verbose": -1, "seed": 0}
    fit_start = time.perf_counter()
    booster = lgb.train(params, lgb.Dataset(x, y), num_boost_round=1)
    fit = time.perf_counter() - fit_start
    held = pd.read_parquet(test)
    for c in NOMINAL:
        held[c] = pd.Categorical(held[c], categories=x[c].cat.categories)
    predicted = booster.predict(held.drop(columns=[TARGET])).argmax(axis=1)
    accuracy = float((pd.Series(labels).to_numpy()[predicted] == held[TARGET]).mean())
    return {"side": f"LightGBM one round, {bins - 1} bins", "seconds": round(read + fit, 2),
            "fit_seconds": round(fit, 2), "accuracy": round(accuracy, 4),
            "leaves": int(booster.num_trees()) and int(
                sum(t["num_leaves"] for t in booster.dump_model()["tree_info"]))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--bins", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--plans", default="scan,tables")
    parser.add_argument("--routings", default="",
                        help="the level scan's routings to run, comma-separated (rewrite, "
                        "path; default: DuckDB's own, Engine.SCAN_ROUTING)")
    parser.add_argument("--data-dir", default=DEFAULT_DATA)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)

    train, test = ensure_data(args.rows, args.data_dir)
    con = connection(train, args.threads)
    results = []
    for bins in args.bins:
        peer = lightgbm_side(con, bins, args.depth, args.threads, test)
        for plan in args.plans.split(","):
            for routing in args.routings.split(",") if plan == "scan" else [""]:
                result = sqltree_side(con, bins, args.depth, plan, test, routing or None)
                result["x_lightgbm_fit"] = round(result["seconds"] / peer["fit_seconds"], 2)
                results.append(result)
                print(json.dumps(result), flush=True)
        results.append(peer)
        print(json.dumps(peer), flush=True)
    print(f"\n{human_rows(args.rows)} rows, DuckDB threads={args.threads}, depth {args.depth}, "
          f"peak RSS {peak_rss_mb():.0f} MB\n")
    print("| side | seconds | x LightGBM fit | held-out accuracy | leaves |")
    print("| --- | --- | --- | --- | --- |")
    for r in results:
        ratio = r.get("x_lightgbm_fit", "")
        fit = f" (fit {r['fit_seconds']})" if "fit_seconds" in r else ""
        print(f"| {r['side']} | {r['seconds']}{fit} | {ratio} | {r['accuracy']} | "
              f"{r['leaves']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": args.rows, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
