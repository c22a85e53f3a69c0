"""Generate the synthetic benchmark table as Parquet, deterministically, in DuckDB.

16 features: ``x0``..``x9`` continuous (``x0``, ``x1``, ``x5`` and ``x6`` have up to a distinct
value per row, the others 20 to 50,001 values), ``n0``..``n5`` nominal with 3, 5, 8, 12, 20 and
50 values; a 3-class target ``y`` that depends on several features, with 5% label noise;
about 2% NULLs in every feature (``--task regression``: a numeric target, the same hidden
score plus noise). Row ``i`` draws its independent uniform numbers from
``hash(i * 64 + k)``, one stream per ``k`` (DuckDB's two-argument ``hash(i, k)`` gives
correlated streams). The same ``--rows`` always gives the same file; the held-out file holds
rows from a disjoint range of ``i``.

Usage::

    python benchmarks/generate.py --rows 1000000 --out train_1m.parquet
    python benchmarks/generate.py --rows 200000 --test --out test_200k.parquet

``benchmarks/run.py`` calls ``generate`` itself for the files it needs.
"""

from __future__ import annotations

import argparse
import os
import time

import duckdb
from sqlglot import exp

NOMINAL_LEVELS = (3, 5, 8, 12, 20, 50)
STREAMS = 64
TEST_OFFSET = 1 << 40
"""First ``i`` of the held-out rows: far from any training range."""
NULL_RATE = 0.02
NOISE_RATE = 0.05
CLASSES = ("A", "B", "C")


def lit(x: float | int) -> exp.Expression:
    return exp.Literal.number(repr(x) if isinstance(x, float) else x)


def uniform(k: int) -> exp.Expression:
    """A uniform number in [0, 1) from stream ``k`` of row ``i``."""
    seed = exp.column("i") * lit(STREAMS) + lit(k)
    hashed = exp.cast(exp.func("hash", seed), "DOUBLE")
    return exp.paren(hashed / lit(18446744073709551616.0))


def code(k: int, levels: int) -> exp.Expression:
    return exp.cast(exp.func("floor", uniform(k) * lit(levels)), "INT")


def with_nulls(value: exp.Expression, k: int) -> exp.Expression:
    return exp.Case().when(exp.LT(this=uniform(k), expression=lit(NULL_RATE)), exp.null()).else_(
        value
    )


def continuous_features() -> list[exp.Expression]:
    """Ten continuous columns of the true values (before NULLs)."""
    u = uniform
    rnd = exp.func
    return [
        u(0) * lit(1000.0),  # x0: a distinct value per row
        (u(1) + u(11)) * lit(50.0),  # x1: a distinct value per row, triangular
        rnd("round", u(2) * lit(100.0), lit(2)),  # x2: 10,001 values
        rnd("round", u(3) * lit(1000.0)),  # x3: 1,001 values
        rnd("floor", u(4) * lit(100.0)),  # x4: 100 values
        rnd("round", u(5) * lit(100000.0), lit(1)),  # x5: up to 1M values
        u(6) * u(6) * lit(50.0),  # x6: a distinct value per row, skewed
        rnd("round", u(7) * lit(50000.0)),  # x7: 50,001 values
        rnd("floor", u(8) * lit(20.0)),  # x8: 20 values
        rnd("round", -rnd("ln", lit(1.0) - u(9)) * lit(1000.0)),  # x9: exponential, ~10k values
    ]


