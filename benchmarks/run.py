"""Benchmark sqltree against scikit-learn on a synthetic table (benchmarks/generate.py).

Each side runs in its own Python process on the same Parquet file, and reports its wall time
(read, encode and fit for scikit-learn; the whole ``train`` call for sqltree), its peak RSS, the
size of the tree, the accuracy on a held-out file, and the time to score the training rows
(scikit-learn's ``predict`` on the in-memory matrix; sqltree's compiled SQL in DuckDB). For
sqltree it also reports the queries and full scans of every level. The result is a markdown
table with the sqltree / scikit-learn ratios.

The generated files are kept (and reused) in ``--data-dir``: by default ``sqltree-bench`` in
the system's temporary directory, or ``$SQLTREE_BENCH_DATA``.

Usage::

    python benchmarks/run.py --rows 1000000
    python benchmarks/run.py --rows 10000000 --max-bins 256 --sides sqltree
    python benchmarks/run.py --rows 1000000 --task regression --max-bins 256
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the sqltree checkout this script belongs to

import generate  # noqa: E402

DEFAULT_DATA = os.environ.get(
    "SQLTREE_BENCH_DATA", os.path.join(tempfile.gettempdir(), "sqltree-bench")
)
SIDES = ("sqltree", "sklearn")
TEST_ROWS = 200_000
TARGET = "y"
NOMINAL = [f"n{j}" for j in range(len(generate.NOMINAL_LEVELS))]


def process_peak_mb(pid: int | str = "self") -> float | None:
    """A process's peak resident set size so far (VmHWM), in MB; None where it cannot be
    read (another machine's process, or no /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_rss_mb() -> float:
    """This process's peak resident set size so far (VmHWM), in MB."""
    found = process_peak_mb()
    if found is not None:
        return found
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ordinal_matrix(frame: Any, categories: dict[str, Any]) -> Any:
    """The features of ``frame`` (every column but the target) as a float32 matrix for
    scikit-learn: nominal columns as their index in ``categories``, NaN for NULL."""
    import numpy as np
    import pandas as pd

    columns = []
    for name in frame.columns:
        if name == TARGET:
            continue
        if name in categories:
            codes = pd.Categorical(frame[name], categories=categories[name]).codes
            columns.append(np.where(codes < 0, np.nan, codes).astype(np.float32))
        else:
            columns.append(frame[name].to_numpy(dtype=np.float32, na_value=np.nan))
    return np.column_stack(columns)


def human_rows(n: int) -> str:
    for unit, size in (("b", 10**9), ("m", 10**6), ("k", 10**3)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def ensure_data(rows: int, data_dir: str, task: str = "classification") -> tuple[str, str]:
    os.makedirs(data_dir, exist_ok=True)
    kind = "reg_" if task == "regression" else ""
    train = os.path.join(data_dir, f"train_{kind}{human_rows(rows)}.parquet")
    test = os.path.join(data_dir, f"test_{kind}{human_rows(TEST_ROWS)}.parquet")
    if not os.path.exists(train):
        generate.generate(rows, train, task=task)
    if not os.path.exists(test):
        generate.generate(TEST_ROWS, test, test=True, task=task)
    return train, test


def held_out(predicted: Any, truth: Any, regression: bool) -> dict[str, float]:
    """Accuracy of labels, or RMSE and R² of numbers, on the held-out rows."""
    import numpy as np

    if not regression:
        return {"accuracy": float((np.asarray(predicted) == truth).mean())}
    error = np.asarray(predicted, dtype=float) - truth
    rmse = float(np.sqrt(np.mean(error * error)))
    spread = float(np.mean((truth - truth.mean()) ** 2))
    return {"rmse": rmse, "r2": 1.0 - rmse * rmse / spread}


# -- scikit-learn side -------------------------------------------------------------------------
def sklearn_worker(args: argparse.Namespace) -> dict[str, Any]:
    import pandas as pd
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    start = time.perf_counter()
    frame = pd.read_parquet(args.train)
    categories = {c: sorted(frame[c].dropna().unique()) for c in NOMINAL}
    x = ordinal_matrix(frame, categories)
    y = frame[TARGET].to_numpy()
    del frame
    read_seconds = time.perf_counter() - start
    regression = args.task == "regression"
    criterion = "gini" if args.algorithm == "cart" else "entropy"
    if regression:
        clf: Any = DecisionTreeRegressor(max_depth=args.max_depth, random_state=0)
    elif args.defaults:  # scikit-learn's own defaults: no depth limit, leaves of one row
        clf = DecisionTreeClassifier(criterion=criterion, random_state=0)
    else:
        clf = DecisionTreeClassifier(
            criterion=criterion, max_depth=args.max_depth, min_samples_leaf=2, random_state=0
        )
    clf.fit(x, y)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()

    t = time.perf_counter()
    clf.predict(x)
    predict_seconds = time.perf_counter() - t
    test = pd.read_parquet(args.test)
    scores = held_out(clf.predict(ordinal_matrix(test, categories)), test[TARGET].to_numpy(),
                      regression)
    return {
        "side": "scikit-learn",
        "seconds": seconds,
        "read_seconds": read_seconds,
        "fit_seconds": seconds - read_seconds,
        "peak_rss_mb": rss,
        "nodes": int(clf.tree_.node_count),
        "leaves": int(clf.get_n_leaves()),
        "depth": int(clf.get_depth()),
        **scores,
        "predict_seconds": predict_seconds,
        "predict_rows": int(x.shape[0]),
    }


# -- sqltree side ------------------------------------------------------------------------------
def sqltree_worker(args: argparse.Namespace) -> dict[str, Any]:
    import sqltree
    from sqltree.engines.duckdb import DuckDBEngine

    # sqltree's own database, as a user's call on a file gets (plan="auto" may then read the
    # rows into memory), with the benchmark's settings
    engine = DuckDBEngine(threads=int(args.threads), memory_limit=args.memory_limit or None)
    con = engine.connection
    regression = args.task == "regression"
    options: dict[str, Any] = {"algorithm": args.algorithm, "max_depth": args.max_depth}
    if regression:
        options = {"task": "regression", "max_depth": args.max_depth}
    if args.max_bins:
        options["max_bins"] = args.max_bins
    options["threshold_search"] = args.threshold_search
    if args.pruning != "default":
        options["pruning"] = None if args.pruning == "none" else args.pruning
    if args.algorithm == "c4.5" and not regression:
        options["subtree_raising"] = args.subtree_raising
    source: Any = args.train
    connection: Any = engine
    if args.postgres:
        source = postgres_table(args.postgres, args.train)
        connection = args.postgres
        args.score = False  # scoring below reads the DuckDB table; accuracy from Python

    start = time.perf_counter()
    model = sqltree.train(
        source, target=TARGET, connection=connection, progress=True, plan=args.plan, **options
    )
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    # pandas only now: a fit on a file does not load it (about 90 MB with pyarrow)
    import pandas as pd

    truth = pd.read_parquet(args.test, columns=[TARGET])[TARGET].to_numpy()
    print(f"trained in {seconds:.1f} s, {model.n_leaves} leaves", file=sys.stderr, flush=True)
    stats = model.stats
    root = model.root
    predict_seconds: float | None = None
    if args.score:
        # The compiled SQL over every training row, already loaded into a DuckDB table (as
        # scikit-learn's predict gets its matrix in memory), written into another table.
        con.execute(
            "CREATE TABLE sqltree_bench_rows AS SELECT * FROM read_parquet(?)", [args.train]
        )
        t = time.perf_counter()
        model.predict("sqltree_bench_rows", connection=con, into="sqltree_bench_scored")
        predict_seconds = time.perf_counter() - t
        con.execute("DROP TABLE sqltree_bench_scored")
        con.execute("DROP TABLE sqltree_bench_rows")
        labels = list(model.predict(args.test, connection=con)["prediction"])
    else:  # held-out accuracy from the tree in Python (same routing as the SQL)
        test = pd.read_parquet(args.test)
        rows = test.astype(object).where(test.notna(), None).to_dict("records")
        labels = [model.predict_row(r) for r in rows]
    scores = held_out(pd.Series(labels).to_numpy(), truth, regression)
    nodes = list(root.walk())
    return {
        "side": "sqltree",
        "seconds": seconds,
        "peak_rss_mb": rss,
        "nodes": len(nodes),
        "leaves": sum(1 for n in nodes if n.is_leaf),
        "depth": _depth(root),
        **scores,
        "predict_seconds": predict_seconds,
        "grow_seconds": sum(lv["seconds"] for lv in stats["levels"]),
        "levels": stats.get("levels", []),
        "queries": stats.get("queries"),
        "scans": stats.get("scans"),
        "tree": root.to_dict() if args.keep_tree else None,
    }


class PhaseClock(logging.Handler):
    """Listens to the logger ``sqltree`` (so the call under test takes no option): the
    seconds of each outermost phase and of the grown levels, the longest time between two
    reports, and each report on standard error as it comes."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.started = time.perf_counter()
        self.last = self.started
        self.silence = (0.0, "")
        self.phases: dict[str, float] = {}
        self.level_seconds = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "sqltree_event", None)
        if event is None:
            return
        now = time.perf_counter()
        if now - self.last > self.silence[0]:
            self.silence = (now - self.last, event.message)
        self.last = now
        if event.depth == 0 and event.kind == "end":
            self.phases[event.phase] = self.phases.get(event.phase, 0.0) + event.seconds
        if event.phase == "grow" and event.kind == "step":
            self.level_seconds += float(event.details.get("seconds", 0.0))
        print(f"{now - self.started:8.2f} s  {event.message}", file=sys.stderr, flush=True)


def defaults_worker(args: argparse.Namespace) -> dict[str, Any]:
    """``sqltree.train(path, target)`` with no option at all (its own DuckDB database)."""
    import sqltree

    clock = PhaseClock()
    log = logging.getLogger("sqltree")
    log.addHandler(clock)
    log.setLevel(logging.DEBUG)
    start = time.perf_counter()
    model = sqltree.train(args.train, target=TARGET)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    log.removeHandler(clock)
    import pandas as pd  # after the call, as in ``sqltree_worker``

    truth = pd.read_parquet(args.test, columns=[TARGET])[TARGET].to_numpy()
    labels = model.predict(args.test)["prediction"].to_numpy()
    grow = clock.phases.get("grow", 0.0)
    pruning = model.stats.get("pruning") or {}
    return {
        "side": "sqltree",
        "seconds": seconds,
        "peak_rss_mb": rss,
        "nodes": model.n_nodes,
        "leaves": model.n_leaves,
        "depth": model.depth,
        "accuracy": float((labels == truth).mean()),
        "read_seconds": clock.phases.get("read", 0.0),
        "grow_seconds": clock.level_seconds,
        "finish_seconds": grow - clock.level_seconds,
        "prune_seconds": clock.phases.get("prune", 0.0),
        "prune_queries": pruning.get("queries"),
        "grown_leaves": pruning.get("leaves_before"),
        "levels": model.stats.get("levels", []),
        "queries": model.stats.get("queries"),
        "longest_silence": clock.silence,
    }


def postgres_table(url: str, path: str) -> Any:
    """A PostgreSQL table holding the Parquet file's rows, loaded on first use (by CSV COPY)
    and kept for later runs; its name comes from the file's (``bench_train_1m``)."""
    import duckdb
    import psycopg
    from sqlglot import exp

    name = "bench_" + os.path.splitext(os.path.basename(path))[0]
    table = exp.Table(this=exp.to_identifier(name, quoted=True))
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass(%s)", [table.sql("postgres")]).fetchone()
        if found[0] is not None:
            return table
        described = duckdb.sql(
            exp.select("*").from_(exp.func("read_parquet", exp.Literal.string(path))).sql("duckdb")
        ).description
        columns = [
            exp.ColumnDef(
                this=exp.to_identifier(d[0], quoted=True),
                kind=exp.DataType.build("DOUBLE" if str(d[1]) == "DOUBLE" else "TEXT"),
            )
            for d in described
        ]
        csv = os.path.join(tempfile.mkdtemp(prefix="sqltree-bench-"), "rows.csv")
        to_csv = "COPY (SELECT * FROM read_parquet(?)) TO " + exp.Literal.string(csv).sql("duckdb")
        duckdb.execute(to_csv + " (HEADER)", [path])
        create = exp.Create(this=exp.Schema(this=table, expressions=columns), kind="TABLE")
        conn.execute(create.sql("postgres"))
        copy = f"COPY {table.sql('postgres')} FROM STDIN (FORMAT csv, HEADER true)"
        with conn.cursor() as cur, cur.copy(copy) as out, open(csv, "rb") as f:
            while chunk := f.read(1 << 20):
                out.write(chunk)
        conn.execute(f"ANALYZE {table.sql('postgres')}")
        os.remove(csv)
    return table


def _depth(node: Any) -> int:
    return 0 if not node.children else 1 + max(_depth(c) for c in node.children)


# -- driver ------------------------------------------------------------------------------------
def run_side(side: str, args: argparse.Namespace, train: str, test: str) -> dict[str, Any]:
    cmd = [
        sys.executable, os.path.abspath(__file__), "--worker", side,
        "--train", train, "--test", test,
        "--max-depth", str(args.max_depth), "--algorithm", args.algorithm,
        "--threads", str(args.threads), "--task", args.task,
    ]
    if args.max_bins:
        cmd += ["--max-bins", str(args.max_bins)]
    if side == "sqltree":
        cmd += ["--threshold-search", args.threshold_search]
    if args.memory_limit:
        cmd += ["--memory-limit", args.memory_limit]
    cmd += ["--plan", args.plan]
    if args.postgres:
        cmd += ["--postgres", args.postgres]
    if args.keep_tree:
        cmd.append("--keep-tree")
    cmd += ["--pruning", args.pruning]
    if not args.score:
        cmd.append("--no-score")
    if args.defaults:
        cmd.append("--defaults")
    if args.subtree_raising:
        cmd.append("--subtree-raising")
    env = dict(os.environ)
    # scikit-learn's tree is single-threaded; numpy and arrow get the same core count.
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - start
    return result


def markdown(results: list[dict[str, Any]], rows: int, args: argparse.Namespace) -> str:
    base = next((r for r in results if r["side"] == "scikit-learn"), None)
    regression = args.task == "regression"
    held = "held-out RMSE / R²" if regression else "held-out acc."
    head = (
        "| side | rows | wall s | x sklearn | peak RSS MB | x sklearn | nodes / leaves "
        f"| depth | {held} | queries / scans per level | score s |"
    )
    lines = [head, "|" + " --- |" * 11]
    for r in results:
        ratio = f"{r['seconds'] / base['seconds']:.2f}" if base else ""
        rss_ratio = f"{r['peak_rss_mb'] / base['peak_rss_mb']:.2f}" if base else ""
        per_level = ""
        if r.get("levels"):
            qs = sorted({lv["queries"] for lv in r["levels"]})
            ss = sorted({lv["scans"] for lv in r["levels"]})
            per_level = f"{_span(qs)} / {_span(ss)}"
        score = (f"{r['rmse']:.4f} / {r['r2']:.4f}" if regression
                 else f"{100 * r['accuracy']:.2f}%")
        lines.append(
            f"| {r['label']} | {rows:,} | {r['seconds']:.1f} | {ratio} | "
            f"{r['peak_rss_mb']:.0f} | {rss_ratio} | {r['nodes']} / {r['leaves']} | "
            f"{r['depth']} | {score} | {per_level} | "
            f"{_fmt(r.get('predict_seconds'))} |"
        )
    return "\n".join(lines)


def defaults_markdown(results: list[dict[str, Any]], rows: int) -> str:
    """The ``--defaults`` table: both sides, the ratios from this run, and where sqltree's
    time went (read, grown levels, finishing the grown tree, pruning)."""
    base = next((r for r in results if r["side"] == "scikit-learn"), None)
    lines = [
        f"{rows:,} rows, each library's defaults; load average at the end: "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}",
        "",
        "| side | wall s | x sklearn | peak RSS MB | x sklearn | leaves | depth "
        "| held-out acc. | where the time went |",
        "|" + " --- |" * 9,
    ]
    for r in results:
        ratio = f"{r['seconds'] / base['seconds']:.2f}" if base else ""
        rss_ratio = f"{r['peak_rss_mb'] / base['peak_rss_mb']:.2f}" if base else ""
        if r["side"] == "sqltree":
            split = (
                f"read {r['read_seconds']:.1f}, grow {r['grow_seconds']:.1f} "
                f"({len(r['levels'])} levels, {r['grown_leaves']:,} leaves), finish "
                f"{r['finish_seconds']:.1f}, prune {r['prune_seconds']:.1f} "
                f"({100 * r['prune_seconds'] / r['seconds']:.0f}%, {r['prune_queries']} "
                f"queries); longest silence {r['longest_silence'][0]:.1f} s"
            )
        else:
            split = f"read + encode {r['read_seconds']:.1f}, fit {r['fit_seconds']:.1f}"
        lines.append(
            f"| {r['label']} | {r['seconds']:.1f} | {ratio} | {r['peak_rss_mb']:.0f} | "
            f"{rss_ratio} | {r['leaves']:,} | {r['depth']} | {100 * r['accuracy']:.2f}% | "
            f"{split} |"
        )
    return "\n".join(lines)


def _sklearn_kind(args: argparse.Namespace) -> str:
    if args.task == "regression":
        return "squared error"
    return "gini" if args.algorithm == "cart" else "entropy"


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def _span(values: list[int]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _sides(text: str) -> list[str]:
    sides = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in sides if s not in SIDES]
    if not sides or unknown:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(SIDES)}, got {text!r}"
        )
    return sides


