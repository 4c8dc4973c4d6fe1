"""Runner liveness through PostgreSQL: a scheduler holds an advisory lock for its whole life (ARCHITECTURE §8).

Each scheduler holds, on one dedicated session, the session-level advisory lock ``(LOCK_SPACE, key)`` and
writes ``key`` on every execution it claims or takes over (``runner_lock``). When its process dies,
PostgreSQL ends the session and drops the lock, so the next tick of any scheduler fails the execution
``runner_gone`` and retries it as the same plan (``cron_sweep_gone``) instead of waiting for
``stale_after``, which stays the fallback for a session that lingers.

The key is random per process life rather than derived from the runner id: a restarted process often gets
the same ``host:pid`` back (pid 1 of a restarted container), and a key derived from it would make its dead
predecessor's executions look alive, in exactly the crash-and-restart case this is for.
"""

from __future__ import annotations

import asyncio
import logging
import secrets

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from hookgate import database
from hookgate.database import Conn
from scheduler.spec import SchedulerError
from sql import Q

log = logging.getLogger("hookgate.scheduler")

#: The first key of every liveness lock ("hglv"). They are two-int advisory locks (objsubid 2 in pg_locks),
#: so no one-bigint lock, such as ``hookgate.migrations.MIGRATION_LOCK_KEY``, can be taken for one.
LOCK_SPACE = 0x68676C76
#: How many random keys to try before giving up (another live session holding one is already unlikely).
_KEY_TRIES = 8
#: What a lost or unreachable session raises, or running out of keys.
_ERRORS: tuple[type[Exception], ...] = (*database.DATABASE_ERRORS, SchedulerError)


def new_key() -> int:
    """A random positive 31-bit key.

    Two runners drawing the same key is harmless: ``pg_try_advisory_lock`` refuses the second one, which
    draws again; a dead runner whose key a live one drew later only looks alive (``stale_after`` applies).
    """
    return secrets.randbelow(2**31 - 1) + 1


class Liveness:
    """One runner's liveness lock on a dedicated session: ``ensure()`` before claiming, ``close()`` at the end.

    The session is a direct connection when a DSN is given (the service), else one borrowed from the pool
    for as long as the lock is held (in-process tests).
    """

    def __init__(self, pool: asyncpg.Pool, dsn: str | None = None, *, name: str = "hookgate scheduler",
                 timeout: float = 5.0) -> None:
        self.pool, self.dsn, self.name, self.timeout = pool, dsn, name, timeout
        self.key = new_key()
        self._conn: Conn | None = None
        self._guard = asyncio.Lock()  # ensure() and close() from different tasks (a tick and stop())

    @property
    def held(self) -> bool:
        """Whether the session was there at the last look (it may have ended since; ``ensure()`` checks)."""
        return self._conn is not None and not self._conn.is_closed()

    async def ensure(self) -> bool:
        """Hold the lock now: check the session with a round trip, reopen and re-lock it if it ended.

        False when it cannot be held right now (database unreachable): the caller must not claim.
        """
        async with self._guard:
            if self._conn is not None:
                try:
                    await self._conn.fetchval(Q.server_ping, timeout=self.timeout)
                    return True
                except _ERRORS as exc:
                    log.warning("liveness session lost; taking the lock again", extra={"error": str(exc)})
                    await self._drop()
            try:
                self._conn = await self._open()
                await self._lock(self._conn)
            except _ERRORS as exc:
                log.warning("cannot hold the liveness lock; not claiming", extra={"error": str(exc)})
                await self._drop()
                return False
            return True

    async def close(self) -> None:
        """Release the lock (end the session, or unlock and give the connection back to the pool)."""
        async with self._guard:
            await self._drop()

    async def _open(self) -> Conn:
        if self.dsn is not None:
            return await database.connect(self.dsn, timeout=self.timeout,
                                          server_settings={"application_name": self.name[:63]})
        conn: Conn = await self.pool.acquire(timeout=self.timeout)
        return conn

    async def _lock(self, conn: Conn) -> None:
        for _ in range(_KEY_TRIES):
            if await conn.fetchval(Q.cron_runner_lock, LOCK_SPACE, self.key, timeout=self.timeout):
                return
            # A live session holds this key. Rows claimed under our previous key (if this is a reconnect)
            # now look dead and are retried; their lease tokens refuse our late writes.
            self.key = new_key()
        raise SchedulerError(f"no free liveness key after {_KEY_TRIES} tries")

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not isinstance(conn, PoolConnectionProxy):
            try:
                await conn.close(timeout=self.timeout)
            except _ERRORS:
                conn.terminate()
            return
        # The pool resets nothing on release (hookgate.database.keep_session): the lock must not travel
        # back into the pool with the connection, so unlock it, or throw the connection away.
        try:
            await conn.fetchval(Q.cron_runner_unlock, LOCK_SPACE, self.key, timeout=self.timeout)
        except _ERRORS:
            conn.terminate()
        await self.pool.release(conn)
