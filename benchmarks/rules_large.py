"""C4.5rules on the benchmark file: the rule set of the 1M-row C4.5 tree (depth 10), its
build time and queries, and its SQL run on DuckDB and SQLite and parsed for every dialect.

    python benchmarks/rules_large.py --rows 1000000 --data-dir /tmp/sqltree-bench
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import sqlglot  # noqa: E402

import sqltree  # noqa: E402
from benchmarks.run import TARGET, ensure_data  # noqa: E402
from sqltree.ruleset.conditions import leaf_paths  # noqa: E402

DIALECTS = ["duckdb", "sqlite", "postgres", "spark", "bigquery", "snowflake", "tsql", "mysql",
            "trino"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--data-dir", default="/tmp/sqltree-bench")
    parser.add_argument("--max-depth", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sqlite-rows", type=int, default=20_000)
    args = parser.parse_args()
    train, _ = ensure_data(args.rows, args.data_dir)
    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    con.execute(f"CREATE TABLE rows_ AS SELECT * FROM read_parquet('{train}')")
    started = time.perf_counter()
    model = sqltree.train("rows_", target=TARGET, connection=con, max_depth=args.max_depth)
    trained = time.perf_counter() - started
    paths = sum(len(c) for _, c in leaf_paths(model.root))
    started = time.perf_counter()
    rule_set = model.rule_set("rows_", connection=con)
    built = time.perf_counter() - started
    s = rule_set.stats
    print(f"tree: {model.n_leaves} leaves, {paths} path conditions, trained in {trained:.1f} s")
    print(f"rule set: {rule_set.n_rules} rules, {rule_set.n_conditions} conditions, "
          f"longest rule {max((len(r.conditions) for r in rule_set.rules), default=0)}, "
          f"built in {built:.1f} s; {s['rounds']} rounds, {s['queries']} queries, "
          f"{s['candidates']} candidates, search {s['search']}")
    tree = model.evaluate("rows_", connection=con)
    print(f"training errors: rules {rule_set.training.errors:.0f} of "
          f"{rule_set.training.rows:.0f}, tree {tree.total - tree.correct:.0f}")
    for dialect in DIALECTS:
        sql = rule_set.to_sql(dialect, table="rows_")
        sqlglot.parse_one(sql, read=dialect)
        print(f"{dialect}: {len(sql):,} characters, parses back")
    started = time.perf_counter()
    scored = con.execute(rule_set.to_sql("duckdb", table="rows_")).fetchall()
    print(f"duckdb: scored {len(scored):,} rows in {time.perf_counter() - started:.1f} s")
    sample = con.execute(f"SELECT * FROM rows_ LIMIT {args.sqlite_rows}").df()
    with contextlib.closing(sqlite3.connect(":memory:")) as lite:
        sample.to_sql("rows_", lite, index=False)
        got = [r[-1] for r in lite.execute(rule_set.to_sql("sqlite", table="rows_"))]
    rows = sample.astype(object).where(sample.notna(), None).to_dict("records")
    same = sum(g == rule_set.predict_row(r) for g, r in zip(got, rows))
    print(f"sqlite: {len(got):,} rows scored, {same:,} as the Python evaluation")


if __name__ == "__main__":
    main()
