"""C4.5rules: a tree's leaves turned into a smaller ordered list of rules, counted in SQL.

Quinlan's procedure (C4.5: Programs for Machine Learning, 1993, chapter 5; release 8 of
C4.5rules), by concern:

- ``conditions``: a rule's conditions as text, SQL and Python; each leaf's path;
- ``counts``: the grouped queries that count rows for every rule at once;
- ``generalise``: dropping conditions while C4.5's pessimistic error rate does not rise;
- ``selection``: a subset of each class's rules by minimum description length, the classes'
  order by false positives, the default class, the training evaluation;
- ``rule_set``: the ``RuleSet`` (printing, ``predict``, ``evaluate``, an ordered ``CASE`` for
  any dialect) and ``build_rule_set``, which ``Model.rule_set`` calls.
"""

from __future__ import annotations

from .conditions import Condition
from .generalise import Rule
from .rule_set import RuleSet, build_rule_set

__all__ = ["Condition", "Rule", "RuleSet", "build_rule_set"]
