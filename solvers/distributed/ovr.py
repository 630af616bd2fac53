"""One-vs-rest on top of distributed CoCoA+: the partitions are placed once and each class's
binary problem (class c against the rest) runs its rounds on the same blocks."""

from __future__ import annotations

import numpy as np

from solvers._core.progress import (
    Callback,
    Monitor,
    Progress,
    SolveResult,
    Status,
    relative_duality_gap,
)
from solvers.distributed.cluster import BlockSet
from solvers.distributed.cocoa import _options, make_sources, problem_spec, run_rounds


def solve_ovr(
    X_parts,
    y_parts=None,
    n_classes: int | None = None,
    *,
    client,
    loss: str = "squared_hinge",
    C: float = 1.0,
    bias: float = 0.0,
    tol: float = 1e-3,
    max_rounds: int = 1000,
    local_passes: int = 1,
    local_time: float | None = None,
    sigma: float | str = "adaptive",
    sample_weight=None,
    class_weight: dict | str | None = None,
    random_state: int | None = 0,
    time_limit: float | None = None,
    callback: Callback | None = None,
    checkpoint_every: int = 1,
    max_recoveries: int = 3,
) -> SolveResult:
    """k one-vs-rest binary SVMs by distributed CoCoA+ (see `solvers.distributed.solve_binary`).

    ``y_parts`` hold class indices 0..n_classes-1; without ``n_classes`` they may hold any
    labels, and the classes are the sorted distinct labels found (``extra["classes"]``).
    ``class_weight`` maps a label to its weight. ``max_rounds`` and ``tol`` apply per class;
    ``time_limit`` to the whole solve. Returns ``w`` (n_classes, n_features), ``bias``
    (n_classes,), ``alpha`` (n_classes, n_samples), ``n_iter`` = rounds over all classes, the
    summed objectives with their relative gap, and per-class figures in ``extra``.
    """
    monitor = Monitor(callback, time_limit)
    options = _options(loss, C, bias, tol, max_rounds, local_passes, checkpoint_every,
                       local_time=local_time, sigma=sigma)  # fmt: skip
    sources = make_sources(X_parts, y_parts, sample_weight, client)
    blocks = BlockSet(client, sources, max_recoveries)
    try:
        classes = _classes(blocks, n_classes)
        k = len(classes)
        rng = np.random.default_rng(random_state)
        results, rounds = [], 0
        for c in range(k):
            spec = problem_spec(blocks, options, class_weight, positive=classes[c])
            result = run_rounds(blocks, spec, options, rng, monitor, first_round=rounds + 1)
            rounds += result.n_iter
            results.append(result)
            if monitor.stopped is not None:  # heard by this class, maybe on its converging round
                break
        result = _combine(results, k, rounds, monitor, blocks)
        result.extra["classes"] = classes
        return result
    finally:
        blocks.close()


def _classes(blocks, n_classes) -> list:
    labels = sorted({label for info in blocks.info for label in info["labels"]})
    if n_classes is None:
        if len(labels) < 2:
            raise ValueError(f"y_parts must hold at least 2 classes, got {labels}")
        return labels
    if any(int(v) != v or v < 0 or v >= n_classes for v in labels) or n_classes < 2:
        raise ValueError(f"y_parts must hold class indices in [0, {n_classes}), got {labels[:5]}")
    return list(range(int(n_classes)))


def _combine(results, k, rounds, monitor, blocks) -> SolveResult:
    if len(results) < k:  # stopped early: the classes not started keep w = 0
        status = monitor.stopped
    else:
        worst = [r.status for r in results if r.status is not Status.CONVERGED]
        status = worst[0] if worst else Status.CONVERGED
    d, n = blocks.n_features, sum(blocks.rows)
    w, alpha, bias = np.zeros((k, d)), np.zeros((k, n)), np.zeros(k)
    for c, r in enumerate(results):
        w[c], alpha[c], bias[c] = r.w, r.alpha, r.bias
    # a class not started is stored at w = 0, α = 0: its primal, not 0, with a dual of 0
    unstarted = k - len(results)
    primal = float(sum(r.primal for r in results))
    dual = float(sum(r.dual for r in results))
    gaps = [r.duality_gap for r in results]
    pg_max = max(r.pg_max for r in results)
    pg_min = min(r.pg_min for r in results)
    if unstarted:
        at_zero = _primal_at_zero(blocks)
        primal += unstarted * at_zero
        # and the gap of each: (P(0) − 0) / max(1, P(0)); every projected gradient is −1 at α = 0
        gaps_at_zero = [relative_duality_gap(at_zero, 0.0)] * unstarted
        pg_max, pg_min = max(pg_max, -1.0), min(pg_min, -1.0)
    else:
        gaps_at_zero = []
    duality_gap = relative_duality_gap(primal, -dual)
    final = monitor.conclude(
        Progress(
            iteration=rounds, elapsed_s=monitor.elapsed(), gap=float(max(gaps + gaps_at_zero)),
            pg_max=float(pg_max), pg_min=float(pg_min),
            pg_range=float(max(r.pg_range for r in results)), active=len(blocks.sources),
            primal=primal, dual=dual, duality_gap=duality_gap,
        ),
        combined=True,
    )  # fmt: skip
    return SolveResult(
        w=w,
        bias=bias,
        alpha=alpha,
        n_iter=rounds,
        status=status,
        gap=final.gap,
        primal=primal,
        dual=dual,
        history=monitor.history,
        duality_gap=duality_gap,
        pg_max=final.pg_max,
        pg_min=final.pg_min,
        pg_range=final.pg_range,
        extra={
            "partitions": blocks.bounds,
            "class_duality_gap": gaps,
            "class_rounds": [r.n_iter for r in results],
            "bytes": {key: sum(r.extra["bytes"][key] for r in results)
                      for key in results[0].extra["bytes"]},
            "recoveries": list(blocks.recoveries),
        },
    )  # fmt: skip


def _primal_at_zero(blocks) -> float:
    """The primal of a binary problem at w = 0: Σ C_i, every row's loss at margin 0 being 1.
    The same for every class (C_i follows the row's own label and weight), so it is measured
    on the problem the blocks hold (one pass, made only when a class was not started)."""
    zero = np.zeros(blocks.n_features + 1)
    while True:  # a block placed again after a loss: measure once more
        results, failed = blocks.call_all("measure", (zero, False, False))
        if not failed:
            return float(sum(r["loss"] for r in results))
