"""Errors raised by sqltree. Every user-facing failure is a subclass of SqlTreeError.

Two kinds matter to a caller, and the command line exits with a different status for each:

- ``OptionError``: the call itself is wrong (an option out of range, misspelt, or given where
  it means nothing; an ambiguous source name; an output path that cannot be written). Nothing
  has been read yet. The command line exits with 2, as for its own usage errors.
- every other ``SqlTreeError``: the call is well formed but its input cannot be used (a missing
  table, column or file, data sqltree cannot learn from, a model file that is not one, a
  database that cannot be reached). The command line exits with 1.
"""

from __future__ import annotations


class SqlTreeError(Exception):
    """Base class of every error sqltree raises on purpose."""


class DataError(SqlTreeError, ValueError):
    """The training or scoring data cannot be used as given (empty, one class, bad column)."""


class SourceError(DataError):
    """The engine cannot read a source as given: a missing table, view, file or column, a
    permission it lacks, SQL it refuses.

    Attributes
    ----------
    source : str
        The source as the message names it (``table 'sales'``, ``the query``, ``file 'x.csv'``).
    engine : str
        The engine that refused it (``DuckDB``, ``PostgreSQL``, ``Spark``).
    """

    def __init__(self, message: str, *, source: str = "", engine: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.engine = engine


class EngineConnectionError(SqlTreeError):
    """A database cannot be opened or reached: a server that refuses the connection, a failed
    login, a file that is not a database. The message names the engine and the address
    (without its password)."""


class UnsupportedError(SqlTreeError, TypeError):
    """A column type, source kind, option or connection that sqltree does not support."""


class OptionError(SqlTreeError, ValueError):
    """An option or argument that is invalid as given: out of range, of the wrong kind, in a
    combination that means nothing, or a source name that could be read two ways. Raised
    before any query runs."""


class UnsupportedOptionError(OptionError, UnsupportedError):
    """An option the chosen algorithm does not use (refused rather than ignored), or a keyword
    no sqltree function takes."""


class ModelFileError(SqlTreeError, ValueError):
    """A model file (or ``Model.from_dict`` document) that is not a valid sqltree model.

    Not JSON, not UTF-8, truncated, another format or version, or a document whose fields,
    tree or splits are inconsistent. The message says what is wrong and where, e.g.
    ``golf.json: node 7: child 12 is out of range (the tree has 9 nodes)``; see
    ``sqltree.model_file.validate`` for the rules. A file that cannot be opened raises the
    ``OSError`` instead.
    """


def install_hint(extra: str) -> str:
    """How to install an optional extra, for error messages: from the repository, since the
    ``sqltree-learn`` distribution is not published on PyPI."""
    return f"pip install -e '.[{extra}]' in a clone of the sqltree repository"
