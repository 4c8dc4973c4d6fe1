"""Cursor pagination: ``?limit=`` (default 50, max 500) and an opaque ``?cursor=``.

A cursor is the last id of the previous page, base64url-encoded so clients do not build or parse it. Each
list query takes the cursor and ``limit + 1`` rows; the extra row only says whether a next page exists.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar
from uuid import UUID

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import ApiError
from hookgate.database import Conn

T = TypeVar("T")


class PageQuery(BaseModel):
    """The paging parameters every list accepts."""

    model_config = ConfigDict(extra="ignore")

    limit: int = Field(default=50, ge=1, le=500, description="Page size (default 50, max 500)")
    cursor: str | None = Field(default=None, max_length=200, description="Opaque cursor from next_cursor")


class Page(BaseModel, Generic[T]):
    """What every list answers: a page of items and the cursor of the next page (null on the last)."""

    items: list[T]
    next_cursor: str | None


def encode(last_id: UUID | int) -> str:
    """The opaque cursor for a page ending at ``last_id``."""
    return base64.urlsafe_b64encode(str(last_id).encode()).rstrip(b"=").decode()


def _raw(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise ApiError(400, "invalid_cursor", "the cursor is not one this API returned") from None


def uuid_after(query: PageQuery) -> UUID | None:
    """The id a uuid-keyed list continues after (None for the first page); 400 if forged."""
    if query.cursor is None:
        return None
    try:
        return UUID(_raw(query.cursor))
    except ValueError:
        raise ApiError(400, "invalid_cursor", "the cursor is not one this API returned") from None


def int_after(query: PageQuery) -> int | None:
    """The id a bigint-keyed list (the audit log) continues after; 400 if forged."""
    if query.cursor is None:
        return None
    raw = _raw(query.cursor)
    if not raw.isdigit() or len(raw) > 18:
        raise ApiError(400, "invalid_cursor", "the cursor is not one this API returned")
    return int(raw)


def page(rows: Sequence[T], limit: int, render: Callable[[T], Any], key: Callable[[T], UUID | int]) -> dict[str, Any]:
    """``{"items", "next_cursor"}`` from up to ``limit + 1`` fetched rows."""
    shown = rows[:limit]
    more = len(rows) > limit
    items = [render(r) for r in shown]
    return {"items": [i.model_dump(mode="json") if isinstance(i, BaseModel) else i for i in items],
            "next_cursor": encode(key(shown[-1])) if more and shown else None}


async def fetch(conn: Conn, query: str, q: PageQuery, render: Callable[[asyncpg.Record], Any],
                *args: object) -> dict[str, Any]:
    """A page of a uuid-keyed list: ``query`` takes ``args``, then the cursor's id and ``limit + 1``."""
    rows = await conn.fetch(query, *args, uuid_after(q), q.limit + 1)
    return page(rows, q.limit, render, lambda r: r["id"])
