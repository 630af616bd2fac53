"""Test-set accuracy of the multi-class solvers against LIBLINEAR on news20.t and sector.t.

Trains on the training file, scores the test file read with the training file's features; C = 1,
bias 1, default tol, on both sides: Crammer–Singer vs -s 4, one-vs-rest (hinge, squared hinge)
vs -s 3 / -s 1, and Weston–Watkins. news20's rows are scaled to unit length, train and test alike
(as in `tests/solvers/test_multiclass_accuracy.py`, which asserts the bounds of the issue).

    .venv/bin/python benchmarks/bench_accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from liblinear import liblinearutil  # noqa: E402

from benchmarks._multiclass import accuracy, liblinear_weights, load_text  # noqa: E402
from solvers import solve_crammer_singer, solve_ovr, solve_weston_watkins  # noqa: E402

COLUMNS = (
    ("ours CS", lambda X, y, k: solve_crammer_singer(X, y, k, C=1.0, bias=1.0)),
    ("LIBLINEAR -s 4", 4),
    ("ours OvR hinge", lambda X, y, k: solve_ovr(X, y, k, loss="hinge", C=1.0, bias=1.0)),
    ("-s 3", 3),
    ("ours OvR squared hinge", lambda X, y, k: solve_ovr(X, y, k, C=1.0, bias=1.0)),
    ("-s 1", 1),
    ("ours WW", lambda X, y, k: solve_weston_watkins(X, y, k, C=1.0, bias=1.0)),
)


def row(name: str) -> list[str]:
    X, labels, y, classes = load_text(name)
    Xt, _, yt, _ = load_text(name, "test")
    cells = []
    for _, how in COLUMNS:
        if callable(how):
            fit = how(X, y, len(classes))
            W, b = fit.w, fit.bias
        else:
            model = liblinearutil.train(labels, X, f"-s {how} -c 1 -B 1 -q")
            W, b = liblinear_weights(model, classes, X.shape[1], 1.0)
        cells.append(f"{accuracy(Xt, yt, W, b):.2f}")
    return cells


def main() -> None:
    print("| set | " + " | ".join(title for title, _ in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for name, label in (("news20", "news20.t (unit rows)"), ("sector", "sector.t")):
        print(f"| {label} | " + " | ".join(row(name)) + " |", flush=True)


if __name__ == "__main__":
    main()
