"""CSV and Parquet upload throughput against reading the same file in-process.

A dense table (label plus `--cols` numeric columns, half the cells zero) is written as CSV and
as Parquet (pyarrow defaults, row groups of 100 000 rows), and as CSV again with class names for
labels ("neg", "pos": the text-label path). Margin's figure is an upload over
HTTP to a running API on loopback (streamed, parsed in the parser process, stored as CSR); the
references read the file in this process into a scipy CSR matrix: pandas.read_csv and
pyarrow.csv.read_csv for CSV, pyarrow.parquet.read_table for Parquet. MB/s of the file's size,
best of `--repeat` runs each (same file, same machine, in the same run).

    .venv/bin/python -m benchmarks.bench_formats [--rows 200000] [--cols 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import scipy.sparse as sp

from benchmarks._loadgen import start_server
from benchmarks._service import free_port

ROOT = Path(__file__).resolve().parents[1]


def write_files(tmp: Path, rows: int, cols: int) -> tuple[Path, Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    X = np.round(rng.standard_normal((rows, cols)), 4)
    X[rng.random((rows, cols)) < 0.5] = 0
    y = np.where(X.sum(axis=1) > 0, 1.0, -1.0)
    csv_path = tmp / "table.csv"
    with open(csv_path, "w") as out:
        out.write("label," + ",".join(f"f{j}" for j in range(cols)) + "\n")
        np.savetxt(out, np.column_stack([y, X]), delimiter=",", fmt="%.6g")
    parquet_path = tmp / "table.parquet"
    table = pa.table({"label": y, **{f"f{j}": X[:, j] for j in range(cols)}})
    pq.write_table(table, parquet_path, row_group_size=100_000)
    # the same table with class names for labels ("neg", "pos"): the text-label path
    text_path = tmp / "table-text.csv"
    with open(csv_path) as numeric, open(text_path, "w") as out:
        out.write(next(numeric))
        for line in numeric:
            out.write(("pos" if line[0] == "1" else "neg") + line[line.index(",") :])
    return csv_path, parquet_path, text_path


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def upload(port: int, path: Path, fmt: str) -> None:
    with open(path, "rb") as body, httpx.Client(timeout=600) as client:
        response = client.post(
            f"http://127.0.0.1:{port}/v1/datasets",
            content=body,
            params={"format": fmt, "name": f"bench-{time.perf_counter_ns()}"},
            headers={"content-type": "application/octet-stream"},
        )
    assert response.status_code in (200, 201), response.text
    dataset = response.json()
    with httpx.Client() as client:  # the next run stores it again, not a duplicate
        client.delete(f"http://127.0.0.1:{port}/v1/datasets/{dataset['id']}")


def pandas_csv(path: Path) -> None:
    import pandas as pd

    frame = pd.read_csv(path)
    sp.csr_matrix(frame.iloc[:, 1:].to_numpy(dtype=np.float64))
    np.unique(frame.iloc[:, 0].to_numpy(), return_inverse=True)  # labels as class codes


def arrow_csv(path: Path) -> None:
    import pyarrow.csv as pc

    table = pc.read_csv(path)
    sp.csr_matrix(np.column_stack([c.to_numpy() for c in table.columns[1:]]))


def arrow_parquet(path: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    sp.csr_matrix(np.column_stack([c.to_numpy() for c in table.columns[1:]]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cols", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        csv_path, parquet_path, text_path = write_files(tmp, args.rows, args.cols)
        env = {**os.environ, "DATA_DIR": str(tmp / "data"), "PYTHONPATH": str(ROOT)}
        env.pop("DATABASE_URL", None)
        from app.migrate import upgrade

        (tmp / "data").mkdir()
        upgrade(f"sqlite:///{tmp / 'data' / 'margin.db'}")
        port = free_port()
        server = start_server("app.main:create_app", port, env, access_log=False)
        try:
            upload(port, csv_path, "csv")  # the parser processes start and compile
            rows = [
                ("CSV", csv_path, "margin upload (HTTP, parse, store)",
                 lambda: upload(port, csv_path, "csv")),
                ("CSV", csv_path, "pandas.read_csv -> CSR", lambda: pandas_csv(csv_path)),
                ("CSV", csv_path, "pyarrow.csv.read_csv -> CSR", lambda: arrow_csv(csv_path)),
                ("CSV, text labels", text_path, "margin upload (HTTP, parse, store)",
                 lambda: upload(port, text_path, "csv")),
                ("CSV, text labels", text_path, "pandas.read_csv -> CSR",
                 lambda: pandas_csv(text_path)),
                ("Parquet", parquet_path, "margin upload (HTTP, parse, store)",
                 lambda: upload(port, parquet_path, "parquet")),
                ("Parquet", parquet_path, "pyarrow.parquet.read_table -> CSR",
                 lambda: arrow_parquet(parquet_path)),
            ]  # fmt: skip
            results = []
            for fmt, path, name, fn in rows:
                seconds = best(fn, args.repeat)
                mb = path.stat().st_size / 2**20
                results.append((fmt, name, mb, seconds))
                print(fmt, name, f"{mb / seconds:.1f} MB/s", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"\nload average {os.getloadavg()}; {args.rows} rows x {args.cols} columns")
    print("| file | reader | MB | s | MB/s |")
    print("|---|---|---|---|---|")
    for fmt, name, mb, seconds in results:
        print(f"| {fmt} | {name} | {mb:.1f} | {seconds:.2f} | {mb / seconds:.1f} |")


if __name__ == "__main__":
    main()
