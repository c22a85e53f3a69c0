"""Apache Spark SQL through a SparkSession: training for data that does not fit one machine.

Temporary tables are temp views over checkpointed DataFrames: every level of the tree is read
by several queries (histogram, partition), so it is computed once and stored, and its plan
no longer carries the levels before it. Nothing here assumes local mode: files are read by
the executors, and only aggregates come back to the driver.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

from sqlglot import exp

from .base import UNPIVOT, Engine, EngineStats, arrow_rows
from .select_plan import TABLES

# Types a CSV column keeps after Spark's inference; anything else (booleans from true/false,
# dates, timestamps) is read back as text, as DuckDB's reader does, so that a file gives the
# same features and the same values on every engine.
_CSV_KEPT_TYPES = ("IntegerType", "LongType", "DoubleType")

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
HUGE_METHOD_LIMIT = "spark.sql.codegen.hugeMethodLimit"
JIT_METHOD_BYTES = 8000
"""HotSpot compiles no method of more bytecode than this (``HugeMethodLimit``): a larger
generated method runs in the bytecode interpreter. Spark's default limit (65535) lets
whole-stage code of that size through; at this one Spark compiles such a stage expression by
expression instead. Binning ten columns of 1M rows by CASE over 64 edges: 5.3-6.6 s at
Spark's default, 0.9-2.1 s at this limit."""

# The local properties SparkContext.setJobGroup sets; restored after each statement so the
# caller's own jobs keep their group and description.
_JOB_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


@dataclass
class SparkStats(EngineStats):
    """Engine counters plus the Spark jobs each statement ran."""

    jobs_per_statement: list[int] | None = None
    """Jobs of each statement in the order they ran; None where Spark cannot tell (Connect)."""

    @property
    def jobs(self) -> int | None:
        """Spark jobs run by this engine's statements so far (None on Spark Connect)."""
        return None if self.jobs_per_statement is None else sum(self.jobs_per_statement)


