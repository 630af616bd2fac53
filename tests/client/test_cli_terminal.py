"""The `margin` client commands on a pseudo-terminal: the progress bar renders (a single solve's,
and a search's whole path), and Ctrl-C asks whether to cancel the job."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time

from margin_client import Client
from tests.client.cli_helpers import ESC
from tests.client.conftest import ROOT, SLOW_PARAMS, Service
from tests.deploy.cluster import wait_for

CTRL_C_INTERRUPTS = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "


class Terminal:
    """A command on a pseudo-terminal; `read` collects what it draws."""

    def __init__(self, service, *args: str):
        self.master, slave = pty.openpty()
        env = {**service.env, "MARGIN_URL": service.url, "TERM": "xterm-256color",
               "COLUMNS": "120", "LINES": "30"}
        env.pop("NO_COLOR", None)
        # Ctrl-C on a terminal interrupts its command. A test run started in the background of a
        # shell without job control (`pytest &`, nohup) hands its children SIGINT ignored, and
        # Python then installs no KeyboardInterrupt handler: the command never saw the Ctrl-C
        # that test_ctrl_c_asks_and_cancels_the_job sends, and its job ran to its time limit.
        command = Service.margin(*args)  # [python, "-c", code, *args]
        command[2] = CTRL_C_INTERRUPTS + command[2]
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=slave,
                                     stdout=slave, stderr=slave, close_fds=True)
        os.close(slave)
        self.output = b""
        self.closed = False

    def read(self, timeout: float = 0.2) -> str:
        deadline = time.monotonic() + 1.0  # a live bar never stops drawing
        while (
            not self.closed
            and time.monotonic() < deadline
            and select.select([self.master], [], [], timeout)[0]
        ):
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.output += chunk
        return self.output.decode(errors="replace")

    def wait_for_text(self, text: str, timeout: float = 60) -> str:
        wait_for(lambda: text in self.read() or self.proc.poll() is not None, timeout, repr(text))
        return self.read()

    def finish(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.read()
        self.read()
        os.close(self.master)
        self.closed = True
        return self.proc.wait(timeout=5)


def test_follow_draws_a_progress_bar_on_a_terminal(service, heart_dataset):
    term = Terminal(service, "train", heart_dataset, "--C", "1", "--tol", "1e-3", "--follow")
    code = term.finish()
    screen = term.read()
    assert code == 0, screen
    assert ESC + "[" in screen  # drawn in place, with control sequences
    assert "━" in screen and "gap " in screen and "iter " in screen and "ETA" in screen
    assert re.search(r"job_\w+ succeeded", screen)


def test_follow_draws_a_search_jobs_whole_path_on_a_terminal(service, heart_dataset):
    """A search's bar is its path: solves done of all, the fold and C being solved and that
    solve's gap as text (before: the bar was the gap of each solve, starting again at every one
    of them, and said nothing of the fold or C)."""
    from margin_client.progress import _PathTracker

    term = Terminal(service, "train", heart_dataset, "--Cs", "0.01,0.1,1", "--cv", "3",
                    "--tol", "1e-3", "--follow")
    code = term.finish()
    screen = term.read()
    assert code == 0, screen
    assert ESC + "[" in screen and "━" in screen
    # the last frame: the refit, the 10th and last solve, ended
    assert "100%" in screen and "solves 10/10" in screen and "refit at C " in screen, screen
    assert re.search(r"job_\w+ succeeded", screen)
    assert "iter " not in screen and "ETA" not in screen  # not the single solve's bar
    job_id = re.search(r"(job_\w+) succeeded", screen).group(1)

    # every record the bar is given turns into these fields, whatever frames a fast search drew
    with Client(service.url) as client:
        records = list(client.jobs.get(job_id).events())
    tracker, shown = _PathTracker(), []
    for record in records:
        fields = tracker.fields(record)
        shown.append(fields["completed"])
        assert fields["solves"] == f"{record['solves_done']}/10"
        assert fields["gap"] == f"{record['gap']:.3g}"
        if record["stage"] == "path":
            C = [0.01, 0.1, 1.0][record["c_index"]]
            assert fields["where"] == (f"fold {record['fold'] + 1}/3  "
                                       f"C {record['c_index'] + 1}/3 = {C:.4g}")
        else:
            assert fields["where"] == f"refit at C {record['C']:.4g}"
    assert shown == sorted(shown) and shown[0] == 0.0 and shown[-1] == 100.0
    assert {r["fold"] for r in records} == {0, 1, 2, None}


def test_ctrl_c_asks_and_cancels_the_job(service, slow_dataset):
    with Client(service.url) as client:
        job = client.jobs.create(slow_dataset, params=SLOW_PARAMS)
        term = Terminal(service, "jobs", "follow", job.id)
        term.wait_for_text("gap ")
        wait_for(lambda: client.jobs.get(job.id).status == "running", 30, "the job to run")
        time.sleep(0.5)
        term.proc.send_signal(signal.SIGINT)
        term.wait_for_text("Cancel job")
        os.write(term.master, b"y\r")
        code = term.finish()
        assert code == 1, term.read()
        assert client.jobs.get(job.id).status == "cancelled"
