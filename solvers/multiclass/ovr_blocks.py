"""The state of one block of one-vs-rest classes and what the fused pass loop does with it.

`solvers.multiclass.ovr` splits the k classes into blocks, one per thread; each block's arrays
(`Block`) are laid out row-major, (n_samples, classes of the block), so that one pass over a row
of X updates every class of the block (`solvers.multiclass.ovr_kernels` says what each array
holds). This module builds a block (from zero or from a warm start scaled along its ray), runs
one pass of it, keeps its per-class stopping and shrinking bookkeeping, and measures it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers._core.warm_start import ray_scale
from solvers.multiclass.kernels import weights_from_alpha
from solvers.multiclass.ovr_kernels import (
    after_pass,
    ovr_measures,
    ovr_pass,
    pass_summary,
    ray_terms,
    rows_in_play,
    shuffled_rows,
)


@dataclass
class Block:
    """The state of one block of classes (`solvers.multiclass.ovr_kernels` says what each holds)."""

    classes: np.ndarray
    Cmat: np.ndarray
    c_stride: int
    alpha: np.ndarray
    W: np.ndarray
    wb: np.ndarray
    usable: np.ndarray
    active: np.ndarray
    live: np.ndarray
    Mbar: np.ndarray
    mbar: np.ndarray
    M: np.ndarray
    m: np.ndarray
    n_kept: np.ndarray
    n_usable: np.ndarray
    gap: np.ndarray
    n_iter: np.ndarray
    in_play: np.ndarray
    stalled: np.ndarray  # (kb,) uint8: left the passes to be finished by primal Newton
    n_live: int  # classes of the block still running


def make_block(
    problem, Cfull, classes, warm_start, loss, W, alpha, on_support=False, warm_weights=None
) -> Block:
    kb = classes.shape[0]
    if Cfull.ndim == 1:
        Cmat, c_stride = np.ascontiguousarray(Cfull[:, None]), 0
        # the same rows for every class: a read-only (n, kb) view of one (n,) array
        usable = np.broadcast_to((Cfull > 0).view(np.uint8)[:, None], (problem.n_samples, kb))
    else:
        Cmat, c_stride = np.ascontiguousarray(Cfull[classes].T), 1
        usable = (Cmat > 0).view(np.uint8)
    wb = np.zeros(kb)
    if warm_start is not None:
        start, clipped = _initial_alpha(warm_start, classes, problem, Cmat, c_stride, usable, loss)
        alpha[...] = start
        if warm_weights is None or clipped:
            _weights_of_alpha(problem, classes, alpha, W, wb)
        else:  # the block's rows of the caller's (k, d) W, a strided view: no temporary
            W[...] = warm_weights[0].T
            wb[...] = warm_weights[1]
        to_ray_optimum(alpha, Cmat, c_stride, loss == "hinge", W, wb)
    active = usable.copy()
    if warm_start is not None and on_support:
        # A start from the previous C of a path begins on its support: most (row, class) pairs
        # of one-vs-rest are non-support (α = 0, margin > 1) and stay so at the next C, and a
        # first pass over them would only find that out again. Sound as shrinking is: the
        # class converges only on a pass over all its rows, after which the rows left out are
        # restored. On sector's C path this cut the class-entries visited by 21%. Not for a
        # resumed checkpoint: its segments could each end before the shrunk rows come back.
        np.logical_and(active, alpha > 0.0, out=active.view(np.bool_))
    live = np.ones(kb, dtype=np.uint8)
    in_play = np.empty(problem.n_samples, dtype=np.uint8)
    rows_in_play(active, live, in_play)
    return Block(
        classes=classes.astype(np.int64),
        Cmat=Cmat,
        c_stride=c_stride,
        alpha=alpha,
        W=W,
        wb=wb,
        usable=usable,
        active=active,
        live=live,
        Mbar=np.full(kb, np.inf),
        mbar=np.full(kb, -np.inf),
        M=np.zeros(kb),
        m=np.zeros(kb),
        n_kept=np.zeros(kb, dtype=np.int64),
        n_usable=usable.sum(axis=0, dtype=np.int64),
        gap=np.full(kb, np.inf),
        n_iter=np.zeros(kb, dtype=np.int64),
        in_play=in_play,
        stalled=np.zeros(kb, dtype=np.uint8),
        n_live=kb,
    )


def _weights_of_alpha(problem, classes, alpha, W, wb):
    """w_c = Σ_i y_ic α_ic x̃_i of the block's classes into W and wb (zeros on entry), a pass
    over X."""
    # flip the signs in place rather than build an (n, kb) y_i α_i
    rest = problem.y[:, None] != classes[None, :]
    np.negative(alpha, out=alpha, where=rest)
    # into the block's region itself: no (n_features, kb) temporary
    weights_from_alpha(problem.X, alpha, problem.bias, 1.0, W, wb)
    np.negative(alpha, out=alpha, where=rest)


def to_ray_optimum(alpha, Cmat, c_stride, hinge, W, wb):
    """Scale each class's warm start (α_c, w̃_c) to the best point of its ray, in place."""
    terms = zip(*ray_terms(alpha, Cmat, c_stride, hinge, W, wb), strict=True)
    r = np.array([ray_scale(*class_terms) for class_terms in terms])
    if np.any(r != 1.0):
        alpha *= r  # row by row, as the arrays are laid out (a column at a time strides)
        W *= r
        wb *= r


