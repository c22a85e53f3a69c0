"""The ``sqltree`` command: train, predict, evaluate, sql, show, rules, dot, scores,
importances."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import stat
import sys
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from difflib import get_close_matches
from typing import Any, NoReturn

from . import __version__, progress
from .algorithm_registry import C45_PRUNING, GRADIENT_BOOSTING, RANDOM_FOREST, TREES
from .errors import EngineConnectionError, OptionError, SqlTreeError
from .options import check_dialect

EXAMPLES = """\
examples:
  sqltree train examples/data/golf.csv --target play -o golf.json
  sqltree predict golf.json examples/data/golf.csv
  sqltree predict golf.json new_rows --connect shop.duckdb --into scored_rows
  sqltree evaluate golf.json examples/data/golf.csv
  sqltree train examples/data/golf.csv --target play --folds 10
  sqltree sql golf.json --dialect snowflake
  sqltree sql golf.json --dialect postgres --table sales --view scored_sales
  sqltree scores examples/data/golf.csv --target play
"""


COMMAND_EXAMPLES = {
    "train": ["sqltree train examples/data/golf.csv --target play -o golf.json",
              "sqltree train examples/data/golf.csv -t play -a cart --test-fraction 0.3"],
    "predict": ["sqltree predict golf.json examples/data/golf.csv -o scored.csv",
                "sqltree predict golf.json examples/data/golf.csv --leaf --unknown majority"],
    "sql": ["sqltree sql golf.json --dialect snowflake --unknown majority",
            "sqltree sql golf.json -d postgres --table sales --view scored_sales"],
    "show": ["sqltree show golf.json --max-depth 1", "sqltree show golf.json --summary"],
    "rules": ["sqltree rules golf.json --ids",
              "sqltree rules golf.json --simplify examples/data/golf.csv"],
    "dot": ["sqltree dot golf.json -o tree.svg --filled"],
    "evaluate": ["sqltree evaluate golf.json examples/data/golf.csv --unknown majority"],
    "scores": ["sqltree scores examples/data/golf.csv --target play",
               "sqltree scores examples/data/golf_numeric_humidity.csv -t humidity "
               "--task regression"],
    "importances": ["sqltree importances golf.json", "sqltree importances golf.json --kind split"],
}
"""Each command's ``--help`` ends with these; tests/test_cli_workflow.py runs every one."""


