"""Benchmark sqltree's CART against Spark MLlib's DecisionTreeClassifier on one SparkSession.

Both sides read the same Parquet file (``benchmarks/generate.py``) as a user would: sqltree
trains on a temp view over it (``sqltree.train(view, connection=spark)``, binned CART), MLlib
fits the pipeline a user writes for a table of numbers and text with NULLs (``StringIndexer``
for the nominal features and the label, ``Imputer`` for the continuous ones,
``VectorAssembler``, ``DecisionTreeClassifier(maxDepth, maxBins)``). For each side: the wall
time of training, the Spark jobs it ran (each side runs under a job group of its own, counted
by the status tracker), the accuracy on the held-out file, and the peak resident memory of the
Python driver and of the driver's JVM after it; for sqltree also the seconds, jobs and nodes
of every level.

MLlib's ``maxBins`` must exceed the values of every nominal feature (``n5`` has 50, and the
indexer adds one for NULL), so MLlib runs at 64 bins only; sqltree at each ``--bins``.

``--gbt N``: gradient boosting instead, on a binary target (whether ``y`` is its first class),
N rounds of depth ``--depth``: sqltree's ``algorithm="gradient-boosting"`` (binary log loss,
``max_leaf_nodes=None``, ``min_samples_leaf=1``, no early stopping) against MLlib's
``GBTClassifier(maxIter=N, maxDepth, stepSize=0.1)`` in the same pipeline; held-out log loss
beside accuracy.

``--forest N``: random forests of N trees of depth ``--depth`` instead: sqltree's
``algorithm="random-forest"`` (``max_features="sqrt"``, bootstrap) against MLlib's
``RandomForestClassifier(numTrees=N, featureSubsetStrategy="sqrt")`` in the tree's pipeline.

Usage::

    python benchmarks/spark.py --rows 1000000
    python benchmarks/spark.py --rows 1000000 --bins 32 64 --master local[2] --json out.json
    python benchmarks/spark.py --rows 1000000 --gbt 100 --depth 5 --bins 64
    python benchmarks/spark.py --rows 1000000 --forest 100 --bins 64
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

import generate  # noqa: E402
from run import (  # noqa: E402
    DEFAULT_DATA,
    NOMINAL,
    TARGET,
    ensure_data,
    human_rows,
    process_peak_mb,
)

CONTINUOUS = [f"x{j}" for j in range(16 - len(generate.NOMINAL_LEVELS))]
MLLIB_BINS = 64


def jvm_pid(spark: Any) -> int | None:
    """The process id of the driver's JVM (started by pyspark), if this process started it."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)


