"""The dashboard in headless Chromium (Debian's ``chromium`` driven by Playwright).

Log in, search for a posted webhook, open the delivery and its run, replay it; open a failed run, read its
attempts and retry it; walk agents (edit, rotate the secret) and autopilots (pause/resume, rotate a token,
edit event filters, next cron fires); filter and page deliveries; read the overview's charts; do a write
with the keyboard only; and, as a new user, find out why a GitHub webhook was rejected. Screenshots of each
step are kept in the test's pytest tmp dir (``<basetemp>/<test name>/screenshots/*.png``; pytest keeps the
last three runs). ``HOOKGATE_TEST_CHROMIUM``
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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


async def follow(page: Any, selector: str, url: str | re.Pattern[str]) -> None:
    """Click ``selector`` and wait until the page is at ``url``."""
    await page.click(selector)
    await page.wait_for_url(url)


async def confirm(page: Any, shots: Callable[[Any, str], Awaitable[Path]], button: str, shot: str,
                  then: str) -> str:
    """Click ``button``, screenshot the question as ``shot``, confirm, wait for ``then``; what it asked."""
    await page.click(button)
    await page.wait_for_selector("#confirm")
    asked: str = await page.inner_text("#confirm")
    await shots(page, shot)
    await page.click("#confirm-button")
    await page.wait_for_selector(then)
    return asked


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
    await follow(page, "header button[type=submit]", f"{live_url}/dashboard/login")
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

    await follow(page, f"#deliveries a[href='/dashboard/deliveries/{delivery_id}']",
                 f"{live_url}/dashboard/deliveries/{delivery_id}")
    assert "order.refunded" in await page.inner_text("#payload")
    assert await page.get_attribute("#summary time", "title")  # the exact UTC time on hover
    await shots(page, "3-delivery")

    await follow(page, "#summary a[href^='/dashboard/runs/']", re.compile(r".*/dashboard/runs/.*"))
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
    # the overview lists the failed run
    await follow(page, f"#failures a[href='/dashboard/runs/{run_id}']", f"{live_url}/dashboard/runs/{run_id}")
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
    # the task's own page, same attempts
    await follow(page, "#step-task a[href^='/dashboard/tasks/']",
                 re.compile(r".*/dashboard/tasks/[0-9a-f-]{36}$"))
    assert await page.inner_text("#task-status") == "failed"
    assert await page.locator("#attempts tr[data-attempt]").count() == 2
    await shots(page, "1b-task")
    await follow(page, f"#task-run a[href='/dashboard/runs/{run_id}']", f"{live_url}/dashboard/runs/{run_id}")

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
    newcomer = await factories.small(ctx, "newcomer", title="github pushes", provider="github",
                                     secret="secret-typed-in-hookgate")
    w, token = newcomer.world, newcomer.token
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


async def test_agents_list_agent_page_edit_the_timeout_and_rotate_the_secret(page, live_url: str, ctx: Context,
                                                                              small: Small, shots):
    agent_id = str(small.agent.row["id"])
    await log_in(page, live_url, small.world.api_key)
    await follow(page, "header nav >> text=Agents", f"{live_url}/dashboard/agents")
    await shots(page, "1-agents")
    await follow(page, f"#agents a[href='/dashboard/agents/{agent_id}']",
                 f"{live_url}/dashboard/agents/{agent_id}")
    assert "healthy" in await page.inner_text("#circuit")
    await shots(page, "2-agent")

    await page.fill("#agent-timeout", "12.5")
    asked = await confirm(page, shots, "#edit button:has-text('Save…')", "3-confirm-edit", "#saved")
    assert "timeout_s" in asked and "12.5" in asked and "max_concurrency" not in asked  # only what changed
    assert "timeout 12.5 s" in await page.inner_text("#health")
    await shots(page, "4-saved")

    old_hint = await ctx.pool.fetchval("SELECT signing_secret_hint FROM agent WHERE id = $1", small.agent.row["id"])
    asked = await confirm(page, shots, "button:has-text('Rotate signing secret…')", "5-confirm-rotate",
                          "#shown-once")
    assert "Rotate the signing secret" in asked
    secret = await page.input_value("#secret-value")
    assert len(secret) >= 24 and "Shown only now" in await page.inner_text("#secret-note")
    await shots(page, "6-secret-shown-once")
    await follow(page, "#shown-once a:has-text('Done')", f"{live_url}/dashboard/agents/{agent_id}")
    hint = await ctx.pool.fetchval("SELECT signing_secret_hint FROM agent WHERE id = $1", small.agent.row["id"])
    assert hint != old_hint and secret.endswith(hint)
    assert f"…{hint}" in await page.inner_text("#health") and secret not in await page.content()  # once only


async def test_autopilots_pause_resume_rotate_a_token_and_edit_the_event_filters(page, live_url: str, ctx: Context,
                                                                                small: Small, shots):
    schedule = await factories.schedule_trigger(small.world, small.autopilot, "*/5 * * * *",
                                                datetime.now(UTC) + timedelta(minutes=5))
    pilot_id, webhook_id = str(small.autopilot["id"]), str(small.trigger["id"])
    await log_in(page, live_url, small.world.api_key)
    await follow(page, "header nav >> text=Autopilots", f"{live_url}/dashboard/autopilots")
    await shots(page, "1-autopilots")
    await follow(page, f"#autopilots a[href='/dashboard/autopilots/{pilot_id}']",
                 f"{live_url}/dashboard/autopilots/{pilot_id}")
    url = await page.input_value(f"#trigger-{webhook_id} input.webhook-url")  # the URL to copy
    assert urlsplit(url).path == f"/hooks/{small.token}"
    fires = page.locator(f"#trigger-{schedule['id']} .next-fires time")
    assert await fires.count() == 3
    first = datetime.fromisoformat(await fires.first.get_attribute("datetime"))
    assert first > datetime.now(UTC) and first.minute % 5 == 0
    await shots(page, "2-autopilot")

    for verb, status in (("Pause", "paused"), ("Resume", "active")):
        await confirm(page, shots, f"#autopilot button:has-text('{verb}…')", f"3-confirm-{verb.lower()}",
                      "#done")
        assert await page.inner_text("#autopilot-status") == status
        await shots(page, f"4-{status}")

    asked = await confirm(page, shots, f"#trigger-{webhook_id} button:has-text('Rotate token…')",
                          "5-confirm-rotate", "#shown-once")
    assert "old URL stops working" in asked
    new_url = await page.input_value("#secret-value")
    assert "/hooks/" in new_url and small.token not in new_url
    await shots(page, "6-new-url")
    async with httpx.AsyncClient() as http:
        old = await http.post(f"{live_url}/hooks/{small.token}", json={"event": "x"})
        new = await http.post(f"{live_url}{urlsplit(new_url).path}", json={"event": "x"})
    assert old.status_code in (401, 404) and new.status_code == 200, (old.text, new.text)
    await follow(page, "#shown-once a:has-text('Done')", f"{live_url}/dashboard/autopilots/{pilot_id}")
    assert await page.input_value(f"#trigger-{webhook_id} input.webhook-url") == new_url

    await page.fill(f"#filters-{webhook_id}", "order.*\ngithub.push")
    asked = await confirm(page, shots, f"#trigger-{webhook_id} button:has-text('Save filters…')",
                          "7-confirm-filters", "#done")
    assert "order.*" in asked
    shown = await page.inner_text(f"#trigger-{webhook_id}")
    assert "order.*" in shown and "github.push" in shown
    assert await ctx.pool.fetchval("SELECT event_filters FROM autopilot_trigger WHERE id = $1",
                                   small.trigger["id"]) == ["order.*", "github.push"]
    await shots(page, "8-filters-saved")


async def rows_shown(page) -> list[str]:
    """The delivery ids of the list page, in order."""
    return [await r.get_attribute("data-delivery") for r in await page.locator("#deliveries tr[data-delivery]").all()]


async def test_overview_charts_then_deliveries_by_status_trigger_event_time_and_beyond_the_first_page(
        page, live_url: str, ctx: Context, small: Small, shots):
    signed, signed_token = await factories.webhook_trigger(small.world, small.autopilot, secret="the-right-secret")
    async with httpx.AsyncClient() as http:
        for n in range(52):  # 50 a page: two more make a second page
            posted = await http.post(f"{live_url}/hooks/{small.token}",
                                     json={"event": "order.shipped" if n % 2 else "order.paid", "n": n})
            assert posted.status_code == 200, posted.text
        rejected = await http.post(f"{live_url}/hooks/{signed_token}", content=b'{"event": "order.paid"}',
                                   headers={"Content-Type": "application/json",
                                            "X-Hub-Signature-256": "sha256=" + "0" * 64})
        assert rejected.status_code == 401, rejected.text
    rejected_id = rejected.json().get("delivery_id")
    async with pushes.failing_agent() as url:  # finished pushes give the latency chart its points
        await pushes.failed_run(ctx, small.autopilot["id"], small.agent.row["id"], url)

    await log_in(page, live_url, small.world.api_key)
    deliveries_chart, latency_chart = page.locator("#chart-deliveries svg"), page.locator("#chart-latency svg")
    assert await deliveries_chart.locator("rect").count() >= 1
    assert await latency_chart.locator("circle").count() >= 1 and await latency_chart.locator("polyline").count() >= 1
    assert "no data" not in await page.text_content("#chart-deliveries") + await page.text_content("#chart-latency")
    await shots(page, "1-overview-charts")

    # Status: from the overview's count of rejected deliveries, no typing.
    await follow(page, "#deliveries-today a:has-text('rejected')",
                 re.compile(r".*/dashboard/deliveries\?status=rejected$"))
    only = await rows_shown(page)
    assert len(only) == 1 and (rejected_id is None or only == [rejected_id])
    assert await page.input_value("select[name=status]") == "rejected"
    await shots(page, "2-status-rejected")

    # Trigger: from the autopilot page's link for each trigger.
    await page.goto(f"{live_url}/dashboard/autopilots/{small.autopilot['id']}")
    await follow(page, f"#trigger-{signed['id']} a:has-text(\"this trigger's deliveries\")",
                 re.compile(rf".*trigger_id={signed['id']}"))
    assert await rows_shown(page) == only
    await page.goto(f"{live_url}/dashboard/autopilots/{small.autopilot['id']}")
    await follow(page, f"#trigger-{small.trigger['id']} a:has-text(\"this trigger's deliveries\")",
                 re.compile(rf".*trigger_id={small.trigger['id']}"))
    first_page = await rows_shown(page)
    assert len(first_page) == 50 and only[0] not in first_page
    await shots(page, "3-trigger-first-page")

    # Paging: the cursor beyond the first page, and back to the newest.
    await follow(page, "#next-page", re.compile(r".*cursor=.*"))
    second_page = await rows_shown(page)
    assert len(second_page) == 2 and not set(second_page) & set(first_page)
    assert await page.locator("#next-page").count() == 0
    await shots(page, "4-second-page")
    await follow(page, "a:has-text('← Newest')",
                 re.compile(rf".*/dashboard/deliveries\?trigger_id={small.trigger['id']}$"))
    assert await rows_shown(page) == first_page

    # Event: a glob, with the trigger filter kept.
    await page.fill("input[name=event]", "order.ship*")
    await follow(page, "#search button[type=submit]", re.compile(r".*event=order\.ship.*"))
    assert len(await rows_shown(page)) == 26
    await shots(page, "5-event")

    # Time range: nothing from an hour ahead; everything within the hour around now.
    await page.goto(f"{live_url}/dashboard/deliveries")
    ahead = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    behind = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    await page.fill("input[name=since]", ahead)
    await follow(page, "#search button[type=submit]", re.compile(r".*since=.*"))
    assert await rows_shown(page) == [] and "match these filters" in await page.inner_text("#deliveries")
    await page.fill("input[name=since]", behind)
    await page.fill("input[name=until]", ahead)
    await follow(page, "#search button[type=submit]", re.compile(r".*until=.*"))
    assert len(await rows_shown(page)) == 50 and await page.locator("#next-page").count() == 1
    await shots(page, "6-time-range")


async def test_from_a_run_to_its_issue_and_task_and_back(page, live_url: str, ctx: Context, small: Small, shots):
    pilot = await factories.autopilot(small.world, small.agent.row["id"], mode="create_issue", title="bugs")
    async with ctx.pool.acquire() as conn:
        run_id = await factories.dispatched_run(conn, pilot["id"])
    await log_in(page, live_url, small.world.api_key)
    await page.goto(f"{live_url}/dashboard/runs/{run_id}")
    await follow(page, "#step-issue a[href^='/dashboard/issues/']",
                 re.compile(r".*/dashboard/issues/[0-9a-f-]{36}$"))
    assert await page.inner_text("#issue-status") in ("todo", "in_progress")
    assert "bugs" in await page.inner_text("#issue")
    await shots(page, "1-issue")
    await follow(page, "#issue-tasks a[href^='/dashboard/tasks/']",
                 re.compile(r".*/dashboard/tasks/[0-9a-f-]{36}$"))
    assert await page.inner_text("#task-status") == "queued" and "None yet." in await page.inner_text("#attempts")
    await shots(page, "2-task")
    await follow(page, f"#task-run a[href='/dashboard/runs/{run_id}']", f"{live_url}/dashboard/runs/{run_id}")


async def test_a_write_with_the_keyboard_only(page, live_url: str, small: Small, shots):
    await log_in(page, live_url, small.world.api_key)
    await page.goto(f"{live_url}/dashboard/autopilots/{small.autopilot['id']}")
    for _ in range(60):  # Tab through the page to the Pause button
        await page.keyboard.press("Tab")
        if await page.evaluate("document.activeElement.textContent.trim()") == "Pause…":
            break
    else:
        raise AssertionError("the Pause button is not reachable with Tab")
    await shots(page, "1-pause-focused")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#confirm")
    assert await page.evaluate("document.activeElement.id") == "confirm-button"  # focus lands on Confirm
    await shots(page, "2-confirm-focused")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#done")
    assert await page.inner_text("#autopilot-status") == "paused"
    await shots(page, "3-paused")


#: What a page's layout looks like to a reader: whether the document or a section scrolls sideways, and every
#: table wider than its box with the box that scrolls it (its nearest ancestor with overflow-x auto or scroll).
LAYOUT = """() => {
  const scroller = (el) => { for (let p = el.parentElement; p; p = p.parentElement) {
    if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return p; } return null; };
  const wide = [...document.querySelectorAll('main table')].filter(t => {
    const box = t.parentElement.getBoundingClientRect(); return t.getBoundingClientRect().width > box.width + 1; });
  return {
    page: document.documentElement.scrollWidth, viewport: document.documentElement.clientWidth,
    sections: [...document.querySelectorAll('main section')].filter(s => s.scrollWidth > s.clientWidth + 1)
      .map(s => s.id || s.querySelector('h2, table')?.id || 'section'),
    wide: wide.map(t => { const s = scroller(t);
      return {table: t.id || t.className || 'table', scroller: s ? s.className : null,
              scrolls: s ? s.scrollWidth > s.clientWidth : false}; }),
  };
}"""


async def test_at_390_pixels_tables_scroll_in_their_own_box_and_the_page_does_not(page, live_url: str, ctx: Context,
                                                                                  small: Small, shots):
    async with pushes.failing_agent() as url:
        run_id = await pushes.failed_run(ctx, small.autopilot["id"], small.agent.row["id"], url)
    task_id = await ctx.pool.fetchval("SELECT id FROM agent_task WHERE run_id = $1", run_id)
    async with httpx.AsyncClient() as http:
        posted = await http.post(f"{live_url}/hooks/{small.token}", json={"event": "order.paid"})
    await page.set_viewport_size({"width": 390, "height": 844})
    await log_in(page, live_url, small.world.api_key)
    pages = {"overview": "/dashboard", "deliveries": "/dashboard/deliveries",
             "delivery": f"/dashboard/deliveries/{posted.json()['delivery_id']}", "agents": "/dashboard/agents",
             "agent": f"/dashboard/agents/{small.agent.row['id']}", "autopilots": "/dashboard/autopilots",
             "autopilot": f"/dashboard/autopilots/{small.autopilot['id']}", "run": f"/dashboard/runs/{run_id}",
             "task": f"/dashboard/tasks/{task_id}"}
    scrolled = set()
    for name, path in pages.items():
        await page.goto(f"{live_url}{path}")
        layout = await page.evaluate(LAYOUT)
        await shots(page, f"390-{name}")
        assert layout["page"] <= layout["viewport"] == 390, (name, layout)  # no sideways scroll of the page
        assert layout["sections"] == [], (name, layout)  # nor of a whole section, heading and forms included
        for table in layout["wide"]:
            assert table["scroller"] == "table-scroll" and table["scrolls"], (name, table)
            scrolled.add(name)
    assert {"deliveries", "agents", "run"} <= scrolled  # their tables are wider than 390 px: they scroll
    # A wide table scrolls in its box: the box moves, the page does not.
    await page.goto(f"{live_url}/dashboard/deliveries")
    box = page.locator(".table-scroll:has(#deliveries)")
    await box.evaluate("b => b.scrollLeft = 200")
    assert await box.evaluate("b => b.scrollLeft") > 0 and await page.evaluate("window.scrollX") == 0


async def test_the_event_filter_labels_keep_their_text_together_and_inside_the_page(page, live_url: str,
                                                                                     small: Small, shots):
    filters = ["order.paid", "github.pull_request_review_comment.created", "x" * 80]
    await factories.webhook_trigger(small.world, small.autopilot, event_filters=filters)
    await log_in(page, live_url, small.world.api_key)
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 900})
        # The deliveries search: "Event (glob: *, ?)" reads on one line above its field, not a word a line.
        await page.goto(f"{live_url}/dashboard/deliveries")
        label = page.locator("#search label:has(input[name=event])")
        tops = await label.locator("code").evaluate_all("cs => cs.map(c => c.getBoundingClientRect().top)")
        field = await label.locator("input").bounding_box()
        assert len(tops) == 2 and abs(tops[0] - tops[1]) < 2, (width, tops)
        assert all(top < field["y"] for top in tops), (width, tops, field)
        await shots(page, f"{width}-event-search")
        # The trigger's filters: the field and the filters shown stay inside their section.
        await page.goto(f"{live_url}/dashboard/autopilots/{small.autopilot['id']}")
        inside = await page.evaluate("""() => {
          const section = document.querySelector('#triggers').getBoundingClientRect();
          return [...document.querySelectorAll('#triggers textarea, #triggers .filters label')].map(e => {
            const r = e.getBoundingClientRect(); return r.left >= section.left && r.right <= section.right + 1; });
        }""")
        assert inside and all(inside), (width, inside)
        assert await page.evaluate("document.documentElement.scrollWidth") <= width
        await shots(page, f"{width}-trigger-filters")