class _Formatter(argparse.HelpFormatter):
    """Descriptions wrapped as usual; an examples epilog kept line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _command(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    epilog = "examples:\n" + "".join(f"  {line}\n" for line in COMMAND_EXAMPLES[name])
    return sub.add_parser(name, epilog=epilog, formatter_class=_Formatter, allow_abbrev=False,
                          **kwargs)


def _csv(given: Sequence[str] | None) -> list[str] | None:
    """The column names of a repeatable ``--features``-style flag: each value is one name or
    a comma-separated list, in which ``\\,`` is a comma that belongs to a name."""
    if given is None:
        return None
    names = []
    for text in given:
        for name in re.split(r"(?<!\\),", text):
            name = name.replace("\\,", ",").strip()
            if name:
                names.append(name)
    return names


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with usage errors on one line (a subcommand's usage buries the one
    that says what was wrong), naming first a misspelt flag or command, not what it lacks."""

    _given: Sequence[str] = ()

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        hint = "".join(f"{given!r} is not known (did you mean {near!r}?); "
                       for given, near in self._typos())
        self.exit(2, f"{self.prog}: error: {hint}{message} (see {self.prog} --help)\n")

    def _typos(self) -> list[tuple[str, str]]:
        """Unknown flags given, and an unknown command, each with the nearest known name."""
        actions = self._subparsers._group_actions if self._subparsers else []
        commands = {name: p for action in actions for name, p in (action.choices or {}).items()}
        # the command's flags too: argparse reports the ones it does not know from here
        parsers = [self, *[commands[g] for g in self._given[:1] if g in commands]]
        flags = [f for p in parsers for f in p._option_string_actions if f.startswith("--")]
        words = [(g.split("=")[0], flags) for g in self._given if g.startswith("--")]
        words += [(g, list(commands)) for g in self._given if commands and g[:1] != "-"][:1]
        near = [(w, get_close_matches(w, names, n=1)) for w, names in words if w not in names]
        return [(word, names[0]) for word, names in near if names]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sqltree",
        description="Train ID3, C4.5 and CART decision trees inside SQL engines, "
        "and compile them to SQL.",
        epilog=EXAMPLES,
        formatter_class=_Formatter,
        allow_abbrev=False,  # --max-dept must not pass for --max-depth
    )
    parser.add_argument("--version", action="version", version=f"sqltree {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_connection(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--connect",
            metavar="URL",
            help="a postgresql:// URL, an existing DuckDB database file, or a SQLite "
                 "database (sqlite:///FILE, or the file itself) (default: in-memory DuckDB)",
        )
        p.add_argument(
            "--create-db",
            action="store_true",
            help="with --connect FILE: create the DuckDB database if the file does not exist",
        )

    t = _command(sub, "train", help="train a tree and save it as JSON",
                       description="Train a tree on a table, query, Parquet/CSV path or glob.")
    t.add_argument("source", help="table or view name, SELECT query, or Parquet/CSV path/glob")
    t.add_argument("--target", "-t", required=True,
                   help="the class column (with --task regression, a numeric column)")
    t.add_argument("--task", choices=["classification", "regression"],
                   help="regression grows a CART regression tree (default: classification, "
                        "or regression for a regression --criterion)")
    t.add_argument("--output", "-o", metavar="MODEL.json", help="where to save the model")
    t.add_argument("--algorithm", "-a", choices=list(TREES),
                   help="default: c4.5, or cart for --task regression")
    repeatable = " (repeatable; a comma separates names, \\, is a comma within one)"
    t.add_argument("--features", metavar="A,B,...", action="append",
                   help="feature columns (default: all others)" + repeatable)
    t.add_argument("--nominal", metavar="A,B,...", action="append",
                   help="treat these columns as nominal" + repeatable)
    t.add_argument("--continuous", metavar="A,B,...", action="append",
                   help="treat these columns as continuous" + repeatable)
    t.add_argument("--weight", metavar="COLUMN", help="a column of row weights")
    t.add_argument("--date-features", action="store_true",
                   help="each DATE/TIMESTAMP feature column D becomes D.year, D.month, D.dow "
                        "(1 = Monday) and D.epoch_day (days since 1970-01-01), computed in SQL")
    t.add_argument("--max-depth", type=int, metavar="N")
    t.add_argument("--min-cases", type=float, metavar="W",
                   help="least weight in two branches of a split (J48 -M; default 2)")
    t.add_argument("--missing", choices=["fractional", "majority", "drop"], default="fractional")
    t.add_argument("--max-bins", type=int, metavar="N",
                   help="cut each continuous feature into at most N quantile bins, computed "
                        "once in the engine (faster on large data; default: every value)")
    t.add_argument("--pruning", choices=[C45_PRUNING, "pessimistic", "none"],
                   help="post-pruning (default: c4.5 for C4.5, none otherwise)")
    t.add_argument("--cf", type=float, default=0.25, help="C4.5 pruning confidence (J48 -C)")
    _add_cart_and_engine_flags(t)
    _add_ensemble_flags(t)
    t.add_argument("--quiet", "-q", action="store_true",
                   help="print neither progress, tree nor the training-set evaluation "
                        "(needs --output unless --folds, --test or --test-fraction)")
    _add_evaluation_flags(t)
    add_connection(t)

    p = _command(sub, "predict", help="score a source with a saved model (CSV to stdout)")
    p.add_argument("model", help="a tree or ensemble file written by 'sqltree train' (or "
                                 "an imported ensemble's .save())")
    p.add_argument("source", help="table, query, or Parquet/CSV path to score")
    p.add_argument("--output", "-o", metavar="FILE", help="write .csv or .parquet instead")
    p.add_argument("--proba", action="store_true",
                   help="add one probability column per class (classification)")
    p.add_argument("--into", metavar="TABLE", help="write the scored rows to a table")
    _add_leaf_flag(p)
    _add_unknown_flag(p)
    p.add_argument("--quiet", "-q", action="store_true", help="print no progress")
    add_connection(p)

    s = _command(sub, "sql", help="print the scoring SQL for a dialect")
    s.add_argument("model", nargs="?", help="a sqltree model or ensemble file")
    s.add_argument("--from", dest="from_file", metavar="FILE",
                   help="a model file of another library: LightGBM's text model, XGBoost's "
                        "JSON model (or a sqltree file)")
    s.add_argument("--dialect", "-d", default="duckdb",
                   help="any sqlglot dialect (duckdb, postgres, spark, snowflake, bigquery, ...)")
    s.add_argument("--table", help="emit SELECT *, <prediction> FROM TABLE")
    s.add_argument("--view", help="with --table: emit CREATE VIEW VIEW AS ...")
    s.add_argument("--proba", action="store_true", help="with --table: probability columns")
    s.add_argument("--pretty", action="store_true", help="indent the SQL")
    s.add_argument("--check", action="store_true",
                   help="with --table: instead, a query that returns a row for each column "
                        "holding values training never saw (none when the table matches)")
    s.add_argument("--quiet", "-q", action="store_true", help="print no progress")
    _add_deploy_flags(s)

    add_connection(_add_reading_parsers(sub))  # rules --simplify reads the training rows
    add_connection(sub.choices["importances"])

    add_connection(_add_evaluate_parser(sub))

    sc = _command(sub, "scores", help="score every candidate split at the root")
    sc.add_argument("source")
    sc.add_argument("--target", "-t", required=True)
    sc.add_argument("--task", choices=["classification", "regression"],
                    default="classification",
                    help="regression: a numeric target's candidates scored by the variance "
                         "decrease, as a regression tree's root scores them (default: "
                         "classification: gain and gain ratio)")
    sc.add_argument("--features", metavar="A,B,...", action="append",
                    help="score splits of these columns only (default: all but the target "
                         "and --weight)" + repeatable)
    sc.add_argument("--weight", metavar="COLUMN",
                    help="a column of row weights, as train --weight weighs them")
    sc.add_argument("--date-features", action="store_true",
                    help="score the parts of DATE/TIMESTAMP columns (see train --help)")
    add_connection(sc)
    _add_debug(parser, sub)
    return parser


