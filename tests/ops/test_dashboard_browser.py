"""The dashboard in headless Chromium (Debian's ``chromium`` driven by Playwright).

Log in, search for a posted webhook, open the delivery and its run, replay it; open a failed run, read its
attempts and retry it. Screenshots of each step are kept in the test's pytest tmp dir
(``<basetemp>/<test name>/screenshots/*.png``; pytest keeps the last three runs). ``HOOKGATE_TEST_CHROMIUM``
names another browser binary; a missing browser fails these tests (CI installs it) unless
``HOOKGATE_SKIP_BROWSER=1``.
"""

import hashlib
import hmac
import importlib.util
import json
import os
import re
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from hookgate.context import Context
from tests import factories, pushes
from tests.ops.conftest import Small
from worker.deliveries import DeliveryWorker

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


@pytest.fixture
def shots(tmp_path: Path) -> Callable[[Any, str], Awaitable[Path]]:
    """Save full-page screenshots as test artefacts, in this test's pytest tmp dir (``screenshots/``)."""
    folder = tmp_path / "screenshots"
    folder.mkdir()

    async def shoot(page: Any, name: str) -> Path:
        path = folder / f"{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        return path

    return shoot


@pytest.mark.skipif(importlib.util.find_spec("gateway.ingress") is None,
                    reason="needs the ingress (gateway.ingress) on this branch")
async def test_log_in_search_open_a_delivery_its_run_and_replay_it(page, live_url: str, ctx: Context, small: Small,
                                                                  shots):
    await log_in(page, live_url, small.world.api_key)
    await shots(page, "1-overview")
    await page.click("header nav >> text=Deliveries")
    assert "No deliveries yet" in await page.inner_text("#deliveries")
    async with httpx.AsyncClient() as http:
        for event in ("order.paid", "order.refunded"):
            posted = await http.post(f"{live_url}/hooks/{small.token}", content=json.dumps({"event": event}),
                                     headers={"Content-Type": "application/json", "X-Request-Id": "req-1"})
            assert posted.status_code == 200, posted.text
    delivery_id = posted.json()["delivery_id"]
    assert await DeliveryWorker(ctx, holder="browser-test").run_once() >= 1  # the run gets its task

    # Search by event glob, using the keyboard to submit the form.
    await page.fill("input[name=event]", "order.ref*")
    await page.press("input[name=event]", "Enter")
    await page.wait_for_url(re.compile(r".*event=order\.ref.*"))
    rows = page.locator("#deliveries tr[data-delivery]")
    assert await rows.count() == 1 and delivery_id in await rows.first.inner_text()
    await shots(page, "2-search")

    await page.click(f"#deliveries a[href='/dashboard/deliveries/{delivery_id}']")
    await page.wait_for_url(f"{live_url}/dashboard/deliveries/{delivery_id}")
    assert "order.refunded" in await page.inner_text("#payload")
    assert await page.get_attribute("#summary time", "title")  # the exact UTC time on hover
    await shots(page, "3-delivery")

    await page.click("#summary a[href^='/dashboard/runs/']")
    await page.wait_for_url(re.compile(r".*/dashboard/runs/.*"))
    assert delivery_id in await page.inner_text("#step-delivery")
    assert "queued" in await page.inner_text("#step-task")
    await shots(page, "4-run")

    await page.click(f"#step-delivery a[href='/dashboard/deliveries/{delivery_id}']")
    await page.click("button:has-text('Replay…')")
    await page.wait_for_selector("#confirm")
    await shots(page, "5-confirm")
    await page.keyboard.press("Enter")  # the Confirm button has the focus
    await page.wait_for_selector("#replayed")
    replayed = page.url.split("/")[-1].split("?")[0]
    assert replayed != delivery_id
    assert delivery_id in await page.inner_text("#replayed")
    await shots(page, "6-replayed")
    await page.goto(f"{live_url}/dashboard/deliveries?event=order.refunded")
    assert await page.locator("#deliveries tr[data-delivery]").count() == 2
    await page.click("header nav >> text=Overview")
    assert await page.locator("#chart-deliveries rect").count() >= 1  # the bars of this minute's deliveries
    await shots(page, "7-overview-charts")


