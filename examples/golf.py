"""Train C4.5 on the golf data in embedded DuckDB, print the tree, its rules and its SQL, score."""

from pathlib import Path

import sqltree

DATA = Path(__file__).parent / "data" / "golf.csv"

model = sqltree.train(str(DATA), target="play")
print(model.text())
print()
print(model.to_sql(dialect="postgres", pretty=True))
print()
scored = model.predict(str(DATA))
print(scored)
print(f"training accuracy: {(scored.prediction == scored.play).mean():.3f}")
