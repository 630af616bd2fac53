#!/usr/bin/env bash
# CoCoA+ on Dask on a 16-core machine: K = 4, 8, 16 worker processes against the single-machine
# solver on 1 and 16 threads, on the 10M-row synthetic set generated in place (10M rows × 100k
# features, 20 non-zeros a row on average: `bench_distributed.py`'s synthetic set at scale 1),
# squared hinge, C = 1, no bias; each worker reads its rows from the set stored as .npy arrays
# (as a stored dataset is read). At most 8 minutes: 5 runs of at most 45 s each plus data
# generation and cluster starts. Writes the table to $OUT/distributed16.md.
#
#   OUT=/path/to/out PYTHON=.venv/bin/python benchmarks/distributed_16core.sh
#
# Needs the project's `distributed` extra (dask.distributed) importable by $PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:-/tmp/distributed16}
mkdir -p "$OUT"
"$PYTHON" -c "import distributed, numba, scipy, solvers.distributed" || {
    echo "install the project first: pip install -e '.[distributed]'" >&2
    exit 1
}
{ nproc; "$PYTHON" --version; date -u; } > "$OUT/machine.txt"
timeout 470 "$PYTHON" benchmarks/bench_distributed.py --sets synthetic --scale 1 \
    --workers 4 8 16 --threads 1 16 --source stored --checkpoint-every 10 --time-limit 45 \
    --out "$OUT/distributed16.md" | tee "$OUT/stdout.txt"
