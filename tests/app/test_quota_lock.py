"""A quota check locks the tenant's row for the rest of its transaction, so that two requests of
one tenant cannot both pass it; a tenant without a row of its own gets one to lock."""

from __future__ import annotations

import threading

import pytest

from app.services.quotas import locked_tenant
from app.tables import Tenant

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # SQLite serializes writers
def test_a_tenant_without_a_row_is_locked_all_the_same(db, db_url):
    with db.session() as session:
        assert session.get(Tenant, "local") is None  # the local tenant never had one
    second_done = threading.Event()

    def second():
        with db.write() as session:
            locked_tenant(session, "local")
            second_done.set()

    with db.write() as session:
        locked_tenant(session, "local")
        thread = threading.Thread(target=second)
        thread.start()
        # before: no row, nothing locked, and the second check ran at once
        assert not second_done.wait(0.5)
    assert second_done.wait(10)  # it goes on once the first transaction ends
    thread.join()
    with db.session() as session:
        assert session.get(Tenant, "local").max_active_jobs is None  # an empty row: defaults
