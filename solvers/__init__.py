"""Margin's solvers: large-scale linear SVMs in numpy, scipy and Numba.

The public API is what this module exports. Names are loaded lazily so that `import solvers`
stays light: the estimator classes (which need scikit-learn) load only when first used.
"""

from importlib import import_module

from solvers.progress import Callback, Monitor, Progress, SolveResult, Status

_LAZY = {
    "read_libsvm": "solvers.io",
    "write_libsvm": "solvers.io",
    "solve_binary": "solvers.binary",
    "solve_crammer_singer": "solvers.crammer_singer",
    "solve_weston_watkins": "solvers.weston_watkins",
    "solve_ovr": "solvers.ovr",
    "solve_svr": "solvers.svr",
    "fit_structural": "solvers.structural",
    "fit_structural_stream": "solvers.structural_stream",
    "LinearSVC": "solvers.linear_svc",
    "LinearSVR": "solvers.linear_svr",
    "export_onnx": "solvers.onnx_export",
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
