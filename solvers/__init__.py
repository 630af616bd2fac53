"""Margin's solvers: large-scale linear SVMs in numpy, scipy and Numba.

The public API is what this module exports. Each family lives in a subpackage — `io` (LIBSVM
files), `binary`, `multiclass`, `regression`, `structural`, `estimators` (scikit-learn
compatible classes), `selection` (C by cross-validation, calibrated probabilities),
`distributed` (CoCoA+ on a Dask cluster, imported on its own: it needs `dask.distributed`) — over a
small shared core, `_core` (the input door, progress and result records, compiled row kernels).
Names are loaded lazily so that `import solvers` stays light: the estimator classes (which need
scikit-learn) load only when first used.
"""

from importlib import import_module

from solvers._core.progress import Callback, Monitor, Progress, SolveResult, Status

_LAZY = {
    "read_libsvm": "solvers.io",
    "write_libsvm": "solvers.io",
    "solve_binary": "solvers.binary",
    "solve_crammer_singer": "solvers.multiclass",
    "solve_weston_watkins": "solvers.multiclass",
    "solve_ovr": "solvers.multiclass",
    "solve_svr": "solvers.regression",
    "solve_structural": "solvers.structural",
    "solve_structural_stream": "solvers.structural",
    "fit_structural": "solvers.structural",
    "fit_structural_stream": "solvers.structural",
    "LinearSVC": "solvers.estimators",
    "LinearSVR": "solvers.estimators",
    "LinearSVCCV": "solvers.selection",
    "LinearSVRCV": "solvers.selection",
    "export_onnx": "solvers.io.onnx_export",
}

__all__ = ["Callback", "Monitor", "Progress", "SolveResult", "Status", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'solvers' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
