"""The checkpoints of a job's successive attempts: each attempt stores under its own key, so one
taken away cannot overwrite the next attempt's file, and an attempt removes the earlier attempts'
files once."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from app.jobs.runner import RunContext
from app.storage import StorageUnavailable, checkpoint_key, get_storage
from app.tables import Job
from tests.app.checkpoint_helpers import new_job, stored_keys


def test_an_attempt_taken_away_does_not_overwrite_the_next_attempt_s_checkpoint(
    app, client, db, heart, monkeypatch
):
    # an attempt re-queued while its worker was cut off from the database trains on and
    # checkpoints: it is refused once the job is another attempt's, but one taken away during
    # its save (after the check) wrote the job's one key, over the checkpoint of the attempt
    # running after it, and a third attempt resumed from the stale iterate
    from app.jobs import lifecycle, runner
    from app.jobs.checkpoint import Checkpoint
    from app.jobs.queue import LocalQueue

    settings = app.state.settings
    job_id = new_job(client, heart)
    ctx, queue = RunContext(settings, db), LocalQueue()

    def take_over(worker):
        with db.write() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job.status == "running":
                outcome = lifecycle.requeue_or_fail(session, queue, job, "silent", 5, "pool")
                assert outcome == "queued"
        with db.write() as session:
            return lifecycle.claim(session, job_id, worker)

    first = take_over("host:1:aaaa")
    ours = Checkpoint(np.full(270, 0.5), np.ones((1, 13)), np.zeros(1), 50, 1.0)
    stale = Checkpoint(np.full(270, 0.1), np.ones((1, 13)), np.zeros(1), 80, 2.0)
    save = Checkpoint.save
    second = []

    def slow_save(point, storage, key, scratch):
        if point is stale:  # checked and current; taken away while it saves
            second.append(take_over("host:2:bbbb"))
            runner._store_checkpoint(ctx, second[0], ours)
        save(point, storage, key, scratch)

    monkeypatch.setattr(Checkpoint, "save", slow_save)
    runner._store_checkpoint(ctx, first, stale)  # the lost attempt's save lands last
    third = take_over("host:3:cccc")
    with db.session() as session:
        job = session.get(Job, job_id)
    start = runner._segments(ctx, third, job).start
    assert start.iteration == 50  # the second attempt's, not the stale one stored after it
    np.testing.assert_array_equal(start.alpha, ours.alpha)
    assert client.get(f"/v1/jobs/{job_id}").json()["resumed_from"] == 50

    runner._store_checkpoint(ctx, third, replace(ours, iteration=60))
    assert stored_keys(settings, job_id) == [checkpoint_key(job_id, 3)]  # the earlier ones removed
    with db.write() as session:
        assert lifecycle.succeed(session, third, "converged", True)
    runner._drop_checkpoint(ctx, job_id)  # as the third attempt's worker does at the end
    runner._store_checkpoint(ctx, first, stale)  # after the job ended: refused
    assert stored_keys(settings, job_id) == []


class CountingStore:
    """A store that counts its listings and deletions, and fails the next `fail_deletes`."""

    def __init__(self, inner):
        self.inner, self.lists, self.deletes, self.fail_deletes = inner, 0, 0, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def list(self, prefix):
        self.lists += 1
        return self.inner.list(prefix)

    def delete(self, key):
        self.deletes += 1
        if self.fail_deletes:
            self.fail_deletes -= 1
            raise StorageUnavailable("store away")
        self.inner.delete(key)


def test_an_attempt_removes_the_earlier_attempts_checkpoints_once(
    app, client, db, heart, monkeypatch
):
    # every checkpoint listed the store to remove the earlier attempts' files, which are gone
    # after the attempt's first: now the first stored checkpoint removes them, the next ones
    # list nothing (and a removal that failed is tried again at the next checkpoint)
    from app.jobs import lifecycle, runner
    from app.jobs.checkpoint import Checkpoint
    from app.jobs.queue import LocalQueue

    settings = app.state.settings
    job_id = new_job(client, heart)
    ctx, queue = RunContext(settings, db), LocalQueue()
    store = CountingStore(get_storage(settings))
    monkeypatch.setattr(runner, "get_storage", lambda _settings: store)
    point = Checkpoint(np.full(270, 0.5), np.ones((1, 13)), np.zeros(1), 50, 1.0)

    def attempt_saves(worker):
        """The `on_checkpoint` of a new attempt of the job, with the store's counts at zero."""
        with db.write() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job.status == "running":
                assert lifecycle.requeue_or_fail(session, queue, job, "silent", 5, "pool")
        with db.write() as session:
            attempt = lifecycle.claim(session, job_id, worker)
        with db.session() as session:
            on_checkpoint = runner._segments(ctx, attempt, session.get(Job, job_id)).on_checkpoint
        store.lists = store.deletes = 0
        return on_checkpoint

    first = attempt_saves("host:1:aaaa")
    first(point)
    first(replace(point, iteration=51))
    assert (store.lists, store.deletes) == (1, 0)  # no earlier attempt: one look, none since
    assert stored_keys(settings, job_id) == [checkpoint_key(job_id, 1)]

    second = attempt_saves("host:2:bbbb")
    second(replace(point, iteration=52))
    assert (store.lists, store.deletes) == (1, 1)
    assert stored_keys(settings, job_id) == [checkpoint_key(job_id, 2)]  # the first's removed
    for iteration in (53, 54):
        second(replace(point, iteration=iteration))
    assert (store.lists, store.deletes) == (1, 1)  # not listed nor deleted again
    assert stored_keys(settings, job_id) == [checkpoint_key(job_id, 2)]

    third = attempt_saves("host:3:cccc")
    store.fail_deletes = 1
    third(replace(point, iteration=55))  # stored; the second's file could not be removed
    assert stored_keys(settings, job_id) == [checkpoint_key(job_id, n) for n in (2, 3)]
    third(replace(point, iteration=56))  # so this checkpoint removes it
    third(replace(point, iteration=57))
    assert (store.lists, store.deletes) == (2, 2)
    assert stored_keys(settings, job_id) == [checkpoint_key(job_id, 3)]
    with db.session() as session:
        assert session.get(Job, job_id).checkpoint_iteration == 57
