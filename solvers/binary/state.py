"""The state of one dual coordinate descent solve (`solvers.binary.dcd`): the data, the packed
per-sample record (α, the label's sign folded into a positive term, Q̄_ii; `solvers.binary.kernels`
says how it is laid out), w̃ and the coordinate index, built from zero or from a warm start, and the
compiled calls that read and update them.

A warm start α is clipped to the solve's bounds and w̃ = Σ_i s_i α_i x̃_i built from it by a pass
over the rows, unless the caller hands over the w̃ it already holds (``warm_weights``: trusted,
used only where the bounds left α unchanged); both are then moved to the best dual point of
their ray (`solvers._core.warm_start`).
"""

from __future__ import annotations

import numpy as np

from solvers._core.problem import CSRArrays
from solvers._core.sparse import sq_norm
from solvers._core.warm_start import ray_scale
from solvers.binary import kernels

LOSSES = {
    "hinge": kernels.HINGE,
    "squared_hinge": kernels.SQUARED_HINGE,
    "squared_error": kernels.SQUARED_ERROR,
}
LONG_ROW_ENTRIES = 128


class SolveState:
    """Arrays of one solve: the data, the packed per-sample record, w̃ and the coordinate index.

    ``C`` has shape (1,) when one value is shared by all samples (see `compact_C`).
    """

    def __init__(self, csr, C, loss, bias, record, w, index):
        self.csr, self.C, self.loss_code, self.bias = csr, C, LOSSES[loss], bias
        self.record, self.w, self.index = record, w, index
        # Rows of many cache lines are prefetched whole; on shorter ones the loop that would do
        # it costs more than it hides, and their first and last lines are enough.
        self.long_rows = csr.data.shape[0] >= LONG_ROW_ENTRIES * max(csr.n_samples, 1)

    @classmethod
    def build(cls, csr: CSRArrays, y, C, loss, bias, warm_start, rows=None, warm_weights=None):
        # Peak memory matters here: the index first (its temporaries die before the record
        # exists), then the record filled in place, the warm start and w̃ from it with no
        # n-length temporaries. w̃ is a pass over the rows unless the caller has it.
        index = kept_index(C, csr.n_samples, rows)
        hinge = loss == "hinge"
        lower = 0.0 if loss != "squared_error" else -np.inf
        width = record_width(loss)
        rec = np.empty(width * csr.n_samples)
        kernels.fill_record(rec, y, C, hinge, width)
        record = kernels.Record(rec, width, hinge, lower)
        if warm_start is None:
            w = np.zeros(csr.n_features + 1)
        else:
            upper = C if hinge else np.inf
            clipped = place_alpha(rec[0::width], warm_start, C, upper, lower, rows)
            if warm_weights is None or clipped:
                w = kernels.record_weights(csr, bias, record)
            else:
                w = warm_weights  # a copy (`checked_weights`): the solve writes w̃ in place
            to_ray_optimum(record, C, w)
        return cls(csr, C, loss, bias, record, w, index)

    def support_first(self) -> int:
        """Reorder the index with the rows of α ≠ 0 first (each part in its order; α < 0 is
        support too under the squared error); returns how many they are."""
        alpha = self.record.values[0 :: self.record.width]
        on_support = alpha[self.index] != 0.0
        self.index = np.concatenate((self.index[on_support], self.index[~on_support]))
        return int(on_support.sum())

    def take_alpha(self):
        """α, moved to the front of the record's buffer, which then shrinks to it (no copy)."""
        rec, width = self.record.values, self.record.width
        self.record = None
        n = rec.shape[0] // width
        kernels.gather_alpha(rec, width)
        rec.resize(n, refcheck=False)  # the state held the only reference to the buffer
        return rec

    def epoch(self, order_index, active_size, M_bar, m_bar):
        return kernels.dcd_epoch(
            self.csr, self.bias, self.record, self.w, order_index, active_size, (M_bar, m_bar),
            self.long_rows,
        )  # fmt: skip

    def full_range(self):
        return kernels.projected_gradient_range(self.csr, self.bias, self.record, self.w, self.C)

    def dual_objective(self):
        return float(kernels.dual_objective(self.record, self.C, self.w))

    def objectives(self):
        primal, dual = kernels.objectives(
            self.csr, self.bias, self.record, self.C, self.w, self.loss_code
        )
        return float(primal), float(dual)


def record_width(loss: str) -> int:
    """Entries per sample in the record: labels ±1 ride on the sign of a positive term."""
    return 4 if loss == "squared_error" else 3


def kept_index(C, n_samples, rows=None):
    """The samples with C_i > 0, in their original order (in that of ``rows`` for a subset), as
    the coordinate index."""
    # uint32 avoids Numba's negative-index checks; int64 beyond (mixing uint64 and int64
    # would turn the record offsets into floats)
    index_dtype = np.uint32 if n_samples < 2**32 else np.int64
    if rows is not None:
        return rows[C[rows] > 0].astype(index_dtype)
    if C.shape[0] == 1 and C[0] > 0:
        return np.arange(n_samples, dtype=index_dtype)
    return np.flatnonzero(C > 0).astype(index_dtype)


def place_alpha(alpha, warm_start, C, upper, lower, rows=None):
    """Write the warm start into ``alpha`` (the record's α, all zero): clipped to the bounds, zero
    where C_i = 0, at ``rows`` for a subset. The caller's array is left alone, and no n-length
    copy of it is made. Returns whether the bounds changed any value (then a w̃ the caller
    built from the warm start no longer matches it)."""
    expected = alpha.shape[0] if rows is None else rows.shape[0]
    given = np.asarray(warm_start)
    if given.shape != (expected,):
        raise ValueError(f"warm_start must have shape ({expected},), got {given.shape}")
    if rows is None:
        alpha[:] = given
    else:
        alpha[rows] = given
    if not np.isfinite(alpha).all():
        raise ValueError("warm_start contains NaN or infinite values")
    outside = np.broadcast_to(C, alpha.shape) <= 0
    clipped = _beyond(alpha, lower, upper) or bool(np.any(alpha, where=outside))
    np.clip(alpha, lower, upper, out=alpha)
    alpha[outside] = 0.0
    return clipped


def _beyond(alpha, lower, upper) -> bool:
    """Whether any α lies outside [lower, upper] (scalars, or ``upper`` one bound per row),
    with no float temporary of α's length."""
    if alpha.shape[0] == 0:
        return False
    if np.ndim(upper) == 0 or np.size(upper) == 1:
        return bool(alpha.min() < lower or alpha.max() > float(np.max(upper)))
    return bool(alpha.min() < lower or np.any(alpha > upper))


def checked_weights(warm_weights, n_features, warm_start):
    """A copy of ``warm_weights`` as float64 of shape (n_features + 1,), finite; only with a
    warm start."""
    if warm_start is None:
        raise ValueError("warm_weights needs the warm_start it was built from")
    given = np.array(warm_weights, dtype=np.float64)  # always a copy
    if given.shape != (n_features + 1,):
        raise ValueError(f"warm_weights must have shape ({n_features + 1},), got {given.shape}")
    if not np.isfinite(given).all():
        raise ValueError("warm_weights contains NaN or infinite values")
    return given


def to_ray_optimum(record, C, w):
    """Scale the warm start (α in ``record``, and w̃) to the best point of its ray, in place."""
    lin, quad, r_max = kernels.ray_terms(record, C)
    r = ray_scale(lin, quad + sq_norm(w), r_max)  # a compiled loop: BLAS here cost ms a call
    if r != 1.0:
        record.values[0 :: record.width] *= r
        w *= r
