"""Connection pools and per-connection setup; the only place that opens connections to PostgreSQL."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar
from urllib.parse import parse_qs, urlsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from hookgate import jsontext
from hookgate.errors import HookgateError
from hookgate.settings import ConfigError
from sql import Q

#: Any connection a store function accepts: a direct one or one borrowed from a pool.
Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"


log = logging.getLogger("hookgate.database")
T = TypeVar("T")

#: SQLSTATEs of a transaction PostgreSQL aborted because of a concurrent one, not because of anything in it:
#: serialization_failure (40001) and deadlock_detected (40P01). The same transaction run again can succeed.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
#: SQLSTATE classes that mean "the database cannot serve us now", not "this statement is wrong": connection
#: exception (08), insufficient resources (53: too many connections, disk full), operator intervention (57:
#: shutdown, cannot connect now, statement cancelled) and system error (58).
UNAVAILABLE_SQLSTATE_CLASSES = ("08", "53", "57", "58")
#: Raised by the client when the database is out of reach (InternalClientError: a FATAL the server sent unasked,
#: e.g. after pg_terminate_backend, found while the next statement is sent or a pooled connection is released).
CLIENT_ERRORS: tuple[type[Exception], ...] = (OSError, TimeoutError, asyncpg.InterfaceError,
                                               asyncpg.InternalClientError)
#: Everything work on the database can raise that is the database's, not a bug of ours: a loop logs it and goes on.
DATABASE_ERRORS: tuple[type[Exception], ...] = (asyncpg.PostgresError, *CLIENT_ERRORS)
#: The asyncpg classes of the unavailable SQLSTATE classes, for handlers chosen by class (the HTTP edge's);
#: an SQLSTATE asyncpg does not know is an ``UnknownPostgresError``, which only :func:`is_unavailable` sees.
UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    asyncpg.PostgresConnectionError, asyncpg.InsufficientResourcesError, asyncpg.OperatorInterventionError,
    asyncpg.PostgresSystemError, *CLIENT_ERRORS,
)


class MissingRow(HookgateError, LookupError):
    """A statement that must return a row returned none (the row vanished or a guard did not match)."""


def one(row: asyncpg.Record | None) -> asyncpg.Record:
    """The row a statement must have returned."""
    if row is None:
        raise MissingRow("statement returned no row")
    return row


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` is a deadlock or a serialization failure (by SQLSTATE): run the transaction again."""
    return isinstance(exc, asyncpg.PostgresError) and exc.sqlstate in RETRYABLE_SQLSTATES


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database cannot serve right now (by SQLSTATE class), not that a statement failed."""
    if isinstance(exc, asyncpg.PostgresError):
        return str(exc.sqlstate or "")[:2] in UNAVAILABLE_SQLSTATE_CLASSES
    return isinstance(exc, CLIENT_ERRORS)


async def retrying(work: Callable[[], Awaitable[T]], *, attempts: int, pause_s: float) -> T:
    """Run ``work`` up to ``attempts`` times while it fails retryably; the last failure is raised.

    ``work`` must be a whole transaction (or statements each safe to repeat): when it raises, what it did is
    rolled back. The pause before retry n (from 0) is random in [0, ``pause_s`` * 2^n), so the transactions
    that collided do not meet again in lockstep.
    """
    for n in range(attempts - 1):
        try:
            return await work()
        except asyncpg.PostgresError as exc:
            if not is_retryable(exc):
                raise
            log.info("transaction lost a conflict; running it again", extra={"sqlstate": exc.sqlstate})
        await asyncio.sleep(random.uniform(0, pause_s * 2**n))
    return await work()


#: ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``, made once: ``dumps`` with any keyword
#: argument builds a new encoder per call, a measurable share of a batch's parameter encoding.
_encode = jsontext.compact_encoder(allow_nan=True)


def _dumps(value: Any) -> bytes:
    return _encode(value).encode()


def _jsonb_dumps(value: Any) -> bytes:
    return _JSONB_VERSION + _encode(value).encode()


def _jsonb_loads(data: bytes) -> Any:
    return json.loads(data[1:])  # after the version byte


#: jsonb's binary wire format is a version byte (1) and the JSON text.
_JSONB_VERSION = b"\x01"


async def init_connection(conn: Conn, *, pooled: bool = False) -> None:
    """JSON codecs for json/jsonb on every connection, and the array types of the batched statements learnt.

    The codecs use the binary wire format: with a text-format codec asyncpg sends a ``jsonb[]`` parameter
    as an array literal, quoting and escaping every character of every document, which was the largest
    single cost of the ingress batch statement (docs/BENCHMARKS.md).

    Through a transaction-mode pooler (``pooled``) the types are learnt by running the statement (unnamed, all
    NULL) in a transaction: ``conn.prepare`` would name it on whichever server connection the pooler lends,
    where it stays and clashes with the same name prepared there by another process; and asyncpg's catalog
    lookup switches ``jit`` off for its own query with a session ``set_config``, which holds on the lookup's
    server connection only inside a transaction (else the query ran JIT-compiled elsewhere: 5 s, measured).
    """
    await conn.set_type_codec("json", encoder=_dumps, decoder=json.loads, schema="pg_catalog", format="binary")
    await conn.set_type_codec("jsonb", encoder=_jsonb_dumps, decoder=_jsonb_loads, schema="pg_catalog",
                              format="binary")
    if not pooled:
        await conn.prepare(Q.connection_learn_types)
        return
    async with conn.transaction():
        await conn.fetch(Q.connection_learn_types, *[None] * 9)


async def keep_session(conn: Conn) -> None:
    """Pool release hook: no reset query (asyncpg still rolls back an open transaction itself).

    Pooled connections carry no session state here (no session SET, LISTEN or advisory lock: LISTEN and
    migrations use direct connections), so asyncpg's default ``RESET ALL; UNLISTEN *; …`` would only cost a
    round trip per release, which the dispatch hot path measured at ~15 % of a worker's CPU.
    """


def read_write(dsn: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` asking for a session that accepts writes, unless the caller, URL or ``PGTARGETSESSIONATTRS`` chose.

    Hookgate writes on every connection. With several hosts in the URL (``h1:5432,h2:5432``, for failover)
    asyncpg takes the first host that answers, a standby included, where every write would fail; with
    ``read-write`` it skips standbys (on PostgreSQL ≥ 14 without a round trip: the server reports it).
    """
    query = parse_qs(urlsplit(dsn).query)
    if "target_session_attrs" in kwargs or "target_session_attrs" in query or os.environ.get("PGTARGETSESSIONATTRS"):
        return kwargs
    return {**kwargs, "target_session_attrs": "read-write"}


