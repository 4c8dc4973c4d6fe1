"""A small TCP proxy between Hookgate processes and PostgreSQL that can cut and restore connections.

Runs in its own thread with its own event loop, so tests and chaos runs can drive it synchronously.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target`` (host or unix socket dir, port).

    ``cut()`` drops every open connection; ``block()`` refuses new ones until unblocked; ``freeze()`` forwards
    nothing either way and answers no new connection, closing nothing (a server whose machine vanished);
    ``freeze(answers_only=True)`` still forwards what clients send, but none of the server's answers.
    """

    def __init__(self, target_host: str, target_port: int, listen_port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.listen_port = listen_port
        self.blocked = False
        self.frozen = False
        self.answers_frozen = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="tcp-proxy")
        self._server: asyncio.Server | None = None

    def start(self) -> int:
        """Start listening; returns the port."""
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return int(self._server.sockets[0].getsockname()[1])

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._handle, "127.0.0.1", self.listen_port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.blocked:
            writer.close()
            return
        if self.frozen:  # accepted and never answered, until cut or stopped
            self._writers.add(writer)
            with contextlib.suppress(ConnectionError, OSError):
                while await reader.read(65536):
                    pass
            self._writers.discard(writer)
            writer.close()
            return
        try:
            host, port = self.target
            if host.startswith("/"):  # a PostgreSQL unix socket directory
                up_reader, up_writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
            else:
                up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer, answers=True))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, answers: bool = False) -> None:
        try:
            while data := await reader.read(65536):
                if not self.frozen and not (answers and self.answers_frozen):
                    writer.write(data)
                    await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    def cut(self) -> None:
        """Abort every open connection (both directions), as a network failure would."""
        def _cut() -> None:
            for writer in list(self._writers):
                transport = writer.transport
                transport.abort()
            self._writers.clear()
        self._loop.call_soon_threadsafe(_cut)

    @staticmethod
    async def _cancel_connections() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def block(self, blocked: bool = True) -> None:
        """Refuse (close at once) new connections while ``blocked``; existing ones are unaffected."""
        self.blocked = blocked

    def freeze(self, frozen: bool = True, *, answers_only: bool = False) -> None:
        """While ``frozen``, drop what either side sends and leave new connections unanswered; nothing is closed.

        With ``answers_only`` only the server's answers are dropped: a statement still runs (and commits), and
        its client never hears of it.
        """
        self.frozen, self.answers_frozen = (False, frozen) if answers_only else (frozen, False)

    def stop(self) -> None:
        """Close everything, finish the connection tasks (none is destroyed pending) and stop the thread."""
        self.cut()
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        asyncio.run_coroutine_threadsafe(self._cancel_connections(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