def _add_ensemble_flags(t: argparse.ArgumentParser) -> None:
    group = t.add_argument_group(
        "forests and boosting (scikit-learn's names; --criterion, --min-samples-leaf, "
        "--max-depth, --max-bins and --max-leaf-nodes apply too)")
    chosen = group.add_mutually_exclusive_group()
    chosen.add_argument("--forest", type=int, metavar="N",
                        help="train a random forest of N trees")
    chosen.add_argument("--boost", type=int, metavar="N",
                        help="train gradient-boosted trees: up to N rounds")
    group.add_argument("--max-features", metavar="K",
                       help="features a forest's node may choose from: sqrt (the default for "
                            "classes), log2, a count, a fraction, or all")
    group.add_argument("--no-bootstrap", action="store_true",
                       help="forest: every row once in every tree (with --max-samples: a "
                            "sample without replacement)")
    group.add_argument("--max-samples", type=float, metavar="F",
                       help="forest: the share of rows each tree draws")
    group.add_argument("--oob", action="store_true",
                       help="forest: score every row with the trees that did not draw it")
    group.add_argument("--random-state", type=int, metavar="N",
                       help="the seed of bagging, feature sampling and validation rows "
                            "(default 0)")
    group.add_argument("--learning-rate", type=float, metavar="R", help="boosting (default 0.1)")
    group.add_argument("--loss", choices=["log_loss", "squared_error", "poisson"],
                       help="boosting: log_loss for classes, squared_error or poisson for "
                            "numbers")
    group.add_argument("--l2-regularization", type=float, metavar="L")
    group.add_argument("--no-early-stopping", action="store_true",
                       help="boosting: train every round (default: stop early on a held-out "
                            "10%% of the rows above 10,000 rows)")


def _ensemble_options(args: argparse.Namespace) -> dict[str, Any]:
    """``train``'s options for --forest or --boost (empty for a tree)."""
    forest_flags = [flag for flag, given in (
        ("--max-features", args.max_features), ("--no-bootstrap", args.no_bootstrap),
        ("--max-samples", args.max_samples), ("--oob", args.oob)) if given not in (None, False)]
    boost_flags = [flag for flag, given in (
        ("--learning-rate", args.learning_rate), ("--loss", args.loss),
        ("--l2-regularization", args.l2_regularization),
        ("--no-early-stopping", args.no_early_stopping)) if given not in (None, False)]
    if args.forest is None and args.boost is None:
        given = forest_flags + boost_flags + (
            ["--random-state"] if args.random_state is not None else [])
        if given:
            raise OptionError(f"{', '.join(given)} apply to --forest or --boost")
        return {}
    if args.algorithm is not None:
        raise OptionError("--algorithm names a tree's algorithm; --forest and --boost train "
                          "their own")
    # a flag of the other kind of ensemble would be silently ignored: refused instead
    if args.forest is not None and boost_flags:
        raise OptionError(f"{', '.join(boost_flags)} apply to --boost, not --forest")
    if args.boost is not None and forest_flags:
        raise OptionError(f"{', '.join(forest_flags)} apply to --forest, not --boost")
    out: dict[str, Any] = {}
    if args.random_state is not None:
        out["random_state"] = args.random_state
    if args.forest is not None:
        out |= {"algorithm": RANDOM_FOREST, "n_estimators": args.forest}
        if args.max_features is not None:
            out["max_features"] = _max_features(args.max_features)
        if args.no_bootstrap:
            out["bootstrap"] = False
        if args.max_samples is not None:
            out["max_samples"] = args.max_samples
        if args.oob:
            out["oob_score"] = True
        return out
    out |= {"algorithm": GRADIENT_BOOSTING, "max_iter": args.boost}
    for name in ("learning_rate", "loss", "l2_regularization"):
        if getattr(args, name) is not None:
            out[name] = getattr(args, name)
    if args.no_early_stopping:
        out["early_stopping"] = False
    return out


def _max_features(text: str) -> Any:
    if text in ("sqrt", "log2"):
        return text
    if text == "all":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise OptionError(f"--max-features takes sqrt, log2, all, a count or a fraction, "
                          f"not {text!r}") from None


def _add_cart_and_engine_flags(t: argparse.ArgumentParser) -> None:
    cart = t.add_argument_group("CART (scikit-learn's names and meanings)")
    cart.add_argument("--criterion", choices=["gini", "entropy", "log_loss", "squared_error",
                                              "friedman_mse", "poisson"],
                      help="gini or entropy for classes; squared_error (the default), "
                           "friedman_mse or poisson for --task regression")
    cart.add_argument("--min-samples-leaf", type=float, metavar="N")
    cart.add_argument("--max-leaf-nodes", type=int, metavar="N")
    cart.add_argument("--ccp-alpha", type=float, metavar="ALPHA")
    cart.add_argument("--threshold-search", choices=["auto", "full", "bounded"],
                      help="exact mode (CART, C4.5, ID3): scan every value (full) or only the "
                           "quantile bins whose gain bound can reach the best cut (bounded); "
                           "the same tree. auto (the default): bounded for CART classification "
                           "on DuckDB while levels are large enough to pay, else full")
    t.add_argument("--plan", choices=["auto", "tables", "select", "scan", "memory"],
                   default="auto",
                   help="where each level's rows live: temporary tables, single SELECTs over "
                        "the source (read-only connections), scan (binned CART, "
                        "classification or regression: histograms summed in the engine, "
                        "splits chosen in Python), or memory (rows read once into numpy); "
                        "auto: memory for small data on sqltree's own DuckDB, scan where it "
                        "applies, else what "
                        "the connection allows")
    duck = t.add_argument_group("DuckDB (the default engine)")
    duck.add_argument("--threads", type=int, metavar="N", help="DuckDB threads (default: cores)")
    duck.add_argument("--memory-limit", metavar="SIZE",
                      help="DuckDB memory_limit, e.g. 4GB: larger data spills to disk")


