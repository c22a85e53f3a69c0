"""A trained tree with everything needed to print it, compile it, score with it and save it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlglot import exp
from sqlglot.errors import ErrorLevel

from . import compiler, dates
from . import progress as reporting
from .algorithm_registry import REGISTRY
from .compiler.scoring import build_scoring_query
from .criteria import impurity, predicted_class
from .deploy import dbt_model, dbt_ref, unquote_identifiers
from .engines.sqlite_numbers import exact_numbers
from .errors import DataError, ModelFileError, OptionError, UnsupportedError
from .model_file import FORMAT, format_version, read_json, validate
from .options import check_dialect
from .source_check import check_source
from .tree import CONTINUOUS, Node, Value, check_unknown, format_value, scoring_tree

if TYPE_CHECKING:
    import pandas

    from .evaluation import Evaluation
    from .permutation import PermutationImportance
    from .regression_evaluation import RegressionEvaluation
    from .ruleset import RuleSet


@dataclass
class FeatureInfo:
    """What the model knows of a feature: its role, source type and training domain."""

    name: str
    kind: str
    sql_type: str
    values: list[Value] = field(default_factory=list)
    date_column: str | None = None
    """The date column a date feature is computed from (``train(date_features=True)``)."""
    date_part: str | None = None
    """Which part of ``date_column`` (``dates.PARTS``); None for a column of the source."""

    def to_dict(self) -> dict[str, Any]:
        """The model file's entry: the date fields only for a date feature."""
        out = vars(self).copy()
        if self.date_part is None:
            del out["date_column"], out["date_part"]
        return out


