"""Dashboard pages keep the admin API's permissions.

Login first, a member sees what the API shows a member, another workspace's ids are 404, and every write
needs the session's CSRF token.
"""

from dataclasses import dataclass

import httpx
import pytest

from autopilot import workspaces
from hookgate.context import Context
from tests import factories
from tests.ops.conftest import Small, admit_runs, insert_delivery, log_in, make_small


@dataclass
class Ids:
    """One of each thing a dashboard page is about, in one workspace."""

    delivery: str
    run: str
    agent: str
    autopilot: str
    trigger: str
    issue: str
    task: str

    def pages(self) -> list[str]:
        """Every GET page about one of these ids."""
        return [f"/dashboard/deliveries/{self.delivery}", f"/dashboard/runs/{self.run}",
                f"/dashboard/agents/{self.agent}", f"/dashboard/autopilots/{self.autopilot}",
                f"/dashboard/issues/{self.issue}", f"/dashboard/tasks/{self.task}"]

    def writes(self) -> list[tuple[str, dict[str, str]]]:
        """Every POST that writes, with the fields its form sends."""
        return [
            (f"/dashboard/deliveries/{self.delivery}/replay", {}),
            (f"/dashboard/runs/{self.run}/cancel", {}),
            (f"/dashboard/runs/{self.run}/retry", {}),
            (f"/dashboard/agents/{self.agent}/edit", {"max_concurrency": "9"}),
            (f"/dashboard/agents/{self.agent}/rotate-secret", {}),
            (f"/dashboard/autopilots/{self.autopilot}/pause", {}),
            (f"/dashboard/triggers/{self.trigger}/rotate-token", {}),
            (f"/dashboard/triggers/{self.trigger}/edit", {"enabled": "false"}),
        ]


async def ids_of(ctx: Context, small: Small) -> Ids:
    delivery = await insert_delivery(ctx, small)
    run = (await admit_runs(ctx, small, 1))[0]
    issue, task = await issue_and_task(ctx, small)
    return Ids(str(delivery), str(run), str(small.agent.row["id"]), str(small.autopilot["id"]),
               str(small.trigger["id"]), str(issue), str(task))


async def issue_and_task(ctx: Context, small: Small) -> tuple[object, object]:
    """An issue and its task, made by dispatching a run of a ``create_issue`` autopilot of the same agent."""
    pilot = await factories.autopilot(small.world, small.agent.row["id"], mode="create_issue", title="issues")
    async with ctx.pool.acquire() as conn:
        run_id = await factories.dispatched_run(conn, pilot["id"])
        return (await conn.fetchval("SELECT id FROM issue WHERE run_id = $1", run_id),
                await conn.fetchval("SELECT id FROM agent_task WHERE run_id = $1", run_id))


async def state(ctx: Context) -> tuple[object, ...]:
    """What any of the writes would change: deliveries, run statuses, agents, autopilots, triggers, audit."""
    async with ctx.pool.acquire() as conn:
        return (
            await conn.fetchval("SELECT count(*) FROM webhook_delivery"),
            await conn.fetchval("SELECT array_agg(status ORDER BY id) FROM autopilot_run"),
            await conn.fetchval("SELECT array_agg((max_concurrency, signing_secret_hint)::text ORDER BY id)"
                                " FROM agent"),
            await conn.fetchval("SELECT array_agg(status ORDER BY id) FROM autopilot"),
            await conn.fetchval("SELECT array_agg((enabled, token_hint)::text ORDER BY id) FROM autopilot_trigger"),
            await conn.fetchval("SELECT count(*) FROM audit_log"),
        )


@pytest.fixture
async def small(ctx: Context) -> Small:
    return await make_small(ctx)


@pytest.fixture
async def ids(ctx: Context, small: Small) -> Ids:
    return await ids_of(ctx, small)


async def test_anonymous_pages_redirect_to_login_and_writes_are_401(client: httpx.AsyncClient, ctx: Context,
                                                                    ids: Ids):
    for path in ["/dashboard", "/dashboard/deliveries", "/dashboard/agents", "/dashboard/autopilots", *ids.pages()]:
        answer = await client.get(path)
        assert answer.status_code == 303 and answer.headers["location"] == "/dashboard/login", path
    before = await state(ctx)
    for path, fields in ids.writes():
        answer = await client.post(path, data={"confirmed": "yes", "csrf": "x", **fields})
        assert answer.status_code == 401, path
    assert await state(ctx) == before


async def test_every_write_without_the_session_csrf_token_is_403(client: httpx.AsyncClient, ctx: Context,
                                                                 small: Small, ids: Ids):
    csrf = await log_in(client, small.world.api_key)
    before = await state(ctx)
    for path, fields in ids.writes():
        missing = await client.post(path, data={"confirmed": "yes", **fields})
        assert missing.status_code == 403 and "CSRF" in missing.text, path
        forged = await client.post(path, data={"confirmed": "yes", "csrf": csrf[:-2] + "xx", **fields})
        assert forged.status_code == 403, path
        foreign = await client.post(path, data={"confirmed": "yes", "csrf": csrf, **fields},
                                    headers={"Origin": "https://evil.example"})
        assert foreign.status_code == 403, path
    assert await state(ctx) == before