class SparkEngine(Engine):
    """Run queries on a SparkSession.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        A classic or Spark Connect session. sqltree creates temp views named ``sqltree_*`` in
        it and drops them, and frees their stored rows, when training ends.

    Notes
    -----
    ``stats.jobs`` counts the Spark jobs sqltree's statements ran (classic sessions only): each
    statement runs under a job group of its own, counted from the status tracker as soon as
    the statement returns.

    From the source's description to ``cleanup``, ``spark.sql.shuffle.partitions`` follows
    the number of rows (``expect_rows``); a Ctrl-C cancels the running statement's jobs in the
    executors.

    Engines of several threads on one session take turns a statement at a time (see
    ``sqltree.engines.base``; ``spark.newSession()`` per thread runs their statements side by
    side). ``spark.sql.codegen.wholeStage`` is turned off for a large statement and restored
    after it, as are the thread's job group and description.

    While the engine works (from its construction to ``cleanup``), Spark's console stays
    quiet: the log level is at least ``ERROR`` (the caller's level comes back at ``cleanup``;
    it is the JVM's, so other sessions' jobs of that time log less too), and the stage
    progress bars of ``spark.ui.showConsoleProgress`` are stopped and a new bar is put back
    at ``cleanup``. Spark reads that setting only when its context starts and offers no call
    to pause the bar, so sqltree swaps the context's private ``_progressBar`` field; where
    that fails (another Spark version, Spark Connect), bars show as before: build the session
    with ``.config("spark.ui.showConsoleProgress", "false")`` to have none.
    """

    dialect: ClassVar[str] = "spark"
    NAME: ClassVar[str] = "Spark"
    SUPPORTS_MATERIALIZED_CTE: ClassVar[bool] = False
    PARTITIONS_BY_HINT: ClassVar[bool] = True
    ONE_PASS_HISTOGRAM: ClassVar[bool] = True
    LOADS_SMALL_ROWS: ClassVar[bool] = True
    # the grouping sets' Expand copies every column of a row once per feature: 31.4 s of
    # levels at 1M rows (CART binned 64, depth 10) against 22.2 s unpivoted
    HISTOGRAM_FORM: ClassVar[str] = UNPIVOT
    SMALL_TABLE_ROWS: ClassVar[int] = 1_000_000
    """Temp tables up to this many rows are coalesced to the default parallelism."""

    def __init__(self, spark: Any) -> None:
        super().__init__()
        self.spark = spark
        self._views: list[str] = []
        self._stored: dict[str, list[Any]] = {}
        """The checkpointed frames of each temp table (``_store``), freed when it is dropped."""
        self._small: set[str] = set()
        """Names of the tables made by ``load_rows``, joined with a broadcast hint."""
        self._group_ids = itertools.count()
        try:
            self._context = spark.sparkContext
            self._tracker = self._context.statusTracker()
        except Exception:  # Spark Connect has no SparkContext: no job counts
            self._context = None
            self._tracker = None
        self.stats: SparkStats = SparkStats(
            jobs_per_statement=None if self._context is None else []
        )
        self._parallelism = max(1, int(self._context.defaultParallelism)) if self._context else 1
        self.begin()

    def _claim_key(self) -> Any:
        return self.spark

    # -- a quiet console -----------------------------------------------------------------------
    QUIET_LOG_LEVEL: ClassVar[str] = "ERROR"
    """The log level while sqltree works: Spark's warnings (a truncated plan string, a
    checkpointed RDD) are about sqltree's own statements, which the user did not write."""

    def _apply_settings(self) -> None:
        limit = self.spark.conf.get(HUGE_METHOD_LIMIT, None)
        if limit is None or int(limit) > JIT_METHOD_BYTES:
            self._remember(HUGE_METHOD_LIMIT, limit)
            self.spark.conf.set(HUGE_METHOD_LIMIT, str(JIT_METHOD_BYTES))
        if self._context is None:  # Spark Connect: the server's console is not the user's
            return
        level = _log_level(self._context)
        if level is not None and _LOG_LEVELS.index(level) < _LOG_LEVELS.index(
            self.QUIET_LOG_LEVEL
        ):
            self._remember("log_level", level)
            self._context.setLogLevel(self.QUIET_LOG_LEVEL)
        if _stop_progress_bar(self._context):
            self._remember("progress_bar", True)

    def _restore_settings(self, saved: dict[str, Any]) -> None:
        for key in (SHUFFLE_PARTITIONS, HUGE_METHOD_LIMIT):
            if key in saved:
                _set_conf(self.spark, key, saved[key])
        if self._context is None:
            return
        if "progress_bar" in saved:
            _start_progress_bar(self._context)
        if "log_level" in saved:
            self._context.setLogLevel(saved["log_level"])

    ROWS_PER_SHUFFLE_PARTITION: ClassVar[int] = 2_000_000
    """Source rows per shuffle partition of training's aggregates (``expect_rows``)."""

    def expect_rows(self, rows: int) -> None:
        """Set ``spark.sql.shuffle.partitions`` for training, given back at ``cleanup``.

        From the number of rows: a multiple of the cores (every core takes a part of each
        aggregate), one part per ``ROWS_PER_SHUFFLE_PARTITION`` rows and more cores. Spark's
        default of 200 made every aggregate of a small table 200 tasks; the shuffles of
        training carry histograms and counts, whose rows grow with the nodes and values, not
        the rows.

        Adaptive execution stays as the session has it. It runs each exchange of a statement
        as a job of its own (a CART level's scoring statement, with its windows, is 14 jobs),
        but turning it off was slower at scale: binned CART at depth 5 on the 1M-row benchmark
        file (``local[2]``, one session, off first, the load average at 11) took 158.3 s
        with it off (75 jobs; levels 1 to 5, 14.3-18.7 s each) and 91.0 s with it on (140
        jobs; 9.1-10.1 s each), the same tree; only on 200,000 cached rows was it faster off.
        """
        self.begin()
        partitions = self.shuffle_partitions(rows)
        with self._statement():
            self._remember(SHUFFLE_PARTITIONS, self.spark.conf.get(SHUFFLE_PARTITIONS, None))
            self.spark.conf.set(SHUFFLE_PARTITIONS, str(partitions))

    def shuffle_partitions(self, rows: int) -> int:
        """The shuffle partitions training takes for a source of ``rows`` rows."""
        cores = self._parallelism
        parts = -(-max(rows, 1) // self.ROWS_PER_SHUFFLE_PARTITION)
        return cores * -(-parts // cores)

    def render(self, query: exp.Expression) -> str:
        """Spark SQL, with a ``BROADCAST`` hint for each small table a query joins (a level's
        tests and routes, ``load_rows``): every executor gets a copy of it, and the level's
        rows are joined where they are, never shuffled by node."""
        return super().render(_broadcast(query, self._small))

    def explain(self, error: BaseException) -> str:
        """Spark's message up to its query context (the plan it appends runs to pages), or a
        Java exception's own message without its stack trace."""
        java = getattr(error, "java_exception", None)
        if java is not None:
            with contextlib.suppress(Exception):
                return str(java.toString())
        first = super().explain(error).split("; line ", 1)[0]
        return first.split(" SQLSTATE:", 1)[0].rstrip(" .;") + "."

    # -- the contract ------------------------------------------------------------------------
    @contextmanager
    def _job_group(self) -> Iterator[None]:
        """Run the enclosed Spark actions under a job group of their own, to count their jobs."""
        if self._context is None:
            yield
            return
        group = f"{self._prefix}{next(self._group_ids)}"
        previous = {key: self._context.getLocalProperty(key) for key in _JOB_PROPERTIES}
        self._context.setJobGroup(group, "sqltree", interruptOnCancel=True)
        try:
            yield
        except BaseException as error:
            if isinstance(error, KeyboardInterrupt) or self._interrupted(error):
                # A Ctrl-C stops Python waiting, not the cluster: the statement's jobs would
                # go on in the executors, beside the statements that clean up.
                with contextlib.suppress(Exception):
                    self._context.cancelJobGroup(group)
            raise
        finally:
            for key, value in previous.items():
                self._context.setLocalProperty(key, value)
            # Counted now: the tracker keeps only the most recent jobs (spark.ui.retainedJobs).
            assert self.stats.jobs_per_statement is not None
            self.stats.jobs_per_statement.append(len(self._tracker.getJobIdsForGroup(group)))

    def _run(self, sql: str) -> list[tuple[Any, ...]]:
        with self._job_group(), self._codegen_for(sql):
            rows = self.spark.sql(self._sending(sql)).collect()
        return [tuple(_plain(v) for v in row) for row in rows]

    FETCHES_ROWS = True

    def _run_batches(self, sql: str, size: int) -> Iterator[tuple[list[str], list[Any]]]:
        with self._job_group(), self._codegen_for(sql):
            result = self.spark.sql(self._sending(sql))
            rows = result.toLocalIterator()  # a partition at a time, not the whole result
            while batch := list(itertools.islice(rows, size)):
                yield result.columns, [tuple(_plain(v) for v in row) for row in batch]

    def float_batches(self, query: exp.Expression) -> Iterator[list[Any]]:
        """As ``Engine.float_batches``, through Arrow where the session gives it
        (``DataFrame.toArrow``, Spark 4): a level's histogram of 180,000 groups took seconds
        as Python rows."""
        if not _collects_arrow():
            yield from super().float_batches(query)
            return
        import pyarrow as pa
        import pyarrow.compute as pc

        self.begin()
        sql = self.render(self._attached(query))
        with self.counted(sql), self._job_group(), self._codegen_for(sql):
            table = self.spark.sql(self._sending(sql)).toArrow()
        for batch in table.to_batches():
            yield [pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
                   for column in batch.columns]

    LARGE_STATEMENT: ClassVar[int] = 40_000
    """Characters of SQL from which a statement runs without whole-stage code generation (a
    depth-10 tree of 1,021 leaves scores in 45,740 characters, whose generated code outgrows
    the limit; a level's histogram or a first level's bins of 16 features take under 36,000,
    and compile)."""

    @contextmanager
    def _codegen_for(self, sql: str) -> Iterator[None]:
        """Whole-stage code generation off for a large statement (a big tree's scoring query).

        Its generated method outgrows the JVM's 64 KB limit, Janino fails to compile it and
        Spark logs the stack traces before falling back to interpreted code anyway: scoring
        200,000 rows with an 811-leaf tree took 28.4 s that way and 26.0 s without the attempt.
        """
        if len(sql) < self.LARGE_STATEMENT:
            yield
            return
        key = "spark.sql.codegen.wholeStage"
        previous = self.spark.conf.get(key, None)
        self.spark.conf.set(key, "false")
        try:
            yield
        finally:
            if previous is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, previous)

    def _run_columns(self, sql: str) -> list[tuple[str, str]]:
        # Analysis only: reading a DataFrame's schema runs no job.
        schema = self.spark.sql(self._sending(sql)).schema
        return [(f.name, _type_text(f.dataType)) for f in schema.fields]

    def _create_temp_table(self, name: str, query: exp.Expression,
                           statistics: bool = True) -> None:
        # Each level is computed once and stored with its lineage cut: a view over a cached
        # query keeps the plan of every level before it, and analysing and matching that plan
        # against the cache made each query several times slower at depth 5 than at depth 1.
        # The view is made from a DataFrame (a SQL temp view would re-resolve, by name, views
        # that have been dropped by then).
        frame = self.spark.sql(self._sending(self.render(query)))
        with self._job_group():
            frame, rows = self._store(name, frame)
            if _partitions(frame) > self._parallelism and rows <= self.SMALL_TABLE_ROWS:
                # A few rows spread over many shuffle partitions: every later query would
                # pay a task for each.
                small, _ = self._store(name, frame.coalesce(self._parallelism))
                self._stored[name].pop(0)  # frame, the first stored
                _release(frame, self._context)
                frame = small
        frame.createOrReplaceTempView(name)

    @property
    def defers_tables(self) -> bool:
        # Only a local checkpoint is filled as the first reader computes it (its blocks are
        # persisted then); a reliable one would run a job of its own afterwards to write them.
        return self._context is not None and not self._context.getCheckpointDir()

    def _create_deferred_table(self, name: str, query: exp.Expression) -> None:
        # A level's routed rows are stored by the job of the next histogram that reads
        # them: the job that counted them was one more pass over every row per level.
        frame = self.spark.sql(self._sending(self.render(query)))
        stored = frame.localCheckpoint(eager=False)
        self._stored.setdefault(name, []).append(stored)
        stored.createOrReplaceTempView(name)

    def load_rows(
        self, hint: str, columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> exp.Table:
        """A temp view over the rows sent as Arrow data: no SQL text per row.

        A level's tests and routes, and the cuts of a whole tree, have a row per node: as a
        ``VALUES`` list, a deep tree's statement grew past 100 KB, and Spark's parser needs
        many times that in driver memory. The rows become a local relation, which carries
        statistics, so joins with it are broadcast.
        """
        if self.plan != TABLES:  # the select plan writes them as literal rows
            return super().load_rows(hint, columns, types, rows)
        self.begin()
        name = self.temp_name(hint)
        self._temp.append(name)
        with self._statement():
            frame = self.spark.createDataFrame(arrow_rows(columns, types, rows))
            frame.createOrReplaceTempView(name)
        self._small.add(name)
        return _table(name)

    def _store(self, name: str, frame: Any) -> tuple[Any, int]:
        """Compute ``frame`` now and return it with a plan that no longer holds its lineage,
        and its number of rows.

        The checkpoint is marked first and noted as ``name``'s, then filled by counting its
        rows: a Ctrl-C during the count (its job runs in the executors) still leaves the
        engine holding the frame, whose stored blocks ``cleanup`` frees.
        """
        if self._context is not None and self._context.getCheckpointDir():
            stored = frame.checkpoint(eager=False)  # reliable storage: survives lost executors
        else:
            stored = frame.localCheckpoint(eager=False)
        self._stored.setdefault(name, []).append(stored)
        return stored, _fill(stored)

    def _drop_temp_table(self, name: str) -> None:
        self._small.discard(name)
        frames = self._stored.pop(name, [])
        self.spark.catalog.dropTempView(name)
        for frame in frames:
            _release(frame, self._context)

    def relation_for_path(self, path: str) -> exp.Expression:
        """Register a Parquet, CSV (header, inferred numbers) or JSON file as a temp view."""
        self.begin()
        reader = self.spark.read
        lower = path.lower()
        # Spark reads a file's schema here, before any statement: a missing file fails now.
        with self.reading(f"file {path!r}"), self._statement():
            if lower.endswith((".csv", ".csv.gz", ".tsv", ".txt")):
                options = {"header": "true"}
                if lower.endswith(".tsv"):
                    options["sep"] = "\t"
                inferred = reader.options(inferSchema="true", **options).csv(path).schema
                schema = _text_unless_numeric(inferred)
                frame = self.spark.read.options(**options).schema(schema).csv(path)
            elif lower.endswith((".json", ".jsonl", ".ndjson")):
                frame = reader.json(path)
            else:
                frame = reader.parquet(path)
            return self._register(frame, "file")

    def relation_for_dataframe(self, frame: Any) -> exp.Expression:
        """Register a pandas DataFrame (through Arrow: NaN and NA become NULL) as a temp view."""
        import pyarrow as pa

        self.begin()
        table = pa.Table.from_pandas(frame, preserve_index=False)
        with self._statement():
            return self._register(self.spark.createDataFrame(table), "frame")

    def _register(self, frame: Any, hint: str) -> exp.Expression:
        name = self.temp_name(hint)
        frame.createOrReplaceTempView(name)
        self._views.append(name)
        return _table(name)

    def _drop_temporaries(self) -> None:
        try:
            super()._drop_temporaries()
        finally:
            with self._statement():
                while self._views:
                    self.spark.catalog.dropTempView(self._views.pop())


_LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")


def _log_level(context: Any) -> str | None:
    """The JVM's root log level (what ``SparkContext.setLogLevel`` sets), if it can be read."""
    try:
        level = str(context._jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel())
    except Exception:
        return None
    return level.upper() if level.upper() in _LOG_LEVELS else None


def _progress_bar_field(context: Any) -> Any:
    """The SparkContext's private ``_progressBar`` field (a ``scala.Option``), made writable."""
    java_context = context._jsc.sc()
    found = java_context.getClass().getDeclaredField("_progressBar")
    found.setAccessible(True)
    return found


def _stop_progress_bar(context: Any) -> bool:
    """Stop the stage progress bar, if the session has one; True when it was stopped."""
    try:
        found = _progress_bar_field(context)
        bar = found.get(context._jsc.sc())
        if bar.isEmpty():
            return False
        bar.get().stop()
        found.set(context._jsc.sc(), context._jvm.scala.Option.empty())
    except Exception:  # another Spark version: leave the bar alone (see SparkEngine)
        return False
    return True


def _start_progress_bar(context: Any) -> None:
    """Give the context a new stage progress bar, made as the context makes its own."""
    with contextlib.suppress(Exception):
        java_context = context._jsc.sc()
        bar = context._jvm.org.apache.spark.ui.ConsoleProgressBar(java_context)
        _progress_bar_field(context).set(java_context, context._jvm.scala.Option.apply(bar))


def _collects_arrow() -> bool:
    """Whether this pyspark's DataFrames collect as Arrow tables (``toArrow``, Spark 4)."""
    from pyspark.sql import DataFrame

    return hasattr(DataFrame, "toArrow")


def _set_conf(spark: Any, key: str, value: str | None) -> None:
    """Give a session setting ``value`` back (None: it was not set, so unset it again)."""
    if value is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, value)


def _broadcast(query: exp.Expression, small: set[str]) -> exp.Expression:
    """``query`` with ``/*+ BROADCAST(alias) */`` on each SELECT that joins one of the
    ``small`` tables (a copy; ``query`` itself when it joins none)."""
    if not small or not any(
        isinstance(j.this, exp.Table) and j.this.name in small for j in query.find_all(exp.Join)
    ):
        return query
    query = query.copy()
    for select in query.find_all(exp.Select):
        names = [
            j.this.alias_or_name
            for j in select.args.get("joins") or []
            if isinstance(j.this, exp.Table) and j.this.name in small
        ]
        if names:
            hints = [exp.Anonymous(this="BROADCAST", expressions=[exp.to_identifier(n)])
                     for n in names]
            select.set("hint", exp.Hint(expressions=hints))
    return query


def _table(name: str) -> exp.Table:
    return exp.Table(this=exp.to_identifier(name, quoted=True))


def _partitions(frame: Any) -> int:
    try:
        return int(frame.rdd.getNumPartitions())
    except Exception:  # Spark Connect has no RDDs: leave the partitioning alone
        return 0


def _fill(frame: Any) -> int:
    """Count the rows of a lazily checkpointed DataFrame, which stores them: one job over its
    RDD, as an eager checkpoint runs (``DataFrame.count`` would add a shuffle and a job)."""
    try:
        rdd = frame._jdf.queryExecution().analyzed().rdd()
    except Exception:  # Spark Connect: no JVM handle
        return int(frame.count())
    return int(rdd.count())


def _release(frame: Any, context: Any) -> None:
    """Free the blocks of a checkpointed DataFrame now rather than when the JVM collects it."""
    # Spark Connect has no JVM handle; it frees them when the DataFrame is garbage-collected.
    # Through the context, not RDD.unpersist: that logs a WARN for every locally checkpointed
    # RDD ("its lineage has been truncated"), a line per temp table, about 6 per tree level.
    with contextlib.suppress(Exception):
        rdd = frame._jdf.queryExecution().analyzed().rdd()
        context._jsc.sc().unpersistRDD(rdd.id(), False)


def _plain(value: Any) -> Any:
    # Spark returns DECIMAL sums and averages as Decimal; the planner works in floats.
    if isinstance(value, Decimal):
        return float(value)
    return value


def _type_text(data_type: Any) -> str:
    text = str(data_type.simpleString())
    if text == "void":  # the type of a bare NULL column
        return "NULL"
    return text


def _text_unless_numeric(schema: Any) -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType(
        [
            f
            if type(f.dataType).__name__ in _CSV_KEPT_TYPES
            else StructField(f.name, StringType(), True)
            for f in schema.fields
        ]
    )
