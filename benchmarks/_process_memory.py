"""Resident memory of a process tree, and its peak while something runs (used by the request
memory benchmark and by the attack tests in tests/reliability).

Peaks come from the kernel, not from sampling: each process's high-water mark (VmHWM, which
counts anonymous, file-backed and shared resident pages) is reset through /proc/<pid>/clear_refs
before the measured work and read after it. The tree's increase is the sum over its processes of
(peak - resident before): an upper bound of what the tree held at once beyond its start.
"""

from __future__ import annotations

import resource
from contextlib import contextmanager
from pathlib import Path

MB = 2**20


def tree(pid: int) -> list[int]:
    """`pid` and its descendants that are alive now."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
    return found


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


class Peak:
    """What `measure` found: `increase` in bytes (tree peak over its resident start)."""

    increase: int = 0
    by_process: dict[int, int]


@contextmanager
def measure(root_pid: int):
    """Yield a `Peak` filled in when the block ends."""
    pids = tree(root_pid)
    before = {}
    for pid in pids:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        except OSError:
            continue
        before[pid] = _status(pid).get("VmRSS", 0)
    peak = Peak()
    yield peak
    peak.by_process = {}
    for pid in tree(root_pid):
        status = _status(pid)
        if "VmHWM" in status:  # a process started meanwhile counts whole
            peak.by_process[pid] = status["VmHWM"] - before.get(pid, 0)
    peak.increase = sum(max(0, v) for v in peak.by_process.values())


def limit_address_space(limit_bytes: int):
    """A `preexec_fn` that caps the child's address space (its children inherit the cap)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return apply
