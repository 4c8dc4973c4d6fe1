"""The dashboard in headless Chromium (Debian's ``chromium`` driven by Playwright).

Log in, watch a delivery appear, replay it. ``HOOKGATE_TEST_CHROMIUM`` names another browser binary;
a missing browser fails these tests (CI installs it) unless ``HOOKGATE_SKIP_BROWSER=1``.
"""

import importlib.util
import json
import os
import shutil
from collections.abc import AsyncIterator

import httpx
import pytest

from hookgate.context import Context
from tests.ops.conftest import Small

CHROMIUM = os.environ.get("HOOKGATE_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(os.environ.get("HOOKGATE_SKIP_BROWSER") == "1", reason="HOOKGATE_SKIP_BROWSER=1")


@pytest.fixture
async def page() -> AsyncIterator[object]:
    from playwright.async_api import async_playwright

    assert shutil.which(CHROMIUM), f"no Chromium at {CHROMIUM}: apt-get install -y chromium"
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = await browser.new_context()
            yield await context.new_page()
        finally:
            await browser.close()


async def log_in(page, base: str, api_key: str) -> None:
    await page.goto(f"{base}/dashboard")
    assert page.url.endswith("/dashboard/login")
    await page.fill("input[name=api_key]", api_key)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}/dashboard")


async def test_log_in_see_the_overview_and_log_out(page, live_url: str, small: Small):
    await page.goto(f"{live_url}/dashboard/login")
    await page.fill("input[name=api_key]", "hgk_" + "A" * 43)
    await page.click("button[type=submit]")
    assert "not valid" in await page.inner_text("#login-error")
    await log_in(page, live_url, small.world.api_key)
    for panel in ("#runs-today", "#deliveries-today", "#expired-leases", "#runtimes", "#queues", "#failures",
                  "#next-fires"):
        assert await page.is_visible(panel), panel
    cookies = await page.context.cookies()
    session = next(c for c in cookies if c["name"] == "hookgate_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert await page.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read the session
    await page.click("header button[type=submit]")
    await page.wait_for_url(f"{live_url}/dashboard/login")
    await page.goto(f"{live_url}/dashboard")
    assert page.url.endswith("/dashboard/login")


@pytest.mark.skipif(importlib.util.find_spec("gateway.ingress") is None,
                    reason="needs the ingress (gateway/ingress/) on this branch")
async def test_log_in_see_a_posted_webhook_appear_and_replay_it(page, live_url: str, ctx: Context, small: Small):
    await log_in(page, live_url, small.world.api_key)
    await page.goto(f"{live_url}/dashboard/deliveries")
    assert "No deliveries yet" in await page.inner_text("#deliveries")
    async with httpx.AsyncClient() as http:
        posted = await http.post(f"{live_url}/hooks/{small.token}", content=json.dumps({"event": "order.paid"}),
                                 headers={"Content-Type": "application/json"})
    assert posted.status_code == 200, posted.text
    delivery_id = posted.json()["delivery_id"]
    await page.click("text=refresh")
    row = page.locator(f"tr[data-delivery='{delivery_id}']")
    assert "order.paid" in await row.inner_text()
    await row.locator("button", has_text="Replay").click()
    await page.wait_for_selector("#replayed")
    replayed = (await page.inner_text("#replayed code")).strip()
    assert replayed != delivery_id
    new_row = page.locator(f"tr[data-delivery='{replayed}']")
    assert f"replay of {delivery_id}" in await new_row.inner_text()
    assert "order.paid" in await new_row.inner_text()
