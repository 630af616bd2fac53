"""The generalized shared-slack SVM (structural SVMs and their reductions; Ramanan): the batch
solver (`batch`), the online cache solver over a stream (`stream`, with `cache` and `chunks`),
standard problems written in its form (`problems`), and the change of variables (`reparam`).

`fit_structural` and `fit_structural_stream` are the names these solvers had first.
"""

from solvers.structural.batch import fit_structural, solve_structural
from solvers.structural.stream import fit_structural_stream, solve_structural_stream

__all__ = [
    "fit_structural",
    "fit_structural_stream",
    "solve_structural",
    "solve_structural_stream",
]
