"""Distributed dual coordinate ascent for binary linear SVMs: CoCoA+ on Dask.

Problem: the primal and dual of `solvers.binary.dcd` (hinge and squared hinge), with
x̃_i = [x_i, bias] and C_i = C · sample_weight_i · class_weight_{y_i}:

    P(w̃) = ½‖w̃‖² + Σ_i C_i ξ_i(w̃),      f(α) = ½‖Aα‖² + Σ_i (½ D_ii α_i² − α_i),
    0 ≤ α_i ≤ U_i,  A = [y_1 x̃_1, …, y_n x̃_n],  w̃(α) = Aα,

(U_i = C_i, D_ii = 0 for the hinge; U_i = ∞, D_ii = 1/(2C_i) for the squared hinge), and
min P = −min f. Method (Ma, Smith, Jaggi, Jordan, Richtárik, Takáč, "Adding vs. averaging in
distributed primal-dual optimization", ICML 2015; Smith et al., "CoCoA: a general framework for
communication-efficient distributed optimization", JMLR 2018): the rows are split into K
partitions P_k, each on a Dask worker with its block α_[k]. A round broadcasts w̃ = Aα and every
worker approximately solves its local subproblem

    min_{Δα_[k]}  G_k = w̃ᵀA_kΔα_[k] + (σ'/2)‖A_kΔα_[k]‖² + Σ_{i∈P_k} (½ D_ii (α_i + Δα_i)² − Δα_i)

within the bounds, then α_[k] += Δα_[k] and w̃ += Σ_k A_kΔα_[k] ("adding", γ = 1). With σ' = K,
‖Σ_k v_k‖² ≤ K Σ_k ‖v_k‖² makes Σ_k G_k an upper bound of f(α + Δα) − f(α): every round is a safe
descent step, whatever the other workers did. The papers' guarantee: with local solutions of
relative accuracy Θ < 1, the dual suboptimality falls linearly for smooth losses (the squared
hinge) and the duality gap as O(1/T) for Lipschitz ones (the hinge), with rates that degrade
with K only through Θ and the data's spread across partitions.

Local solver: with β = σ'α_[k] the subproblem times σ' is exactly the single-machine dual of
`solvers.binary.dcd` for C' = σ'C (bounds σ'U_i, diagonal D_ii/σ') started from w̃, so each worker
runs the unchanged DCD epoch kernel on its rows and returns Δw_k = (w̃_local − w̃)/σ'
(`solvers.distributed.block`). H, the local work per round, is ``local_passes`` full passes in a
fresh random order (default 1, the papers' H = n_k): more passes make Θ smaller and the rounds
fewer but each longer; with one machine's processes communication is cheap, and one pass keeps a
round's time near one single-machine epoch. No shrinking: the subproblem changes every round.

Stopping: each round every worker first measures its sums of C_i ξ_i(w̃) and of the dual terms at
the current (w̃, α_[k]) and its projected-gradient range; the driver adds ½‖w̃‖² and stops when the
relative duality gap (P − D)/max(1, |P|) ≤ ``tol``. The state returned is the one measured: the
round's broadcast w̃ and α as it was at the round's start (the α checkpoint the workers return;
with ``checkpoint_every`` > 1 only checkpoint rounds can end the solve). A solve stopped by its
budget or callback measures the blocks' current state once more and returns that.

Fault tolerance: see `solvers.distributed.cluster`; a lost worker's block is restored from the
last checkpoint and w̃ rebuilt from all blocks, so certificates stay exact.
"""

from __future__ import annotations

import numbers

import numpy as np

from solvers._core.params import check_bias, check_choice, check_max_iter, check_tol
from solvers._core.problem import check_csr
from solvers._core.progress import (
    Callback,
    Monitor,
    Progress,
    SolveResult,
    Status,
    finite_or_none,
    relative_duality_gap,
)
from solvers.distributed.block import LOSS_CODES, expand_delta, payload_bytes
from solvers.distributed.cluster import BlockSet
from solvers.distributed.sources import InCluster, InMemory, Partition, StoredRows