def _add_reading_parsers(sub: Any) -> argparse.ArgumentParser:
    """``show``, ``rules`` and ``dot``: a saved tree as text, rules or a picture; returns
    ``rules``' parser."""
    show = _command(sub, "show", help="print a saved tree as text")
    show.add_argument("model")
    _add_max_depth(show)
    show.add_argument("--summary", action="store_true",
                      help="print what the model was trained on and how, not the tree")

    imp = _command(sub, "importances",
                   help="print each feature's importance in a saved tree, forest or boosting")
    imp.add_argument("model")
    imp.add_argument("--kind", choices=["gain", "split", "permutation"], default="gain",
                     help="gain: the share of the impurity decrease (scikit-learn's "
                          "feature_importances_, the default); split: the number of tests; "
                          "permutation: the score's mean drop when the feature is shuffled "
                          "in the engine (needs --source)")
    imp.add_argument("--source", help="with --kind permutation: the rows to shuffle and score")
    imp.add_argument("--repeats", type=int, default=5, metavar="N",
                     help="with --kind permutation: shuffles per feature (default 5)")
    imp.add_argument("--seed", type=int, default=1, metavar="N",
                     help="with --kind permutation: the shuffles' hash seed (default 1)")

    r = _command(sub, "rules", help="print one IF ... THEN rule per leaf")
    r.add_argument("model")
    _add_max_depth(r)
    r.add_argument("--ids", action="store_true",
                   help="start each rule with its leaf's id (what 'sqltree sql --leaf' gives)")
    r.add_argument("--simplify", metavar="SOURCE",
                   help="C4.5rules: generalise, select and order the rules on the training "
                        "rows in SOURCE, print them with their training evaluation")
    r.add_argument("--cf", type=float, default=0.25,
                   help="with --simplify: confidence of the pessimistic error (default 0.25)")
    r.add_argument("--sql", metavar="DIALECT",
                   help="with --simplify: print the rule set as an ordered CASE in DIALECT")

    d = _command(sub, "dot", help="print the tree as Graphviz DOT, or draw it",
                       description="Print the tree as Graphviz DOT text, or with -o write it "
                       "to a .dot file or draw it as .svg, .png or .pdf through Graphviz.")
    d.add_argument("model")
    _add_max_depth(d)
    d.add_argument("--filled", action="store_true",
                   help="fill nodes with their class's colour, stronger the purer the node")
    d.add_argument("--output", "-o", metavar="FILE",
                   help="write FILE: .dot text, or .svg/.png/.pdf drawn by Graphviz (needs "
                        "the graphviz Python package and Graphviz's dot program)")
    return r


def _add_deploy_flags(s: argparse.ArgumentParser) -> None:
    """``sql``'s choices of what the SQL computes and where it goes."""
    _add_leaf_flag(s)
    _add_unknown_flag(s)
    s.add_argument("--no-quote", action="store_true",
                   help="write identifiers unquoted, in the case the dialect folds them to "
                        "(OUTLOOK on Snowflake), for tables created with unquoted names")
    s.add_argument("--dbt", action="store_true",
                   help="write a dbt model file scoring {{ ref(NAME) }} (with --source-ref)")
    s.add_argument("--source-ref", metavar="NAME",
                   help="with --dbt: the dbt model (or seed) whose rows are scored")
    s.add_argument("--output", "-o", metavar="FILE", help="write the SQL to FILE")


def _add_leaf_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--leaf", action="store_true",
                   help="the id of the leaf each row reaches instead of its class, in a column "
                        "'leaf' (the ids 'sqltree rules --ids' prints)")


def _add_unknown_flag(p: argparse.ArgumentParser) -> None:
    """``--unknown`` for sql, predict and evaluate: what is deployed can be scored first."""
    # default None, read as "fractional" for a tree: an ensemble refuses the flag only if given
    p.add_argument("--unknown", choices=["fractional", "majority"],
                   help="a single tree: at a C4.5 test that meets an unknown value, C4.5's "
                        "exact weighted sum over the branches (default), or the heaviest "
                        "branch (a plain, much shorter CASE)")


def _add_max_depth(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-depth", type=_depth, metavar="N",
                   help="show tests down to depth N only; a cut subtree is marked with the "
                        "number of leaves it holds")


def _depth(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text!r}")
    return value


def _add_debug(parser: argparse.ArgumentParser, sub: argparse._SubParsersAction) -> None:
    """``--debug`` before or after the command (``sqltree train ... --debug``)."""
    text = "on an error, print the traceback as well"
    parser.add_argument("--debug", action="store_true", help=text)
    for command in sub.choices.values():
        # SUPPRESS: the command's own default must not undo ``sqltree --debug COMMAND``.
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help=text)


def _add_evaluation_flags(t: argparse.ArgumentParser) -> None:
    """``train``'s held-out and cross-validated evaluations."""
    ev = t.add_argument_group(
        "evaluation (computed in the engine; printed after the model, even with --quiet)")
    ev.add_argument("--folds", type=int, metavar="K",
                    help="also K-fold cross-validation, folds dealt in SQL (stratified)")
    ev.add_argument("--test", metavar="SOURCE", help="also evaluate on this source")
    ev.add_argument("--test-fraction", type=float, metavar="F",
                    help="hold out this fraction of the rows (split in SQL); the model is "
                         "trained on the rest and evaluated on them")
    ev.add_argument("--seed", type=int, metavar="N",
                    help="with --folds or --test-fraction: the rows' hash seed (default 1)")
    ev.add_argument("--key", metavar="COLUMN",
                    help="with --folds or --test-fraction: hash this column (a row id) "
                         "instead of the whole row")
    ev.add_argument("--no-stratify", action="store_true",
                    help="with --folds or --test-fraction: deal rows regardless of class")


