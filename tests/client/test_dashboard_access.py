"""Reaching the dashboard in a real browser: keyboard use and labelled fields, an API key asked
once, and /docs and /redoc rendered offline."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.client.conftest import HEART
from tests.client.dashboard import open_ui, shot


def test_keyboard_use_and_labelled_fields(page, heart_dataset, heart_model):
    unlabelled = """() => [...document.querySelectorAll('input, select, textarea')]
        .filter(e => e.type !== 'hidden' && !e.closest('dialog')
                && !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
        .map(e => e.id || e.name)"""
    for fragment in ("#/datasets", f"#/datasets/{heart_dataset}", f"#/models/{heart_model}"):
        open_ui(page, fragment)
        assert page.evaluate(unlabelled) == [], fragment
    # the predict box, by keyboard only
    page.focus("#predict-input")
    page.keyboard.type(HEART.read_text().splitlines()[0])
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "predict-submit"
    page.keyboard.press("Enter")
    expect(page.locator("#predict-output tbody tr")).to_have_count(1)
    # the sections are reached from the navigation by keyboard
    page.goto("about:blank")
    open_ui(page)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.wait_for_selector("main[data-view=jobs-list][data-ready=true]")


def test_the_key_is_asked_once(browser, keyed_service):
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{keyed_service.url}/ui/#/datasets")
    dialog = page.locator("#key-dialog")
    expect(dialog).to_be_visible()
    page.fill("#api-key", "mgn_wrong")
    page.keyboard.press("Enter")
    expect(page.locator("#key-reason")).to_contain_text("refused")
    page.fill("#api-key", keyed_service.key)
    page.keyboard.press("Enter")
    page.wait_for_selector("main[data-view=datasets-list][data-ready=true]")
    expect(dialog).to_be_hidden()
    for section in ("jobs", "models", "datasets"):
        page.click(f"nav a[data-section={section}]")
        page.wait_for_selector(f"main[data-view={section}-list][data-ready=true]")
        expect(dialog).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('margin.apiKey')") == keyed_service.key
    shot(page, "keyed-datasets")
    context.close()


def test_api_docs_render_offline(page):
    page.goto(f"{page.service.url}/docs")
    page.wait_for_selector(".opblock")
    assert page.locator(".opblock").count() >= 20
    expect(page.locator("button.authorize")).to_be_visible()
    expect(page.locator("#operations-datasets-upload_dataset")).to_be_visible()
    shot(page, "docs")
    page.goto(f"{page.service.url}/redoc")
    page.wait_for_selector("h1:has-text('Margin')")
    expect(page.locator("a[href$='operation/upload_dataset']").first).to_be_attached()
    shot(page, "redoc")
