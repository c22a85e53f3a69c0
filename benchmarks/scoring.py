"""Scoring one tree in DuckDB: sqltree's SQL forms against orbital's SQL and a plain copy.

The tree is scikit-learn's ``DecisionTreeClassifier`` (gini, ``max_depth=10``,
``min_samples_leaf=2``) trained on the first million rows of the benchmark table
(``generate.py``) and imported into sqltree node by node (same tests, same thresholds, same
class counts), so both SQL generators compile the same tree. The features are written as
doubles that float32 holds exactly (scikit-learn trains on float32) and NULL as -1:
orbital's SQL sends a NULL down the false side of every test, whatever scikit-learn learnt
for missing values, so with NULLs the two would score different trees.

Each side writes a DuckDB table from a DuckDB table of ``--rows`` rows (all columns plus the
prediction): ``copy`` (``CREATE TABLE AS SELECT`` the columns), sqltree's ``to_sql`` in each
``--forms`` form, orbital's ``export_sql`` (its label, all columns kept), and sqltree's
``predict(into=...)``. Wall time, median of ``--repeat`` runs, the sides interleaved in one
process; every side's predictions are checked against scikit-learn's on every row.

``--ensembles`` times many-tree models instead (``--trees 100 --trees 500 --trees 2000``):
scikit-learn's ``RandomForestClassifier`` (depth 8) and LightGBM's ``LGBMClassifier`` (31
leaves), trained on ``--train-rows`` rows of the benchmark table and imported with
``sqltree.from_sklearn`` / ``sqltree.from_lightgbm``, score ``--rows`` rows: sqltree's SQL
and orbital's SQL (for the forest, and for scikit-learn's ``HistGradientBoostingClassifier``
of the same size as the LightGBM-equivalent model) writing a DuckDB table, the library's own
``predict_proba`` on the same rows in memory (2 threads), and a plain copy; SQLite scores
``--sqlite-rows`` rows with models of at most ``--sqlite-max-trees`` trees. Every sqltree
label is checked against the library's.

``--timeout`` stops an SQL side after that many seconds (DuckDB's and SQLite's ``interrupt``;
SQLite's preparation of a very large statement does not see it) and reports it as stopped.

``--c45`` instead times the exact C4.5 scoring of unknown values (the default ``to_sql`` of a
C4.5 tree, one SELECT) against ``predict`` on the benchmark file as it is, NULLs included.

Usage::

    python benchmarks/scoring.py --rows 1000000 --rows 10000000
    python benchmarks/scoring.py --c45 --rows 1000000 --repeat 1
    python benchmarks/scoring.py --ensembles --trees 100 --trees 500 --repeat 1
    python benchmarks/scoring.py --ensembles --kinds lightgbm --trees 500 --timeout 420
"""

from __future__ import annotations

import argparse
import json
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

DEFAULT_DATA = os.environ.get(
    "SQLTREE_BENCH_DATA", os.path.join(tempfile.gettempdir(), "sqltree-bench")
)
TRAIN_ROWS = 1_000_000
FEATURES = [f"x{j}" for j in range(10)] + [f"n{j}" for j in range(len(generate.NOMINAL_LEVELS))]
TARGET = "y"


def data_file(rows: int, data_dir: str) -> str:
    os.makedirs(data_dir, exist_ok=True)
    millions, rest = divmod(rows, 1_000_000)
    name = f"train_{millions}m.parquet" if not rest else f"train_{rows}.parquet"
    path = os.path.join(data_dir, name)
    if not os.path.exists(path):
        generate.generate(rows, path)
    return path


