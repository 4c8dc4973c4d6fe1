"""The plans PostgreSQL runs for one connection's statements, as ``auto_explain`` logs them.

The plan tests make a connection's cached plans from the tables as they were, grow the tables, then read
the plans of the next statements: ``async with logged_plans(conn, "auto_explain.log_analyze = on") as
plans:`` collects one message per statement run inside the block (``auto_explain.log_min_duration = 0``,
plus the settings given), sent to the client at level LOG.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any


@contextlib.asynccontextmanager
async def logged_plans(conn: Any, *settings: str) -> AsyncIterator[list[str]]:
    """The plan of every statement ``conn`` runs inside the block, in order."""
    plans: list[str] = []
    conn.add_log_listener(lambda _c, message: plans.append(message.message))
    await conn.execute("LOAD 'auto_explain'")
    await conn.execute("; ".join(f"SET {s}" for s in ("auto_explain.log_min_duration = 0", *settings,
                                                     "client_min_messages = log")))
    yield plans
    await conn.execute("SET client_min_messages = notice")