async def test_another_workspaces_ids_are_404_on_every_page_and_write(client: httpx.AsyncClient, ctx: Context,
                                                                      small: Small):
    other = await factories.small(ctx, "other", title="secret-project")
    foreign = await ids_of(ctx, other)
    csrf = await log_in(client, small.world.api_key)  # the owner of the first workspace
    for path in foreign.pages():
        answer = await client.get(path)
        assert answer.status_code == 404 and "secret-project" not in answer.text, path
        assert "no such" in answer.text and answer.headers["content-type"].startswith("text/html"), path
    before = await state(ctx)
    for path, fields in foreign.writes():
        for confirmed in ("", "yes"):
            answer = await client.post(path, data={"csrf": csrf, "confirmed": confirmed, **fields})
            assert answer.status_code == 404 and other.token not in answer.text, (path, confirmed)
            assert answer.headers["content-type"].startswith("text/html"), path  # the page's answer, not a route miss
    assert await state(ctx) == before


async def test_malformed_ids_are_404(client: httpx.AsyncClient, small: Small):
    csrf = await log_in(client, small.world.api_key)
    for kind in ("deliveries", "runs", "agents", "autopilots", "issues", "tasks"):
        answer = await client.get(f"/dashboard/{kind}/not-an-id")
        assert answer.status_code == 404 and answer.headers["content-type"].startswith("text/html"), kind
    answer = await client.post("/dashboard/triggers/not-an-id/edit", data={"csrf": csrf, "confirmed": "yes"})
    assert answer.status_code == 404


async def test_a_plain_member_sees_no_webhook_url_or_token_and_no_write_buttons(client: httpx.AsyncClient,
                                                                                ctx: Context, small: Small,
                                                                                ids: Ids):
    async with ctx.pool.acquire() as conn:
        _, key = await workspaces.add_member(conn, small.world.workspace_id, "viewer", "member")
    await log_in(client, key)
    for path in ["/dashboard", "/dashboard/deliveries", "/dashboard/agents", "/dashboard/autopilots", *ids.pages()]:
        answer = await client.get(path)
        assert answer.status_code == 200 and small.token not in answer.text and "/hooks/" not in answer.text, path
    autopilot = (await client.get(f"/dashboard/autopilots/{ids.autopilot}")).text
    assert "shown to the autopilot's writers only" in autopilot
    for button in ("Pause…", "Rotate token…", "Save filters…", "Disable…"):
        assert button not in autopilot
    assert "Replay…" not in (await client.get(f"/dashboard/deliveries/{ids.delivery}")).text
    run = (await client.get(f"/dashboard/runs/{ids.run}")).text
    assert "Cancel run…" not in run and "Retry…" not in run
    agent = (await client.get(f"/dashboard/agents/{ids.agent}")).text
    assert "Rotate signing secret…" not in agent and 'action="/dashboard/agents/' not in agent


async def test_a_plain_member_is_refused_every_write_the_api_refuses_them(client: httpx.AsyncClient,
                                                                          ctx: Context, small: Small, ids: Ids):
    async with ctx.pool.acquire() as conn:
        _, key = await workspaces.add_member(conn, small.world.workspace_id, "viewer", "member")
    csrf = await log_in(client, key)
    before = await state(ctx)
    for path, fields in ids.writes():
        answer = await client.post(path, data={"csrf": csrf, "confirmed": "yes", **fields})
        assert answer.status_code == 403, path
    assert await state(ctx) == before


async def test_a_collaborator_may_do_what_the_api_lets_a_writer_do(client: httpx.AsyncClient, ctx: Context,
                                                                   small: Small, ids: Ids):
    async with ctx.pool.acquire() as conn:
        member, key = await workspaces.add_member(conn, small.world.workspace_id, "helper", "member")
        await conn.execute("INSERT INTO autopilot_collaborator (autopilot_id, member_id, added_by) VALUES ($1, $2, $3)",
                           small.autopilot["id"], member["id"], small.world.owner_id)
    csrf = await log_in(client, key)
    page = (await client.get(f"/dashboard/autopilots/{ids.autopilot}")).text
    assert f"/hooks/{small.token}" in page and "Rotate token…" in page
    replay = await client.post(f"/dashboard/deliveries/{ids.delivery}/replay", data={"csrf": csrf, "confirmed": "yes"})
    assert replay.status_code == 303
    # Agents are another matter: only their owner, owners and admins change them.
    edit = await client.post(f"/dashboard/agents/{ids.agent}/edit",
                             data={"csrf": csrf, "confirmed": "yes", "max_concurrency": "9"})
    assert edit.status_code == 403