def _add_evaluate_parser(sub: Any) -> argparse.ArgumentParser:
    """``sqltree evaluate MODEL SOURCE``; the caller adds the connection flags."""
    e = _command(sub, "evaluate", help="evaluate a saved model on a source, in the engine",
                       description="Accuracy, kappa, per-class precision/recall/F1, log loss "
                       "and the confusion matrix, counted by one GROUP BY query.")
    e.add_argument("model", help="a tree or ensemble file written by 'sqltree train' (or "
                                 "an imported ensemble's .save())")
    e.add_argument("source", help="table, query, or Parquet/CSV path holding the target column")
    weights = e.add_mutually_exclusive_group()
    weights.add_argument("--weight", metavar="COLUMN",
                         help="weigh rows by this column (default: the model's training "
                              "weight column, if any)")
    weights.add_argument("--unweighted", action="store_true",
                         help="count every row as 1")
    e.add_argument("--json", action="store_true", help="print every figure as JSON")
    e.add_argument("--threshold", type=float, metavar="P",
                   help="a model of two classes (a tree or an ensemble): predict the second "
                        "where its probability is at least P")
    _add_unknown_flag(e)
    return e


DUCKDB_NOT_FILES = (":memory:", "md:", "motherduck:")
"""``--connect`` values DuckDB reads as something other than a file path."""


def _connection(url: str | None, create: bool = False):  # type: ignore[no-untyped-def]
    if url is None:
        return None
    if url.startswith(("postgresql://", "postgres://")):
        return url
    if url.startswith(SQLITE_URL):
        return _sqlite(url[len(SQLITE_URL):], create)
    if "://" in url:
        raise OptionError(
            f"--connect takes a postgresql:// URL, a sqlite:/// URL or a DuckDB database "
            f"file, not {url!r}"
        )
    # duckdb.connect creates any file it is given: a mistyped path would train on, or write
    # predictions into, a new empty database instead of failing.
    is_file = url and not url.startswith(DUCKDB_NOT_FILES)
    if is_file and not create and not os.path.exists(os.path.expanduser(url)):
        raise EngineConnectionError(
            f"DuckDB database {url!r} does not exist (pass --create-db to create it)"
        )
    if is_file and _is_sqlite_file(os.path.expanduser(url)):
        return _sqlite(url, create)
    import duckdb

    try:
        return duckdb.connect(url)
    except duckdb.Error as error:
        raise EngineConnectionError(f"DuckDB cannot open {url!r}: {_one_line(error)}") from None


SQLITE_URL = "sqlite:///"
"""``--connect sqlite:///shop.db``: a SQLite database file (``sqlite:////abs/path`` too)."""


def _is_sqlite_file(path: str) -> bool:
    """Whether ``path`` is a SQLite database (its 16-byte header says so)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _sqlite(path: str, create: bool):  # type: ignore[no-untyped-def]
    import sqlite3

    path = os.path.expanduser(path)
    if not path:
        raise OptionError("--connect sqlite:/// needs a database file: sqlite:///shop.db")
    if not create and not os.path.exists(path):
        raise EngineConnectionError(
            f"SQLite database {path!r} does not exist (pass --create-db to create it)"
        )
    if os.path.exists(path) and os.path.getsize(path) and not _is_sqlite_file(path):
        raise EngineConnectionError(f"{path!r} is not a SQLite database")
    return sqlite3.connect(path)


MODEL_SUFFIXES = (".json",)
SCORED_SUFFIXES = (".csv", ".parquet")


def _check_output(path: str | None, suffixes: Sequence[str], what: str) -> None:
    """Fail before the work, not after it, when the output file cannot be written there or
    would not be what its name says."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
    if not os.path.isdir(folder):
        raise OptionError(f"cannot write {path!r}: the folder {folder!r} does not exist")
    if os.path.isdir(path):
        raise OptionError(f"cannot write {path!r}: it is a folder")
    if not path.lower().endswith(tuple(suffixes)):
        raise OptionError(
            f"cannot write {path!r}: {what} are written as {' or '.join(suffixes)} files; "
            f"name the file with one of those endings"
        )


@contextlib.contextmanager
def _written(path: str) -> Iterator[str]:
    """A temporary name beside ``path`` that becomes ``path`` when the block succeeds: an
    error or a Ctrl-C while writing leaves no half-written file behind. The file gets the mode
    a plain ``open`` would give it (the one it had, or 0666 less the umask), not the temporary
    file's 0600."""
    folder, name = os.path.split(os.path.abspath(os.path.expanduser(path)))
    handle, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=os.path.splitext(name)[1],
                                         dir=folder)
    os.close(handle)
    try:
        yield temporary
        os.chmod(temporary, _new_file_mode(path))
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)


def _new_file_mode(path: str) -> int:
    """The mode ``open(path, "w")`` leaves a file with: its own if it exists, else 0666 less
    the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that report bad input (a file, a source, an option, SQL the engine refused)
    rather than a fault of sqltree: one line each, no traceback."""
    import duckdb
    from sqlglot.errors import SqlglotError

    errors: list[type[BaseException]] = [SqlTreeError, OSError, SqlglotError, duckdb.Error]
    psycopg = sys.modules.get("psycopg")  # loaded only when a postgresql:// URL was used
    if psycopg is not None:
        errors.append(psycopg.Error)
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None:
        errors.append(sqlite3.Error)
    return tuple(errors)


def _exit_status(error: BaseException) -> int | None:
    """2 for a command line that is wrong, 1 for input that cannot be used, None for a fault
    of sqltree (its traceback is shown)."""
    if isinstance(error, OptionError):
        return 2
    if isinstance(error, _user_errors()):
        return 1
    return None


DRIVERS = {"duckdb": "DuckDB", "_duckdb": "DuckDB", "psycopg": "PostgreSQL", "pyspark": "Spark",
           "sqlite3": "SQLite"}


