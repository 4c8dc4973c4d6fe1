"""The bad-credential debt stops a token-guessing client after 30 misses a minute, even with a valid token."""

from __future__ import annotations

import secrets

from tests.gateway import ingress_kit as kit


async def test_thirty_unknown_tokens_then_429_even_for_a_valid_token_from_that_ip(db_url):
    async with kit.app_client(db_url) as (ctx, client):
        hook = await kit.hook(ctx)
        raw, headers = kit.github({"action": "opened"})
        for n in range(30):
            guess = await client.post(f"/hooks/awt_{secrets.token_urlsafe(32)}", content=raw, headers=headers)
            assert guess.status_code == 404, n
        blocked = await client.post(f"/hooks/awt_{secrets.token_urlsafe(32)}", content=raw, headers=headers)
        assert blocked.status_code == 429 and blocked.json()["error"] == "rate_limited"
        assert int(blocked.headers["retry-after"]) >= 1
        valid = await client.post(hook.path, content=raw, headers=headers)
        assert valid.status_code == 429
        async with ctx.pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM webhook_delivery") == 0


async def test_bad_signatures_count_as_misses_too(db_url):
    async with kit.app_client(db_url) as (ctx, client):
        hook = await kit.hook(ctx)
        for _ in range(30):
            guessed = await kit.post_github(client, hook, {"action": "opened"}, secret="guess")
            assert guessed.status_code == 401
        assert (await kit.post_github(client, hook, {"action": "opened"})).status_code == 429
