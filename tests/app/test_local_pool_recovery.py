"""What the local pool does when one of its worker processes dies: the job the child had claimed
is re-queued at once (JOB_RETRIES), and the temporary files the child left in DATA_DIR/tmp (a
checkpoint half-saved, a download) are removed then, not at the pool's next start."""

from __future__ import annotations

import os
import time

from app.tables import Job
from tests.app.checkpoint_helpers import in_flight, left_by_a_dead_process, new_job


class DeadChild:
    """A child process the supervisor found gone (SIGKILLed)."""

    def __init__(self, pid: int):
        self.pid, self.exitcode = pid, -9


def test_a_dead_child_s_job_is_requeued_and_its_temp_files_swept(app, client, db, heart):
    # the pool swept tmp/ only at its start: a child killed mid-save left its partial checkpoint
    # (up to the size of the dual state) for as long as the pool ran, a day at most
    from app.jobs import lifecycle, workers
    from app.jobs.local_pool import LocalPool

    settings = app.state.settings
    settings.job_retries = 1
    tmp = settings.data_dir / "tmp"
    left, mine = left_by_a_dead_process(tmp), in_flight(tmp)
    # a live process's entry two days old: the start's day-old rule is not the recovery's (it
    # swept every entry a day old, a live run's CSV among them, each time a child died)
    os.utime(mine, (time.time() - 2 * 86_400,) * 2)
    pid = int(left.name.split("-")[-2])  # the gone process that wrote it, as a child would
    worker = workers.new_worker_id(pid)
    job_id = new_job(client, heart)
    with db.write() as session:
        assert lifecycle.claim(session, job_id, worker) is not None
    pool = LocalPool(settings, size=1)  # not started: no child spawned
    pool._ids[pid] = worker
    try:
        pool._recover(DeadChild(pid))
    finally:
        pool.db.dispose()
    with db.session() as session:
        job = session.get(Job, job_id)
    assert (job.status, job.attempt) == ("queued", 1)
    reasons = [e["reason"] for e in client.get(f"/v1/jobs/{job_id}/history").json()["items"]]
    assert "attempt 1 ended: the worker process running the job died (signal 9); re-queued" in (
        reasons
    )
    assert not left.exists()  # the dead child's file
    assert mine.exists()  # a live process's file stays, however old
