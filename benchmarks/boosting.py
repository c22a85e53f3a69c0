"""Gradient boosting: sqltree in DuckDB (the SQL rounds, or the memory plan) against LightGBM
and scikit-learn's ``HistGradientBoostingClassifier`` on the benchmark table.

Each side runs in its own process on the same Parquet file with the same settings (rounds,
leaves, bins, ``min_samples_leaf``, no early stopping) and reports its wall time (read,
encode and fit), its peak RSS and the held-out log loss and accuracy.

Usage::

    python benchmarks/boosting.py --rows 1000000 --rounds 100
    python benchmarks/boosting.py --rows 100000 --rounds 20 --sides sqltree,lightgbm
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
    classes = np.unique(y)
    model = lightgbm.LGBMClassifier(
        n_estimators=args.rounds, num_leaves=args.leaves, learning_rate=args.learning_rate,
        max_bin=args.max_bins, min_child_samples=args.min_samples_leaf, reg_lambda=0.0,
        n_jobs=args.threads, verbose=-1)
    model.fit(x, y)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    tx, ty, _ = _frame(args.test, categories)
    return {"side": "LightGBM", "seconds": seconds, "peak_rss_mb": rss,
            **_held_out(model.predict_proba(tx), classes, ty)}


def sklearn_worker(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingClassifier

    start = time.perf_counter()
    x, y, categories = _frame(args.train)
    model = HistGradientBoostingClassifier(
        max_iter=args.rounds, max_leaf_nodes=args.leaves, learning_rate=args.learning_rate,
        max_bins=args.max_bins, min_samples_leaf=args.min_samples_leaf, early_stopping=False,
        categorical_features="from_dtype", random_state=0)
    model.fit(x, y)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    tx, ty, _ = _frame(args.test, categories)
    return {"side": "scikit-learn HGB", "seconds": seconds, "peak_rss_mb": rss,
            **_held_out(model.predict_proba(tx), np.unique(y), ty)}


def sqltree_worker(args: argparse.Namespace) -> dict[str, Any]:
    import duckdb
    import pandas as pd

    import sqltree
    from sqltree.engines.duckdb import DuckDBEngine

    engine = DuckDBEngine(duckdb.connect(), threads=args.threads)
    start = time.perf_counter()
    model = sqltree.train(args.train, TARGET, algorithm="gradient-boosting",
                          max_iter=args.rounds, max_leaf_nodes=args.leaves,
                          learning_rate=args.learning_rate, max_bins=args.max_bins,
                          min_samples_leaf=args.min_samples_leaf, early_stopping=False,
                          connection=engine, plan=args.plan)
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    test = pd.read_parquet(args.test)
    rounds = model.stats["rounds"]
    return {"side": f"sqltree ({model.stats['plan']})", "seconds": seconds, "peak_rss_mb": rss,
            **_held_out(model.predict_proba_frame(test), model.classes, test[TARGET].to_numpy()),
            "seconds_per_round": [round(r["seconds"], 3) for r in rounds]}


def run_side(side: str, args: argparse.Namespace, train: str, test: str) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--train", train,
           "--test", test, "--rounds", str(args.rounds), "--leaves", str(args.leaves),
           "--learning-rate", str(args.learning_rate), "--max-bins", str(args.max_bins),
           "--min-samples-leaf", str(args.min_samples_leaf), "--threads", str(args.threads),
           "--plan", args.plan]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    base = next((r for r in results if r["side"] == "LightGBM"), None)
    lines = [f"{human_rows(args.rows)} rows, {args.rounds} rounds, {args.leaves} leaves, "
             f"{args.max_bins} bins, {args.threads} threads",
             "", "| side | seconds | peak MB | held-out log loss | accuracy | time / LightGBM |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        ratio = f"{r['seconds'] / base['seconds']:.1f}x" if base else ""
        lines.append(f"| {r['side']} | {r['seconds']:.1f} | {r['peak_rss_mb']:,.0f} | "
                     f"{r['log_loss']:.4f} | {r['accuracy']:.4f} | {ratio} |")
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
    p.add_argument("--sides", default=",".join(SIDES))
    p.add_argument("--data-dir", default=DEFAULT_DATA)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--train", help=argparse.SUPPRESS)
    p.add_argument("--test", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        workers = {"sqltree": sqltree_worker, "lightgbm": lightgbm_worker,
                   "sklearn": sklearn_worker}
        print(json.dumps(workers[args.worker](args)))
        return
    train, test = ensure_data(args.rows, args.data_dir)
    results = [run_side(side, args, train, test) for side in args.sides.split(",")]
    print(markdown(results, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
