"""Multi-class linear SVMs: Crammer–Singer and Weston–Watkins by the sequential dual method
(one front end, `sdm`), and one-vs-rest by fused, threaded dual coordinate descent (`ovr`)."""

from solvers.multiclass.crammer_singer import solve_crammer_singer
from solvers.multiclass.ovr import solve_ovr
from solvers.multiclass.weston_watkins import solve_weston_watkins

__all__ = ["solve_crammer_singer", "solve_ovr", "solve_weston_watkins"]
