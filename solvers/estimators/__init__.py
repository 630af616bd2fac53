"""scikit-learn-compatible estimators over the solve_* functions: `LinearSVC` (binary,
one-vs-rest, Crammer–Singer, Weston–Watkins) and `LinearSVR`."""

from solvers.estimators.linear_svc import LinearSVC
from solvers.estimators.linear_svr import LinearSVR

__all__ = ["LinearSVC", "LinearSVR"]