def load_uptime() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# -- the numeric table and the tree -------------------------------------------------------------
def numeric_table(con: Any, path: str, name: str) -> None:
    """``name``: a row id, the 16 features as float32-exact doubles (nominal values by their
    code), NULL as -1, and the class."""
    from sqlglot import exp

    cols: list[exp.Expression] = [
        exp.alias_(exp.Window(this=exp.RowNumber()), "rid")
    ]
    for f in FEATURES:
        value: exp.Expression = exp.column(f)
        if f.startswith("n"):  # "n3_07" -> 7
            value = exp.cast(exp.func("substr", value, exp.Literal.number(4)), "INT")
        value = exp.cast(exp.cast(value, "FLOAT"), "DOUBLE")
        cols.append(exp.alias_(exp.func("coalesce", value, exp.Literal.number(-1.0)), f))
    cols.append(exp.column(TARGET))
    query = exp.select(*cols).from_(exp.func("read_parquet", exp.Literal.string(path)))
    con.execute(f"DROP TABLE IF EXISTS {name}")
    con.execute(exp.Create(this=exp.to_table(name), kind="TABLE", expression=query).sql("duckdb"))


def train_sklearn(con: Any, table: str) -> Any:
    import numpy as np
    from sklearn.tree import DecisionTreeClassifier

    frame = con.execute(f"SELECT {', '.join(FEATURES)}, {TARGET} FROM {table} ORDER BY rid").df()
    x = frame[FEATURES].to_numpy(dtype=np.float32)
    clf = DecisionTreeClassifier(criterion="gini", max_depth=10, min_samples_leaf=2,
                                 random_state=0)
    clf.fit(x, frame[TARGET].to_numpy())
    return clf


def import_tree(clf: Any, features: list[str]) -> Any:
    """scikit-learn's tree as a sqltree model: the same tests, thresholds and class counts."""
    from sqltree.model import FeatureInfo, Model
    from sqltree.tree import CONTINUOUS, Node, Split

    t = clf.tree_
    classes = [str(c) for c in clf.classes_]

    def node(i: int) -> Node:
        weight = float(t.weighted_n_node_samples[i])
        counts = [float(v) * weight for v in t.value[i][0]]
        total = sum(counts)
        n = Node(counts=counts, proba=[c / total for c in counts], node_id=i,
                 n_samples=int(t.n_node_samples[i]))
        left, right = int(t.children_left[i]), int(t.children_right[i])
        if left == -1:
            return n
        n.split = Split(features[int(t.feature[i])], CONTINUOUS, threshold=float(t.threshold[i]))
        n.children = [node(left), node(right)]
        n.shares = [float(t.weighted_n_node_samples[c]) / weight for c in (left, right)]
        n.unknown_branch = 0 if t.missing_go_to_left[i] else 1
        return n

    return Model(root=node(0), classes=classes, target=TARGET,
                 features=[FeatureInfo(f, "continuous", "DOUBLE") for f in features],
                 options={"algorithm": "cart"})


def orbital_sql(clf: Any, table: str) -> str:
    import orbital
    import orbital.types
    from sklearn.pipeline import Pipeline

    types = {f: orbital.types.DoubleColumnType() for f in FEATURES}
    types["rid"] = orbital.types.Int64ColumnType(passthrough=True)
    types[TARGET] = orbital.types.StringColumnType(passthrough=True)
    pipeline = orbital.parse_pipeline(Pipeline([("tree", clf)]), features=types)
    projection = orbital.ResultsProjection(select=["rid", *FEATURES, TARGET])
    sql = orbital.export_sql(table, pipeline, dialect="duckdb", projection=projection)
    # The label only, as sqltree's side writes (DuckDB then drops the probabilities' columns).
    return (f"SELECT rid, {', '.join(FEATURES)}, {TARGET}, output_label AS prediction "
            f"FROM ({sql}) AS orbital")


# -- timing -------------------------------------------------------------------------------------
def timed(con: Any, fn: Callable[[], None]) -> float:
    con.execute("DROP TABLE IF EXISTS scored")
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class TimedOut(Exception):
    """A side interrupted after ``--timeout`` seconds."""


