"""The app takes a webhook to the ingress ahead of Starlette's router: every answer is the one the stack gives."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware

from gateway import access, errors, no_store, overload
from gateway import app as gateway_app
from hookgate.context import Context
from tests.gateway import ingress_kit as kit


def _stack(ctx: Context) -> Starlette:
    """The same routes, middleware and handlers as ``create_app`` in a plain Starlette: every request routed."""
    plain = Starlette(routes=gateway_app.all_routes(), exception_handlers={**overload.HANDLERS, **errors.HANDLERS},
                      middleware=[Middleware(access.RequestContext), Middleware(no_store.NoStore)])
    plain.state.ctx = ctx
    return plain


def _shape(answer: httpx.Response) -> tuple[int, Any, dict[str, str]]:
    """Status, body (JSON without the new rows' ids) and headers (without the per-request id's value)."""
    body: Any = answer.content
    if answer.headers.get("content-type", "").startswith("application/json") and answer.content:
        body = {k: v for k, v in answer.json().items() if k not in ("delivery_id", "run_id")}
    headers = {k: v for k, v in answer.headers.items() if k != "x-request-id"}
    return answer.status_code, body, headers


async def test_each_webhook_answer_matches_the_full_stack(ctx: Context) -> None:
    h = await kit.hook(ctx)
    direct, plain = gateway_app.create_app(ctx), _stack(ctx)
    assert isinstance(direct, gateway_app.App) and type(plain) is Starlette

    def requests(tag: str) -> list[tuple[str, str, bytes, dict[str, str]]]:
        signed, headers = kit.github({"action": "opened", "tag": tag})
        forged, forged_headers = kit.github({"action": "opened", "tag": tag}, secret="wrong")
        return [
            ("POST", h.path, signed, headers),  # accepted
            ("POST", h.path, signed, headers),  # its duplicate
            ("POST", h.path, forged, forged_headers),  # a bad signature: 401
            ("POST", h.path, b"{not json", headers),  # 400
            ("POST", h.path, signed, headers | {"content-type": "image/png"}),  # 415
            ("POST", "/hooks/awt_" + "x" * 43, signed, headers),  # an unknown token: 404
            ("POST", "/hooks/", signed, headers),  # no token
            ("POST", h.path + "/extra", signed, headers),  # the path converter takes the rest: a malformed token
            ("POST", h.path + "%0A", signed, headers),  # a newline the route's pattern does not cross
            ("GET", h.path, b"", {}),  # no GET handshake: 405 from the ingress
            ("HEAD", h.path, b"", {}),
            ("PUT", h.path, signed, headers),  # not an ingress method: the router's 405
            ("POST", "/hooksx", signed, headers),
            ("GET", "/healthz", b"", {}),
        ]

    answers: dict[str, list[tuple[int, Any, dict[str, str]]]] = {}
    for label, app in (("direct", direct), ("plain", plain)):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://hooks.test") as http:
            got = []
            for method, path, body, headers in requests(label):
                answer = await http.request(method, path, content=body, headers=headers)
                assert answer.headers.get("x-request-id"), (label, method, path)
                got.append(_shape(answer))
            answers[label] = got
    assert [status for status, _, _ in answers["direct"]][:6] == [200, 200, 401, 400, 415, 404]
    assert answers["direct"][0][1]["status"] == "accepted" and answers["direct"][1][1]["status"] == "duplicate"
    assert answers["direct"] == answers["plain"]


@pytest.mark.parametrize("root_path", ["", "/edge"])
async def test_a_webhook_on_either_path_is_accepted_and_its_token_never_logged(
        ctx: Context, root_path: str, caplog: pytest.LogCaptureFixture) -> None:
    h = await kit.hook(ctx)
    app = gateway_app.create_app(ctx)
    raw, headers = kit.github({"action": "opened"})
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, root_path=root_path)
    with caplog.at_level("INFO", logger="hookgate.access"):
        async with httpx.AsyncClient(transport=transport, base_url="http://hooks.test") as http:
            answer = await http.post(root_path + h.path, content=raw, headers=headers)
    assert answer.status_code == 200, answer.text
    assert json.loads(answer.content)["status"] == "accepted"
    lines = [r for r in caplog.records if r.name == "hookgate.access"]
    assert lines and all(h.token not in str(r.__dict__) for r in lines)
    # Under a root path the request goes through the stack, where the token is masked by its shape instead.
    assert [r.__dict__["path"] for r in lines] == [root_path + access.REDACTED_HOOK_PATH]
