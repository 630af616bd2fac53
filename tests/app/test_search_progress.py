"""A search job's progress says where on its path it is in every record a client receives: the
live event stream, its replay, the stored history (GET /progress) and the job's latest record
carry stage, fold, C index, C and the solves done of all beside the current solve's gap and the
path's percent; the history is thinned per solve."""

from __future__ import annotations

import json
import threading
import time

import pytest
from sqlalchemy import insert, select

from app.jobs import history
from app.jobs.runner import RunContext, run_job
from app.tables import JobProgress

pytestmark = pytest.mark.timeout(180)
CS = [0.01, 0.1, 1.0]
FOLDS = 3
SOLVES = len(CS) * FOLDS + 1  # the refit on all rows included


def _progress_events(lines: list[str]) -> list[dict]:
    """The data of the `progress` events among an SSE stream's lines."""
    records, kind = [], None
    for line in lines:
        if line.startswith("event:"):
            kind = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and kind == "progress":
            records.append(json.loads(line[5:]))
    return records


def _check_path(records: list[dict], chosen_C: float) -> None:
    assert records, "no progress records"
    for r in records:
        assert r["stage"] in ("path", "refit"), r
        assert (r["folds_total"], r["cs_total"], r["solves_total"]) == (FOLDS, len(CS), SOLVES)
        assert 0 <= r["solves_done"] <= SOLVES
        assert r["percent"] == pytest.approx(100 * r["solves_done"] / SOLVES)
        assert r["gap"] is not None and r["iteration"] >= 1
        if r["stage"] == "path":
            assert 0 <= r["fold"] < FOLDS and 0 <= r["c_index"] < len(CS)
            assert r["C"] == CS[r["c_index"]]
        else:
            assert r["fold"] is None and r["c_index"] is None and r["C"] == chosen_C
            assert r["solves_done"] >= SOLVES - 1
    done = [r["solves_done"] for r in records]
    assert done == sorted(done)  # the path's share never moves back
    last = records[-1]  # the refit's end: every solve done
    assert (last["stage"], last["solves_done"], last["percent"]) == ("refit", SOLVES, 100.0)


def _ends(records: list[dict]) -> list[tuple]:
    """The solves (fold, C index) in the order the count says they ended, one at a time."""
    ended = []
    for before, r in zip([{"solves_done": 0}, *records], records, strict=False):
        assert r["solves_done"] - before["solves_done"] in (0, 1), (before, r)
        if r["solves_done"] > before["solves_done"]:
            ended.append((r["fold"], r["c_index"]))
    return ended


def test_every_record_of_a_search_job_says_where_on_the_path_it_is(app, client, db, heart):
    app.state.settings.progress_interval_s = 0.0  # a write per report: the stream sees each
    body = {"dataset_id": heart["id"],
            "params": {"tol": 1e-4, "search": {"Cs": CS, "cv": FOLDS}, "calibration": "none"}}
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    live: list[str] = []

    def watch():
        with client.stream("GET", f"/v1/jobs/{job_id}/events") as events:
            live.extend(events.iter_lines())

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.5)  # connected before the first report
    assert run_job(job_id, RunContext(app.state.settings, db)) == "succeeded"
    watcher.join(60)
    job = client.get(f"/v1/jobs/{job_id}").json()
    chosen = client.get(f"/v1/models/{job['model_id']}").json()["selection"]["C"]

    seen = _progress_events(live)
    _check_path(seen, chosen)
    # every solve of the path reported, each fold at each C, then the refit (before: the
    # events held the gap alone, which starts again at every solve)
    solves = {(r["fold"], r["c_index"]) for r in seen}
    assert solves == {(f, c) for f in range(FOLDS) for c in range(len(CS))} | {(None, None)}
    assert seen[-1]["stage"] == "refit"
    # each solve counted as it ended, the refit last (before: the count stepped by the folds
    # once a C was done, and the last record said 9 of 10 beside a succeeded job)
    ended = _ends(seen)
    assert sorted(ended[:-1]) == sorted(solves - {(None, None)}) and ended[-1] == (None, None)

    replay = _progress_events(client.get(f"/v1/jobs/{job_id}/events").text.splitlines())
    stored = client.get(f"/v1/jobs/{job_id}/progress", params={"limit": 10_000}).json()["items"]
    assert replay == stored  # the replay is the stored history, record for record
    _check_path(stored, chosen)
    assert {r["stage"] for r in stored} == {"path", "refit"}

    latest = job["progress"]
    assert latest["stage"] == "refit" and latest["solves_done"] == latest["solves_total"]
    assert latest["percent"] == 100.0 and latest == seen[-1]
    assert job["percent"] == 100.0  # succeeded