def capped(fn: Callable[[], None], connections: list[Any], seconds: float | None
           ) -> Callable[[], None]:
    """``fn``, interrupted after ``seconds`` (DuckDB and SQLite connections both have
    ``interrupt()``), raising ``TimedOut`` then."""
    if not seconds:
        return fn

    def run() -> None:
        import threading

        fired = threading.Event()

        def stop() -> None:
            fired.set()
            for c in connections:
                c.interrupt()

        timer = threading.Timer(seconds, stop)
        timer.start()
        try:
            fn()
        except Exception:
            if fired.is_set():
                raise TimedOut(f"stopped after {seconds:.0f} s") from None
            raise
        finally:
            timer.cancel()
        if fired.is_set():
            raise TimedOut(f"stopped after {seconds:.0f} s")
    return run


def sides(con: Any, model: Any, clf: Any, table: str, forms: list[str], unmerged: bool = False
          ) -> dict[str, Callable]:
    """The statements to time, each writing the table ``scored``."""
    copy = f"CREATE TABLE scored AS SELECT rid, {', '.join(FEATURES)}, {TARGET} FROM {table}"
    out: dict[str, Callable[[], None]] = {"copy": lambda: con.execute(copy)}
    for form in forms:
        options = {} if form == "default" else {"form": form}
        sql = model.to_sql(table=table, **options)
        out[f"sqltree {form}"] = lambda sql=sql: con.execute(f"CREATE TABLE scored AS {sql}")
    if unmerged:  # the walk as it was before subtrees of one label were merged
        from sqltree.compiler.blocks import literal
        from sqltree.compiler.walk import build_case
        from sqltree.model import render

        label = render(build_case(model.root, lambda n: literal(model.classes[n.label])),
                       "duckdb")
        sql = f"SELECT *, {label} AS prediction FROM {table}"
        out["sqltree unmerged walk"] = lambda: con.execute(f"CREATE TABLE scored AS {sql}")
    if clf is not None:
        orb = orbital_sql(clf, table)
        out["orbital"] = lambda: con.execute(f"CREATE TABLE scored AS {orb}")
    out["sqltree predict"] = lambda: model.predict(table, connection=con, into="scored")
    return out


def disagreements(con: Any, table: str) -> int:
    """Rows of ``scored`` whose prediction differs from ``table``'s ``expected`` (by
    ``rid``)."""
    return con.execute(
        f"SELECT count(*) FROM scored s JOIN {table} t USING (rid) "
        f"WHERE s.prediction IS DISTINCT FROM t.expected"
    ).fetchone()[0]


def run_cart(args: argparse.Namespace) -> list[dict[str, Any]]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {int(args.threads)}")
    numeric_table(con, data_file(TRAIN_ROWS, args.data_dir), "train")
    clf = train_sklearn(con, "train")
    model = import_tree(clf, FEATURES)
    print(f"tree: {clf.get_n_leaves()} leaves, depth {clf.get_depth()}; sqltree: "
          f"{model.n_leaves} leaves, depth {model.depth}", file=sys.stderr)
    results = []
    for rows in args.rows:
        import numpy as np

        numeric_table(con, data_file(rows, args.data_dir), "bench")
        frame = con.execute(f"SELECT rid, {', '.join(FEATURES)} FROM bench").df()
        expected = clf.predict(frame[FEATURES].to_numpy(dtype=np.float32))
        con.register("expected_frame", frame.assign(expected=expected)[["rid", "expected"]])
        con.execute("CREATE OR REPLACE TABLE expected AS SELECT * FROM expected_frame")
        con.unregister("expected_frame")
        del frame, expected
        runs = sides(con, model, clf, "bench", args.forms, args.unmerged)
        times: dict[str, list[float]] = {name: [] for name in runs}
        loads = []
        for _ in range(args.repeat):
            for name, fn in runs.items():
                loads.append(load_uptime())
                times[name].append(timed(con, fn))
                if len(times[name]) == 1 and name != "copy":
                    times[name + " disagreements"] = [disagreements(con, "expected")]
        results.append({"rows": rows, "leaves": model.n_leaves, "times": times,
                        "loads": loads})
        print(table_of(results[-1]))
    return results


