"""Shared fixtures: a throwaway PostgreSQL cluster, a Spark standalone cluster on this machine
(a master and two workers) with one session, and ``engine_factory``, which loads a pandas
DataFrame into DuckDB, PostgreSQL or Spark (or SQLite, for tests that list ``SQLITE``).

An engine that cannot start is skipped locally and is an error when ``CI=true``, so that CI
never passes by skipping. ``pytest -m "not spark and not postgres"`` runs the fast subset.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlglot import exp

from sqltree.engines.base import Engine

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "examples" / "data"
IN_CI = os.environ.get("CI", "").lower() == "true"
TEST_SCHEMA = "sqltree_test"


def unavailable(reason: str) -> None:
    """Skip, or fail under CI, when an engine cannot be started."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: engines may not be skipped)", pytrace=False)
    pytest.skip(reason)


# -- PostgreSQL ------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin() -> str | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: [int(x) for x in Path(p).parent.parent.name.split(".") if x.isdigit()],
    )
    if found:
        return str(Path(found[-1]).parent)
    initdb = shutil.which("initdb")
    return str(Path(initdb).parent) if initdb else None


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A libpq URL of a private cluster (initdb + pg_ctl), stopped when the session ends.

    ``SQLTREE_POSTGRES_URL`` points the tests at an existing server instead.
    """
    if os.environ.get("SQLTREE_POSTGRES_URL"):
        yield os.environ["SQLTREE_POSTGRES_URL"]
        return
    bindir = _pg_bin()
    if bindir is None:
        unavailable("PostgreSQL binaries (initdb, pg_ctl) not found")
    # initdb and pg_ctl refuse to run as root.
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    root = tempfile.mkdtemp(prefix="sqltree-pg-")
    if as_root:
        shutil.chown(root, "postgres", "postgres")
    os.chmod(root, 0o700)
    port = _free_port()
    data = f"{root}/data"
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -k {root} "
        "-c fsync=off -c full_page_writes=off -c synchronous_commit=off"
    )

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, text=True)

    try:
        run(
            f"{bindir}/initdb",
            "-D",
            data,
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        run(f"{bindir}/pg_ctl", "-D", data, "-l", f"{root}/log", "-w", "-o", options, "start")
    except (OSError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"could not start a throwaway PostgreSQL: {detail.strip()[-500:]}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_admin(postgres_url: str) -> Iterator[Any]:
    """An autocommit superuser connection (test tables are made and dropped with it)."""
    psycopg = pytest.importorskip("psycopg")
    conn = psycopg.connect(postgres_url, autocommit=True)
    yield conn
    conn.close()


# -- workers ---------------------------------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With pytest-xdist's ``--dist loadgroup`` (the default options), the Spark tests run in
    one worker and the PostgreSQL tests in one: one session and one cluster per run."""
    for item in items:
        for engine in ("spark", "postgres"):
            if item.get_closest_marker(engine) is not None:
                item.add_marker(pytest.mark.xdist_group(engine))
                break


# -- Spark -----------------------------------------------------------------------------------
SPARK_WORKERS = 2
"""Standalone workers of the test cluster, one core and one executor each."""

SPARK_START_SECONDS = 120.0
"""How long the master, the workers and the executors may take to come up."""