def test_a_plain_jobs_records_leave_the_path_fields_empty(app, client, db, heart):
    job_id = client.post("/v1/jobs", json={"dataset_id": heart["id"],
                                           "params": {"tol": 1e-3}}).json()["id"]
    assert run_job(job_id, RunContext(app.state.settings, db)) == "succeeded"
    records = _progress_events(client.get(f"/v1/jobs/{job_id}/events").text.splitlines())
    assert records and all(r["gap"] is not None for r in records)
    for name in ("stage", "fold", "folds_total", "c_index", "cs_total", "C", "solves_done",
                 "solves_total", "percent"):
        assert {r[name] for r in records} == {None}, name


def test_a_search_history_is_thinned_per_solve(app, client, db, heart, fake_trainer):
    """Each solve's iterations start at 1: thinned by iteration alone, the path kept the first
    solve's early reports and dropped every later solve's."""
    fake_trainer()
    job_id = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()["id"]
    solves = [(0, 0), (1, 0), (0, 1), (1, 1)]
    rows = [
        {"job_id": job_id, "attempt": 1, "iteration": it, "elapsed_s": 0.001 * it,
         "gap": 1.0 / it, "stage": "path", "fold": fold, "folds_total": 2, "c_index": c,
         "cs_total": 2, "C": 10.0**c, "solves_done": 2 * c, "solves_total": 5}
        for fold, c in solves for it in range(1, 301)
    ]  # fmt: skip
    with db.write() as session:
        session.execute(insert(JobProgress), rows)
        assert history.thin(session, job_id, 1) > 0
    with db.session() as session:
        kept = session.execute(
            select(JobProgress.fold, JobProgress.c_index, JobProgress.iteration)
            .where(JobProgress.job_id == job_id)
        ).all()
    for fold, c in solves:
        iterations = sorted(it for f, i, it in kept if (f, i) == (fold, c))
        assert iterations[:20] == list(range(1, 21)), (fold, c)  # its early reports kept
        assert len(iterations) < 300  # its later ones thinned


def test_an_early_stopped_grid_counts_the_path_it_visited(app, client, db, heart):
    """The library's grid (no min and max) stops once the score has not improved for 3 Cs: the
    totals then shrink to the path visited, so the percent rises and never moves back, and the
    finished job says 100 % (before: the totals counted the whole grid, and the last record
    of the finished job said 33 of 37 solves done, 89 %)."""
    search = {"Cs": {"num": 12}, "cv": FOLDS}
    body = {"dataset_id": heart["id"],
            "params": {"tol": 1e-3, "search": search, "calibration": "none"}}
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    assert run_job(job_id, RunContext(app.state.settings, db)) == "succeeded"
    job = client.get(f"/v1/jobs/{job_id}").json()
    visited = len(client.get(f"/v1/models/{job['model_id']}").json()["selection"]["table"])
    assert visited < 12  # the grid stopped early

    stored = client.get(f"/v1/jobs/{job_id}/progress", params={"limit": 10_000}).json()["items"]
    assert {r["cs_total"] for r in stored} == {12, visited}
    percents = [r["percent"] for r in stored]
    assert percents == sorted(percents)
    latest = job["progress"]
    assert latest == stored[-1] and latest["stage"] == "refit" and latest["cs_total"] == visited
    assert latest["solves_done"] == latest["solves_total"] >= visited * FOLDS + 1
    assert latest["percent"] == 100.0 and job["percent"] == 100.0
