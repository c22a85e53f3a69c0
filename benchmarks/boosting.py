"""Gradient boosting: sqltree in DuckDB (the SQL rounds, or the memory plan) against LightGBM
and scikit-learn's ``HistGradientBoostingClassifier`` on the benchmark table.

Each side runs in its own process on the same Parquet file with the same settings (rounds,
leaves, bins, ``min_samples_leaf``, no early stopping) and reports its wall time (read,
encode and fit), its peak RSS and the held-out log loss and accuracy.

``--task regression`` boosts squared error on the regression benchmark table and adds
JoinBoost (gradient boosting in DuckDB by SQL, residuals kept by ``UPDATE``) as a side: its
table is prepared as a user would (nominal columns as integer codes, NULLs as a value below
every other), and that preparation counts in its time. Held-out RMSE and R² replace log loss.

Usage::

    python benchmarks/boosting.py --rows 1000000 --rounds 100
    python benchmarks/boosting.py --rows 100000 --rounds 20 --sides sqltree,lightgbm
    python benchmarks/boosting.py --task regression --rounds 100 --leaves 8 \
        --sides sqltree,lightgbm,joinboost
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

from run import DEFAULT_DATA, NOMINAL, TARGET, ensure_data, human_rows, peak_rss_mb  # noqa: E402

SIDES = ("sqltree", "lightgbm", "sklearn")


def _frame(path: str, categories: dict[str, Any] | None = None) -> tuple[Any, Any, Any]:
    import pandas as pd

    frame = pd.read_parquet(path)
    categories = categories or {c: sorted(frame[c].dropna().unique()) for c in NOMINAL}
    x = frame.drop(columns=TARGET)
    for c, values in categories.items():
        x[c] = pd.Categorical(x[c], categories=values)
    return x, frame[TARGET].to_numpy(), categories


def _held_out_numbers(predicted: Any, truth: Any) -> dict[str, float]:
    import numpy as np

    error = np.asarray(predicted, dtype=float) - truth
    rmse = float(np.sqrt(np.mean(error * error)))
    return {"rmse": rmse, "r2": 1.0 - rmse * rmse / float(np.mean((truth - truth.mean()) ** 2))}


def _held_out(proba: Any, classes: Any, truth: Any) -> dict[str, float]:
    import numpy as np
    from sklearn.metrics import log_loss

    return {"log_loss": float(log_loss(truth, proba, labels=list(classes))),
            "accuracy": float((np.asarray(classes)[np.argmax(proba, axis=1)] == truth).mean())}


def lightgbm_worker(args: argparse.Namespace) -> dict[str, Any]:
    import lightgbm
    import numpy as np

    start = time.perf_counter()
    x, y, categories = _frame(args.train)
    regression = args.task == "regression"
    kind = lightgbm.LGBMRegressor if regression else lightgbm.LGBMClassifier
    model = kind(
        n_estimators=args.rounds, num_leaves=args.leaves, learning_rate=args.learning_rate,
        max_bin=args.max_bins, min_child_samples=args.min_samples_leaf, reg_lambda=0.0,
        n_jobs=args.threads, verbose=-1)
    model.fit(x, y)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    tx, ty, _ = _frame(args.test, categories)
    quality = (_held_out_numbers(model.predict(tx), ty) if regression
               else _held_out(model.predict_proba(tx), np.unique(y), ty))
    return {"side": "LightGBM", "seconds": seconds, "peak_rss_mb": rss, **quality}


def sklearn_worker(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    regression = args.task == "regression"
    start = time.perf_counter()
    x, y, categories = _frame(args.train)
    kind = HistGradientBoostingRegressor if regression else HistGradientBoostingClassifier
    model = kind(
        max_iter=args.rounds, max_leaf_nodes=args.leaves, learning_rate=args.learning_rate,
        max_bins=args.max_bins, min_samples_leaf=args.min_samples_leaf, early_stopping=False,
        categorical_features="from_dtype", random_state=0)
    model.fit(x, y)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    tx, ty, _ = _frame(args.test, categories)
    quality = (_held_out_numbers(model.predict(tx), ty) if regression
               else _held_out(model.predict_proba(tx), np.unique(y), ty))
    return {"side": "scikit-learn HGB", "seconds": seconds, "peak_rss_mb": rss, **quality}


def joinboost_worker(args: argparse.Namespace) -> dict[str, Any]:
    import duckdb
    from joinboost.app import GradientBoosting
    from joinboost.joingraph import JoinGraph

    if args.task != "regression":
        raise SystemExit("JoinBoost's released code boosts squared error only: --task regression")
    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    columns = [r[0] for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?)",
                                         [args.train]).fetchall() if r[0] != TARGET]
    numeric = [c for c in columns if c not in NOMINAL]

    def prepare(name: str, path: str) -> None:
        # codes for the nominal columns and a value below every other for NULL: JoinBoost
        # splits numbers only and has no missing-value rule
        parts = [f'COALESCE("{c}", -1e30) AS "{c}"' for c in numeric] + [
            f'COALESCE(DENSE_RANK() OVER (ORDER BY "{c}") * ("{c}" IS NOT NULL)::INT, 0) AS "{c}"'
            for c in NOMINAL]
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT {', '.join(parts)}, "
                    f'"{TARGET}" FROM read_parquet(?)', [path])

    start = time.perf_counter()
    prepare("train", args.train)
    graph = JoinGraph(exe=con)
    graph.add_relation("train", X=columns, y=TARGET)
    model = GradientBoosting(learning_rate=args.learning_rate, max_leaves=args.leaves,
                             max_depth=64, iteration=args.rounds)
    model.fit(graph)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    prepare("test", args.test)
    held_out = JoinGraph(exe=con)
    held_out.add_relation("test", X=columns, y=TARGET)
    predicted = model.predict(held_out, input_mode="FULL_JOIN_JG")
    truth = con.execute(f'SELECT "{TARGET}" FROM test').fetchnumpy()[TARGET]
    return {"side": "JoinBoost", "seconds": seconds, "peak_rss_mb": rss,
            **_held_out_numbers(predicted, truth)}


def sqltree_worker(args: argparse.Namespace) -> dict[str, Any]:
    import duckdb
    import pandas as pd

    import sqltree
    from sqltree.engines.duckdb import DuckDBEngine

    engine = DuckDBEngine(duckdb.connect(), threads=args.threads)
    start = time.perf_counter()
    model = sqltree.train(args.train, TARGET, algorithm="gradient-boosting", task=args.task,
                          max_iter=args.rounds, max_leaf_nodes=args.leaves,
                          learning_rate=args.learning_rate, max_bins=args.max_bins,
                          min_samples_leaf=args.min_samples_leaf, early_stopping=False,
                          connection=engine, plan=args.plan)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    test = pd.read_parquet(args.test)
    rounds = model.stats["rounds"]
    truth = test[TARGET].to_numpy()
    quality = (_held_out_numbers(model.predict_frame(test), truth) if args.task == "regression"
               else _held_out(model.predict_proba_frame(test), model.classes, truth))
    return {"side": f"sqltree ({model.stats['plan']})", "seconds": seconds, "peak_rss_mb": rss,
            **quality, "seconds_per_round": [round(r["seconds"], 3) for r in rounds]}


def run_side(side: str, args: argparse.Namespace, train: str, test: str) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--train", train,
           "--test", test, "--rounds", str(args.rounds), "--leaves", str(args.leaves),
           "--learning-rate", str(args.learning_rate), "--max-bins", str(args.max_bins),
           "--min-samples-leaf", str(args.min_samples_leaf), "--threads", str(args.threads),
           "--plan", args.plan, "--task", args.task]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    base = next((r for r in results if r["side"] == "LightGBM"), None)
    quality = ("rmse", "r2") if args.task == "regression" else ("log_loss", "accuracy")
    titles = ("held-out RMSE", "R²") if args.task == "regression" else (
        "held-out log loss", "accuracy")
    lines = [f"{human_rows(args.rows)} rows, {args.task}, {args.rounds} rounds, "
             f"{args.leaves} leaves, {args.max_bins} bins, {args.threads} threads",
             "", f"| side | seconds | peak MB | {titles[0]} | {titles[1]} | time / LightGBM |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        ratio = f"{r['seconds'] / base['seconds']:.1f}x" if base else ""
        lines.append(f"| {r['side']} | {r['seconds']:.1f} | {r['peak_rss_mb']:,.0f} | "
                     f"{r[quality[0]]:.4f} | {r[quality[1]]:.4f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--leaves", type=int, default=31)
    p.add_argument("--learning-rate", type=float, default=0.1)
    p.add_argument("--max-bins", type=int, default=255)
    p.add_argument("--min-samples-leaf", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--plan", default="tables", choices=["tables", "memory"])
    p.add_argument("--task", default="classification", choices=["classification", "regression"])
    p.add_argument("--sides", default=",".join(SIDES))
    p.add_argument("--data-dir", default=DEFAULT_DATA)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--train", help=argparse.SUPPRESS)
    p.add_argument("--test", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        workers = {"sqltree": sqltree_worker, "lightgbm": lightgbm_worker,
                   "sklearn": sklearn_worker, "joinboost": joinboost_worker}
        print(json.dumps(workers[args.worker](args)))
        return
    train, test = ensure_data(args.rows, args.data_dir, task=args.task)
    results = [run_side(side, args, train, test) for side in args.sides.split(",")]
    print(markdown(results, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
