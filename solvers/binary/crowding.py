"""Whether the machine is too busy for all of a parallel solve's threads to help.

A shared-mode round of `solvers.binary.parallel` ends when its slowest thread does. When other
processes keep the cores busy, some thread is regularly kept waiting for a core during its share
of the round, and the others wait for it: such rounds cost more than rounds on fewer threads. Each
thread measures the share of its own span it spent on a core (`share_on_a_core`), and
`CrowdWatch` decides from those shares, round by round, how many threads the remaining rounds
use. The threads' spread in speed (a slower core, more memory traffic) is no crowding, so each
thread is judged against its own span, not the round's wall time.
"""

from __future__ import annotations

import time

CPU_SHARE_FLOOR = 0.7  # a thread on a core less than this share of its own span was crowded
CROWDED_ROUNDS = 2  # crowded rounds in a row after which the solve drops threads
MIN_JUDGED_S = 0.005  # rounds whose shortest thread span is under this are not judged


def thread_clocks():
    """(time waited for a core so far, CPU time, wall time) of the calling thread, in seconds;
    the first is None where the kernel does not report it."""
    return _waited_s(), time.thread_time(), time.perf_counter()


def _waited_s():
    """Seconds this thread has been runnable but waiting for a core (Linux schedstat's
    run_delay), or None."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stat:
            return int(stat.read().split()[1]) * 1e-9
    except (OSError, IndexError, ValueError):
        return None


def share_on_a_core(started):
    """The share of the thread's span since ``started`` (`thread_clocks`) it was not kept
    waiting for a core: from the scheduler's run-queue delay where Linux reports it (a wait for
    the GIL or the disk is no crowding), else the CPU time over the span. None for a span under
    ``MIN_JUDGED_S``."""
    waited, cpu, wall = started
    span = time.perf_counter() - wall
    if span < MIN_JUDGED_S:
        return None
    if waited is not None:
        now = _waited_s()
        if now is not None:
            return max(0.0, 1.0 - (now - waited) / span)
    return (time.thread_time() - cpu) / span


class CrowdWatch:
    """The thread count of a solve's remaining rounds, judged from its rounds' shares.

    Judged against the round's wall time rather than each thread's own span, the threads' spread
    in speed made idle 16-core rounds look crowded (the slowest thread at 0.62–0.93 of the round).
    After ``CROWDED_ROUNDS`` judged rounds in a row in which some thread ran less than
    ``CPU_SHARE_FLOOR`` of its span, the remaining rounds run on the threads the last round used
    less the crowded ones, never fewer than half of them: one busy core of sixteen should cost a
    thread or two (halving cost it eight on a lent 16-core machine), a crowd on every core half
    the threads; the count never grows back within a solve. Rounds on one thread (shrinking left
    little work) break the row; rounds with a span under ``MIN_JUDGED_S`` are not judged (one
    preemption weighs too much there).
    """

    def __init__(self):
        self.crowded_in_row = 0

    def threads_after(self, n_threads, K, shares):
        """The threads for the next rounds of a solve on ``n_threads``, after a round that ran
        on K of them with ``shares`` (`share_on_a_core` of each)."""
        if K == 1:
            self.crowded_in_row = 0
            return n_threads
        if any(share is None for share in shares):
            return n_threads
        n_crowded = sum(share < CPU_SHARE_FLOOR for share in shares)
        self.crowded_in_row = self.crowded_in_row + 1 if n_crowded else 0
        if self.crowded_in_row < CROWDED_ROUNDS:
            return n_threads
        self.crowded_in_row = 0
        K = min(n_threads, K)
        return max(K - n_crowded, K // 2)