def session(master: str, driver_memory: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(master)
        .appName("sqltree-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.retainedJobs", "100000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def jobs_of(spark: Any, group: str) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def sqltree_side(spark: Any, bins: int, depth: int, plan: str = "auto",
                 routing: str | None = None, table: str = "bench_train") -> dict[str, Any]:
    """``routing``: the level scan's ``Engine.SCAN_ROUTING`` for this run (None: Spark's)."""
    import sqltree
    from sqltree.engines.spark import SparkEngine

    engine = SparkEngine(spark)
    if routing:
        engine.SCAN_ROUTING = routing  # type: ignore[misc]
    start = time.perf_counter()
    model = sqltree.train(table, target=TARGET, algorithm="cart", max_depth=depth,
                          max_bins=bins, connection=engine, plan=plan)
    seconds = time.perf_counter() - start
    scored = model.predict("bench_test", connection=spark)
    accuracy = float((scored["prediction"] == scored[TARGET]).mean())
    stats = model.stats
    routed = f", routing by {routing}" if routing else ""
    return {
        "side": f"sqltree cart binned {bins}, {stats['plan']} plan{routed}",
        "seconds": round(seconds, 1),
        "jobs": engine.stats.jobs,
        "growth_jobs": stats["jobs"],
        "queries": engine.stats.queries,
        "plan": stats["plan"],
        "leaves": model.n_leaves,
        "accuracy": round(accuracy, 4),
        "levels": [
            {"depth": lv["depth"], "nodes": lv["nodes"], "seconds": round(lv["seconds"], 2),
             "jobs": lv["jobs"], "queries": lv["queries"]}
            for lv in stats["levels"]
        ],
        "shuffle_partitions": engine.shuffle_partitions(stats["rows"]),
        "python_peak_mb": process_peak_mb(),
        "jvm_peak_mb": process_peak_mb(jvm_pid(spark) or 0),
    }


def sqltree_forest_side(spark: Any, bins: int, depth: int, trees: int,
                        table: str = "bench_train") -> dict[str, Any]:
    import sqltree
    from sqltree.engines.spark import SparkEngine

    engine = SparkEngine(spark)
    start = time.perf_counter()
    model = sqltree.train(table, target=TARGET, algorithm="random-forest", n_estimators=trees,
                          max_depth=depth, max_bins=bins, max_features="sqrt",
                          random_state=0, connection=engine)
    seconds = time.perf_counter() - start
    test = spark.table("bench_test").toPandas()
    accuracy = float((model.predict_frame(test) == test[TARGET].to_numpy()).mean())
    levels = model.stats["levels"]
    return {
        "side": f"sqltree random forest binned {bins}, {model.stats['plan']} plan",
        "seconds": round(seconds, 1),
        "jobs": engine.stats.jobs,
        "queries": engine.stats.queries,
        "batches": model.stats["batches"],
        "leaves": model.n_leaves,
        "accuracy": round(accuracy, 4),
        "seconds_histograms": round(sum(lv["histogram_seconds"] for lv in levels), 1),
        "seconds_routing": round(sum(lv["route_seconds"] for lv in levels), 1),
        "statements_per_level": sorted({lv["statements"] for lv in levels}),
        "python_peak_mb": process_peak_mb(),
        "jvm_peak_mb": process_peak_mb(jvm_pid(spark) or 0),
    }


BINARY = "is_first"
"""The binary target of ``--gbt``: whether ``y`` is the first of its classes."""


def binary_views(spark: Any, first: str) -> None:
    for name in ("bench_train", "bench_test", "bench_warmup"):
        if spark.catalog.tableExists(name):
            features = ", ".join(c for c in spark.table(name).columns if c != TARGET)
            spark.sql(f"SELECT {features}, CASE WHEN {TARGET} = '{first}' THEN 'yes' "
                      f"ELSE 'no' END AS {BINARY} FROM {name} WHERE {TARGET} IS NOT NULL"
                      ).createOrReplaceTempView(f"{name}_binary")


def log_loss(p_yes: Any, truth_yes: Any) -> float:
    import numpy as np

    p = np.clip(np.asarray(p_yes, dtype=float), 1e-15, 1 - 1e-15)
    t = np.asarray(truth_yes, dtype=bool)
    return float(-np.mean(np.where(t, np.log(p), np.log1p(-p))))


def sqltree_gbt_side(spark: Any, bins: int, depth: int, rounds: int,
                     table: str = "bench_train_binary") -> dict[str, Any]:
    import sqltree
    from sqltree.engines.spark import SparkEngine

    engine = SparkEngine(spark)
    start = time.perf_counter()
    model = sqltree.train(table, target=BINARY, algorithm="gradient-boosting",
                          max_iter=rounds, max_depth=depth, max_leaf_nodes=None,
                          min_samples_leaf=1, learning_rate=0.1, max_bins=bins,
                          early_stopping=False, connection=engine)
    seconds = time.perf_counter() - start
    test = spark.table("bench_test_binary").toPandas()
    proba = model.predict_proba_frame(test)[:, list(model.classes).index("yes")]
    truth = (test[BINARY] == "yes").to_numpy()
    rounds_seconds = [r["seconds"] for r in model.stats["rounds"]]
    return {
        "side": f"sqltree gradient boosting binned {bins}, {model.stats['plan']} plan",
        "seconds": round(seconds, 1),
        "jobs": engine.stats.jobs,
        "queries": engine.stats.queries,
        "leaves": model.n_leaves,
        "accuracy": round(float(((proba > 0.5) == truth).mean()), 4),
        "log_loss": round(log_loss(proba, truth), 4),
        "seconds_per_round": [round(x, 2) for x in rounds_seconds],
        "python_peak_mb": process_peak_mb(),
        "jvm_peak_mb": process_peak_mb(jvm_pid(spark) or 0),
    }


def mllib_gbt_side(spark: Any, depth: int, rounds: int,
                   table: str = "bench_train_binary") -> dict[str, Any]:
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import GBTClassifier
    from pyspark.ml.feature import Imputer, StringIndexer, VectorAssembler
    from pyspark.ml.functions import vector_to_array

    indexed = [f"{c}_index" for c in NOMINAL]
    imputed = [f"{c}_imputed" for c in CONTINUOUS]
    pipeline = Pipeline(stages=[
        StringIndexer(inputCols=NOMINAL, outputCols=indexed, handleInvalid="keep"),
        StringIndexer(inputCol=BINARY, outputCol="label", stringOrderType="alphabetAsc"),
        Imputer(inputCols=CONTINUOUS, outputCols=imputed),
        VectorAssembler(inputCols=[*imputed, *indexed], outputCol="features"),
        GBTClassifier(labelCol="label", featuresCol="features", maxDepth=depth,
                      maxBins=MLLIB_BINS, maxIter=rounds, stepSize=0.1, seed=0),
    ])
    start = time.perf_counter()
    model = pipeline.fit(spark.table(table))
    seconds = time.perf_counter() - start
    # "no" < "yes" alphabetically: label 1 is "yes"
    scored = model.transform(spark.table("bench_test_binary")).select(
        vector_to_array("probability")[1].alias("p"), "label").toPandas()
    truth = scored["label"].to_numpy() == 1.0
    return {
        "side": f"MLlib GBTClassifier maxBins {MLLIB_BINS}",
        "seconds": round(seconds, 1),
        "leaves": sum((t.numNodes + 1) // 2 for t in model.stages[-1].trees),
        "accuracy": round(float(((scored["p"] > 0.5).to_numpy() == truth).mean()), 4),
        "log_loss": round(log_loss(scored["p"], truth), 4),
        "python_peak_mb": process_peak_mb(),
        "jvm_peak_mb": process_peak_mb(jvm_pid(spark) or 0),
    }


def mllib_side(spark: Any, depth: int, table: str = "bench_train", trees: int = 0
               ) -> dict[str, Any]:
    """MLlib's tree, or with ``trees`` its ``RandomForestClassifier`` of that many trees
    (each node choosing among the square root of the features, as sqltree's forest)."""
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import DecisionTreeClassifier, RandomForestClassifier
    from pyspark.ml.feature import Imputer, StringIndexer, VectorAssembler

    indexed = [f"{c}_index" for c in NOMINAL]
    imputed = [f"{c}_imputed" for c in CONTINUOUS]
    pipeline = Pipeline(stages=[
        StringIndexer(inputCols=[*NOMINAL, TARGET], outputCols=[*indexed, "label"],
                      handleInvalid="keep"),
        Imputer(inputCols=CONTINUOUS, outputCols=imputed),
        VectorAssembler(inputCols=[*imputed, *indexed], outputCol="features"),
        RandomForestClassifier(labelCol="label", featuresCol="features", maxDepth=depth,
                               maxBins=MLLIB_BINS, numTrees=trees,
                               featureSubsetStrategy="sqrt", seed=0) if trees else
        DecisionTreeClassifier(labelCol="label", featuresCol="features", maxDepth=depth,
                               maxBins=MLLIB_BINS),
    ])
    train = spark.table(table).where(f"{TARGET} IS NOT NULL")
    start = time.perf_counter()
    model = pipeline.fit(train)
    seconds = time.perf_counter() - start
    scored = model.transform(spark.table("bench_test"))
    accuracy = scored.selectExpr("avg(CAST(prediction = label AS DOUBLE))").first()[0]
    fitted = model.stages[-1]
    estimators = fitted.trees if trees else [fitted]
    return {
        "side": f"MLlib {'RandomForest' if trees else 'DecisionTree'}Classifier "
                f"maxBins {MLLIB_BINS}",
        "seconds": round(seconds, 1),
        # binary trees: one leaf more than tests
        "leaves": sum((int(t.numNodes) + 1) // 2 for t in estimators),
        "depth": max(int(t.depth) for t in estimators),
        "accuracy": round(float(accuracy), 4),
        "python_peak_mb": process_peak_mb(),
        "jvm_peak_mb": process_peak_mb(jvm_pid(spark) or 0),
    }


def in_group(spark: Any, group: str, work: Any) -> dict[str, Any]:
    """Run ``work()`` under the job group ``group``; its result with the jobs it ran."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    try:
        result = work()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
        context.setLocalProperty("spark.job.description", None)
    # sqltree's engine runs each statement under a group of its own and counts them itself
    result.setdefault("jobs", jobs_of(spark, group))
    return result


def markdown(results: list[dict[str, Any]], rows: int, master: str, depth: int) -> str:
    mllib = next((r for r in results if r["side"].startswith("MLlib")), None)
    lines = [
        f"{human_rows(rows)} rows, {master}, depth {depth}",
        "",
        "| side | seconds | / MLlib | jobs | held-out accuracy | leaves | JVM peak MB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    if any("log_loss" in r for r in results):
        lines[2] = lines[2].replace("held-out accuracy", "held-out accuracy | log loss")
        lines[3] += " --- |"
    for r in results:
        ratio = f"{r['seconds'] / mllib['seconds']:.2f}x" if mllib else ""
        loss = f" {r['log_loss']} |" if "log_loss" in r else ""
        lines.append(
            f"| {r['side']} | {r['seconds']} | {ratio} | {r['jobs']} | "
            f"{r['accuracy']} |{loss} {r['leaves']} | {r['jvm_peak_mb'] or 0:.0f} |"
        )
    for r in results:
        if "levels" in r:
            lines += ["", f"{r['side']}: per level (seconds / jobs / nodes)", ""]
            lines.append(", ".join(
                f"{lv['depth']}: {lv['seconds']} s / {lv['jobs']} / {lv['nodes']}"
                for lv in r["levels"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--bins", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--sides", default="sqltree,mllib")
    parser.add_argument("--plans", default="auto",
                        help="sqltree's training plans, comma-separated (auto, scan, tables)")
    parser.add_argument("--routings", default="",
                        help="the level scan's routings to run, comma-separated (rewrite, "
                        "path; default: Spark's own, Engine.SCAN_ROUTING)")
    parser.add_argument("--data-dir", default=DEFAULT_DATA)
    parser.add_argument("--warmup-rows", type=int, default=50_000,
                        help="train each side once on this many rows first, untimed, so that "
                        "neither pays alone for the JVM's first compilations (0: no warm-up)")
    parser.add_argument("--gbt", type=int, default=0, metavar="ROUNDS",
                        help="gradient boosting of ROUNDS rounds on a binary target instead")
    parser.add_argument("--forest", type=int, default=0, metavar="TREES",
                        help="random forests of TREES trees (max_features sqrt) instead")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)

    train_path, test_path = ensure_data(args.rows, args.data_dir)
    spark = session(args.master, args.driver_memory)
    spark.read.parquet(train_path).createOrReplaceTempView("bench_train")
    spark.read.parquet(test_path).createOrReplaceTempView("bench_test")
    sides = args.sides.split(",")
    if args.warmup_rows:
        spark.sql(f"SELECT * FROM bench_train LIMIT {int(args.warmup_rows)}"
                  ).createOrReplaceTempView("bench_warmup")
    if args.gbt:
        first = spark.sql(f"SELECT MIN({TARGET}) FROM bench_train").first()[0]
        binary_views(spark, first)
        many_trees(spark, args, sides, "gbt")
        spark.stop()
        return
    if args.forest:
        many_trees(spark, args, sides, "forest")
        spark.stop()
        return
    if args.warmup_rows:
        if "sqltree" in sides:
            import sqltree
            sqltree.train("bench_warmup", target=TARGET, algorithm="cart",
                          max_depth=args.depth, max_bins=args.bins[0], connection=spark)
        if "mllib" in sides:
            mllib_side(spark, args.depth, "bench_warmup")
    results = []
    if "sqltree" in sides:
        for bins in args.bins:
            for plan in args.plans.split(","):
                for routing in args.routings.split(","):
                    results.append(in_group(
                        spark, f"sqltree-{bins}-{plan}-{routing}",
                        lambda b=bins, p=plan, r=routing: sqltree_side(
                            spark, b, args.depth, p, r or None)))
                    print(json.dumps(results[-1]), flush=True)
    if "mllib" in sides:
        results.append(in_group(spark, "mllib", lambda: mllib_side(spark, args.depth)))
        print(json.dumps(results[-1]), flush=True)
    print(markdown(results, args.rows, args.master, args.depth))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": args.rows, "master": args.master, "results": results}, f,
                      indent=2)
    spark.stop()


def many_trees(spark: Any, args: argparse.Namespace, sides: list[str], what: str) -> None:
    """The ``--gbt`` or ``--forest`` comparison (``what``): both sides warmed up on the first
    rows with two rounds or trees, then timed."""
    count = getattr(args, what)
    train, warmup = ("bench_train_binary", "bench_warmup_binary") if what == "gbt" else (
        "bench_train", "bench_warmup")

    def ours(bins: int, n: int, table: str) -> dict[str, Any]:
        side = sqltree_gbt_side if what == "gbt" else sqltree_forest_side
        return side(spark, bins, args.depth, n, table)

    def theirs(n: int, table: str) -> dict[str, Any]:
        if what == "gbt":
            return mllib_gbt_side(spark, args.depth, n, table)
        return mllib_side(spark, args.depth, table, trees=n)

    if args.warmup_rows:
        if "sqltree" in sides:
            ours(args.bins[0], 2, warmup)
        if "mllib" in sides:
            theirs(2, warmup)
    results = []
    if "sqltree" in sides:
        for bins in args.bins:
            results.append(in_group(spark, f"sqltree-{what}-{bins}",
                                    lambda b=bins: ours(b, count, train)))
            print(json.dumps(results[-1]), flush=True)
    if "mllib" in sides:
        results.append(in_group(spark, f"mllib-{what}", lambda: theirs(count, train)))
        print(json.dumps(results[-1]), flush=True)
    unit = "boosting rounds" if what == "gbt" else "trees"
    print(markdown(results, args.rows, args.master, args.depth).replace(
        "rows,", f"rows, {count} {unit},", 1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": args.rows, "master": args.master, what: count,
                       "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