def build_query(rows: int, start: int, task: str = "classification") -> exp.Select:
    u = uniform
    xs = continuous_features()
    codes = [code(20 + j, levels) for j, levels in enumerate(NOMINAL_LEVELS)]
    # The hidden score: axis-aligned steps, an interaction, nominal effects.
    n0_effect = (
        exp.Case()
        .when(exp.EQ(this=codes[0], expression=lit(1)), lit(0.8))
        .when(exp.EQ(this=codes[0], expression=lit(2)), lit(-0.6))
        .else_(lit(0.0))
    )
    step = exp.Case().when(
        exp.and_(
            exp.GT(this=u(5), expression=lit(0.7)),
            exp.LT(this=code(23, NOMINAL_LEVELS[3]), expression=lit(6)),
        ),
        lit(1.5),
    ).else_(lit(0.0))
    parity = exp.Mod(this=code(21, NOMINAL_LEVELS[1]), expression=lit(2))
    score = (
        lit(3.0) * u(0)
        + lit(2.0) * u(2) * u(3)
        + exp.paren(n0_effect)
        + exp.paren(step)
        + u(6) * u(6) * exp.paren(parity)
        - lit(0.8) * exp.cast(exp.GT(this=u(8), expression=lit(0.5)), "DOUBLE")
        + lit(0.5) * exp.func("sin", u(1) * lit(6.0))
        + lit(0.3) * (exp.cast(code(25, NOMINAL_LEVELS[5]), "DOUBLE") / lit(50.0))
    )
    clean = (
        exp.Case()
        .when(exp.LT(this=score, expression=lit(1.6)), exp.Literal.string(CLASSES[0]))
        .when(exp.LT(this=score.copy(), expression=lit(2.9)), exp.Literal.string(CLASSES[1]))
        .else_(exp.Literal.string(CLASSES[2]))
    )
    noisy = exp.Case().when(
        exp.LT(this=u(40), expression=lit(NOISE_RATE)),
        exp.func(
            "list_extract",
            exp.Array(expressions=[exp.Literal.string(c) for c in CLASSES]),
            code(41, len(CLASSES)) + lit(1),
        ),
    ).else_(clean)

    columns: list[exp.Expression] = []
    for j, x in enumerate(xs):
        value = exp.cast(x, "DOUBLE")
        columns.append(exp.alias_(with_nulls(value, 50 + j), f"x{j}"))
    for j, c in enumerate(codes):
        text = exp.DPipe(
            this=exp.Literal.string(f"n{j}_"),
            expression=exp.func("lpad", exp.cast(c, "VARCHAR"), lit(2), exp.Literal.string("0")),
            safe=True,
        )
        columns.append(exp.alias_(with_nulls(text, 30 + j), f"n{j}"))
    if task == "regression":
        # the same hidden score, plus noise of about 0.3 standard deviations (a sum of three
        # uniforms: bell-shaped, bounded)
        spread = u(40) + u(41) + u(42) - lit(1.5)
        columns.append(exp.alias_(exp.paren(score.copy() + lit(0.6) * spread), "y"))
    else:
        columns.append(exp.alias_(noisy, "y"))
    series = exp.Table(
        this=exp.func("range", lit(start), lit(start + rows)),
        alias=exp.TableAlias(this=exp.to_identifier("r"), columns=[exp.to_identifier("i")]),
    )
    return exp.select(*columns).from_(series)


def generate(
    rows: int, out: str, test: bool = False, threads: int | None = None,
    task: str = "classification",
) -> float:
    """Write the table to ``out``; return the seconds it took. ``task="regression"``: the
    target ``y`` is the hidden score itself plus noise, a number."""
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    start = time.perf_counter()
    sql = build_query(rows, TEST_OFFSET if test else 0, task).sql(dialect="duckdb")
    tmp = out + ".tmp"
    con.sql(sql).write_parquet(tmp, compression="snappy")
    os.replace(tmp, out)
    con.close()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, required=True, help="number of rows to write")
    parser.add_argument("--out", required=True, help="the Parquet file to write")
    parser.add_argument(
        "--test", action="store_true",
        help="write held-out rows (drawn from a range of row numbers no training file uses)",
    )
    parser.add_argument("--threads", type=int, help="DuckDB threads (default: DuckDB's own)")
    parser.add_argument(
        "--task", default="classification", choices=["classification", "regression"],
        help="a 3-class target, or a numeric one: the hidden score plus noise",
    )
    args = parser.parse_args(argv)
    seconds = generate(args.rows, args.out, args.test, args.threads, args.task)
    print(f"wrote {args.rows:,} rows to {args.out} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
