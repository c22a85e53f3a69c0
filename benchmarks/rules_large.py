"""Rule-set SQL for the 1M-row benchmark tree, against every engine's limits.

Trains the benchmark's C4.5 tree (``run.py --rows 1000000``: depth 10, sqltree's own DuckDB)
and saves it, then checks the largest rule set the tree can give, every leaf's path as a rule
(generalisation only drops conditions and rules, so a real rule set's SQL is part of this
one): its ordered CASE is rendered and parsed back for every dialect, run on DuckDB over the
training rows and on SQLite over a sample, where every row must get the Python evaluation's
class. Then the real rule set, built on the first ``--sample-rows`` training rows (the
generalisation reads them once per round), is timed and checked the same way.

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
from sqltree.engines.duckdb import DuckDBEngine  # noqa: E402
from sqltree.ruleset import Rule, RuleSet  # noqa: E402
from sqltree.ruleset.conditions import leaf_paths  # noqa: E402
from sqltree.ruleset.selection import RuleUse  # noqa: E402

DIALECTS = ["duckdb", "sqlite", "postgres", "spark", "bigquery", "snowflake", "tsql", "mysql",
            "trino"]


def say(text: str) -> None:
    print(text, flush=True)


def every_leaf(model: sqltree.Model) -> RuleSet:
    rules = [Rule(c, leaf.label, 0.5, 0.0, 0.0, leaf.node_id)
             for leaf, c in leaf_paths(model.root) if c]
    k = len(model.classes)
    use = RuleUse([0.0] * len(rules), [0.0] * len(rules), [0.0] * len(rules),
                  [0.0] * len(rules), [[0.0] * k for _ in range(k)], 0, 0)
    return RuleSet(rules, 0, model.classes, model.target, 0.25, use)


def check_sql(name: str, rule_set: RuleSet, con: duckdb.DuckDBPyConnection,
              sqlite_rows: int) -> None:
    longest = max((len(r.conditions) for r in rule_set.rules), default=0)
    say(f"{name}: {rule_set.n_rules} rules, {rule_set.n_conditions} conditions, "
        f"longest {longest}")
    for dialect in DIALECTS:
        started = time.perf_counter()
        sql = rule_set.to_sql(dialect, table="rows_")
        sqlglot.parse_one(sql, read=dialect)
        say(f"  {dialect}: {len(sql):,} characters, rendered and parsed back in "
            f"{time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    (n,) = con.execute(f"SELECT COUNT(*) FROM ({rule_set.to_sql('duckdb', table='rows_')})"
                       ).fetchone()
    say(f"  duckdb: scored {n:,} rows in {time.perf_counter() - started:.1f} s")
    sample = con.execute(f"SELECT * FROM rows_ LIMIT {sqlite_rows}").df()
    with contextlib.closing(sqlite3.connect(":memory:")) as lite:
        sample.to_sql("rows_", lite, index=False)
        started = time.perf_counter()
        got = [r[-1] for r in lite.execute(rule_set.to_sql("sqlite", table="rows_"))]
        seconds = time.perf_counter() - started
    rows = sample.astype(object).where(sample.notna(), None).to_dict("records")
    same = sum(g == rule_set.predict_row(r) for g, r in zip(got, rows))
    say(f"  sqlite: scored {len(got):,} rows in {seconds:.1f} s, {same:,} as the Python "
        "evaluation")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--data-dir", default="/tmp/sqltree-bench")
    parser.add_argument("--max-depth", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sqlite-rows", type=int, default=20_000)
    parser.add_argument("--sample-rows", type=int, default=50_000)
    args = parser.parse_args()
    train, _ = ensure_data(args.rows, args.data_dir)
    saved = Path(args.data_dir) / f"rules_tree_{args.rows}_d{args.max_depth}.json"
    engine = DuckDBEngine(threads=args.threads)
    if saved.exists():
        model = sqltree.load(saved)
    else:
        started = time.perf_counter()
        model = sqltree.train(train, target=TARGET, connection=engine, max_depth=args.max_depth)
        say(f"trained in {time.perf_counter() - started:.1f} s")
        model.save(saved)
    paths = sum(len(c) for _, c in leaf_paths(model.root))
    say(f"tree: {model.n_leaves} leaves, {paths} path conditions")
    con = engine.connection
    con.execute(f"CREATE OR REPLACE TABLE rows_ AS SELECT * FROM read_parquet('{train}')")
    check_sql("every leaf's path", every_leaf(model), con, args.sqlite_rows)
    con.execute(f"CREATE OR REPLACE TABLE sample_ AS SELECT * FROM rows_ "
                f"LIMIT {args.sample_rows}")
    started = time.perf_counter()
    rule_set = model.rule_set("sample_", connection=con)
    s = rule_set.stats
    say(f"rule set on {args.sample_rows:,} rows: built in {time.perf_counter() - started:.1f} s,"
        f" {s['rounds']} rounds, {s['queries']} queries, {s['candidates']} candidates, "
        f"search {s['search']}")
    check_sql("rule set", rule_set, con, args.sqlite_rows)


if __name__ == "__main__":
    main()
