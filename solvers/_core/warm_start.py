"""Rescaling a dual warm start to the best point of its ray.

Every dual here has the form f(α) = ½‖w̃(α)‖² + ½ Σ_i D_ii α_i² − ℓ(α), w̃ linear in α and ℓ
linear, on a feasible set that is a box containing 0 (or, for the joint multi-class duals, a
cone cut by a box). Along the ray {rα : r ≥ 0},

    f(rα) = ½ r² Q − r L,    Q = ‖w̃(α)‖² + Σ_i D_ii α_i²,   L = ℓ(α),

a parabola whose minimum over the feasible part, 0 ≤ r ≤ r_max (the largest r that keeps rα in
the box), is r* = clip(L / Q, 0, r_max). Starting from r*α instead of α costs one pass over α
(w̃ scales with it) and can only lower f: r = 1 is on the ray and feasible.

Why it matters on a path over C. At small C the solution grows about linearly with C (the margins
are near 0, so every α_i is near its bound C_i for the hinge loss, near 2C_i for the squared
hinge), and the previous C's α, rescaled by r*, is close to the next solution without a guess of
the ratio; at large C, where the support vectors' α settle, r* stays near 1. At the optimum of
the same problem r* = 1, so a warm start from a finished solve is left as it is.
"""

from __future__ import annotations

import math


def ray_scale(linear: float, quadratic: float, r_max: float = math.inf) -> float:
    """r* = argmin over 0 ≤ r ≤ r_max of ½ r² ``quadratic`` − r ``linear`` (1 when the ray is
    flat, ``quadratic`` ≤ 0: then α is 0 or the ray gives no direction)."""
    if not quadratic > 0.0 or not math.isfinite(linear):
        return 1.0
    return min(max(linear / quadratic, 0.0), r_max)
