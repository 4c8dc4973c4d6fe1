"""Real HTTP on a loopback port: a Starlette app in the test's own event loop, or a request handler in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
from collections.abc import AsyncIterator, Iterator

import uvicorn
from starlette.applications import Starlette


@contextlib.asynccontextmanager
async def serving_app(app: Starlette, port: int = 0) -> AsyncIterator[str]:
    """Uvicorn serving ``app`` on 127.0.0.1 (``port`` 0: a free one) until the block ends; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", access_log=False,
                                           log_config=None, timeout_graceful_shutdown=1))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]  # pytest keeps its signals
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # it could not start: raise why
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = server.force_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 5)


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that does not log each request to stderr."""

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving_thread(server: http.server.ThreadingHTTPServer) -> Iterator[str]:
    """``server`` serving in a daemon thread until the block ends; yields its base URL."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
