"""The select plan: training made only of single ``SELECT`` statements over the user's source.

The tables plan stores each level's rows, its histogram and the small tables of a level's
splits as temporary tables. A connection that may not create tables (a PostgreSQL role with
only ``SELECT``, a read-only replica, SQLite here) trains on the select plan instead: every
such table stays a *definition*, and each statement is written with the definitions it reads,
and the ones those read, as common table expressions in front of it. The stages build the same
queries on either plan: a level is the partition of the level above it, which moves rows down
one level by joining the level's tests and routes (each node's path predicate, with C4.5's
branch shares as weights), so the rows of level ``d`` are the source's rows moved down by the
``d`` partitions of the levels above, inside every statement that reads them. Nothing is
created, so nothing is left to clean up.

A definition that a statement reads more than once (a level read by every feature's part of a
histogram, a histogram read by several parts of the scoring query) is ``MATERIALIZED`` where
the engine has that, so the source is read once per statement; each statement that reads it
counts as a scan.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlglot import exp

from ..errors import OptionError, UnsupportedError

TABLES = "tables"
SELECT = "select"
AUTO = "auto"
PLANS = (AUTO, TABLES, SELECT)
"""The values of ``train(plan=...)``: choose by the connection, working tables, or SELECTs only."""


def check_plan(plan: str) -> str:
    """``plan`` if it names a plan, else an ``OptionError`` listing them."""
    if plan not in PLANS:
        raise OptionError(f"plan must be one of {PLANS}, not {plan!r}")
    return plan


def plan_note(plan: str, reason: str) -> str:
    """What progress says of the training plan: its name, and for the select plan why."""
    return f"{plan} plan" if plan == TABLES else f"{plan} plan: {reason}"


def choose_plan(plan: str, refusal: str | None) -> tuple[str, str]:
    """The plan to train on, and why, for a requested ``plan`` on a connection where the tables
    plan cannot run for the reason ``refusal`` (None: it can)."""
    check_plan(plan)
    if plan == TABLES:
        if refusal is not None:
            raise UnsupportedError(
                f"plan='tables' cannot run here: {refusal}; use plan='select' (or the "
                "default, 'auto')"
            )
        return TABLES, "asked for"
    if plan == SELECT:
        return SELECT, "asked for"
    if refusal is None:
        return TABLES, "the connection can create temporary tables"
    return SELECT, refusal


@dataclass
class _Definition:
    query: exp.Expression
    refs: Counter[str]
    """Definitions it reads, with how often it names each."""
    reads_source: bool
    """Whether it reads anything but definitions and literal rows (the source), itself or
    through the definitions it reads."""


class SelectPlan:
    """The definitions that stand in for temporary tables, and the statements that read them.

    Parameters
    ----------
    materialized : bool
        Whether the engine takes ``WITH name AS MATERIALIZED (...)``.
    """

    def __init__(self, materialized: bool) -> None:
        self.materialized = materialized
        self._defined: dict[str, _Definition] = {}
        self._dropped: set[str] = set()

    def define(self, name: str, query: exp.Expression) -> exp.Table:
        """Keep ``query`` as the definition of ``name``; returns a reference to it."""
        inner = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
        refs: Counter[str] = Counter()
        external = False
        for table in query.find_all(exp.Table):
            if table.name in self._defined:
                refs[table.name] += 1
            elif table.name not in inner:
                external = True
        reads = external or any(self._defined[r].reads_source for r in refs)
        self._defined[name] = _Definition(query, refs, reads)
        return exp.Table(this=exp.to_identifier(name, quoted=True))

    def drop(self, name: str) -> None:
        """Forget ``name`` once no kept definition reads it (a level is read by the next)."""
        if name not in self._defined:
            return
        self._dropped.add(name)
        live = [n for n in self._defined if n not in self._dropped]
        needed = set(self._closure(live))
        for gone in [n for n in self._defined if n not in needed]:
            del self._defined[gone]
            self._dropped.discard(gone)

    def clear(self) -> None:
        self._defined.clear()
        self._dropped.clear()

    def _closure(self, names: list[str]) -> list[str]:
        """``names`` and every definition they read, each after the definitions it reads."""
        order: list[str] = []
        seen: set[str] = set()
        for start in names:
            if start in seen:
                continue
            # Iterative depth-first walk: a deep tree's levels form a long chain.
            stack: list[tuple[str, bool]] = [(start, False)]
            while stack:
                name, expanded = stack.pop()
                if expanded:
                    order.append(name)
                    continue
                if name in seen:
                    continue
                seen.add(name)
                stack.append((name, True))
                stack.extend((r, False) for r in reversed(self._defined[name].refs)
                             if r not in seen)
        return order

    def attach(self, query: exp.Expression) -> tuple[exp.Expression, bool]:
        """``query`` with the definitions it reads in front of it as CTEs, and whether it then
        reads the source (a scan). The definitions are not copied: rendering copies."""
        named = Counter(
            t.name for t in query.find_all(exp.Table) if t.name in self._defined
        )
        if not named:
            return query, False
        order = self._closure(list(named))
        uses = Counter(named)
        for name in order:
            uses.update(self._defined[name].refs)
        ctes = [
            exp.CTE(
                this=self._defined[name].query,
                alias=exp.TableAlias(this=exp.to_identifier(name, quoted=True)),
                materialized=True if self.materialized and uses[name] > 1 else None,
            )
            for name in order
        ]
        out = query.copy()
        existing = out.args.get("with_")
        if existing is not None:
            existing.set("expressions", [*ctes, *existing.expressions])
        else:
            out.set("with_", exp.With(expressions=ctes))
        return out, any(self._defined[name].reads_source for name in order)