@dataclass
class SparkCluster:
    """A Spark standalone master and its workers, each a JVM started by ``spark-class``.

    ``root`` holds their logs and work folders, and ``shared``, the folder for files that
    the driver and every executor read (on this machine any local path is shared; on a real
    cluster it would be a network file system).
    """

    master_url: str
    root: Path
    shared: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        """Stop the workers (which stop their executors), then the master."""
        for process in reversed(self.processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _wait_for_line(process: subprocess.Popen[bytes], log: Path, text: str,
                   deadline: float) -> None:
    """Wait until ``text`` appears in ``log``; fail if the daemon exits or time runs out."""
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise RuntimeError(f"{log.name}: no {text!r} (exit status {process.poll()}): {tail}")


def _start_spark_cluster() -> SparkCluster:
    """A master and ``SPARK_WORKERS`` workers on the loopback interface, sized for a
    two-core machine (one core and 1 GB per worker, 256 MB per daemon)."""
    home = _spark_home()
    launcher = home / "bin" / "spark-class"
    root = Path(tempfile.mkdtemp(prefix="sqltree-spark-"))
    (root / "conf").mkdir()  # no spark-defaults.conf or spark-env.sh of the machine's
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_CONF_DIR": str(root / "conf"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "PYSPARK_PYTHON": sys.executable,
    }
    port = _free_port()
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", root, root / "shared")
    cluster.shared.mkdir()
    deadline = time.monotonic() + SPARK_START_SECONDS

    def daemon(name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = root / f"{name}.log"
        with open(log, "wb") as out:
            # a session of its own: stopping the worker's group stops its executors too
            process = subprocess.Popen(
                [str(launcher), *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        cluster.processes.append(process)
        return process, log

    try:
        master, log = daemon(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(port), "--webui-port", str(_free_port()),
        )
        _wait_for_line(master, log, "I have been elected leader", deadline)
        workers = [
            daemon(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()),
                "--work-dir", str(root / f"work-{i}"), cluster.master_url,
            )
            for i in range(SPARK_WORKERS)
        ]
        for worker, log in workers:
            _wait_for_line(worker, log, "Successfully registered with master", deadline)
    except BaseException:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return cluster


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[SparkCluster]:
    """A standalone Spark cluster on this machine (a master and two workers), stopped when
    the session ends; ``SQLTREE_SPARK_KEEP=1`` keeps its folder (the daemons' logs, and the
    executors' in ``work-*``) for a look afterwards."""
    try:
        _spark_home()
    except ImportError:
        unavailable("pyspark is not installed")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        unavailable("Spark needs Java: no java on PATH and no JAVA_HOME")
    try:
        cluster = _start_spark_cluster()
    except (OSError, RuntimeError) as error:
        unavailable(f"could not start a Spark standalone cluster: {error}")
    try:
        yield cluster
    finally:
        cluster.stop()
        if not os.environ.get("SQLTREE_SPARK_KEEP"):
            shutil.rmtree(cluster.root, ignore_errors=True)


def _executors(session: Any) -> int:
    """Executors registered with the driver (its status list also names the driver)."""
    infos = session.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return max(0, len(infos) - 1)


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One SparkSession for the whole run, the driver of the test cluster (``spark_cluster``),
    whose two executors run in JVMs of their own: nothing the driver keeps in its process or
    its temporary folder is seen by the tasks. ``SQLTREE_SPARK_MASTER=local[2]`` runs the
    tests in local mode instead."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        unavailable("pyspark is not installed")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        unavailable("Spark needs Java: no java on PATH and no JAVA_HOME")
    master = os.environ.get("SQLTREE_SPARK_MASTER")
    executors = 0
    if master is None:
        master = request.getfixturevalue("spark_cluster").master_url
        executors = SPARK_WORKERS
    try:
        session = (
            SparkSession.builder.master(master)
            .appName("sqltree-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", "1g")
            .config("spark.executor.memory", "768m")
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", str(SPARK_WORKERS))
            .config("spark.pyspark.python", sys.executable)
            .getOrCreate()
        )
    except Exception as error:
        unavailable(f"could not start Spark: {error}")
    session.sparkContext.setLogLevel("ERROR")
    deadline = time.monotonic() + SPARK_START_SECONDS
    while _executors(session) < executors:  # tasks would wait for them anyway
        if time.monotonic() > deadline:
            session.stop()
            unavailable(f"the Spark cluster gave {_executors(session)} of {executors} executors")
        time.sleep(0.2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_shared_folder(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that the driver and every executor read: the cluster's shared folder, or a
    temporary one in local mode."""
    if os.environ.get("SQLTREE_SPARK_MASTER"):
        return tmp_path_factory.mktemp("spark")
    return Path(request.getfixturevalue("spark_cluster").shared)


# -- one DataFrame on any engine -------------------------------------------------------------
@dataclass
class Loaded:
    """What ``engine_factory`` made: the engine, the source to train on, and how to undo it."""

    engine: Engine
    source: exp.Table
    undo: list[Callable[[], None]] = field(default_factory=list)


class EngineFactory:
    """Load pandas DataFrames into one engine; everything made is dropped after the test.

    ``factory(frame, name="data")`` returns ``(engine, source)``: ``source`` is a table
    reference (``exp.Table``) to pass to ``describe`` or ``train``. Each call makes a new
    engine on a new connection, so one test can train on several tables.
    """

    def __init__(self, kind: str, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self._request = request
        self._loaded: list[Loaded] = []

    def __call__(self, frame: Any, name: str = "data") -> tuple[Engine, exp.Table]:
        loaded = getattr(self, f"_load_{self.kind}")(frame, name)
        self._loaded.append(loaded)
        return loaded.engine, loaded.source

    def _load_duckdb(self, frame: Any, name: str) -> Loaded:
        import duckdb

        from sqltree.engines.duckdb import DuckDBEngine

        conn = duckdb.connect()
        engine = DuckDBEngine(conn)
        table = exp.Table(this=exp.to_identifier(name, quoted=True))
        conn.register("sqltree_test_frame", frame)
        conn.execute(
            exp.Create(
                this=table, kind="TABLE", expression=exp.select("*").from_("sqltree_test_frame")
            ).sql("duckdb")
        )
        conn.unregister("sqltree_test_frame")
        return Loaded(engine, table, [engine.cleanup, conn.close])

    def _load_postgres(self, frame: Any, name: str) -> Loaded:
        from sqltree.engines.postgres import PostgresEngine

        admin = self._request.getfixturevalue("postgres_admin")
        url = self._request.getfixturevalue("postgres_url")
        # A unique schema per table keeps parallel and repeated loads of one name apart.
        schema = f"{TEST_SCHEMA}_{uuid.uuid4().hex[:8]}"
        schema_ref = exp.Table(db=exp.to_identifier(schema, quoted=True))
        admin.execute(exp.Create(this=schema_ref, kind="SCHEMA").sql("postgres"))
        table = exp.Table(
            this=exp.to_identifier(name, quoted=True), db=exp.to_identifier(schema, quoted=True)
        )
        loader = PostgresEngine(admin)
        loader.load_dataframe(frame, table)
        engine = PostgresEngine.connect(url)

        def drop_schema() -> None:
            drop = exp.Drop(tables=[schema_ref.copy()], kind="SCHEMA", cascade=True, exists=True)
            admin.execute(drop.sql("postgres"))

        return Loaded(engine, table, [engine.close, drop_schema])

    def _load_spark(self, frame: Any, name: str) -> Loaded:
        import pyarrow as pa

        from sqltree.engines.spark import SparkEngine

        session = self._request.getfixturevalue("spark")
        engine = SparkEngine(session)
        # Spark accepts only word characters in temp view names; the columns stay as given.
        safe = re.sub(r"\W", "_", name)
        view = f"{safe}_{uuid.uuid4().hex[:8]}"
        session.createDataFrame(
            pa.Table.from_pandas(frame, preserve_index=False)
        ).createOrReplaceTempView(view)
        table = exp.Table(this=exp.to_identifier(view, quoted=True))
        return Loaded(engine, table, [engine.cleanup, lambda: session.catalog.dropTempView(view)])

    def _load_sqlite(self, frame: Any, name: str) -> Loaded:
        import sqlite3

        from sqltree.engines.sqlite import SQLiteEngine

        conn = sqlite3.connect(":memory:")
        engine = SQLiteEngine(conn)
        table = exp.Table(this=exp.to_identifier(name, quoted=True))
        engine.load_dataframe(frame, table)
        return Loaded(engine, table, [engine.cleanup, conn.close])

    def close(self) -> None:
        for loaded in reversed(self._loaded):
            for undo in loaded.undo:
                undo()
        self._loaded.clear()


ENGINES = [
    pytest.param("duckdb", id="duckdb"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("spark", id="spark", marks=[pytest.mark.spark, pytest.mark.slow]),
]
SQLITE = pytest.param("sqlite", id="sqlite")
"""SQLite (Python's sqlite3), which trains on the select plan only; not in ``ENGINES``: tests
that run on it list it (``indirect=True``)."""


@pytest.fixture(params=ENGINES)
def engine_factory(request: pytest.FixtureRequest) -> Iterator[EngineFactory]:
    """Parametrized over duckdb, postgres and spark: ``factory(frame) -> (engine, source)``."""
    factory = EngineFactory(request.param, request)
    yield factory
    factory.close()


# -- hypothesis profiles (tests/test_properties.py) --------------------------------------------
from hypothesis import settings as _hypothesis_settings  # noqa: E402

# "default": the same examples on every run (CI is deterministic); "thorough": 10x as many,
# new ones each run. Choose with SQLTREE_HYPOTHESIS_PROFILE.
_hypothesis_settings.register_profile(
    "default", max_examples=100, derandomize=True, deadline=None, database=None,
    print_blob=True,
)
_hypothesis_settings.register_profile(
    "thorough", max_examples=1000, derandomize=False, deadline=None, print_blob=True,
)
_hypothesis_settings.load_profile(os.environ.get("SQLTREE_HYPOTHESIS_PROFILE", "default"))
