"""What checking a Parquet upload's page headers costs per page, read through the 256-byte
window that grows on demand against one read of up to 1 MiB per header (the window before).

A file of one-value pages (pyarrow's `data_page_size=1`, `write_batch_size=1`) is the worst case:
its check walks every header and reads almost nothing else. Both windows walk the same file in
the same run, in turns, best of `--repeat`; the upload check then refuses files with more than
`page_budget` pages beyond the first two of each column chunk, so the last column bounds what
one upload of that size may cost.

    .venv/bin/python benchmarks/bench_parquet_pages.py --rows 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.services.formats import parquet_pages  # noqa: E402
from benchmarks._common import output_block  # noqa: E402


def tiny_pages(path: Path, rows: int) -> None:
    column = pa.array(np.arange(rows) % 100, type=pa.int8())
    pq.write_table(pa.table({"label": column, "x": column}), path, data_page_size=1,
                   write_batch_size=1, compression="none", use_dictionary=False,
                   write_statistics=False)  # fmt: skip


def walk(path: Path) -> tuple[int, float]:
    """(pages, seconds) of walking every column chunk's headers."""
    meta, size = pq.read_metadata(path), path.stat().st_size
    start, pages = time.perf_counter(), 0
    with open(path, "rb") as raw:
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                chunk = meta.row_group(g).column(c)
                for _ in parquet_pages.walk_chunk(raw, chunk.data_page_offset,
                                                  chunk.total_compressed_size, size):  # fmt: skip
                    pages += 1
    return pages, time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", help="also write the output into this fragment of results/")
    args = parser.parse_args(argv)
    with output_block(args.out), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pages.parquet"
        tiny_pages(path, args.rows)
        windows = {"1 MiB (before)": parquet_pages.MAX_HEADER_BYTES,
                   "256 B, grown on demand": parquet_pages.FIRST_READ_BYTES}  # fmt: skip
        best = {name: float("inf") for name in windows}
        for _ in range(args.repeat):
            for name, window in windows.items():
                parquet_pages.FIRST_READ_BYTES = window
                pages, seconds = walk(path)
                best[name] = min(best[name], seconds)
        size = path.stat().st_size
        budget = parquet_pages.page_budget(2 << 30)
        print(f"{pages:,} one-value pages, {size / 1e6:.1f} MB; best of {args.repeat}, "
              f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
        print("| header window | µs a page | a 2 GiB upload's page budget, walked |")
        print("|---|---|---|")
        for name, seconds in best.items():
            per_page = seconds / pages
            print(f"| {name} | {per_page * 1e6:.1f} | {budget * per_page:.0f} s |")


if __name__ == "__main__":
    main()
