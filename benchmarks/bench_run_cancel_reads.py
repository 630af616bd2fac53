"""What a running prediction run pays to notice a cancel: the status reads between chunks.

A run's CSV is written by `prediction_csv.write_csv` over chunks of CHUNK_ROWS rows; the runner
wraps the chunks in `until_cancelled`, which reads the run's status (`still_running`) between
chunks, at most every CANCEL_CHECK_S. This writes the CSV of a synthetic dataset (--rows rows,
30 features, 20% dense) with the plain chunks and with the wrapped ones, alternating which goes
first, --repeat times each, on a migrated database (SQLite in a temporary directory, or
--database-url), and prints the medians, their ratio, the time spent in the status reads, and
the same with a read after every chunk (CANCEL_CHECK_S=0). The load average is printed with them.

    .venv/bin/python -m benchmarks.bench_run_cancel_reads [--rows 200000] [--repeat 8]
        [--database-url postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from app import migrate
from app.db import Database
from app.services import prediction_runs as runs
from app.services.dataset_source import CHUNK_ROWS, DatasetSource
from app.services.model_cache import model_from_row
from app.services.model_store import pack_weights
from app.services.prediction_csv import write_csv
from app.tables import Model, PredictionRun, new_id

N_FEATURES = 30


def stored_run(db: Database) -> tuple[runs.RunClaim, object]:
    """A model row and a running run of it; (the run's claim, the loaded model)."""
    coef = np.random.default_rng(0).standard_normal((1, N_FEATURES))
    model_id, run_id = new_id("model"), new_id("pred")
    model = Model(
        id=model_id, estimator="LinearSVC", params={}, kind="classifier", classes=[-1, 1],
        n_features=N_FEATURES, zero_based=False, weights=pack_weights(coef, [0.0]),
        status="converged", n_iter=1, train_time_s=0.0,
    )  # fmt: skip
    with db.write() as session:
        session.add(model)
        session.add(PredictionRun(id=run_id, model_id=model_id, status="running", attempt=1))
    return runs.RunClaim(run_id, 1, "bench:0:0"), model_from_row(model)


def dataset(directory: Path, rows: int) -> DatasetSource:
    X = sp.random(rows, N_FEATURES, density=0.2, format="csr", random_state=0)
    arrays = {"data": X.data, "indices": X.indices, "indptr": X.indptr, "y": np.ones(rows)}
    for name, array in arrays.items():
        np.save(directory / f"{name}.npy", array)
    return DatasetSource(lambda: directory, N_FEATURES, False)


def measure(db, claim, model, source, out: Path, repeat: int) -> dict[str, float]:
    spent: list[float] = []

    def read() -> bool:
        start = time.perf_counter()
        running = runs.still_running(db, claim)
        spent.append(time.perf_counter() - start)
        return running

    def plain():
        write_csv(out, model, source.chunks(model))

    def checked():
        write_csv(out, model, runs.until_cancelled(source.chunks(model), read))

    times: dict = {plain: [], checked: []}
    for i in range(repeat):
        for fn in (plain, checked) if i % 2 else (checked, plain):
            start = time.perf_counter()
            fn()
            times[fn].append(time.perf_counter() - start)
    base, wrapped = statistics.median(times[plain]), statistics.median(times[checked])
    return {"plain": base, "checked": wrapped, "reads": len(spent) / repeat,
            "read_s": sum(spent) / repeat}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{tmp}/margin.db"
        migrate.upgrade(url)
        db = Database(url)
        claim, model = stored_run(db)
        source = dataset(Path(tmp), args.rows)
        chunks = -(-args.rows // CHUNK_ROWS)
        print(f"{url.split(':')[0]}, {args.rows} rows in {chunks} chunks, load {os.getloadavg()}")
        for every_s in (runs.CANCEL_CHECK_S, 0.0):
            runs.CANCEL_CHECK_S = every_s
            m = measure(db, claim, model, source, Path(tmp) / "out.csv", args.repeat)
            print(
                f"CANCEL_CHECK_S={every_s:g}: write_csv median {m['plain']:.3f} s plain, "
                f"{m['checked']:.3f} s with the reads (ratio {m['checked'] / m['plain']:.3f}); "
                f"{m['reads']:.0f} reads a run, {m['read_s'] * 1e3:.1f} ms in them "
                f"({m['read_s'] / m['plain']:.1%} of the plain run)"
            )
        print(f"load {os.getloadavg()}")
        db.dispose()


if __name__ == "__main__":
    main()