@dataclass
class Model:
    """A decision tree trained by sqltree.

    Attributes
    ----------
    root : Node
        The tree.
    classes : list
        Class labels, in the order of every ``counts`` and ``proba`` list.
    target : str
        The target column it was trained for.
    features : list of FeatureInfo
        The features it was trained on (not all need to appear in the tree).
    options : dict
        The training options.
    stats : dict
        Training statistics: rows, queries, full scans, seconds, per-level counts.
    task : {"classification", "regression"}
        A regression tree has no classes; every node's ``value`` is its weighted mean target,
        which its leaves predict.
    """

    root: Node
    classes: list[Value]
    target: str
    features: list[FeatureInfo]
    options: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    task: str = "classification"

    @property
    def is_regression(self) -> bool:
        return self.task == "regression"

    # -- structure ---------------------------------------------------------------------------
    @property
    def n_leaves(self) -> int:
        return sum(1 for _ in self.root.leaves())

    @property
    def n_nodes(self) -> int:
        return sum(1 for _ in self.root.walk())

    @property
    def depth(self) -> int:
        deepest = 0
        stack = [(self.root, 0)]
        while stack:
            node, d = stack.pop()
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in node.children)
        return deepest

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    # -- text --------------------------------------------------------------------------------
    def text(self, decimals: int | None = 6, *, max_depth: int | None = None) -> str:
        """The tree as J48 prints it: one test per line, leaves with ``(weight/errors)``;
        ``max_depth`` cuts deeper subtrees, marked ``[cut: N leaves]``."""
        from .export import text

        return text(self, decimals=decimals, max_depth=max_depth)

    def rules(self, decimals: int | None = 6, *, max_depth: int | None = None,
              ids: bool = False) -> str:
        """One ``IF ... THEN class`` line per leaf, with coverage and confidence (``ids``: the
        leaf ids ``to_sql(output="leaf")`` gives)."""
        from .export import rules

        return rules(self, decimals=decimals, max_depth=max_depth, ids=ids)

    def rule_set(self, source: Any, *, connection: Any = None, cf: float = 0.25,
                 weight: str | bool = True, seed: int = 1) -> RuleSet:
        """C4.5rules: the leaves' rules generalised, selected and ordered, counted in SQL.

        ``source`` holds the training rows (as for ``train``); each leaf's rule loses
        conditions while C4.5's pessimistic error rate at ``cf`` does not rise, then each
        class keeps the subset of its rules with the shortest description, classes are
        ordered by false positives and the default class is the most frequent among rows no
        rule covers (``seed`` drives the search for classes with more than ten rules).
        An unknown value satisfies no condition. See ``docs/rules.md``.

        Examples
        --------
        >>> import sqltree
        >>> model = sqltree.train("examples/data/golf.csv", target="play")
        >>> rules = model.rule_set("examples/data/golf.csv")
        >>> print(rules.to_sql())  # doctest: +ELLIPSIS
        CASE WHEN "outlook" = 'sunny' AND "humidity" = 'high' THEN 'no' ...
        """
        from .ruleset import build_rule_set

        return build_rule_set(self, source, connection=connection, cf=cf, weight=weight,
                              seed=seed)

    def graphviz(self, decimals: int | None = 6, *, max_depth: int | None = None,
                 filled: bool = False) -> str:
        """The tree as Graphviz DOT text (``filled``: nodes coloured by class and purity; draw
        it with ``sqltree.pictures.render``)."""
        from .export import graphviz

        return graphviz(self, decimals=decimals, max_depth=max_depth, filled=filled)

    def plot(self, *, ax: Any = None, max_depth: int | None = None, decimals: int | None = 6,
             fontsize: float | None = None, filled: bool = False) -> Any:
        """Draw the tree with matplotlib, as ``sklearn.tree.plot_tree`` does (``filled`` as
        for ``graphviz``); returns the Axes (see ``sqltree.pictures.plot``)."""
        from .pictures import plot

        return plot(self, ax=ax, max_depth=max_depth, decimals=decimals, fontsize=fontsize,
                    filled=filled)

    def permutation_importance(self, source: Any, *, connection: Any = None,
                               n_repeats: int = 5, seed: int = 1, weight: str | bool = True
                               ) -> PermutationImportance:
        """Each feature's drop in accuracy (R² for regression) when its values are shuffled
        among the rows of ``source`` in the engine: ``sqltree.permutation_importance``."""
        from .permutation import permutation_importance

        return permutation_importance(self, source, connection=connection,
                                      n_repeats=n_repeats, seed=seed, weight=weight)

    def feature_importances(self, kind: str = "gain") -> dict[str, float]:
        """Each feature's importance in the tree, by name, in the order of ``features``.

        ``kind="gain"``: scikit-learn's ``feature_importances_``, each test's weighted impurity
        decrease (the node's weight times its impurity, less its children's) summed per
        feature and normalised to add up to 1: Gini or entropy as CART was grown (entropy for
        ID3 and C4.5), the variance for a regression tree. ``kind="split"``: how many tests
        use the feature (J48-style usage counts). A feature the tree never tests has 0.

        Examples
        --------
        >>> import sqltree
        >>> model = sqltree.train("examples/data/golf.csv", target="play")
        >>> model.feature_importances("split")
        {'outlook': 1.0, 'temperature': 0.0, 'humidity': 1.0, 'windy': 1.0}
        """
        totals = dict.fromkeys(self.feature_names, 0.0)
        if kind not in ("gain", "split"):
            raise OptionError(f"kind is 'gain' or 'split', not {kind!r}")
        criterion = "entropy"
        algorithm = REGISTRY.get(self.options.get("algorithm"))
        if algorithm is not None and algorithm.cart_options:
            criterion = "gini" if self.options.get("criterion", "gini") == "gini" else "entropy"

        def weighted(node: Node) -> float:
            if self.is_regression:
                return sum(node.counts) * (node.impurity or 0.0)
            return sum(node.counts) * impurity(node.counts, criterion)

        for node in self.root.walk():
            if node.split is None:
                continue
            if kind == "split":
                totals[node.split.feature] += 1.0
            else:
                totals[node.split.feature] += weighted(node) - sum(
                    weighted(c) for c in node.children)
        if kind == "gain":
            whole = sum(totals.values())
            if whole > 0:
                totals = {name: v / whole for name, v in totals.items()}
        return totals

    def summary(self) -> str:
        """A few lines on the model: target and classes, the source's shape, the class balance,
        the algorithm and its options, the tree's size, training time and queries, and the
        sqltree version that trained it (``sqltree show --summary``)."""
        from .summary import summary

        return summary(self)

    def __repr__(self) -> str:
        return (
            f"Model(target={self.target!r}, algorithm={self.options.get('algorithm')!r}, "
            + (f"task={self.task!r}, " if self.is_regression else f"classes={self.classes!r}, ")
            + f"n_leaves={self.n_leaves}, depth={self.depth})"
        )

    # -- prediction in Python ----------------------------------------------------------------
    def predict_proba_row(self, row: dict[str, Any], *, unknown: str = "fractional"
                          ) -> list[float]:
        """Class probabilities for one row (a mapping of column name to value).

        The same sums, in the same order, as ``Node.predict_proba``, without its recursion:
        a row with an unknown value at each of a thousand fractional tests in a chain goes a
        thousand tests deep. With ``unknown="majority"`` an unknown value at such a test goes
        down the test's heaviest branch instead, as ``to_sql(unknown="majority")`` scores it.
        """
        majority = check_unknown(unknown) == "majority"
        row = self._dated_row(row)

        def follow(node: Node) -> Node:
            return _follow(node, row, majority)

        start = follow(self.root)
        if start.split is None:
            return list(start.proba)
        k = len(start.proba)
        stack: list[tuple[Node, int, list[float]]] = [(start, 0, [0.0] * k)]
        done: list[float] | None = None  # the sum of the child last finished
        while True:
            node, i, total = stack[-1]
            if done is not None:
                share = node.shares[i - 1]
                for c, p in enumerate(done):
                    total[c] += share * p
                done = None
            branches = min(len(node.shares), len(node.children))
            while i < branches and not node.shares[i] > 0:
                i += 1
            if i == branches:
                stack.pop()
                if not stack:
                    return total
                done = total
                continue
            stack[-1] = (node, i + 1, total)
            child = follow(node.children[i])
            if child.split is None:
                done = list(child.proba)
            else:
                stack.append((child, 0, [0.0] * k))

    def predict_row(self, row: dict[str, Any], *, unknown: str = "fractional") -> Value:
        """The predicted class (or number) of one row, as the compiled SQL would give it."""
        check_unknown(unknown)
        if self.is_regression:
            return self.leaf_of(row).value
        return self.classes[predicted_class(self.predict_proba_row(row, unknown=unknown))]

    def leaf_row(self, row: dict[str, Any], *, unknown: str = "fractional") -> int | None:
        """The id of the leaf one row reaches, as ``to_sql(output="leaf")`` gives it: None
        where a fractional test meets an unknown value (unless ``unknown="majority"``)."""
        node = _follow(self.root, self._dated_row(row), check_unknown(unknown) == "majority")
        return node.node_id if node.is_leaf else None

    def _dated_row(self, row: dict[str, Any]) -> Any:
        """``row`` with the values of the date features computed from its date columns (a
        ``date``, ``datetime`` or ISO-8601 text), as the scoring SQL computes them."""
        return dates.with_values(row, dates.parts_of(self.features))

    def scoring_root(self, unknown: str = "fractional") -> Node:
        """The tree the scoring SQL compiles: the model's own, or with ``unknown="majority"``
        a copy whose fractional tests send unknown values down their heaviest branch."""
        return scoring_tree(self.root, unknown)

    def leaf_of(self, row: dict[str, Any]) -> Node:
        """The leaf a row reaches in a tree whose every test routes unknown values to one
        branch (CART's)."""
        node = self.root
        row = self._dated_row(row)
        while node.split is not None:
            branch = node.split.branch_of(row.get(node.split.feature))
            if branch is None:
                branch = node.unknown_branch
            if branch is None:
                raise ValueError("a test that spreads unknown values has no single leaf")
            node = node.children[branch]
        return node

    # -- SQL ---------------------------------------------------------------------------------
    def to_expression(self, output: str = "label", table: str | None = None, *,
                      unknown: str = "fractional", dialect: str | None = None
                      ) -> exp.Expression:
        """The scoring expression as a sqlglot tree (``output``: "label" or "leaf"; a
        regression tree's label is its predicted number; for ``unknown`` see ``to_sql``).
        A date feature's tests compute it from its date column (``dialect`` "sqlite": with
        SQLite's date functions)."""
        return self._dated(self._expression(self.scoring_root(unknown), output, table), dialect)

    def _dated(self, expression: exp.Expression, dialect: str | None) -> exp.Expression:
        """``expression`` with each date feature computed from its date column
        (``dates.inline``)."""
        return dates.inline(expression, dates.parts_of(self.features), dialect)

    def _expression(self, root: Node, output: str, table: str | None = None) -> exp.Expression:
        if output == "label" and self.is_regression:
            return compiler.compile_value(root, table)
        if output == "label":
            return compiler.compile_label(root, self.classes, table)
        if output == "leaf":
            return compiler.compile_leaf(root, table)
        raise OptionError(f"output must be 'label' or 'leaf', not {output!r}")

    def to_sql(
        self,
        dialect: str = "duckdb",
        *,
        output: str = "label",
        table: str | None = None,
        column: str = "prediction",
        proba: bool = False,
        view: str | None = None,
        pretty: bool = False,
        unknown: str = "fractional",
        quote_identifiers: bool = True,
    ) -> str:
        """Scoring SQL for any sqlglot dialect.

        With neither ``table`` nor ``view``: one expression (``CASE WHEN ... END``). With
        ``table``: ``SELECT *, <prediction> AS prediction FROM table``; with ``view`` as well,
        ``CREATE VIEW view AS`` that query. ``proba`` adds one probability column per class.

        Parameters
        ----------
        output : {"label", "leaf"}, default="label"
            The predicted class, or the id of the leaf a row reaches (the ``id`` of the node
            in the model file, as ``rules(ids=True)`` prints it).
        unknown : {"fractional", "majority"}, default="fractional"
            Where a C4.5 test meets an unknown value (NULL, or a nominal value no branch
            lists): "fractional" scores as C4.5 does, with each class's probability summed
            over every branch weighted by its share of the training weight (exact, and long:
            that arithmetic is most of the SQL); "majority" sends the value down the test's
            heaviest branch, a plain ``CASE`` (``predict_row(..., unknown="majority")`` is the
            same in Python). Trees without such tests give the same SQL either way.
        quote_identifiers : bool, default=True
            False writes every identifier unquoted, in the case the dialect folds unquoted
            names to (``OUTLOOK`` for Snowflake, ``outlook`` for PostgreSQL), for tables whose
            columns were created unquoted; a name that cannot be written unquoted (``it's``,
            ``select``) raises OptionError.
        """
        check_dialect(dialect)
        if output not in ("label", "leaf"):
            raise OptionError(f"output must be 'label' or 'leaf', not {output!r}")
        if table is None:
            if view is not None:
                raise OptionError("a view needs the table it reads: pass table=...")
            if proba:
                raise OptionError("probabilities are columns: pass table=... to get a query")
        check_unknown(unknown)
        leaves = reporting.count(self.n_leaves, "leaf", "leaves")
        start = f"compiling {leaves} to {dialect} SQL"
        with reporting.phase("compile", start) as phase:
            if table is None:
                expression = self.to_expression(output, unknown=unknown, dialect=dialect)
            else:
                expression = self._select(exp.to_table(table, dialect=dialect), output, column,
                                          proba, unknown, view=view, dialect=dialect)
            if not quote_identifiers:
                unquote_identifiers(expression, dialect)
            sql = render(expression, dialect, pretty)
            phase.done(f"compiled {leaves} into {len(sql):,} characters of "
                       f"{dialect} SQL, {phase.seconds:.2f} s", characters=len(sql))
        return sql

    def to_dbt(
        self,
        ref: str,
        dialect: str = "duckdb",
        *,
        output: str = "label",
        column: str = "prediction",
        proba: bool = False,
        pretty: bool = True,
        unknown: str = "fractional",
        quote_identifiers: bool = True,
    ) -> str:
        """A dbt model file that scores the dbt model ``ref``: ``SELECT *, <prediction> AS
        prediction FROM {{ ref('sales') }}``, Jinja left as it is, for the warehouse's
        ``dialect``. Save it under the project's ``models/``; the options are ``to_sql``'s.
        """
        check_dialect(dialect)
        relation = dbt_ref(ref)
        header = (f"{self.target} predicted by a sqltree {self.options.get('algorithm')} tree "
                  f"({self.n_leaves} leaves), compiled for {dialect}")
        leaves = reporting.count(self.n_leaves, "leaf", "leaves")
        start = f"compiling {leaves} to a {dialect} dbt model"
        with reporting.phase("compile", start) as phase:
            query = self._select(relation, output, column, proba, unknown, dialect=dialect)
            if not quote_identifiers:
                unquote_identifiers(query, dialect)
            text = dbt_model(render(query, dialect, pretty), relation, header)
            phase.done(f"compiled {leaves} into a dbt model of {len(text):,} "
                       f"characters, {phase.seconds:.2f} s", characters=len(text))
        return text

    def check_sql(self, table: str, dialect: str = "duckdb", *, pretty: bool = False,
                  quote_identifiers: bool = True) -> str:
        """A query a deployment can run to check that ``table`` still holds what the model
        was trained on: one row per nominal column the tree tests that holds values training
        never saw (``column``, ``rows``, an ``example``), none when all is well, so it serves as
        a dbt singular test as it is. A column whose values changed type (booleans stored as
        1/0 where the model learnt ``'True'``) has every row outside, or makes the engine
        refuse the comparison; either way the check does not pass silently.

        Examples
        --------
        >>> import sqltree
        >>> model = sqltree.train("examples/data/golf.csv", target="play")
        >>> print(model.check_sql("sales").splitlines()[0][:64])
        SELECT 'outlook' AS "column", COUNT(*) AS "rows", MIN(CAST("outl
        """
        from .compiler.blocks import column as quoted_column
        from .compiler.blocks import literal

        check_dialect(dialect)
        relation = exp.to_table(table, dialect=dialect)
        tested = {n.split.feature for n in self.root.walk() if n.split is not None}
        parts: list[exp.Select] = []
        for f in self.features:
            if f.name not in tested or f.kind == CONTINUOUS or not f.values:
                continue
            col = quoted_column(f.name)
            outside = exp.and_(col.copy().is_(exp.null()).not_(), exp.not_(exp.In(
                this=col.copy(), expressions=[literal(v) for v in f.values])))
            parts.append(
                exp.select(
                    exp.alias_(exp.Literal.string(f.name), "column", quoted=True),
                    exp.alias_(exp.Count(this=exp.Star()), "rows", quoted=True),
                    exp.alias_(exp.Min(this=exp.cast(col.copy(), "TEXT")), "example",
                               quoted=True),
                ).from_(relation.copy()).where(outside).having(
                    exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0)))
            )
        if not parts:  # nothing to check: a query that returns no rows
            query: exp.Expression = exp.select(
                exp.alias_(exp.Literal.string(""), "column", quoted=True)).where(exp.false())
        else:
            query = parts[0]
            for part in parts[1:]:
                query = exp.union(query, part, distinct=False)
        query = self._dated(query, dialect)
        if not quote_identifiers:
            unquote_identifiers(query, dialect)
        return render(query, dialect, pretty)

    def _select(self, relation: exp.Expression, output: str, column: str, proba: bool,
                unknown: str, *, view: str | None = None, dialect: str = "duckdb"
                ) -> exp.Expression:
        """``to_sql``'s query over ``relation``: a SELECT, or with ``view`` the view of it."""
        query: exp.Expression = self.scoring_query(
            relation, output=output, column=column, proba=proba, unknown=unknown,
            dialect=dialect,
        )
        if view is not None:
            query = exp.Create(
                this=exp.to_table(view, dialect=dialect), kind="VIEW", expression=query
            )
        return query

    def proba_columns(self) -> list[str]:
        """The probability columns' names: ``proba_<label>``, one per class, in class order.

        Engines compare column names without regard to case (DuckDB, SQLite and Spark even
        quoted ones), so two labels whose names differ only in case, such as ``yes`` and
        ``YES``, would give one column twice, which DuckDB renames on its own (``proba_yes_1``).
        Such labels are refused with a ``DataError`` that names them.
        """
        if self.is_regression:
            raise UnsupportedError("a regression tree predicts a number, not probabilities")
        names = [f"proba_{format_value(c)}" for c in self.classes]
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            j = seen.setdefault(name.lower(), i)
            if j != i:
                raise DataError(
                    f"class labels {self.classes[j]!r} and {self.classes[i]!r} would both name "
                    f"the probability column {names[j]!r} (column names are compared without "
                    "regard to case): score without probabilities, or relabel the classes"
                )
        return names

    def scoring_query(
        self,
        relation: exp.Expression,
        *,
        output: str = "label",
        column: str = "prediction",
        proba: bool = False,
        source_columns: Sequence[str] | None = None,
        expand: bool = False,
        ordered: bool = True,
        unknown: str = "fractional",
        dialect: str | None = None,
    ) -> exp.Select:
        """``SELECT *, <prediction> FROM relation`` as a sqlglot query.

        Given the source's column names, rows that meet an unknown value at a C4.5 test get
        their class probabilities in a step of their own, once per row: in closed form, or,
        with ``expand``, by copies of the row that walk on from every branch (see
        ``compiler.scoring.build_expansion_query``; that keeps the source's row order only when
        ``ordered``). ``unknown`` is ``to_sql``'s. Date features are computed from their date
        columns (``dates``; ``dialect`` "sqlite" writes SQLite's date functions).
        """
        root = self.scoring_root(unknown)
        if source_columns is not None and output == "label" and not self.is_regression:
            _refuse_duplicates([column, *(self.proba_columns() if proba else [])])
            tested = {n.split.feature for n in root.walk() if n.split is not None}
            relation = dates.add_parts(relation, dates.needed_parts(self.features, tested),
                                       dialect or "duckdb")
            return build_scoring_query(
                root, self.classes, relation, source_columns, column,
                self.proba_columns() if proba else None, expand=expand, ordered=ordered,
            )
        names = [column, *(self.proba_columns() if proba else [])]
        _refuse_duplicates(names)
        outputs = [self._expression(root, output)]
        if proba:
            outputs += compiler.compile_proba(root, len(self.classes))
        outputs = [self._dated(e, dialect) for e in outputs]
        # Built without copies: sqlglot's builders would copy the whole tree's expressions.
        select = exp.Select(expressions=[exp.Star()] + [
            exp.Alias(this=e, alias=exp.to_identifier(name, quoted=True))
            for e, name in zip(outputs, names)
        ])
        return select.from_(relation, copy=False)

    def predict(
        self,
        source: Any,
        *,
        connection: Any = None,
        proba: bool = False,
        column: str = "prediction",
        into: str | None = None,
        unknown: str = "fractional",
        output: str = "label",
    ) -> pandas.DataFrame | None:
        """Score ``source`` in the engine with the compiled SQL.

        Returns the source's columns plus ``prediction`` (and ``proba_<class>`` columns with
        ``proba=True``) as a pandas DataFrame in the source's row order, or, with ``into``,
        writes them to that table and returns None (the table's rows are in no particular
        order: restoring it would sort the whole table). ``unknown="majority"`` scores as
        ``to_sql(unknown="majority")`` does; ``output="leaf"`` gives the id of the leaf each
        row reaches instead of its prediction, as ``to_sql(output="leaf")`` does.
        """
        from .dataset import resolve_relation
        from .engines import get_engine

        check_unknown(unknown)
        engine = get_engine(connection)
        try:
            relation = resolve_relation(source, engine)
            schema = engine.columns(relation)
            names = [n for n, _ in schema]
            self._check_source(dict(schema), engine)
            taken = {n.lower() for n in names}
            clash = [c for c in [column, *(self.proba_columns() if proba else [])]
                     if c.lower() in taken]
            if clash:
                raise DataError(
                    f"the source already has columns {clash}; choose another name with column="
                )
            query = self.scoring_query(
                relation, output=output, column=column, proba=proba, source_columns=names,
                expand=engine.VECTORIZED, ordered=into is None, unknown=unknown,
                dialect=engine.dialect,
            )
            # The engine copies the query before rendering it; see compiler.collector_paused.
            start = (f"scoring {relation.meta['sqltree_source']} with "
                     f"{reporting.count(self.n_leaves, 'leaf', 'leaves')}")
            with compiler.collector_paused(), reporting.phase("score", start) as phase:
                if into is not None:
                    engine.create_table(into, query)
                    phase.done(f"scored into {into!r}, {phase.seconds:.2f} s")
                    return None
                frame = engine.frame(query)
                phase.done(f"scored {len(frame):,} rows, {phase.seconds:.2f} s", rows=len(frame))
                return frame
        finally:
            engine.cleanup()

    def _check_source(self, types: dict[str, exp.DataType], engine: Any) -> None:
        """Refuse a scoring source without a column the tree tests, or with text where the
        tree compares numbers, or with another type family than in training (the engine's own
        error would name neither, or there would be no error and wrong answers)."""
        tested = {n.split.feature: n.split for n in self.root.walk() if n.split}
        types = dict(dates.checked_schema(self.features, tested, list(types.items()),
                                          engine.dialect))
        missing = sorted(f for f in tested if f not in types)
        if missing:
            raise DataError(f"columns the tree tests are not in the source: {missing}")
        kinds = {f.name: f.kind for f in self.features}
        untyped = (exp.DataType.Type.NULL, exp.DataType.Type.UNKNOWN)
        for name in sorted(tested):
            dtype = types[name]
            if kinds.get(name) == CONTINUOUS and not dtype.is_type(
                *exp.DataType.NUMERIC_TYPES, *untyped
            ):
                raise DataError(
                    f"column {name!r} is {dtype.sql(engine.dialect)} in the source, but the tree "
                    f"compares it with numbers ({name} <= {tested[name].threshold!r}); cast "
                    "it to a number in a query"
                )
        check_source(self, types, engine)

    def evaluate(
        self,
        source: Any,
        *,
        connection: Any = None,
        weight: str | bool = True,
        title: str = "Evaluation",
        unknown: str = "fractional",
        threshold: float | None = None,
    ) -> Evaluation | RegressionEvaluation:
        """Evaluate the tree on ``source`` with one ``GROUP BY actual, predicted`` query.

        The source (a table, query, path or DataFrame, as for ``predict``) must hold the
        target column and the columns the tree tests. Rows are scored by the compiled SQL
        in the engine and only their counts per (actual, predicted) class come back: the
        result has the confusion matrix, accuracy, Cohen's kappa, per-class precision,
        recall, F1 and support with weighted and macro averages, log loss and Weka's error
        measures; ``str()`` prints it as Weka's evaluation block, ``to_dict()``/``to_json()``
        give every figure. Rows with a NULL target are left out and counted.

        A regression tree's evaluation (``RegressionEvaluation``) is one aggregate query over
        the scoring SQL: root mean squared error, mean absolute error, R² and the count.

        ``weight``: True counts each row with the model's training weight column (when it
        was trained with one), False counts rows, a column name weighs by that column.
        ``unknown="majority"`` evaluates the SQL ``to_sql(unknown="majority")`` deploys.
        ``threshold`` (two classes): the second class is predicted where its probability is at
        least this, instead of the likelier class (``Evaluation.threshold_curve()`` lists
        every threshold's counts).
        """
        from .evaluation import evaluate

        if self.is_regression:
            from .regression_evaluation import evaluate_regression

            if threshold is not None:
                raise UnsupportedError("a regression tree predicts numbers: threshold= does "
                                       "not apply")
            if unknown != "fractional":
                raise UnsupportedError(
                    "a regression tree routes unknown values to one branch at every test: "
                    "unknown= does not apply"
                )
            return evaluate_regression(self, source, connection=connection, weight=weight,
                                       title=title)
        return evaluate(self, source, connection=connection, weight=weight, title=title,
                        unknown=unknown, threshold=threshold)

    # -- files -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = {
            "format": FORMAT,
            "version": None,
            "target": self.target,
            **({"task": self.task} if self.is_regression else {}),
            "classes": self.classes,
            "features": [f.to_dict() for f in self.features],
            "options": self.options,
            "stats": self.stats,
            "tree": self.root.to_dict(),
        }
        data["version"] = format_version(data)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Model:
        """The model of a ``to_dict`` document, checked first by ``model_file.validate``:
        anything else raises ModelFileError saying what is wrong and where."""
        validate(data)
        return cls(
            root=Node.from_dict(data["tree"]),
            classes=list(data["classes"]),
            target=data["target"],
            features=[FeatureInfo(**f) for f in data["features"]],
            options=dict(data.get("options", {})),
            stats=dict(data.get("stats", {})),
            task=data.get("task", "classification"),
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model as JSON (floats written exactly, so loading round-trips)."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=1, ensure_ascii=False)
            fh.write("\n")


def load(path: str | os.PathLike[str]) -> Model:
    """Read a model written by ``Model.save``; any other file raises ModelFileError naming it."""
    data = read_json(path)
    try:
        return Model.from_dict(data)
    except ModelFileError as e:
        raise ModelFileError(f"{os.fspath(path)}: {e}") from None


def _follow(node: Node, row: dict[str, Any], majority: bool) -> Node:
    """Down from ``node`` by the row's values to a leaf, or to the test where the value is
    unknown and spread over every branch (with ``majority``, it takes the heaviest)."""
    while node.split is not None:
        branch = node.split.branch_of(row.get(node.split.feature))
        if branch is None:
            branch = node.unknown_route() if majority else node.unknown_branch
        if branch is None:
            return node
        node = node.children[branch]
    return node


def render(expression: exp.Expression, dialect: str, pretty: bool = False) -> str:
    """Render with sqlglot, failing loudly on anything the dialect cannot express."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        with compiler.collector_paused():
            if dialect == "sqlite":
                expression = exact_numbers(expression.copy())
            return expression.sql(
                dialect=dialect, unsupported_level=ErrorLevel.RAISE, pretty=pretty, copy=False
            )
    finally:
        sys.setrecursionlimit(limit)


def _refuse_duplicates(names: Sequence[str]) -> None:
    """Output columns must differ in more than case (see ``Model.proba_columns``)."""
    lowered = [n.lower() for n in names]
    twice = sorted({n for n, low in zip(names, lowered) if lowered.count(low) > 1})
    if twice:
        raise OptionError(f"output columns {twice} would have the same name: choose another "
                          "column=")


def features_info(features: Sequence[Any]) -> list[FeatureInfo]:
    return [FeatureInfo(f.name, f.kind, f.sql_type, list(f.values),
                        getattr(f, "date_column", None), getattr(f, "date_part", None))
            for f in features]
