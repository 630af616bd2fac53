"""The `SearchProgress` records of a search, in the order the callback receives them: the count
of solves moves as each solve ends (one fold at one C, or the refit), the last record says every
solve done, and an early-stopped grid's totals shrink to the path it visited, so that the share
done never moves back and ends at 1."""

from __future__ import annotations

from functools import cache

import numpy as np
from sklearn.datasets import load_svmlight_file

from solvers import LinearSVCCV
from tests.conftest import shared_file


@cache
def _a9a(n=1500):
    X, y = load_svmlight_file(str(shared_file("a9a", "a9a.t")), n_features=123)
    rows = np.random.default_rng(0).permutation(X.shape[0])[:n]
    return X.tocsr()[rows], y[rows]


def _search(**options) -> tuple[LinearSVCCV, list]:
    records = []
    search = LinearSVCCV(callback=records.append, **options).fit(*_a9a())
    return search, records


def _solve(record) -> tuple:
    return record.stage, record.fold, record.c_index


def _ends(records) -> list:
    """The solves in the order the count says they ended."""
    ended, done = [], 0
    for r in records:
        assert r.solves_done in (done, done + 1), (done, r)  # one solve at a time
        if r.solves_done == done + 1:
            ended.append(_solve(r))
        done = r.solves_done
    return ended


def _share_done(records) -> list[float]:
    return [r.solves_done / r.solves_total for r in records]


def test_each_solve_counts_as_it_ends_and_the_last_record_says_all_done():
    Cs, folds = [0.01, 0.1, 1.0], 5
    search, records = _search(Cs=Cs, cv=folds, n_jobs=2)
    total = len(Cs) * folds + 1
    assert all(r.solves_total == total for r in records)
    ended = _ends(records)
    # each solve counted once, by a record of its own, and the refit last (before: the count
    # stepped by the 5 folds when a C was done, and stayed at 15 of 16 through the refit)
    assert sorted(ended[:-1]) == [("path", f, i) for f in range(folds) for i in range(len(Cs))]
    assert ended[-1] == ("refit", None, None)
    last = records[-1]
    assert last.stage == "refit" and last.solves_done == last.solves_total == total
    assert last.C == search.C_ and last.progress.iteration == search.n_iter_
    assert last.progress.gap == search.gap_  # the refit's final state, repeated at its end
    shares = _share_done(records)
    assert shares == sorted(shares)


def test_an_end_record_repeats_its_solves_last_pass():
    _, records = _search(Cs=[0.1, 1.0], cv=3, n_jobs=2)
    previous: dict[tuple, object] = {}
    done = 0
    for r in records:
        if r.solves_done > done:
            assert r.progress is previous[_solve(r)].progress
        previous[_solve(r)], done = r, r.solves_done


def test_a_search_stopped_by_its_callback_does_not_count_its_stopped_solves():
    records = []

    def stop_at_the_second(record):
        records.append(record)
        return False if len(records) == 2 else None

    search = LinearSVCCV(Cs=[0.1, 1.0], cv=3, n_jobs=1, callback=stop_at_the_second).fit(*_a9a())
    assert search.search_status_ == "stopped"
    assert [r.solves_done for r in records] == [0, 0]


def test_an_early_stopped_grid_shrinks_its_totals_to_the_path_it_visited():
    folds = 3
    search, records = _search(Cs=12, cv=folds, n_jobs=2)
    visited = len(search.cv_results_["mean_test_score"])
    assert visited < len(search.Cs_)  # the grid stopped early
    last = records[-1]
    assert last.stage == "refit" and last.cs_total == visited
    assert last.solves_done == last.solves_total >= visited * folds + 1
    # before the stop the whole grid; a fold that ran ahead of the stop point may have
    # finished a solve past it, which counts (before: the totals stayed at the grid's 12 Cs
    # and 37 solves, and the last record said 24 of them done)
    assert {r.cs_total for r in records} == {len(search.Cs_), visited}
    assert all(r.c_index is None or r.c_index < r.cs_total for r in records)
    shares = _share_done(records)
    assert shares == sorted(shares) and shares[-1] == 1.0
    totals = [r.solves_total for r in records]
    assert totals == sorted(totals, reverse=True)