def parser() -> argparse.ArgumentParser:
    """The command line; every option has a help line (``--help``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--rows", type=int, default=1_000_000, help="training rows (default: %(default)s)"
    )
    p.add_argument(
        "--max-depth", type=int, default=10,
        help="deepest test level, both sides (default: %(default)s)",
    )
    p.add_argument(
        "--algorithm", default="c4.5", choices=["c4.5", "id3", "cart"],
        help="sqltree's algorithm; scikit-learn grows an entropy tree, or a gini tree for cart "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--task", default="classification", choices=["classification", "regression"],
        help="regression: a numeric target (the hidden score plus noise), sqltree's CART "
        "regression tree against scikit-learn's DecisionTreeRegressor, held-out RMSE and R² "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--max-bins", type=int, default=0,
        help="sqltree's binned mode with this many bins per continuous feature "
        "(default: 0, exact)",
    )
    p.add_argument(
        "--threads", type=int, default=2,
        help="DuckDB threads, and OMP_NUM_THREADS for scikit-learn (default: %(default)s)",
    )
    p.add_argument(
        "--pruning", default="default", choices=["default", "none", "c4.5", "pessimistic"],
        help="sqltree's post-pruning; default: error-based for C4.5, none for ID3 and CART",
    )
    p.add_argument(
        "--subtree-raising", action="store_true",
        help="C4.5 pruning with subtree raising (recounts rows in the engine; slower)",
    )
    p.add_argument(
        "--no-score", dest="score", action="store_false",
        help="skip the compiled-SQL scoring (accuracy from the tree in Python)",
    )
    p.add_argument("--memory-limit", default=None, help="DuckDB memory_limit, e.g. 4GB")
    p.add_argument(
        "--threshold-search", default="auto",
        help="sqltree's exact threshold search: auto, full or bounded, several "
        "comma-separated (each its own sqltree run) (default: %(default)s)",
    )
    p.add_argument(
        "--plan", default="auto", choices=["auto", "tables", "select", "scan", "memory"],
        help="sqltree's training plan: temporary tables, single SELECTs over the source, or "
        "the rows read into numpy once (default: %(default)s, sqltree's choice: memory for "
        "classification up to half of the machine's memory at 25 bytes a cell, else tables)",
    )
    p.add_argument(
        "--postgres", metavar="URL", default=None,
        help="train sqltree on this PostgreSQL database instead of DuckDB (the training file "
        "is loaded into a table there on first use; implies --no-score)",
    )
    p.add_argument(
        "--sides", type=_sides, default="sqltree,sklearn",
        help="which sides to run, comma-separated (default: sqltree,sklearn)",
    )
    p.add_argument(
        "--data-dir", default=DEFAULT_DATA,
        help="folder for the generated Parquet files, reused across runs (default: "
        "$SQLTREE_BENCH_DATA or sqltree-bench in the temporary folder: %(default)s)",
    )
    p.add_argument(
        "--defaults", action="store_true",
        help="each library's defaults: sqltree.train(path, target) with no option (C4.5, "
        "J48's pruning with subtree raising, its own DuckDB database) against scikit-learn's "
        "DecisionTreeClassifier(criterion='entropy') with no depth or leaf limit; ignores the "
        "options that shape either side",
    )
    p.add_argument("--json", help="also write the raw results to this file")
    p.add_argument("--keep-tree", action="store_true", help="put sqltree's tree in --json")
    worker = p.add_argument_group("one side in this process (the driver runs these)")
    worker.add_argument(
        "--worker", choices=SIDES, help="train this side only and print its result as JSON"
    )
    worker.add_argument("--train", help="the worker's training file (Parquet)")
    worker.add_argument("--test", help="the worker's held-out file (Parquet)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)

    if args.worker:
        if not (args.train and args.test):
            parser().error("--worker needs --train and --test")
        workers = {"sqltree": sqltree_worker, "sklearn": sklearn_worker}
        if args.defaults:
            workers["sqltree"] = defaults_worker
        worker = workers[args.worker]
        print(json.dumps(worker(args)))
        return

    train, test = ensure_data(args.rows, args.data_dir, args.task)
    results = []
    searches = args.threshold_search.split(",")
    runs = [(side, search) for side in args.sides
            for search in (searches if side == "sqltree" else [""])]
    for side, search in runs:
        args.threshold_search = search or "auto"
        result = run_side(side, args, train, test)
        mode = f"binned {args.max_bins}" if args.max_bins else f"exact ({args.threshold_search})"
        where = (" on PostgreSQL" if args.postgres else "") + (
            f", {args.plan} plan" if args.plan != "auto" else ""
        )
        algorithm = "regression" if args.task == "regression" else args.algorithm
        result["label"] = (
            f"sqltree {algorithm} {mode}{where}" if side == "sqltree"
            else "scikit-learn " + _sklearn_kind(args)
        )
        if args.defaults:
            result["label"] = (
                "sqltree `train(path, target)`" if side == "sqltree"
                else "scikit-learn `DecisionTreeClassifier(criterion='entropy')`"
            )
        results.append(result)
        print(f"{result['label']}: {result['seconds']:.1f} s", file=sys.stderr, flush=True)
    if args.defaults:
        print(defaults_markdown(results, args.rows))
        _write_json(args.json, results)
        return
    print(
        f"{args.rows:,} rows, max_depth={args.max_depth}, threads={args.threads}"
        + (f", memory_limit={args.memory_limit}" if args.memory_limit else "")
        + f", sqltree pruning={args.pruning}"
        + (" with subtree raising" if args.subtree_raising else "")
        + "\n"
    )
    print(markdown(results, args.rows, args))
    for r in results:
        if r.get("levels"):
            print(f"\n{r['label']} per level:\n")
            print("| level | nodes | splits | search | queries | scans | s |")
            print("| --- | --- | --- | --- | --- | --- | --- |")
            for lv in r["levels"]:
                print(
                    f"| {lv['depth']} | {lv['nodes']} | {lv['splits']} | "
                    f"{lv.get('search', '')} | {lv['queries']} | {lv['scans']} | "
                    f"{lv['seconds']:.2f} |"
                )
    _write_json(args.json, results)


def _write_json(path: str | None, results: list[dict[str, Any]]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
