"""The chaos HTTP agent's outage: refused connections (kept-alive ones too), then 503, then back on its URL."""

import json
import random

import httpx
import pytest

from tests.chaos.agents import HttpAgent


class Always200(random.Random):
    """An rng whose every roll answers 200 at once (no 500, 429 or slow answer)."""

    def random(self) -> float:
        return 0.99


async def test_the_http_agent_refuses_then_answers_503_then_comes_back_on_the_same_url() -> None:
    agent = HttpAgent(rng=Always200())
    url = await agent.start()
    body, headers = json.dumps({"run_id": "r1"}).encode(), {"webhook-id": "t1"}
    try:
        async with httpx.AsyncClient(timeout=5) as kept:
            assert (await kept.post(url, content=body, headers=headers)).status_code == 200
            await agent.outage("refused")
            with pytest.raises(httpx.TransportError):  # the kept-alive connection is closed too
                await kept.post(url, content=body, headers=headers)
            async with httpx.AsyncClient(timeout=5) as fresh:
                with pytest.raises(httpx.ConnectError):
                    await fresh.post(url, content=body, headers=headers)
            await agent.outage("503")
            assert (await kept.post(url, content=body, headers=headers)).status_code == 503
            await agent.recover()
            assert (await kept.post(url, content=body, headers=headers)).status_code == 200
    finally:
        await agent.stop()
    assert agent.acked["t1"] == 2 and agent.answered_503 == 1 and agent.down is None
    assert agent.runs["r1"] == {"t1"}
