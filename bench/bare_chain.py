"""The bare chain of ``bench/dispatch.py``: what a webhook costs to carry to an agent with nothing but the parts.

A Starlette endpoint stores the body with one ``INSERT`` and a ``NOTIFY`` in the same statement and answers 200;
in the same process, a ``LISTEN``ing asyncpg connection wakes a loop that takes the new rows (``FOR UPDATE SKIP
LOCKED``, marked sent) and POSTs each to the agent once, over a keep-alive connection. It has none of Hookgate's
promises (no run, task, lease, retry, signature, dedupe or audit): it is the floor the end-to-end phase is read
against, under the same uvicorn settings (httptools, no access log) and the same event loop as the gateway.

Run by ``bench/dispatch.py``: ``python bench/bare_chain.py DSN PORT AGENT_URL [asyncio|uvloop]``.
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp
import asyncpg
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

TABLE = "CREATE TABLE IF NOT EXISTS bare_event (id bigserial PRIMARY KEY, body jsonb NOT NULL, sent boolean NOT NULL " \
        "DEFAULT false)"
INSERT = "WITH e AS (INSERT INTO bare_event (body) VALUES ($1::jsonb) RETURNING id) " \
         "SELECT pg_notify('bare_chain', e.id::text) FROM e"
TAKE = "UPDATE bare_event SET sent = true WHERE id IN (SELECT id FROM bare_event WHERE NOT sent ORDER BY id " \
       "LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING body"


async def main(dsn: str, port: int, agent_url: str) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=4, max_size=20)
    await pool.execute(TABLE)
    wake = asyncio.Event()

    async def receive(request: Request) -> JSONResponse:
        await pool.execute(INSERT, (await request.body()).decode())
        return JSONResponse({"status": "accepted"})

    async def forward() -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                await wake.wait()
                wake.clear()
                while rows := await pool.fetch(TAKE):
                    for row in rows:
                        # The agent reads payload.payload.t0, as in the gateway's envelope.
                        body = json.dumps({"payload": {"payload": json.loads(row["body"])}})
                        async with http.post(agent_url, data=body, headers={"content-type": "application/json"}) as r:
                            await r.read()

    listener = await asyncpg.connect(dsn)
    await listener.add_listener("bare_chain", lambda *_: wake.set())
    forwarding = asyncio.create_task(forward())
    app = Starlette(routes=[Route("/hooks/{token}", receive, methods=["POST"])])
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", access_log=False, log_config=None,
                            http="httptools", loop="none")
    try:
        await uvicorn.Server(config).serve()
    finally:
        forwarding.cancel()
        await listener.close()
        await pool.close()


if __name__ == "__main__":
    dsn_arg, port_arg, agent_arg = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if (sys.argv[4] if len(sys.argv) > 4 else "uvloop") == "uvloop":
        import uvloop

        uvloop.run(main(dsn_arg, port_arg, agent_arg))
    else:
        asyncio.run(main(dsn_arg, port_arg, agent_arg))