async def test_open_a_failed_run_see_its_attempts_and_retry_it(page, live_url: str, ctx: Context, small: Small,
                                                               shots):
    async with pushes.failing_agent() as url:
        run_id = await pushes.failed_run(ctx, small.autopilot["id"], small.agent.row["id"], url)
    await log_in(page, live_url, small.world.api_key)
    await page.click(f"#failures a[href='/dashboard/runs/{run_id}']")  # the overview lists the failed run
    await page.wait_for_url(f"{live_url}/dashboard/runs/{run_id}")
    assert await page.inner_text("#run-status") == "failed"
    attempts = page.locator("#attempts tr[data-attempt]")
    assert await attempts.count() == 2
    assert "502" in await attempts.first.inner_text()
    assert await attempts.first.locator("time").get_attribute("title")  # the exact UTC time on hover
    details = attempts.first.locator("details")
    assert not await details.locator("pre").first.is_visible()  # the agent's answer starts collapsed
    await details.locator("summary").click()
    assert "upstream down" in await details.inner_text()
    await shots(page, "1-failed-run")

    await page.click("button:has-text('Retry…')")
    await page.wait_for_selector("#confirm")
    assert "Retry this run?" in await page.inner_text("#confirm")
    await shots(page, "2-confirm-retry")
    await page.keyboard.press("Enter")  # the Confirm button has the focus
    await page.wait_for_selector("#retried")
    assert page.url == f"{live_url}/dashboard/runs/{run_id}?retried=1"
    assert await page.inner_text("#run-status") == "queued"
    assert await page.locator("button:has-text('Retry…')").count() == 0
    assert await page.locator("#attempts tr[data-attempt]").count() == 2
    await shots(page, "3-retried")


async def test_a_new_user_sees_why_their_github_webhook_was_rejected(page, live_url: str, ctx: Context, shots):
    # A fresh workspace: one agent, one autopilot, a GitHub trigger whose secret differs from GitHub's side.
    w = await factories.world(ctx, "newcomer")
    agent = await factories.http_agent(w)
    pilot = await factories.autopilot(w, agent.row["id"], title="github pushes")
    _, token = await factories.webhook_trigger(w, pilot, provider="github", secret="secret-typed-in-hookgate")
    body = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "acme/api"}}).encode()
    signature = "sha256=" + hmac.new(b"secret-typed-on-github", body, hashlib.sha256).hexdigest()
    async with httpx.AsyncClient() as http:
        posted = await http.post(f"{live_url}/hooks/{token}", content=body, headers={
            "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/1a2b3c", "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "5b0d9c2e-0000-11ef-8000-000000000001", "X-Hub-Signature-256": signature})
    assert posted.status_code == 401, posted.text

    await log_in(page, live_url, w.api_key)
    await shots(page, "1-overview")
    rejected = page.locator("#failures a[href^='/dashboard/deliveries/']")  # no id to type: the overview lists it
    assert await rejected.count() == 1
    await rejected.click()
    await page.wait_for_url(re.compile(r".*/dashboard/deliveries/[0-9a-f-]{36}$"))
    await shots(page, "2-rejected-delivery")
    assert await page.inner_text("#delivery-status") == "rejected"
    verdict = await page.inner_text("#signature-verdict")
    assert "The signature did not verify" in verdict
    assert "does not match" in verdict and "signing secret (the secret ending in …gate)" in verdict
    checked = await page.inner_text("#signature-checked")
    assert "X-Hub-Signature-256" in checked and "masked" in checked
    assert "invalid_signature" in await page.inner_text("#signature")
    assert "A different secret on each side" in await page.inner_text("#signature")  # the usual cause
    assert signature.split("=")[1] not in await page.content()  # the value is never shown (nor stored)
    assert "github.push" in await page.inner_text("#summary")