def solve_binary(
    X_parts,
    y_parts=None,
    *,
    client,
    loss: str = "squared_hinge",
    C: float = 1.0,
    bias: float = 0.0,
    tol: float = 1e-3,
    max_rounds: int = 1000,
    local_passes: int = 1,
    sample_weight=None,
    class_weight: dict | str | None = None,
    random_state: int | None = 0,
    time_limit: float | None = None,
    callback: Callback | None = None,
    checkpoint_every: int = 1,
    max_recoveries: int = 3,
    positive_label=None,
) -> SolveResult:
    """Train a binary linear SVM on rows split over a Dask cluster (CoCoA+, module docstring).

    Parameters
    ----------
    X_parts : list
        The partitions: CSR matrices (with ``y_parts``), futures of `Partition` or ``(X, y)``
        pairs already in the cluster, or `StoredRows` (see `stored_partitions`), which the
        workers read themselves.
    y_parts : list of arrays or None
        Labels in {-1, +1} per partition, for matrices given in memory.
    client : dask.distributed.Client
    loss : {"squared_hinge", "hinge"}
    C, bias : as in `solvers.solve_binary` (C a number; weights come separately)
    tol : float
        Target relative duality gap (P − D)/max(1, |P|) of the returned state.
    max_rounds, local_passes : rounds at most; DCD passes per worker and round (H).
    sample_weight : list of arrays or None
        Per-partition sample weights for matrices given in memory (stored and in-cluster
        partitions carry their own).
    class_weight : dict {label: weight}, "balanced" or None
    random_state, time_limit, callback : as in `solvers.solve_binary`; the callback sees one
        `Progress` per round, with ``bytes_sent`` (w broadcast, Δw and checkpoints).
    checkpoint_every : int
        Rounds between α checkpoints returned to the driver (a lost block restarts from the
        last one).
    max_recoveries : int
        Attempts to place a lost partition again before giving up.
    positive_label : label or None
        The label taken as +1 (every other as -1); None: the labels must be -1 and +1.

    Returns
    -------
    SolveResult
        ``w`` (n_features,), ``bias``, ``alpha`` in partition order, ``n_iter`` = rounds,
        ``gap`` = ``duality_gap``, the projected-gradient range, and in ``extra`` the partition
        bounds, bytes communicated and recoveries.
    """
    monitor = Monitor(callback, time_limit)
    options = _options(loss, C, bias, tol, max_rounds, local_passes, checkpoint_every)
    sources = make_sources(X_parts, y_parts, sample_weight)
    blocks = BlockSet(client, sources, max_recoveries)
    try:
        spec = problem_spec(blocks, options, class_weight, positive=positive_label)
        rng = np.random.default_rng(random_state)
        return run_rounds(blocks, spec, options, rng, monitor, first_round=1)
    finally:
        blocks.close()


def _options(loss, C, bias, tol, max_rounds, local_passes, checkpoint_every) -> dict:
    check_choice(loss, sorted(LOSS_CODES), "loss")
    if not isinstance(C, numbers.Real) or isinstance(C, bool) or not (np.isfinite(C) and C > 0):
        raise ValueError(f"C must be a finite number > 0, got {C!r}")
    return {
        "loss": loss,
        "C": float(C),
        "bias": check_bias(bias),
        "tol": check_tol(tol),
        "max_rounds": check_max_iter(max_rounds, "max_rounds"),
        "local_passes": check_max_iter(local_passes, "local_passes"),
        "checkpoint_every": check_max_iter(checkpoint_every, "checkpoint_every"),
    }


def make_sources(X_parts, y_parts, sample_weight):
    """The partitions as sources (`solvers.distributed.sources`), checked where they are."""
    from distributed import Future

    X_parts = list(X_parts)
    if not X_parts:
        raise ValueError("X_parts must hold at least one partition")
    if all(isinstance(x, StoredRows) for x in X_parts):
        return X_parts
    if all(isinstance(x, Future) for x in X_parts):
        return [InCluster(x) for x in X_parts]
    if y_parts is None or len(y_parts) != len(X_parts):
        raise ValueError("y_parts must give one label array per partition of X_parts")
    if sample_weight is not None and len(sample_weight) != len(X_parts):
        raise ValueError("sample_weight must give one array per partition of X_parts")
    sources = []
    for k, (X, y) in enumerate(zip(X_parts, y_parts, strict=True)):
        X = check_csr(X, f"X_parts[{k}]")
        sw = None if sample_weight is None else _weights(sample_weight[k], X.shape[0], k)
        sources.append(InMemory(Partition(X, np.asarray(y), sw)))
    return sources


def _weights(sw, n, k):
    sw = np.asarray(sw, dtype=np.float64)
    if sw.shape != (n,) or not np.isfinite(sw).all() or (sw < 0).any():
        raise ValueError(f"sample_weight[{k}] must be finite, >= 0, with shape ({n},)")
    return sw


def problem_spec(blocks, options, class_weight, positive) -> dict:
    """What each block needs to set up one binary problem (σ' = K)."""
    counts: dict = {}
    for info in blocks.info:
        for label, count in info["labels"].items():
            counts[label] = counts.get(label, 0) + count
    if class_weight == "balanced":
        n = sum(counts.values())
        class_weight = {label: n / (len(counts) * c) for label, c in counts.items()}
    elif class_weight is not None and not isinstance(class_weight, dict):
        raise ValueError(f'class_weight must be a dict, "balanced" or None, got {class_weight!r}')
    spec = {k: options[k] for k in ("loss", "C", "bias")}
    spec.update(sigma=float(len(blocks.sources)), positive=positive, class_weight=class_weight)
    blocks.setup(spec)
    return spec


