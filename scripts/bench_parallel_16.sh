#!/bin/sh
# Thread scaling of one binary problem on a lent 16-core machine (about 8 minutes; run it with a
# 540 s limit, which leaves room for one rerun in a 15-minute loan). It needs python3 with numpy,
# scipy and numba; LIBLINEAR is timed when liblinear-official can be installed from wheels or a
# source package carried in .whl/ (the machine reaches nothing outside itself). The table goes to
# $OUT/scaling16.md.
set -eu
OUT="${OUT:-benchmarks/out}"
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-build-isolation --find-links .whl liblinear-official >/dev/null 2>&1 || true
fi
{
    nproc
    grep -m1 "model name" /proc/cpuinfo || true
    python3 -c "import sys, numba, numpy, scipy; print(sys.version.split()[0], 'numba', numba.__version__, 'numpy', numpy.__version__, 'scipy', scipy.__version__)"
    date -u
} > "$OUT/machine.txt"
export PYTHONUNBUFFERED=1
timeout 500 python3 benchmarks/bench_scaling16.py --out "$OUT/scaling16.md"