def run_c45(args: argparse.Namespace) -> list[dict[str, Any]]:
    """C4.5 (binned, as ``run.py --max-bins 256``) on the benchmark file as it is, NULLs
    included: the exact label as one SELECT against ``predict``, which spreads the rows that
    meet an unknown value by copies."""
    import duckdb

    import sqltree

    con = duckdb.connect()
    con.execute(f"SET threads = {int(args.threads)}")
    train = data_file(TRAIN_ROWS, args.data_dir)
    if args.model and os.path.exists(args.model):
        model = sqltree.load(args.model)
    else:
        model = sqltree.train(train, target=TARGET, max_depth=10, max_bins=256,
                              subtree_raising=False, connection=con)
        if args.model:
            model.save(args.model)
    results = []
    for rows in args.rows:
        con.execute("CREATE OR REPLACE TABLE bench AS SELECT row_number() OVER () AS rid, * "
                    "FROM read_parquet(?)", [data_file(rows, args.data_dir)])
        sql = model.to_sql(table="bench")
        runs: dict[str, Callable[[], None]] = {
            "copy": lambda: con.execute("CREATE TABLE scored AS SELECT * FROM bench"),
            "sqltree to_sql, one SELECT": lambda sql=sql: con.execute(
                f"CREATE TABLE scored AS {sql}"),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        loads = []
        for _ in range(args.repeat):
            for name, fn in runs.items():
                loads.append(load_uptime())
                times[name].append(timed(con, fn))
            con.execute("CREATE OR REPLACE TABLE one_select AS SELECT * FROM scored")
            loads.append(load_uptime())
            times.setdefault("sqltree predict", []).append(timed(con, lambda: model.predict(
                "bench", connection=con, into="scored")))
        times["sqltree predict disagreements"] = [con.execute(
            "SELECT count(*) FROM scored s JOIN one_select o USING (rid) "
            "WHERE s.prediction IS DISTINCT FROM o.prediction").fetchone()[0]]
        results.append({"rows": rows, "leaves": model.n_leaves, "times": times,
                        "loads": loads, "sql_characters": len(sql)})
        print(f"{len(sql):,} characters of SQL")
        print(table_of(results[-1]))
    return results


def fit_ensemble(kind: str, n_trees: int, x: Any, y: Any) -> Any:
    if kind == "forest":
        from sklearn.ensemble import RandomForestClassifier

        return RandomForestClassifier(n_trees, max_depth=8, random_state=0, n_jobs=2).fit(x, y)
    if kind == "lightgbm":
        import lightgbm

        return lightgbm.LGBMClassifier(n_estimators=n_trees, num_leaves=31, verbose=-1,
                                       num_threads=2, random_state=0).fit(x, y)
    if kind == "hist":  # the scikit-learn model of LightGBM's size, for orbital
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(max_iter=n_trees, max_leaf_nodes=31,
                                              early_stopping=False, random_state=0).fit(x, y)
    raise AssertionError(kind)


def orbital_ensemble_sql(est: Any, table: str, dialect: str = "duckdb") -> str:
    import orbital
    import orbital.types
    from sklearn.pipeline import Pipeline

    types = {f: orbital.types.DoubleColumnType() for f in FEATURES}
    pipeline = orbital.parse_pipeline(Pipeline([("model", est)]), features=types)
    sql = orbital.export_sql(table, pipeline, dialect=dialect)
    return f"SELECT output_label AS prediction FROM ({sql}) AS orbital"


def run_ensembles(args: argparse.Namespace) -> list[dict[str, Any]]:
    import sqlite3

    import duckdb
    import numpy as np

    import sqltree

    con = duckdb.connect()
    con.execute(f"SET threads = {int(args.threads)}")
    numeric_table(con, data_file(TRAIN_ROWS, args.data_dir), "train")
    train = con.execute(f"SELECT {', '.join(FEATURES)}, {TARGET} FROM train ORDER BY rid "
                        f"LIMIT {int(args.train_rows)}").df()
    x_train = train[FEATURES].astype(np.float32)
    rows = args.rows[0]
    numeric_table(con, data_file(rows, args.data_dir), "bench")
    frame = con.execute(f"SELECT rid, {', '.join(FEATURES)} FROM bench ORDER BY rid").df()
    x = frame[FEATURES].astype(np.float32)
    lite = sqlite3.connect(":memory:")
    lite_rows = min(args.sqlite_rows, rows)
    frame.iloc[:lite_rows].to_sql("bench", lite, index=False)
    results = []
    for n_trees in args.trees:
        for kind in args.kinds:
            start = time.perf_counter()
            est = fit_ensemble(kind, n_trees, x_train, train[TARGET])
            fit_s = time.perf_counter() - start
            model = (sqltree.from_sklearn(est) if kind == "forest"
                     else sqltree.from_lightgbm(est))
            start = time.perf_counter()
            report: dict[str, Any] = {}
            sql = model.to_sql("duckdb", table="bench", columns=["rid"], report=report)
            compile_s = time.perf_counter() - start
            expected = est.predict(x)
            runs: dict[str, Callable[[], None]] = {
                "copy": lambda: con.execute(
                    f"CREATE TABLE scored AS SELECT rid, {', '.join(FEATURES)} FROM bench"),
                "sqltree SQL": lambda sql=sql: con.execute(f"CREATE TABLE scored AS {sql}"),
                "library predict_proba (in memory)": lambda est=est: est.predict_proba(x),
            }
            orbital_name = "orbital SQL" + ("" if kind == "forest" else " (HistGradientBoosting)")
            other = None
            if n_trees <= args.orbital_max_trees:
                other = est if kind == "forest" else fit_ensemble(
                    "hist", n_trees, x_train, train[TARGET])
                start = time.perf_counter()
                try:
                    orb = orbital_ensemble_sql(other, "bench")
                except Exception as e:  # reported in the results, not hidden
                    report["orbital_error"] = f"{type(e).__name__}: {e}"[:300]
                    print(f"orbital failed on {kind}: {e}", file=sys.stderr)
                else:
                    report["orbital_compile_s"] = round(time.perf_counter() - start, 2)
                    report["orbital_characters"] = len(orb)
                    runs[orbital_name] = lambda orb=orb: con.execute(
                        f"CREATE TABLE scored AS {orb}")
            if n_trees <= args.sqlite_max_trees:
                lite_sql = model.to_sql("sqlite", table="bench", columns=["rid"])

                def on_sqlite(q: str) -> Callable[[], None]:
                    def run() -> None:
                        lite.execute("DROP TABLE IF EXISTS scored")
                        lite.execute(f"CREATE TABLE scored AS {q}")
                    return run

                runs[f"sqltree SQL on SQLite ({lite_rows:,} rows)"] = on_sqlite(lite_sql)
                if other is not None:
                    try:
                        lite_orb = orbital_ensemble_sql(other, "bench", "sqlite")
                    except Exception as e:
                        report["orbital_sqlite_error"] = f"{type(e).__name__}: {e}"[:300]
                    else:
                        runs[f"{orbital_name} on SQLite ({lite_rows:,} rows)"] = on_sqlite(
                            lite_orb)
            times: dict[str, list[float]] = {name: [] for name in runs}
            notes: dict[str, str] = {}
            loads = []
            for _ in range(args.repeat):
                for name, fn in runs.items():
                    if name in notes:
                        continue
                    loads.append(load_uptime())
                    sql_side = "SQL" in name
                    try:
                        times[name].append(timed(con, capped(
                            fn, [con, lite], args.timeout if sql_side else None)))
                    except Exception as e:  # a side that fails or is stopped says so
                        notes[name] = (str(e) if isinstance(e, TimedOut)
                                       else f"failed: {type(e).__name__}: {e}"[:200])
                        print(f"  {kind} {n_trees} trees, {name}: {notes[name]}",
                              file=sys.stderr, flush=True)
                        continue
                    print(f"  {kind} {n_trees} trees, {name}: {times[name][-1]:.2f} s "
                          f"(load {loads[-1]})", file=sys.stderr, flush=True)
                    if name == "sqltree SQL" and len(times[name]) == 1:
                        got = con.execute("SELECT prediction FROM scored ORDER BY rid").df()
                        times[name + " disagreements"] = [int(np.sum(
                            got["prediction"].astype(str).to_numpy() != expected.astype(str)))]
                    if name.startswith("sqltree SQL on SQLite") and len(times[name]) == 1:
                        got = [r[0] for r in lite.execute(
                            "SELECT prediction FROM scored ORDER BY rid")]
                        times[name + " disagreements"] = [int(np.sum(
                            np.asarray(got, dtype=str) != expected[:lite_rows].astype(str)))]
            result = {"rows": rows, "leaves": model.n_leaves, "trees": n_trees, "kind": kind,
                      "times": times, "notes": notes, "loads": loads,
                      "compile_s": round(compile_s, 2), "fit_s": round(fit_s, 2),
                      "sql": report}
            results.append(result)
            print(f"\n{kind}, {n_trees} trees ({model.n_trees} in the model): "
                  f"{report['bytes']:,} bytes of SQL ({report['bytes_per_leaf']} bytes per "
                  f"leaf), compiled in {compile_s:.1f} s; orbital's SQL "
                  f"{report.get('orbital_characters', 'not written')} characters")
            print(table_of(result), flush=True)
    return results


def table_of(result: dict[str, Any]) -> str:
    times = result["times"]
    notes = result.get("notes", {})
    copy = statistics.median(times["copy"])
    orbital_side = next((n for n in times if n.startswith("orbital") and times[n]
                         and "SQLite" not in n), None)
    orb = statistics.median(times[orbital_side]) if orbital_side else None
    lines = [
        f"{result['rows']:,} rows, {result['leaves']} leaves; load average during the run: "
        f"{result['loads'][0]} .. {result['loads'][-1]}",
        "",
        "| side | median s | runs s | x copy | orbital / side | rows unlike the reference |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, ts in times.items():
        if name.endswith(" disagreements"):
            continue
        if not ts:
            lines.append(f"| {name} | {notes.get(name, 'not run')} | | | | |")
            continue
        med = statistics.median(ts)
        bad = times.get(name + " disagreements", [""])[0]
        ratio = f"{orb / med:.2f}" if orb is not None and "SQLite" not in name else ""
        lines.append(f"| {name} | {med:.2f} | {', '.join(f'{t:.2f}' for t in ts)} | "
                     f"{med / copy:.2f} | {ratio} | {bad} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, action="append",
                        help="rows to score (repeatable; default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--forms", nargs="+", default=["default"],
                        help="sqltree to_sql forms to time ('default' is to_sql's own)")
    parser.add_argument("--data-dir", default=DEFAULT_DATA)
    parser.add_argument("--unmerged", action="store_true",
                        help="also time the walk without merging subtrees of one label")
    parser.add_argument("--c45", action="store_true",
                        help="time C4.5's exact scoring of unknown values instead")
    parser.add_argument("--model", help="with --c45: the model file to use (trained and "
                        "written there if it does not exist)")
    parser.add_argument("--ensembles", action="store_true",
                        help="time forests and LightGBM models instead")
    parser.add_argument("--trees", type=int, action="append",
                        help="with --ensembles: trees per model (repeatable; default 100)")
    parser.add_argument("--kinds", nargs="+", default=["forest", "lightgbm"],
                        choices=["forest", "lightgbm"], help="with --ensembles: the models")
    parser.add_argument("--train-rows", type=int, default=100_000,
                        help="with --ensembles: rows the models are trained on")
    parser.add_argument("--sqlite-rows", type=int, default=1_000_000)
    parser.add_argument("--sqlite-max-trees", type=int, default=100)
    parser.add_argument("--orbital-max-trees", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=None,
                        help="with --ensembles: stop an SQL side after this many seconds "
                        "(reported as stopped)")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args(argv)
    args.rows = args.rows or [TRAIN_ROWS]
    args.trees = args.trees or [100]
    if args.ensembles:
        results = run_ensembles(args)
    else:
        results = run_c45(args) if args.c45 else run_cart(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
