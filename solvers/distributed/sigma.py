"""σ' of CoCoA+'s local subproblems, chosen round by round (see `solvers.distributed.cocoa`).

A round's step Σ_k Δα_[k], with v_k = A_kΔα_[k] the change partition k made to w̃, descends the
dual f whenever ‖Σ_k v_k‖² ≤ σ' Σ_k ‖v_k‖²: the driver receives every v_k (the Δw_k), so it can
check this exactly and undo the steps that fail it.
"""

from __future__ import annotations

from solvers._core.sparse import sq_norm


class SigmaControl:
    """σ' for the next round, and the check that makes a round's step safe with it.

    The step Σ_k Δα_[k] with Δw_k = A_kΔα_[k] descends f whenever
    ‖Σ_k Δw_k‖² ≤ σ' Σ_k ‖Δw_k‖² (module docstring). With σ' = K this always holds; with a
    smaller σ' the driver checks it: a step that fails is undone on the workers and σ' grows
    to at least twice its value and the observed ratio (K at most, where the check cannot
    fail), and it is not lowered again for `HOLD` rounds; after a passed check σ' moves down
    towards `MARGIN` times the observed ratio (never below 1, at most halving a round).
    Rejections in a row are at most about log2(K) + 1, and every step taken descends. A fixed
    σ' below K is raised in the same way when a step fails its check.
    """

    MARGIN = 1.25
    HOLD = 10
    FLOOR = 1.0

    def __init__(self, sigma: float, K: int, adaptive: bool):
        self.sigma, self.K, self.adaptive = float(sigma), float(K), adaptive
        self.hold, self.rejected = 0, 0

    def accepts(self, total, deltas) -> bool:
        """Whether the step whose parts are ``deltas`` (Δw_k) and whose sum is ``total`` is
        safe with the σ' the workers used; moves σ' for the next round."""
        # plain loops, not BLAS dot products, which wait for a free core on a busy machine
        together = float(sq_norm(total))
        apart = sum(float(sq_norm(dw)) for dw in deltas)
        ratio = together / apart if apart > 0 else 1.0
        if ratio <= self.sigma * (1 + 1e-12) or self.sigma >= self.K:
            if self.adaptive and self.hold == 0:
                self.sigma = min(self.K, max(self.FLOOR, self.MARGIN * ratio, 0.5 * self.sigma))
            self.hold = max(0, self.hold - 1)
            return True
        self.rejected += 1
        self.sigma = min(self.K, max(2.0 * self.sigma, self.MARGIN * ratio))
        self.hold = self.HOLD
        return False
