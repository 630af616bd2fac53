"""The long PostgreSQL-outage run: N repetitions (default 20) of a 20 s outage mid-job with
JOB_STALL_S=15, on one service (`margin api`, two `margin worker`, procrastinate backend) and a
PostgreSQL cluster of its own. The CI test (tests/reliability/test_pg_outage.py) runs the short
version. Needs root (the cluster runs as `postgres`) and PostgreSQL's binaries
(MARGIN_TEST_PG_BIN, default /usr/lib/postgresql/15/bin).

    .venv/bin/python scripts/pg_outage.py [--repetitions 20] [--outage-s 20] [--stall-s 15]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from tests.reliability.outage import OutageRun

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--outage-s", type=float, default=20.0)
    parser.add_argument("--stall-s", type=float, default=15.0, help="JOB_STALL_S")
    parser.add_argument("--job-s", type=float, default=6.0, help="each job's time budget")
    args = parser.parse_args()
    start, failed = time.monotonic(), 0
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="margin-outage-") as tmp:
        with OutageRun(Path(tmp), args.outage_s, args.stall_s, args.job_s) as run:
            for i in range(1, args.repetitions + 1):
                rep = run.repeat(timeout=max(120.0, 6 * args.stall_s))
                for view in [*rep.jobs.values(), *rep.after]:
                    key = f"{view['status']} at attempt {view.get('attempt')}"
                    counts[key] = counts.get(key, 0) + 1
                problems = rep.problems()
                failed += bool(problems)
                print(
                    f"repetition {i}: {rep.seconds:.0f} s, "
                    f"{', '.join(problems) or 'every job ended, none stranded'}",
                    flush=True,
                )
            if failed:
                print(run.logs())
    jobs = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(
        f"{args.repetitions - failed}/{args.repetitions} repetitions clean "
        f"({args.outage_s:g} s outages, JOB_STALL_S={args.stall_s:g}); jobs: {jobs}; "
        f"{time.monotonic() - start:.0f} s; load {os.getloadavg()[0]:.1f}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
