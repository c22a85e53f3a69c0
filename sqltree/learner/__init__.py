"""The tree learner over additive statistics and the backends that feed it.

``gains`` defines each criterion once over sums of a few weighted columns; ``splitter`` picks
every node's best split from a histogram of those sums; ``growth`` grows many trees level by
level in the same requests; ``backends`` sums the histograms in a SQL engine or in numpy and
moves rows to their children; ``encode`` stores the rows once as small integer codes;
``forest`` trains random forests on top of them.
"""

from .gains import Criterion, Entropy, Gini, Newton, Poisson, SquaredError, criterion

__all__ = ["Criterion", "Entropy", "Gini", "Newton", "Poisson", "SquaredError", "criterion"]
