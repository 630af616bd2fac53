"""PostgreSQL stops for 5 s while distributed workers run jobs (JOB_STALL_S=3, shorter than the
outage), three times in a row on the same service: every job ends succeeded (with its model) or
failed with a reason, no job is ever queued or running without a queue entry, the jobs submitted
after each outage run at their first attempt, and both workers stay alive with fresh heartbeats.
`scripts/pg_outage.py` runs the long version (20 repetitions of a 20 s outage, JOB_STALL_S=15)."""

from __future__ import annotations

import pytest

from tests.reliability.outage import OutageRun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def test_jobs_outlive_three_postgres_outages(tmp_path):
    with OutageRun(tmp_path, outage_s=5, stall_s=3, job_s=4) as run:
        try:
            for i in range(3):
                rep = run.repeat(timeout=90)
                assert rep.problems() == [], f"repetition {i + 1}: {rep}"
        except BaseException:
            print(run.logs())
            raise