def _initial_alpha(warm_start, classes, problem, Cmat, c_stride, usable, loss):
    """The block's (n, kb) α from the (k, n) warm start, within the bounds, and whether the
    bounds changed any value (a W built from the warm start then no longer matches it)."""
    n, k = problem.n_samples, problem.n_classes
    ws = np.asarray(warm_start, dtype=np.float64)
    if ws.shape != (k, n):
        raise ValueError(f"warm_start must have shape ({k}, {n}), got {ws.shape}")
    if not np.all(np.isfinite(ws)) or np.any(ws < 0):
        raise ValueError("warm_start must hold finite values >= 0")
    alpha = np.ascontiguousarray(ws[classes].T)
    clipped = False
    if loss == "hinge":
        upper = Cmat if c_stride else np.broadcast_to(Cmat, alpha.shape)
        clipped = bool(np.any(alpha > upper))
        np.minimum(alpha, upper, out=alpha)
    unusable = usable == 0
    clipped = clipped or bool(np.any(alpha, where=unusable))
    alpha[unusable] = 0.0
    return alpha, clipped


def rows_to_visit(running, order, rng, buffer, verify):
    """The rows each running block visits in this pass, in one order shared by all blocks.

    A row in which every live class of a block has shrunk its variable is a no-op for that block;
    leaving it out saves reading its flags and prefetching its entries. The order is drawn over
    the rows in play for some live class, a set that does not depend on how the classes are
    blocked, and each block keeps the rows it needs in that order: serial and threaded runs still
    give identical iterates.
    """
    if order == "permute" and len(running) == 1:
        count = shuffled_rows(running[0].in_play, int(rng.integers(0, 2**63)), buffer)
        return [buffer[:count]]
    n = buffer.shape[0]
    masks = [b.in_play.view(np.bool_) for b in running]
    union = masks[0] if len(masks) == 1 else np.logical_or.reduce(masks)
    if order == "permute":
        count = shuffled_rows(union.view(np.uint8), int(rng.integers(0, 2**63)), buffer)
        rows = buffer[:count]
    elif order == "cyclic" or verify:
        rows = np.flatnonzero(union)
    else:
        rows = rng.integers(0, n, size=n)
        return [rows[mask[rows]] for mask in masks]
    if len(masks) == 1:
        return [rows]
    return [rows[mask[rows]] for mask in masks]


def end_of_pass(b: Block, tol: float, shrink: bool, full_pass: bool, iteration: int) -> bool:
    """Per-class stopping and shrinking bookkeeping after a pass; True if some class met tol."""
    met_any, b.n_live = after_pass(
        tol, shrink, full_pass, iteration, b.M, b.m, b.n_kept, b.n_usable, b.usable, b.active,
        b.live, b.gap, b.n_iter, b.Mbar, b.mbar, b.in_play,
    )  # fmt: skip
    return met_any


def set_aside_stalled(b: Block, stalls) -> None:
    """Take the block's live classes whose passes have stalled out of the passes (to be finished
    by primal Newton once no class is left running)."""
    live, classes, gaps = b.live.tolist(), b.classes.tolist(), b.gap.tolist()
    out = [j for j, c in enumerate(classes) if live[j] and stalls[c].stalled(gaps[j])]
    if out:
        b.live[out] = 0
        b.stalled[out] = 1
        b.n_live -= len(out)
        rows_in_play(b.active, b.live, b.in_play)


def summary_of_pass(running):
    gap, M, m, kept = 0.0, -np.inf, np.inf, 0
    for b in running:
        g, top, bottom, k = pass_summary(b.M, b.m, b.n_kept)
        gap, M, m, kept = max(gap, g), max(M, top), min(m, bottom), kept + k
    return gap, M, m, kept


def block_measures(problem, b: Block, hinge: bool):
    """Per-class (primal, f(α), M, m) of a block at its current α."""
    return ovr_measures(
        problem.X,
        problem.bias,
        problem.y,
        b.classes,
        b.Cmat,
        b.c_stride,
        hinge,
        b.alpha,
        b.W,
        b.wb,
    )


def run_block(problem, b: Block, rows: np.ndarray, hinge: bool, long_rows: bool) -> None:
    """One pass of the block's live classes over ``rows`` (in that order)."""
    ovr_pass(
        problem.X, problem.bias, problem.y, b.classes, b.Cmat, b.c_stride, hinge, problem.A,
        rows, b.alpha, b.W, b.wb, b.active, b.live, b.Mbar, b.mbar, b.M, b.m, b.n_kept,
        b.in_play, long_rows,
    )  # fmt: skip
