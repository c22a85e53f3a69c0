"""C4.5 and ID3 as J48 builds them: gain or gain ratio, multiway nominal tests, fractional
unknown values.

- ``strategy``: what only these algorithms decide (which nodes may split, the choice among
  the scored rows, the branches and J48's printed thresholds);
- ``criteria``: gain, split info and the minimum-weight rule, in SQL;
- ``cuts``: a continuous feature's best cut per node, by windows or by the ordered scan;
- ``bounded``: the same cuts by the bound-pruned search over a level's bins;
- ``scores``: the scoring query and the branch counts of the chosen splits.

The numpy twins of ``scores`` and the strategy's readings are ``algorithms.memory``'s.
"""
