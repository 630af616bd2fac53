"""Model selection: `LinearSVCCV` and `LinearSVRCV` (a warm-started path over C with k-fold
cross-validation, folds in parallel over one copy of X) and probability calibration (Platt,
softmax temperature, isotonic) from held-out decision values."""

from solvers.selection.calibration import Calibration, fit_calibration, platt
from solvers.selection.cv import LinearSVCCV, LinearSVRCV

__all__ = ["Calibration", "LinearSVCCV", "LinearSVRCV", "fit_calibration", "platt"]
