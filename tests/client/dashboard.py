"""Helpers of the dashboard tests (tests/client/test_dashboard_*.py; the browser and page
fixtures are in conftest): open a view, take a screenshot (to test-artifacts/ui/), count a
plot's points.

The pages run under a Content-Security-Policy without 'unsafe-eval' (app/ui): a test waits with
`page.wait_for_function("() => ...")`, a function, since Playwright evaluates a bare expression
with eval in the page, which the policy refuses."""

from __future__ import annotations

from tests.client.conftest import artifact_dir

SHOTS = artifact_dir("ui")


def open_ui(page, fragment: str = "#/datasets"):
    page.goto(f"{page.service.url}/ui/{fragment}")
    page.wait_for_selector("main[data-ready=true]")


def shot(page, name: str):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def points(page, figure: str) -> int:
    return int(page.get_attribute(f"figure#{figure}", "data-points"))
