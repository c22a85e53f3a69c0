"""Errors raised by sqltree. Every user-facing failure is a subclass of SqlTreeError."""

from __future__ import annotations


class SqlTreeError(Exception):
    """Base class of every error sqltree raises on purpose."""


class DataError(SqlTreeError, ValueError):
    """The training or scoring data cannot be used as given (empty, one class, bad column)."""


class UnsupportedError(SqlTreeError, TypeError):
    """A column type, source kind, option or connection that sqltree does not support."""


class ModelFileError(SqlTreeError, ValueError):
    """A model file (or ``Model.from_dict`` document) that is not a valid sqltree model.

    Not JSON, not UTF-8, truncated, another format or version, or a document whose fields,
    tree or splits are inconsistent. The message says what is wrong and where, e.g.
    ``golf.json: node 7: child 12 is out of range (the tree has 9 nodes)``; see
    ``sqltree.model_file.validate`` for the rules. A file that cannot be opened raises the
    ``OSError`` instead.
    """
