"""One partition and its block of α on a Dask worker (a Dask actor): the worker side of CoCoA+.

The block keeps its rows through the input door's view (`CSRArrays`) and its α inside the binary
DCD record (`solvers.binary.kernels`), in the scaled form that turns the CoCoA+ local
subproblem into the single-machine dual (see `solvers.distributed.cocoa`): the record holds
β_i = σ'α_i with the bounds and diagonal of C' = σ'C, so the unchanged DCD epoch kernel solves
the local subproblem and the same record still measures the true objectives (each term scales
by σ') and the true projected gradients (they are equal).
"""

from __future__ import annotations

import time

import numpy as np

from solvers._core.problem import check_labels, compact_C, csr_arrays
from solvers._core.sparse import sq_norm, weighted_row_sum
from solvers.binary import kernels
from solvers.binary.state import LONG_ROW_ENTRIES
from solvers.distributed.sources import as_partition

LOSS_CODES = {"hinge": kernels.HINGE, "squared_hinge": kernels.SQUARED_HINGE}
WIDTH = 3  # classification record: α, s_i·U_i or s_i·D_ii, Q̄_ii
CHUNKS_PER_PASS = 16  # how often a time-budgeted pass looks at the clock


class Block:
    """The state one worker keeps for one partition between rounds."""

    def __init__(self, source):
        part = as_partition(source.load() if hasattr(source, "load") else source)
        self.csr = csr_arrays(part.X)
        self.labels = np.asarray(part.y)
        if self.labels.shape != (self.csr.n_samples,):
            raise ValueError(
                f"a partition's y must have shape ({self.csr.n_samples},), got {self.labels.shape}"
            )
        self.sample_weight = part.sample_weight
        self.long_rows = self.csr.data.shape[0] >= LONG_ROW_ENTRIES * max(self.csr.n_samples, 1)
        self.record = None

    def describe(self) -> dict:
        values, counts = np.unique(self.labels, return_counts=True)
        return {
            "n_rows": self.csr.n_samples,
            "n_features": self.csr.n_features,
            "nbytes": self.csr.nbytes,
            "labels": dict(zip(values.tolist(), counts.tolist(), strict=True)),
        }

    def setup(self, spec: dict, alpha=None):
        """Start a binary problem (spec: loss, C, bias, sigma, positive, class_weight) at α = 0,
        or at ``alpha`` (clipped to the bounds); returns A_k α_k when ``alpha`` is given."""
        self._configure(spec)
        if alpha is None:
            return None
        self._load_alpha(alpha)
        return self.contribution()

    def _configure(self, spec: dict) -> None:
        n = self.csr.n_samples
        if spec["positive"] is None:
            y = check_labels(self.labels, n, binary=True)
        else:
            y = np.where(self.labels == spec["positive"], 1.0, -1.0)
        C = np.full(n, float(spec["C"]))
        if self.sample_weight is not None:
            C *= np.asarray(self.sample_weight, dtype=np.float64)
        for label, weight in (spec["class_weight"] or {}).items():
            C[self.labels == label] *= weight  # by the original label (a class, for OvR)
        self.spec = dict(spec)
        self.sigma, self.bias = float(spec["sigma"]), float(spec["bias"])
        self.loss = LOSS_CODES[spec["loss"]]
        hinge = spec["loss"] == "hinge"
        self.C = compact_C(C * self.sigma, n)
        self.upper = C if hinge else np.full(n, np.inf)
        self.y = y
        rec = np.empty(WIDTH * n)
        kernels.fill_record(rec, y, self.C, hinge, WIDTH)
        self.record = kernels.Record(rec, WIDTH, hinge, 0.0)
        self.index = np.flatnonzero(C > 0).astype(np.uint32 if n < 2**32 else np.int64)
        self.saved = None

    def _load_alpha(self, alpha) -> None:
        alpha = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, self.upper)
        alpha[self.C_values() <= 0] = 0.0
        self.record.values[0::WIDTH] = alpha * self.sigma

    def set_alpha(self, alpha):
        """Set α_k (clipped to its bounds; rows with C_i = 0 stay at 0) and return A_k α_k."""
        self._load_alpha(alpha)
        return self.contribution()

    def set_sigma(self, sigma: float) -> None:
        """Keep α_k and solve the local subproblem with σ' = ``sigma`` from now on."""
        if float(sigma) != self.sigma:
            alpha = self.alpha()
            self._configure({**self.spec, "sigma": float(sigma)})
            self._load_alpha(alpha)

    def revert(self) -> None:
        """Undo the last round's change of α_k (the driver rejected its step)."""
        if self.saved is not None:
            self.record.values[0::WIDTH] = self.saved
            self.saved = None

    def contribution(self):
        """A_k α_k = Σ_{i in k} y_i α_i x̃_i, dense with the bias entry last."""
        alpha = self.record.values[0::WIDTH] / self.sigma
        csr = self.csr
        return weighted_row_sum(
            alpha * self.y, csr.data, csr.indices, csr.indptr, csr.n_features, self.bias
        )

    def C_values(self):
        return np.broadcast_to(self.C, (self.csr.n_samples,))

    def alpha(self):
        return self.record.values[0::WIDTH] / self.sigma

    def measure(self, w, with_alpha: bool = False, with_range: bool = True) -> dict:
        """Sums this block adds to the objectives at (w, α_k), its projected-gradient range
        (a pass of its own: skipped, as ±inf, without ``with_range``), and α_k when asked
        (the driver's checkpoint)."""
        csr, rec = self.csr, self.record
        M, m = -np.inf, np.inf
        if with_range:
            M, m = kernels.projected_gradient_range(csr, self.bias, rec, w, self.C)
        primal, dual = kernels.objectives(csr, self.bias, rec, self.C, w, self.loss)
        half_norm = 0.5 * sq_norm(w)
        return {
            "loss": (primal - half_norm) / self.sigma,
            "dual": (dual - half_norm) / self.sigma,
            "pg_max": float(M),
            "pg_min": float(m),
            "alpha": self.alpha() if with_alpha else None,
        }

    def round(self, w, passes: int, seed: int, with_alpha: bool, sigma=None,
              time_s: float | None = None) -> dict:
        """One CoCoA+ round: measure (w, α_k), then up to ``passes`` DCD epochs of the local
        subproblem (with σ' = ``sigma`` when given) from w, stopping early once ``time_s``
        seconds have passed (checked every `CHUNKS_PER_PASS`-th of a pass); returns the
        measures, Δw_k (sparse when that is smaller) and the coordinate steps taken. The
        projected-gradient range is the one the local passes saw (for progress only: the
        driver measures the returned state's own at the end), which spares a pass a round."""
        if sigma is not None:
            self.set_sigma(sigma)
        out = self.measure(w, with_alpha, with_range=False)
        self.saved = self.record.values[0::WIDTH].copy()
        w_local = np.array(w)
        out["steps"], out["pg_max"], out["pg_min"] = self._local_passes(
            w_local, passes, seed, time_s
        )
        w_local -= w
        w_local /= self.sigma
        out["dw"] = compact_delta(w_local)
        return out

    def _local_passes(self, w_local, passes, seed, time_s):
        """(coordinate steps, largest and smallest projected gradient of the last pass)."""
        n_kept = self.index.shape[0]
        no_shrinking = (np.inf, -np.inf)
        chunk = max(1, n_kept if time_s is None else -(-n_kept // CHUNKS_PER_PASS))
        deadline = None if time_s is None else time.perf_counter() + time_s
        steps, M, m = 0, -np.inf, np.inf
        for p in range(passes):
            kernels.shuffle_prefix(self.index, n_kept, (seed + p * 0x9E3779B9) % 2**63)
            M, m = -np.inf, np.inf
            for start in range(0, n_kept, chunk):
                part = self.index[start:start + chunk]
                _, M_part, m_part = kernels.dcd_epoch(
                    self.csr, self.bias, self.record, w_local, part, part.shape[0],
                    no_shrinking, self.long_rows,
                )  # fmt: skip
                M, m = max(M, float(M_part)), min(m, float(m_part))
                steps += part.shape[0]
                if deadline is not None and time.perf_counter() >= deadline:
                    return steps, M, m
        return steps, M, m


def compact_delta(dw: np.ndarray):
    """("sparse", positions, values) when that is fewer bytes than the dense vector."""
    nz = np.flatnonzero(dw)
    if nz.size * (4 + 8) < dw.size * 8 and dw.size < 2**32:
        return ("sparse", nz.astype(np.uint32), dw[nz])
    return ("dense", dw)


def expand_delta(payload, size: int) -> np.ndarray:
    if payload[0] == "dense":
        return payload[1]
    out = np.zeros(size)
    out[payload[1]] = payload[2]
    return out


def payload_bytes(payload) -> int:
    return sum(part.nbytes for part in payload[1:])
