"""Spark MLlib's LinearSVC (pyspark, local mode) on the benchmark's rcv1-like split, for
`bench_distributed.py --spark`: prints one JSON line with its fit time, test accuracy and our
primal objective of its weights.

Runs in its own virtual environment (pyspark brings its own world; Java 17 is on the machine):

    python3 -m venv .venv-spark && .venv-spark/bin/pip install pyspark==4.3.0 numpy scipy
    .venv-spark/bin/python benchmarks/bench_spark_svc.py --scale 0.02 --C 1 --cores 2

Same problem as ours: the hinge loss, no intercept, no standardization, regParam = 1/(C·n)
(Spark minimizes (1/n) Σ hinge + (λ/2)‖w‖², ours ½‖w‖² + C Σ hinge, the same minimizer).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import rcv1_like  # noqa: E402


def split(scale, seed=0):
    """The rcv1-like set cut 80/20 into train and test rows (the same cut on both sides)."""
    X, y = rcv1_like(scale)
    order = np.random.default_rng(seed).permutation(X.shape[0])
    cut = int(0.8 * len(order))
    train, test = np.sort(order[:cut]), np.sort(order[cut:])
    return X[train], y[train], X[test], y[test]


def primal(X, y, w, C):
    return 0.5 * float(w @ w) + C * float(np.sum(np.maximum(0.0, 1.0 - y * (X @ w))))


def main():
    from pyspark.ml.classification import LinearSVC
    from pyspark.ml.linalg import SparseVector
    from pyspark.sql import SparkSession

    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=0.02)
    parser.add_argument("--C", type=float, default=1.0)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--max-iter", type=int, default=100)
    args = parser.parse_args()
    X, y, Xt, yt = split(args.scale)
    spark = (SparkSession.builder.master(f"local[{args.cores}]")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
             .getOrCreate())  # fmt: skip
    d = X.shape[1]
    rows = [
        (float(label > 0), SparseVector(d, X.indices[a:b].tolist(), X.data[a:b].tolist()))
        for label, a, b in zip(y, X.indptr[:-1], X.indptr[1:], strict=True)
    ]
    frame = spark.createDataFrame(rows, ["label", "features"]).cache()
    frame.count()
    model = LinearSVC(regParam=1.0 / (args.C * X.shape[0]), fitIntercept=False,
                      standardization=False, maxIter=args.max_iter, tol=1e-6)  # fmt: skip
    start = time.perf_counter()
    fitted = model.fit(frame)
    seconds = time.perf_counter() - start
    w = fitted.coefficients.toArray()
    accuracy = float(np.mean(np.where(Xt @ w > 0, 1.0, -1.0) == yt))
    print(json.dumps({"seconds": seconds, "accuracy": accuracy, "primal": primal(X, y, w, args.C),
                      "iterations": fitted.summary().totalIterations}))  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main()
