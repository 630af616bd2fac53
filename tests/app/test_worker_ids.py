"""Worker ids stay unique where host names and pids repeat (containers with host networking are
all pid 1 on one host): /readyz counts each process, and one's exit leaves the other's row."""

from __future__ import annotations

from app.jobs import workers


def test_ids_with_the_same_host_and_pid_differ(monkeypatch):
    monkeypatch.setattr(workers.socket, "gethostname", lambda: "vm")
    first, second = workers.new_worker_id(pid=1), workers.new_worker_id(pid=1)
    assert first != second and first.startswith("vm:1:") and second.startswith("vm:1:")
    parsed = workers.WorkerId.parse(first)
    assert (parsed.host, parsed.pid) == ("vm", 1)


def test_readiness_counts_two_workers_of_one_host_and_pid(client, db, monkeypatch):
    monkeypatch.setattr(workers.socket, "gethostname", lambda: "vm")
    ids = [workers.new_worker_id(pid=1) for _ in range(2)]
    for worker_id in ids:
        workers.register(db, worker_id, "procrastinate")
    assert client.get("/readyz").json()["workers"] == 2
    workers.unregister(db, ids[0])  # one stops: the other is still counted, under its own id
    assert client.get("/readyz").json()["workers"] == 1


def test_a_worker_that_exited_unreaped_is_dead_here():
    # a zombie still answers os.kill(pid, 0): before, the reaper took it for alive until the
    # host's init reaped it, which in a container without an init never happens
    import subprocess
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    alive = workers.WorkerId.parse(workers.new_worker_id(pid=child.pid))
    deadline = time.monotonic() + 30
    while not _zombie(child.pid):  # exited, not yet waited for
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert alive.dead_here()
    child.wait()
    assert alive.dead_here()  # reaped: gone
    assert not workers.WorkerId.parse(workers.new_worker_id()).dead_here()  # this process


def _zombie(pid: int) -> bool:
    return workers.process_state(pid) == "Z"
