#!/usr/bin/env bash
# CoCoA+ on Dask on a 16-core machine: K = 1, 2, 4, 8, 16 worker processes against the
# single-machine solver, on a synthetic set generated in place (1M rows × 100k features, 20M
# non-zeros), squared hinge, C = 1, no bias. At most about 8 minutes: 6 runs of at most 60 s
# each plus data generation and cluster starts. Writes the table to $OUT/distributed16.md.
#
#   OUT=/path/to/out PYTHON=.venv/bin/python benchmarks/distributed_16core.sh
#
# Needs the project installed with its `distributed` extra (pip install -e '.[distributed]').
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:-/tmp/distributed16}
mkdir -p "$OUT"
"$PYTHON" -c "import distributed, numba, scipy, solvers.distributed" || {
    echo "install the project first: pip install -e '.[distributed]'" >&2
    exit 1
}
{ nproc; "$PYTHON" --version; } > "$OUT/machine.txt"
timeout 480 "$PYTHON" benchmarks/bench_distributed.py --sets synthetic --scale 0.1 \
    --workers 1 2 4 8 16 --time-limit 60 --out "$OUT/distributed16.md" | tee "$OUT/stdout.txt"
