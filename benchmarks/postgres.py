"""Benchmark sqltree training inside PostgreSQL against copying the table out to scikit-learn.

Both sides start from the same PostgreSQL table (the Parquet file of ``generate.py``, loaded
once by ``run.postgres_table``). sqltree trains where the rows are (``sqltree.train(table,
connection=url, algorithm="cart", max_bins=...)``, one run per ``--plans``). The peer is what a
user does instead: ``COPY (SELECT ...) TO STDOUT`` into pandas, ordinal codes for the text
columns, scikit-learn's ``DecisionTreeClassifier`` with the same depth (NaN for NULL, its native
missing-value support). For each side: wall seconds, held-out accuracy, peak resident memory of
the Python process and of the PostgreSQL backend that served it; for sqltree also the
statements and seconds of every level.

Usage::

    python benchmarks/postgres.py --url postgresql://postgres@127.0.0.1:54329/bench
    python benchmarks/postgres.py --url ... --rows 1000000 --bins 64 --plans scan,tables
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the sqltree checkout this script belongs to

from run import (  # noqa: E402
    DEFAULT_DATA,
    NOMINAL,
    TARGET,
    ensure_data,
    human_rows,
    ordinal_matrix,
    peak_rss_mb,
    postgres_table,
    process_peak_mb,
)


def backend_peak_mb(conn: Any) -> float | None:
    """Peak resident memory of the PostgreSQL backend serving ``conn``, when the server runs
    on this machine."""
    (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()
    return process_peak_mb(pid)


def statement_kind(sql: str, what: str) -> str:
    """What a statement did, from its progress label (``stored pairs_12``: the table's hint)
    or, for a query, its text: a histogram groups the level's stored rows (the bin edges'
    queries group the source)."""
    if what != "query":
        return re.sub(r"_[0-9]+$", "", what)
    level = re.search(r"_(pairs|scanned|routed)_[0-9]+", sql)
    return "histogram" if " GROUP BY " in sql and level else "other queries"


def tally_statements(engine: Any) -> dict[str, list[float]]:
    """Seconds of each statement ``engine`` runs from now on, by ``statement_kind``."""
    kinds: dict[str, list[float]] = {}
    counted = engine.counted

    @contextmanager
    def timed(sql: str, what: str = "query") -> Iterator[None]:
        start = time.perf_counter()
        with counted(sql, what):
            yield
        kinds.setdefault(statement_kind(sql, what), []).append(time.perf_counter() - start)

    engine.counted = timed
    return kinds


def sqltree_side(url: str, table: Any, bins: int, depth: int, plan: str, test: str
                 ) -> dict[str, Any]:
    import pandas as pd

    import sqltree
    from sqltree.engines.postgres import PostgresEngine

    engine = PostgresEngine.connect(url)
    kinds = tally_statements(engine)
    start = time.perf_counter()
    model = sqltree.train(table.sql("postgres"), TARGET, connection=engine, algorithm="cart",
                          max_depth=depth, max_bins=bins, plan=plan)
    seconds = time.perf_counter() - start
    backend_mb = backend_peak_mb(engine.connection)
    held = pd.read_parquet(test)
    accuracy = float((model.predict(held)["prediction"] == held[TARGET]).mean())
    stats = model.stats
    return {
        "side": f"sqltree cart binned {bins}, {stats['plan']} plan",
        "seconds": round(seconds, 1),
        "queries": engine.stats.queries,
        "accuracy": round(accuracy, 4),
        "leaves": model.n_leaves,
        "python_peak_mb": peak_rss_mb(),
        "backend_peak_mb": backend_mb,
        "statements": {k: {"count": len(v), "seconds": round(sum(v), 2),
                           "each": [round(x, 2) for x in v]}
                       for k, v in sorted(kinds.items())},
        "levels": [{"depth": lv["depth"], "nodes": lv["nodes"], "queries": lv["queries"],
                    "seconds": round(lv["seconds"], 2)} for lv in stats["levels"]],
    }


def copy_sklearn_side(url: str, table: Any, depth: int, test: str) -> dict[str, Any]:
    import pandas as pd
    import psycopg
    from sklearn.tree import DecisionTreeClassifier

    start = time.perf_counter()
    with psycopg.connect(url) as conn:
        buffer = io.BytesIO()
        copy = f"COPY (SELECT * FROM {table.sql('postgres')}) TO STDOUT (FORMAT csv, HEADER)"
        with conn.cursor() as cur, cur.copy(copy) as out:
            for chunk in out:
                buffer.write(chunk)
        backend_mb = backend_peak_mb(conn)
    buffer.seek(0)
    frame = pd.read_csv(buffer)
    del buffer
    frame = frame[frame[TARGET].notna()]
    categories = {c: sorted(frame[c].dropna().unique()) for c in NOMINAL}
    x, y = ordinal_matrix(frame, categories), frame[TARGET].to_numpy()
    del frame
    read_seconds = time.perf_counter() - start
    clf = DecisionTreeClassifier(max_depth=depth, random_state=0).fit(x, y)
    seconds = time.perf_counter() - start
    held = pd.read_parquet(test)
    predicted = clf.predict(ordinal_matrix(held, categories))
    accuracy = float((predicted == held[TARGET].to_numpy()).mean())
    return {
        "side": "COPY TO STDOUT + pandas + scikit-learn CART",
        "seconds": round(seconds, 1),
        "read_seconds": round(read_seconds, 1),
        "queries": 1,
        "accuracy": round(accuracy, 4),
        "leaves": int(clf.get_n_leaves()),
        "python_peak_mb": peak_rss_mb(),
        "backend_peak_mb": backend_mb,
    }


def markdown(results: list[dict[str, Any]], rows: int, depth: int) -> str:
    peer = next((r for r in results if r["side"].startswith("COPY")), None)
    lines = [
        f"{human_rows(rows)} rows on PostgreSQL, depth {depth}",
        "",
        "| side | seconds | / COPY + scikit-learn | statements | held-out accuracy | leaves "
        "| Python peak MB | backend peak MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        ratio = f"{r['seconds'] / peer['seconds']:.2f}x" if peer else ""
        lines.append(f"| {r['side']} | {r['seconds']} | {ratio} | {r['queries']} | "
                     f"{r['accuracy']} | {r['leaves']} | {r['python_peak_mb'] or 0:.0f} | "
                     f"{r['backend_peak_mb'] or 0:.0f} |")
    for r in results:
        if "statements" in r:
            lines += ["", f"{r['side']}: statements by kind (count, seconds)", "",
                      ", ".join(f"{k}: {v['count']}, {v['seconds']} s"
                                for k, v in r["statements"].items())]
        if "levels" in r:
            lines += ["", f"{r['side']}: per level (seconds / statements / nodes)", "",
                      ", ".join(f"{lv['depth']}: {lv['seconds']} s / {lv['queries']} / "
                                f"{lv['nodes']}" for lv in r["levels"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a PostgreSQL database to load and train in")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--bins", type=int, default=64)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--plans", default="auto",
                        help="sqltree's training plans, comma-separated (auto, scan, tables)")
    parser.add_argument("--sides", default="sqltree,copy")
    parser.add_argument("--data-dir", default=DEFAULT_DATA)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)

    train, test = ensure_data(args.rows, args.data_dir)
    table = postgres_table(args.url, train)
    results = []
    sides = args.sides.split(",")
    if "sqltree" in sides:
        for plan in args.plans.split(","):
            results.append(sqltree_side(args.url, table, args.bins, args.depth, plan, test))
            print(json.dumps(results[-1]), flush=True)
    if "copy" in sides:
        results.append(copy_sklearn_side(args.url, table, args.depth, test))
        print(json.dumps(results[-1]), flush=True)
    print(markdown(results, args.rows, args.depth))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": args.rows, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
