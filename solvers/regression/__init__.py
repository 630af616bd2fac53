"""Linear support vector regression by dual coordinate descent (`solvers.regression.svr`)."""

from solvers.regression.svr import solve_svr, svr_objectives

__all__ = ["solve_svr", "svr_objectives"]