def run_rounds(blocks, spec, options, rng, monitor, first_round) -> SolveResult:
    """CoCoA+ rounds until the certified gap meets tol or a budget runs out."""
    K, d = len(blocks.sources), blocks.n_features
    w = np.zeros(d + 1)
    sent = {"broadcast": 0, "deltas": 0, "checkpoints": 0}
    status, measured, n_rounds = Status.MAX_ITER, None, 0
    for n_rounds in range(1, options["max_rounds"] + 1):
        with_alpha = (n_rounds - 1) % options["checkpoint_every"] == 0
        seeds = rng.integers(0, 2**62, size=K)
        args = [(w, options["local_passes"], int(seed), with_alpha) for seed in seeds]
        results, failed = blocks.call_all("round", args)
        round_bytes = _count_bytes(sent, w, results)
        if failed:  # no certificate this round: rebuild w from the restored blocks
            w = blocks.rebuild_w()
            continue
        measured = _certificate(w, results, options["tol"])
        if with_alpha:
            blocks.set_checkpoint([r["alpha"] for r in results])
        iteration = first_round + n_rounds - 1
        stop = monitor.report(_progress(monitor, iteration, measured, K, round_bytes))
        if measured["met"] and with_alpha:
            status = Status.CONVERGED
            break
        w = w + sum(expand_delta(r["dw"], d + 1) for r in results)
        measured = None  # the blocks have moved on: the returned state is measured below
        if stop is not None:
            status = stop
            break
    if measured is None:
        w, measured = _measure_current(blocks, w, options["tol"])
        if measured["met"]:
            status = Status.CONVERGED
    return _result(blocks, spec, w, measured, status, n_rounds, monitor, sent, first_round)


def _count_bytes(sent, w, results) -> int:
    broadcast = w.nbytes * len(results)
    deltas = sum(payload_bytes(r["dw"]) for r in results if r is not None)
    alphas = sum(r["alpha"].nbytes for r in results if r is not None and r["alpha"] is not None)
    sent["broadcast"] += broadcast
    sent["deltas"] += deltas
    sent["checkpoints"] += alphas
    return broadcast + deltas + alphas


def _measure_current(blocks, w, tol):
    """Measure the blocks' current α with w (rebuilding w after any loss) and keep α."""
    while True:
        results, failed = blocks.call_all("measure", (w, True))
        if not failed:
            break
        w = blocks.rebuild_w()
    blocks.set_checkpoint([r["alpha"] for r in results])
    return w, _certificate(w, results, tol)


def _certificate(w, results, tol) -> dict:
    half_norm = 0.5 * float(w @ w)
    primal = half_norm + sum(r["loss"] for r in results)
    dual = half_norm + sum(r["dual"] for r in results)  # f(α), minimisation form
    M = max(r["pg_max"] for r in results)
    m = min(r["pg_min"] for r in results)
    M, m = (M, m) if np.isfinite(M) and np.isfinite(m) else (0.0, 0.0)
    gap = relative_duality_gap(primal, -dual)
    return {"primal": primal, "dual": dual, "gap": gap, "M": M, "m": m, "met": gap <= tol}


def _progress(monitor, iteration, measured, K, round_bytes=None) -> Progress:
    return Progress(
        iteration=iteration,
        elapsed_s=monitor.elapsed(),
        gap=measured["gap"],
        pg_max=finite_or_none(measured["M"]),
        pg_min=finite_or_none(measured["m"]),
        pg_range=measured["M"] - measured["m"],
        active=K,
        primal=measured["primal"],
        dual=measured["dual"],
        duality_gap=measured["gap"],
        bytes_sent=round_bytes,
    )


def _result(blocks, spec, w, measured, status, n_rounds, monitor, sent, first_round):
    d = blocks.n_features
    last = first_round + n_rounds - 1
    final = monitor.conclude(_progress(monitor, last, measured, len(blocks.sources)))
    return SolveResult(
        w=w[:d].copy(),
        bias=float(spec["bias"] * w[d]),
        alpha=np.concatenate(blocks.checkpoint) if blocks.checkpoint else np.empty(0),
        n_iter=n_rounds,
        status=status,
        gap=final.gap,
        primal=measured["primal"],
        dual=measured["dual"],
        history=monitor.history,
        duality_gap=measured["gap"],
        pg_max=final.pg_max,
        pg_min=final.pg_min,
        pg_range=final.pg_range,
        extra={
            "partitions": blocks.bounds,
            "bytes": dict(sent),
            "recoveries": list(blocks.recoveries),
            "sigma": spec["sigma"],
            "sources": [s.describe() for s in blocks.sources],
        },
    )