async def create_pool(dsn: str, *, min_size: int = 2, max_size: int = 20, pooler: bool = False,
                      **kwargs: Any) -> asyncpg.Pool:
    """A pool whose connections speak JSON natively; statements are prepared and cached per connection.

    ``pooler``: ``dsn`` is a transaction-mode pooler's (PgBouncer), whose server connections change hands
    between transactions: no statement cache (each statement is parsed again, unnamed, in the round trip that
    runs it) and nothing named prepared.
    """
    if pooler:
        kwargs["statement_cache_size"] = 0
    pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=functools.partial(init_connection, pooled=pooler),
        reset=keep_session, max_inactive_connection_lifetime=300, **read_write(dsn, kwargs),
    )
    assert pool is not None
    return pool


async def connect(dsn: str, **kwargs: Any) -> asyncpg.Connection:
    """One direct connection (LISTEN, migrations, admin work) with the same codecs as the pool."""
    conn: asyncpg.Connection = await asyncpg.connect(dsn, **read_write(dsn, kwargs))
    await init_connection(conn)
    return conn


def describe_connect_error(exc: BaseException) -> str:
    """One line saying why the database could not be reached, with no secret from the URL."""
    if isinstance(exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError):
        return f"database refused the credentials: {exc}"
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"database does not exist: {exc}"
    if isinstance(exc, asyncpg.TargetServerAttributeNotMatched):
        return "no server in the database URL accepts writes (only standbys answered)"
    if isinstance(exc, socket.gaierror):
        return "database host name does not resolve"
    if isinstance(exc, ConnectionRefusedError | OSError):
        return f"database is unreachable ({exc.__class__.__name__}: {exc.strerror or exc})"
    if isinstance(exc, TimeoutError):
        return "database did not answer in time"
    if isinstance(exc, ValueError):
        return f"database URL is malformed: {exc}"
    return f"database connection failed: {exc.__class__.__name__}"


#: What opening a connection raises when it cannot (ValueError: a malformed URL).
_CONNECT_ERRORS: tuple[type[Exception], ...] = (*DATABASE_ERRORS, ValueError)


async def check_reachable(dsn: str, timeout: float = 5.0) -> None:
    """Open and close one connection, raising ConfigError with a one-line reason on failure."""
    try:
        conn = await asyncpg.connect(dsn, **read_write(dsn, {"timeout": timeout}))
    except _CONNECT_ERRORS as exc:
        raise ConfigError(describe_connect_error(exc)) from None
    await conn.close()


async def detect_pooler(dsn: str, timeout: float = 5.0) -> bool:
    """Whether a pooler (PgBouncer, …) answers at ``dsn`` in PostgreSQL's place.

    A pooler hands its clients a backend key of its own making (it cancels queries for them on whichever server
    connection they hold), so the process id in it is not the one of the backend that runs our statements;
    PostgreSQL's own key names its backend. The mode of the pool cannot be seen: found, it is taken to be
    transaction mode (the one that needs care). No statement cache: nothing named is left on a server connection.
    """
    try:
        conn = await asyncpg.connect(dsn, **read_write(dsn, {"timeout": timeout, "statement_cache_size": 0}))
    except _CONNECT_ERRORS as exc:
        raise ConfigError(describe_connect_error(exc)) from None
    try:
        return bool(conn.get_server_pid() != await conn.fetchval(Q.server_backend_pid, timeout=timeout))
    finally:
        await conn.close()