def _one_line(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    # sqlglot underlines the offending token of a parse error with terminal escapes
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = " ".join(lines) or type(error).__name__
    driver = DRIVERS.get(type(error).__module__.split(".")[0])
    return f"{driver}: {line}" if driver and not isinstance(error, SqlTreeError) else line


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    0 on success; 2 when the command line is wrong (an unknown flag, an option out of range
    or in a combination that means nothing, an output file that cannot be written, an
    ambiguous source name); 1 when its input cannot be used (a missing file, table or column,
    data sqltree cannot learn from, a model file that is not one, a database that cannot be
    reached); 130 after a Ctrl-C, once the engine's working tables are dropped. Each error is
    one line on standard error (``--debug`` adds the traceback); a fault of sqltree itself
    keeps its traceback.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, and usage errors already printed
        return e.code if isinstance(e.code, int) else 2
    try:
        with contextlib.nullcontext() if getattr(args, "quiet", False) else progress.shown():
            return _dispatch(args)
    except BrokenPipeError:
        # The reader went away (``sqltree show m.json | head``): not an error. Point stdout
        # at /dev/null so that Python's final flush does not report it either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        if args.debug:
            traceback.print_exc()
        print("sqltree: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        status = _exit_status(e)
        if status is None:
            raise
        if args.debug:
            traceback.print_exc()
        print(f"sqltree: error: {_one_line(e)}", file=sys.stderr)
        return status


def _dispatch(args: argparse.Namespace) -> int:
    import sqltree

    if args.command == "train":
        cart_options = {
            name: getattr(args, name)
            for name in ("criterion", "min_samples_leaf", "max_leaf_nodes", "ccp_alpha",
                         "threshold_search")
            if getattr(args, name) is not None
        }
        if "min_samples_leaf" in cart_options and cart_options["min_samples_leaf"] >= 1:
            cart_options["min_samples_leaf"] = int(cart_options["min_samples_leaf"])
        pruning = {None: "default", "none": None}.get(args.pruning, args.pruning)
        _check_train_args(args)
        ensemble = _ensemble_options(args)
        connection = _connection(args.connect, args.create_db)
        if args.threads is not None or args.memory_limit is not None:
            if connection is not None and not type(connection).__module__.startswith("duckdb"):
                raise OptionError("--threads and --memory-limit apply to DuckDB only")
            from sqltree.engines.duckdb import DuckDBEngine

            connection = DuckDBEngine(connection, threads=args.threads,
                                      memory_limit=args.memory_limit)
        options = dict(
            target=args.target,
            algorithm=args.algorithm,
            task=args.task,
            features=_csv(args.features),
            nominal=_csv(args.nominal) or (), continuous=_csv(args.continuous) or (),
            weight=args.weight, date_features=args.date_features,
            max_depth=args.max_depth, min_cases=args.min_cases,
            missing=args.missing, max_bins=args.max_bins,
            pruning=pruning, cf=args.cf,
            plan=args.plan,
            **cart_options,
        )
        options.update(ensemble)
        model, held_out = _train_or_hold_out(args, connection, options)
        if not args.quiet:  # a tree's text ends with a line break, an evaluation's too
            print(_ensemble_text(model) + "\n" if ensemble else model.text())
        _print_evaluations(args, model, held_out, connection, options)
        if args.output:
            with _written(args.output) as path:
                model.save(path)
            if not args.quiet:
                print(f"saved {args.output}", file=sys.stderr)
        return 0
    if args.command == "predict":
        _check_output(args.output, SCORED_SUFFIXES, "scored rows")
        model = sqltree.load(args.model)
        if isinstance(model, sqltree.Ensemble):
            _refuse_for_ensemble(model, ("--leaf", args.leaf), ("--unknown", args.unknown))
            if args.proba and model.is_regression:
                raise OptionError(f"--proba: {args.model} holds a regression ensemble, which "
                                  "predicts a number, not class probabilities")
            scored = model.predict(args.source, proba=args.proba, into=args.into,
                                   connection=_connection(args.connect, args.create_db))
        else:
            scored = model.predict(
                args.source, connection=_connection(args.connect, args.create_db),
                proba=args.proba, into=args.into, unknown=args.unknown or "fractional",
                **({"output": "leaf", "column": "leaf"} if args.leaf else {}),
            )
        if scored is None:
            return 0
        if args.output:
            with _written(args.output) as path:
                if args.output.lower().endswith(".parquet"):
                    scored.to_parquet(path, index=False)
                else:
                    scored.to_csv(path, index=False)
        else:
            scored.to_csv(sys.stdout, index=False)
        return 0
    if args.command == "sql":
        return _sql_command(args)
    if args.command in ("show", "rules", "dot"):
        return _reading_command(args)
    if args.command == "importances":
        if (args.kind == "permutation") != (args.source is not None):
            raise OptionError("--kind permutation and --source go together")
        model = sqltree.load(args.model)
        if args.kind == "permutation":
            importances = sqltree.permutation_importance(
                model, args.source, n_repeats=args.repeats, seed=args.seed,
                connection=_connection(args.connect, args.create_db)).mean
        else:
            importances = model.feature_importances(args.kind)
        width = max(len(name) for name in importances)
        for name, value in sorted(importances.items(), key=lambda p: -p[1]):
            shown = f"{value:.0f}" if args.kind == "split" else f"{value:.6f}"
            print(f"{name:<{width}}  {shown}")
        return 0
    if args.command == "evaluate":
        return _evaluate_command(args)
    if args.command == "scores":
        frame = sqltree.split_scores(args.source, target=args.target, task=args.task,
                                     features=_csv(args.features), weight=args.weight,
                                     date_features=args.date_features,
                                     connection=_connection(args.connect, args.create_db))
        print(frame.to_string(index=False))
        return 0
    raise AssertionError(args.command)


# -- sql, show, rules, dot -----------------------------------------------------------------------
def _sql_command(args: argparse.Namespace) -> int:
    import sqltree

    if args.dbt:
        if args.source_ref is None:
            raise OptionError("--dbt needs --source-ref NAME (the dbt model whose rows it scores)")
        for flag, given in (("--table", args.table), ("--view", args.view)):
            if given:
                raise OptionError(f"{flag} does not go with --dbt: the model reads "
                                   "--source-ref, and dbt makes the view")
    elif args.source_ref is not None:
        raise OptionError("--source-ref names the ref of a dbt model file: add --dbt")
    table_needed = [("--view", args.view), ("--proba", args.proba),
                    ("--check", args.check)] if not args.dbt else [("--check", args.check)]
    for flag, given in table_needed:
        if given and args.table is None:
            raise OptionError(f"{flag} needs --table (the table the query reads)")
    check_dialect(args.dialect)
    _check_output(args.output, (".sql",), "SQL and dbt model files")
    if (args.model is None) == (args.from_file is None):
        raise OptionError("give one model: a sqltree file, or --from FILE")
    if args.from_file is not None:
        from .ensemble.files import read_any

        model = read_any(args.from_file)
    else:
        model = sqltree.load(args.model)
    if isinstance(model, sqltree.Ensemble):
        return _ensemble_sql(args, model)
    options = dict(output="leaf" if args.leaf else "label", proba=args.proba,
                   unknown=args.unknown or "fractional", quote_identifiers=not args.no_quote)
    if args.leaf:
        options["column"] = "leaf"
    if args.check:
        for flag, given in (("--view", args.view), ("--proba", args.proba),
                            ("--leaf", args.leaf), ("--dbt", args.dbt)):
            if given:
                raise OptionError(f"{flag} does not go with --check")
        text = model.check_sql(args.table, args.dialect, pretty=args.pretty,
                               quote_identifiers=not args.no_quote) + "\n"
    elif args.dbt:
        text = model.to_dbt(args.source_ref, args.dialect, pretty=True, **options)
    else:
        text = model.to_sql(args.dialect, table=args.table, view=args.view,
                            pretty=args.pretty, **options) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    with open(args.output, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _load_tree(path: str, command: str) -> Any:
    """The single tree in a model file; an ensemble file is refused, naming what it takes."""
    import sqltree

    model = sqltree.load(path)
    if isinstance(model, sqltree.Ensemble):
        raise OptionError(f"{path} holds an ensemble of {model.n_trees:,} trees: `sqltree "
                          f"{command}` takes a single tree; `sqltree predict`, `evaluate`, "
                          "`sql`, `importances` and `show --summary` take ensembles")
    return model


def _refuse_for_ensemble(model: Any, *flags: tuple[str, Any]) -> None:
    """Refuse, before any query, the first flag given that applies to a single tree only."""
    why = {
        "--leaf": f"an ensemble's row reaches a leaf in each of its {model.n_trees:,} trees, "
                  "not one leaf",
        "--unknown": "an ensemble's trees send an unknown (NULL) value down the branch each "
                     "test records, with no C4.5 fractional split to choose",
    }
    for flag, given in flags:
        if given not in (None, False):
            raise OptionError(f"{flag} is for a single tree, not an ensemble: {why[flag]}")


def _ensemble_sql(args: argparse.Namespace, model: Any) -> int:
    """``sqltree sql`` for an ensemble: the query over ``--table`` (default ``data``)."""
    for flag, given in (("--dbt", args.dbt), ("--leaf", args.leaf), ("--no-quote", args.no_quote),
                        ("--unknown", args.unknown)):
        if given:
            raise OptionError(f"{flag} is for a single tree, not an ensemble")
    report: dict[str, Any] = {}
    text = model.to_sql(args.dialect, table=args.table or "data", view=args.view,
                        proba=args.proba, pretty=args.pretty, report=report) + "\n"
    if not args.quiet:
        print(f"{report['form']} form: {report['reason']}; {report['characters']:,} characters "
              f"({report['bytes_per_leaf']} bytes per leaf)", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    with open(args.output, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


PICTURE_SUFFIXES = (".dot", ".gv", ".svg", ".png", ".pdf")
"""What ``sqltree dot -o`` writes: DOT text, or a picture drawn by Graphviz."""


def _reading_command(args: argparse.Namespace) -> int:
    """``show``, ``rules`` and ``dot``: the saved tree, whole or down to ``--max-depth``."""
    import sqltree

    if args.command == "dot":
        _check_output(args.output, PICTURE_SUFFIXES, "trees")
    summary = args.command == "show" and args.summary
    if summary and args.max_depth is not None:
        raise OptionError("--summary prints no tree: it does not go with --max-depth")
    model = sqltree.load(args.model) if summary else _load_tree(args.model, args.command)
    if summary:
        print(model.summary())
    elif args.command == "show":
        print(model.text(max_depth=args.max_depth))
    elif args.command == "rules" and args.simplify is not None:
        if args.ids or args.max_depth is not None:
            raise OptionError("--simplify prints a rule set, not the leaves: it does not go "
                              "with --ids or --max-depth")
        rule_set = model.rule_set(args.simplify, cf=args.cf,
                                  connection=_connection(args.connect, args.create_db))
        print(rule_set.to_sql(args.sql, pretty=True) if args.sql else rule_set)
    elif args.command == "rules":
        if args.sql or args.cf != 0.25 or args.connect:
            raise OptionError("--sql, --cf and --connect go with --simplify SOURCE")
        print(model.rules(max_depth=args.max_depth, ids=args.ids))
    elif args.output is None:
        print(model.graphviz(max_depth=args.max_depth, filled=args.filled))
    else:
        from sqltree.pictures import render

        render(model.graphviz(max_depth=args.max_depth, filled=args.filled), args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


# -- evaluation ----------------------------------------------------------------------------------
def _check_train_args(args: argparse.Namespace) -> None:
    """Refuse, before any query, what ``train`` cannot do as asked: an output file it cannot
    write, evaluation flags that do not go together. ``--quiet`` with nothing to keep or
    print is refused later (``_lost_model``), once every option's value has been checked."""
    _check_output(args.output, MODEL_SUFFIXES, "models")
    _check_evaluation_flags(args)


def _ensemble_text(model: Any) -> str:
    """A forest's or boosting's summary, with its out-of-bag score or its last round."""
    lines = [model.summary()]
    oob = model.stats.get("oob")
    if oob is not None:
        lines.append(f"out-of-bag score: {oob['score']:.6f} on {oob['rows']:,} rows")
    rounds = model.stats.get("rounds")
    if rounds:
        last = rounds[-1]
        line = f"{progress.count(len(rounds), 'round')}; training loss {last['train_loss']:.6f}"
        if last["validation_loss"] is not None:
            line += f", validation loss {last['validation_loss']:.6f}"
        lines.append(line)
    return "\n".join(lines)


def _check_evaluation_flags(args: argparse.Namespace) -> None:
    """Refuse evaluation flags that cannot go together, before any query."""
    from sqltree import crossval

    if args.test_fraction is not None and (args.folds is not None or args.test is not None):
        raise OptionError("--test-fraction holds out part of the source; it does not go with "
                          "--folds or --test")
    dealing = args.folds is not None or args.test_fraction is not None
    for flag, given in (("--seed", args.seed is not None), ("--key", args.key is not None),
                        ("--no-stratify", args.no_stratify)):
        if given and not dealing:
            raise OptionError(f"{flag} applies to --folds and --test-fraction only")
    if args.folds is not None:
        crossval.check_folds(args.folds)
    if args.test_fraction is not None:
        crossval.check_fraction(args.test_fraction)


def _dealing(args: argparse.Namespace) -> dict[str, Any]:
    return {"seed": 1 if args.seed is None else args.seed, "key": args.key,
            "stratified": not args.no_stratify}


def _train_or_hold_out(
    args: argparse.Namespace, connection: Any, options: dict[str, Any]
) -> tuple[Any, Any]:
    """The model (trained on the rows not held out, with --test-fraction) and the held-out
    evaluation (None without --test-fraction)."""
    import sqltree

    progress = not args.quiet
    if args.test_fraction is None:
        return sqltree.train(args.source, connection=connection,
                             progress=_lost_model if _loses_model(args) else progress,
                             **options), None
    return sqltree.holdout(args.source, test_fraction=args.test_fraction, connection=connection,
                           progress=progress, **_dealing(args), **options)


def _loses_model(args: argparse.Namespace) -> bool:
    """``--quiet`` without ``--output`` or an evaluation: nothing would be printed or kept."""
    evaluates = any(v is not None for v in (args.folds, args.test, args.test_fraction))
    return bool(args.quiet and not args.output and not evaluates)


def _lost_model(event: Any) -> None:
    """``train``'s progress callback for ``_loses_model``: its first event comes after every
    option's value is checked and before the source is read, so a wrong value is reported
    first, and this refusal before any work."""
    raise OptionError(
        "--quiet prints nothing, so without --output the trained model would be lost: "
        "add -o MODEL.json (or --folds, --test or --test-fraction, whose evaluations it "
        "prints)"
    )


def _print_evaluations(args: argparse.Namespace, model: Any, held_out: Any, connection: Any,
                       options: dict[str, Any]) -> None:
    """J48's order: the training set (a tree's, unless --quiet, or the model saw only part of
    it), then a test source, the held-out rows, and cross-validation (of a tree, a forest or
    boosting, as ``options`` say)."""
    import sqltree

    if not args.quiet and held_out is None and not isinstance(model, sqltree.Ensemble):
        print(model.evaluate(args.source, connection=connection,
                             title="Evaluation on training set"), end="\n\n")
    if args.test is not None:
        print(model.evaluate(args.test, connection=connection, title="Evaluation on test set"),
              end="\n\n")
    if held_out is not None:
        print(held_out, end="\n\n")
    if args.folds is not None:
        print(sqltree.cross_validate(args.source, folds=args.folds, connection=connection,
                                     progress=not args.quiet, **_dealing(args), **options),
              end="\n\n")


def _evaluate_command(args: argparse.Namespace) -> int:
    """``sqltree evaluate MODEL SOURCE``: a tree's or an ensemble's evaluation, the same
    block (``--json``: the same keys)."""
    import sqltree

    model = sqltree.load(args.model)
    shown = " ".join(args.source.split())
    title = f"Evaluation on {shown if len(shown) <= 60 else shown[:57] + '...'}"
    weight: str | bool = False if args.unweighted else (args.weight or True)
    extra: dict[str, Any] = {} if args.threshold is None else {"threshold": args.threshold}
    if isinstance(model, sqltree.Ensemble):
        _refuse_for_ensemble(model, ("--unknown", args.unknown))
    else:
        extra["unknown"] = args.unknown or "fractional"
    evaluation = model.evaluate(args.source, weight=weight, title=title,
                                connection=_connection(args.connect, args.create_db), **extra)
    print(evaluation.to_json() if args.json else evaluation)
    return 0


if __name__ == "__main__":
    sys.exit(main())