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

    min_{Δα_[k]}  G_k = w̃ᵀA_kΔα_[k] + (σ'/2)‖A_kΔα_[k]‖²
                         + Σ_{i∈P_k} (½ D_ii ((α_i + Δα_i)² − α_i²) − Δα_i)

within the bounds, then α_[k] += Δα_[k] and w̃ += Σ_k A_kΔα_[k] ("adding", γ = 1). Exactly,

    f(α + Δα) − f(α) = Σ_k G_k(Δα_[k]) + ½‖Σ_k v_k‖² − (σ'/2) Σ_k ‖v_k‖²,   v_k = A_kΔα_[k],

so whenever ‖Σ_k v_k‖² ≤ σ' Σ_k ‖v_k‖² the local decreases (G_k ≤ 0: coordinate descent
never rises from Δα = 0) add up to a descent of f. σ' = K makes this hold for any step
(‖Σ_k v_k‖² ≤ K Σ_k ‖v_k‖²), but it charges every partition as if all moved w the same way; on
real data the steps partly cancel and the ratio is often near 1 ("sigma" = K is the safe
choice). The default ``sigma="adaptive"`` (`SigmaControl`) starts at σ' = K (from α = 0 the
partitions' first steps point the same way), has the driver check the inequality on the Δw_k
it receives, lowers σ' towards the ratio it saw, undoes a step that fails it on the workers and
retries with a larger σ' (K at most, where it cannot fail): every step taken descends, which is
the one inequality the papers' analysis asks of σ'. Their guarantee: with local solutions of
relative accuracy Θ < 1, the dual suboptimality falls linearly for smooth losses (the squared
hinge) and the duality gap as O(1/T) for Lipschitz ones (the hinge), at rates that improve as
σ' falls and degrade with K through Θ and the coupling between partitions (directions in which
the partitions' steps cancel, which block methods like this one resolve slowly).

Local solver: with β = σ'α_[k] the subproblem times σ' is exactly the single-machine dual of
`solvers.binary.dcd` for C' = σ'C (bounds σ'U_i, diagonal D_ii/σ') started from w̃, so each worker
runs the unchanged DCD epoch kernel on its rows and returns Δw_k = (w̃_local − w̃)/σ'
(`solvers.distributed.block`). H, the local work per round, is ``local_passes`` full passes in a
fresh random order (default 1, the papers' H = n_k), cut short by ``local_time`` seconds when
given (so a slow or large partition does not hold every round back): more passes make Θ smaller
and the rounds fewer but each longer; where communication is cheap (one machine's processes,
a fast network) one pass keeps a round near one single-machine epoch, and over a slow network
more passes or a time budget per round pay. No shrinking: the subproblem changes every round.

Stopping: each round every worker first measures its sums of C_i ξ_i(w̃) and of the dual terms at
the current (w̃, α_[k]) (the projected-gradient range shown in progress is the local pass's; the
returned state's own is measured once at the end); the driver adds ½‖w̃‖² and stops when the
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
from solvers._core.sparse import sq_norm
from solvers.distributed.block import LOSS_CODES, expand_delta, payload_bytes
from solvers.distributed.cluster import BlockSet
from solvers.distributed.sigma import SigmaControl
from solvers.distributed.sources import (
    InCluster,
    InMemory,
    Partition,
    StoredRows,
    dask_partitions,
    is_dask_collection,
)


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
    local_time: float | None = None,
    sigma: float | str = "adaptive",
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
    X_parts : list or Dask collection
        The partitions: CSR matrices (with ``y_parts``), futures of `Partition` or ``(X, y)``
        pairs already in the cluster, `StoredRows` (see `stored_partitions`), which the
        workers read themselves, or a Dask bag of partitions or a Dask array chunked by rows
        (`dask_partitions`), computed in the cluster.
    y_parts : list of arrays, Dask array or None
        Labels in {-1, +1} per partition, for matrices given in memory or a Dask array.
    client : dask.distributed.Client
    loss : {"squared_hinge", "hinge"}
    C, bias : as in `solvers.solve_binary` (C a number; weights come separately)
    tol : float
        Target relative duality gap (P − D)/max(1, |P|) of the returned state.
    max_rounds, local_passes : rounds at most; DCD passes per worker and round (H).
    local_time : float or None
        Seconds of local work per worker and round at most (H becomes "up to
        ``local_passes`` passes or this long, whichever ends first").
    sigma : "adaptive" or float >= 1
        σ' of the local subproblems: "adaptive" (module docstring: steps checked by the
        driver, σ' moved between 1 and K) or a fixed value (K, the safe bound, at most; a
        fixed value below K is still raised when a step fails the driver's check).
    sample_weight : list of arrays, Dask array or None
        Per-partition sample weights for matrices given in memory or a Dask array (stored and
        in-cluster partitions carry their own).
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
    options = _options(loss, C, bias, tol, max_rounds, local_passes, checkpoint_every,
                       local_time=local_time, sigma=sigma)  # fmt: skip
    sources = make_sources(X_parts, y_parts, sample_weight, client)
    blocks = BlockSet(client, sources, max_recoveries)
    try:
        spec = problem_spec(blocks, options, class_weight, positive=positive_label)
        rng = np.random.default_rng(random_state)
        return run_rounds(blocks, spec, options, rng, monitor, first_round=1)
    finally:
        blocks.close()


def _options(loss, C, bias, tol, max_rounds, local_passes, checkpoint_every, *,
             local_time=None, sigma="adaptive") -> dict:
    check_choice(loss, sorted(LOSS_CODES), "loss")
    if not _positive_number(C):
        raise ValueError(f"C must be a finite number > 0, got {C!r}")
    if local_time is not None and not _positive_number(local_time):
        raise ValueError(f"local_time must be None or a finite number > 0, got {local_time!r}")
    if sigma != "adaptive" and not (_positive_number(sigma) and sigma >= 1):
        raise ValueError(f'sigma must be "adaptive" or a number >= 1, got {sigma!r}')
    return {
        "local_time": None if local_time is None else float(local_time),
        "sigma": sigma,
        "loss": loss,
        "C": float(C),
        "bias": check_bias(bias),
        "tol": check_tol(tol),
        "max_rounds": check_max_iter(max_rounds, "max_rounds"),
        "local_passes": check_max_iter(local_passes, "local_passes"),
        "checkpoint_every": check_max_iter(checkpoint_every, "checkpoint_every"),
    }


def _positive_number(value) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and bool(np.isfinite(value)) and value > 0)  # fmt: skip


def make_sources(X_parts, y_parts, sample_weight, client=None):
    """The partitions as sources (`solvers.distributed.sources`), checked where they are."""
    from distributed import Future

    if is_dask_collection(X_parts):
        futures = dask_partitions(client, X_parts, y_parts, sample_weight)
        if not futures:
            raise ValueError("X_parts must hold at least one partition")
        return [InCluster(f) for f in futures]
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
    K = len(blocks.sources)
    sigma = options["sigma"]
    start = float(K) if sigma == "adaptive" else min(float(sigma), K)
    spec.update(sigma=start, positive=positive, class_weight=class_weight)
    blocks.setup(spec)
    return spec


def run_rounds(blocks, spec, options, rng, monitor, first_round) -> SolveResult:
    """CoCoA+ rounds until the certified gap meets tol or a budget runs out."""
    K, d = len(blocks.sources), blocks.n_features
    w = np.zeros(d + 1)
    sent = {"broadcast": 0, "deltas": 0, "checkpoints": 0}
    control = SigmaControl(spec["sigma"], K, adaptive=options["sigma"] == "adaptive")
    steps: list[int] = []  # coordinate steps a round, all blocks together
    status, measured, n_rounds = Status.MAX_ITER, None, 0
    for n_rounds in range(1, options["max_rounds"] + 1):
        with_alpha = (n_rounds - 1) % options["checkpoint_every"] == 0
        seeds = rng.integers(0, 2**62, size=K)
        args = [(w, options["local_passes"], int(seed), with_alpha, control.sigma,
                 options["local_time"]) for seed in seeds]  # fmt: skip
        results, failed = blocks.call_all("round", args)
        round_bytes = _count_bytes(sent, w, results)
        steps.append(sum(r["steps"] for r in results if r is not None))
        if failed:  # no certificate this round: undo the others' steps, rebuild w
            blocks.call_all("revert")
            w = blocks.rebuild_w()
            continue
        measured = _certificate(w, results, options["tol"])
        if with_alpha:
            blocks.set_checkpoint([r["alpha"] for r in results])
        iteration = first_round + n_rounds - 1
        converged = measured["met"] and with_alpha
        if converged:  # the round's record is then the returned state's, with its own range
            measured = _with_range(blocks, w, measured)
        stop = monitor.report(_progress(monitor, iteration, measured, K, round_bytes))
        if converged:
            status = Status.CONVERGED
            break
        w = _take_step(blocks, control, w, results)
        measured = None  # the blocks have moved on: the returned state is measured below
        if stop is not None:
            status = stop
            break
    if measured is None:
        w, measured = _measure_current(blocks, w, options["tol"])
        if measured["met"]:
            status = Status.CONVERGED
    extra = {"sigma": control.sigma, "rejected_rounds": control.rejected, "local_steps": steps}
    return _result(blocks, spec, w, measured, status, n_rounds, monitor, sent, first_round,
                   extra)  # fmt: skip


def _take_step(blocks, control, w, results):
    """w after the round's step: added when σ' makes it safe, else undone on the workers
    (w rebuilt from the blocks if one was lost meanwhile and came back from its checkpoint)."""
    d = w.shape[0]
    deltas = [expand_delta(r["dw"], d) for r in results]
    total = np.sum(deltas, axis=0)
    if control.accepts(total, deltas):
        w = w + total
    else:
        _, failed = blocks.call_all("revert")
        if failed:
            w = blocks.rebuild_w()
    blocks.set_sigma(control.sigma)
    return w


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


def _with_range(blocks, w, measured) -> dict:
    """The measured state's own projected-gradient range: the blocks step back to the α they
    were measured at (the round's start, also the checkpoint) and measure it with w."""
    blocks.call_all("revert")
    while True:  # a block placed again holds the checkpoint, the same α: measure once more
        results, failed = blocks.call_all("measure", (w, False))
        if not failed:
            return {**measured, **_range(results)}


def _range(results) -> dict:
    M = max(r["pg_max"] for r in results)
    m = min(r["pg_min"] for r in results)
    return {"M": M, "m": m} if np.isfinite(M) and np.isfinite(m) else {"M": 0.0, "m": 0.0}


def _certificate(w, results, tol) -> dict:
    half_norm = 0.5 * float(sq_norm(w))  # a plain loop: BLAS waits for free cores
    primal = half_norm + sum(r["loss"] for r in results)
    dual = half_norm + sum(r["dual"] for r in results)  # f(α), minimisation form
    gap = relative_duality_gap(primal, -dual)
    return {"primal": primal, "dual": dual, "gap": gap, **_range(results), "met": gap <= tol}


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


def _result(blocks, spec, w, measured, status, n_rounds, monitor, sent, first_round, extra):
    d = blocks.n_features
    last = first_round + n_rounds - 1
    # a converged round is measured before its report; a later measure may share its gap only
    final = monitor.conclude(
        _progress(monitor, last, measured, len(blocks.sources)), same_range=True
    )
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
            **extra,
            "sources": [s.describe() for s in blocks.sources],
        },
    )
