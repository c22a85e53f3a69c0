"""Scoring SQL where people deploy it: identifiers left unquoted, and dbt model files.

By default every identifier sqltree writes is quoted, so a column is read exactly as it was
named in training (``"outlook"``). Engines that fold unquoted names do not find such a column
when it was created unquoted in another case: Snowflake and Oracle store ``outlook`` as
``OUTLOOK``, so ``"outlook"`` names nothing there. ``unquote_identifiers`` writes every
identifier unquoted and in the case the dialect folds unquoted names to (sqlglot's
``normalize_identifier``), and refuses names that cannot be written unquoted.

``dbt_model`` writes a dbt model file: the scoring query reading ``{{ ref('name') }}``, the
Jinja left as it is, and the rest of the SQL kept from Jinja.
"""

from __future__ import annotations

import re
from functools import cache

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect, Dialects

from .errors import DataError, OptionError

__all__ = ["check_unquoted_name", "dbt_model", "dbt_ref", "unquote_identifiers"]

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
"""A name every dialect reads unquoted: ASCII letters, digits and underscores, no digit first."""

_DBT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_JINJA = ("{{", "}}", "{%", "%}", "{#", "#}")
_RAW_END = re.compile(r"\{%-?\s*endraw\s*-?%\}")


@cache
def _reserved_words() -> frozenset[str]:
    """Every word some dialect's generator quotes because that dialect reserves it.

    A name reserved anywhere is refused everywhere: ``user`` is a column in one engine and
    the current user in another, so unquoted it may read the wrong thing without an error.
    """
    words: set[str] = set()
    for name in Dialects:
        if not name.value:
            continue
        try:
            words |= {w.lower() for w in Dialect.get_or_raise(name.value).generator_class
                      .RESERVED_KEYWORDS}
        except Exception:  # a dialect sqlglot lists but cannot load: nothing to learn from it
            continue
    return frozenset(words)


def check_unquoted_name(name: str, dialect: str, what: str = "column") -> None:
    """Refuse a name that cannot be written unquoted: anything but ASCII letters, digits and
    underscores (no digit first), a word some dialect reserves, or a word ``dialect`` reads as
    something other than a column (``current_date``)."""
    reason = None
    if not _PLAIN.match(name):
        reason = "only ASCII letters, digits and underscores (no digit first) can be"
    elif name.lower() in _reserved_words():
        reason = "it is a reserved word in some SQL dialects, and reserved words cannot be"
    elif not _reads_as_column(name, dialect):
        reason = f"{dialect} reads it as something other than a column name when it is"
    if reason is not None:
        raise OptionError(
            f"the {what} {name!r} cannot be written unquoted: {reason} written without "
            "quotes; keep the identifiers quoted (the default), or rename it"
        )


def _reads_as_column(name: str, dialect: str) -> bool:
    """Whether ``SELECT name FROM t WHERE name = 1``, written with ``name`` unquoted, reads
    back as that column in both places (no dialect's generator quotes the name: it is a plain
    word and reserved nowhere, which ``check_unquoted_name`` has checked first)."""
    ref = exp.column(name)
    probe = (exp.select(ref).from_("t").where(exp.EQ(this=ref.copy(), expression=exp.Literal
                                                      .number(1))).sql(dialect))
    try:
        parsed = sqlglot.parse_one(probe, read=dialect)
    except sqlglot.errors.SqlglotError:
        return False
    where = parsed.args.get("where")
    used = [parsed.expressions[0] if parsed.expressions else None,
            where.this.this if where is not None and isinstance(where.this, exp.EQ) else None]
    return all(isinstance(c, exp.Column) and c.name.lower() == name.lower() and not c.table
               for c in used)


def unquote_identifiers(expression: exp.Expression, dialect: str) -> exp.Expression:
    """Write every identifier of ``expression`` unquoted, in the case ``dialect`` folds
    unquoted names to (upper case for Snowflake and Oracle, lower case for most others, as
    written for case-sensitive dialects such as MySQL and ClickHouse); changes it in place.

    Raises OptionError naming the first identifier that cannot be written unquoted
    (``check_unquoted_name``).
    """
    target = Dialect.get_or_raise(dialect)
    for ident in list(expression.find_all(exp.Identifier)):
        check_unquoted_name(ident.name, dialect, _what(ident))
        ident.set("quoted", False)
        target.normalize_identifier(ident)
    return expression


def _what(ident: exp.Identifier) -> str:
    parent = ident.parent
    if isinstance(parent, exp.Alias | exp.TableAlias):
        return "output column"
    if isinstance(parent, exp.Table):
        return "table name"
    return "column"


def dbt_ref(name: str) -> exp.Table:
    """``{{ ref('name') }}`` as a relation sqlglot writes as it is (a dbt model name)."""
    if not isinstance(name, str) or not _DBT_NAME.match(name):
        raise OptionError(
            f"a dbt ref names a model: letters, digits and underscores, not {name!r}"
        )
    return exp.Table(this=exp.Var(this=f"{{{{ ref('{name}') }}}}"))


def dbt_model(sql: str, ref: exp.Table, header: str) -> str:
    """The text of a dbt model file: ``header`` as SQL comments, then ``sql``, which reads
    ``ref`` (``dbt_ref``). Anything else in ``sql`` that Jinja would read as its own (a label
    or a value holding ``{{``, say) is kept from Jinja in ``{% raw %}`` blocks."""
    jinja = ref.this.name
    before, found, after = sql.partition(jinja)
    if not found:
        raise AssertionError("the scoring query does not read the dbt ref")
    comments = "".join(f"-- {line}".rstrip() + "\n" for line in header.splitlines())
    return _raw(comments + before) + jinja + _raw(after) + "\n"


def _raw(text: str) -> str:
    if not any(mark in text for mark in _JINJA):
        return text
    if _RAW_END.search(text):
        raise DataError("the scoring SQL holds Jinja's endraw tag, which no dbt model can quote")
    return "{% raw %}" + text + "{% endraw %}"
