"""A trigger's own success reply: what `accepted` and `duplicate` deliveries are answered instead of the receipt.

Some senders read the answer: Twilio wants TwiML or an empty body, a Slack slash command shows the text to
its user. A reply is a status (200, 201, 202 or 204), a content type and a body of at most 4 KiB (none with
204), validated on save. Every other outcome keeps its JSON answer, and the delivery's id still travels in
the `Hookgate-Delivery-Id` header.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["MAX_BODY", "SuccessReply"]

MAX_BODY = 4096
"""Bytes of a reply's body, UTF-8 encoded."""
_TOKEN = r"[A-Za-z0-9!#$&^_.+-]+"
_MEDIA_TYPE = rf"^{_TOKEN}/{_TOKEN}(; ?[A-Za-z0-9_-]+=[A-Za-z0-9_.-]+)*$"


class SuccessReply(BaseModel):
    """`{"status", "content_type", "body"}`: the answer to an accepted or duplicate delivery."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    status: Literal[200, 201, 202, 204] = Field(default=200, json_schema_extra={"minimum": 200, "maximum": 204})
    content_type: str = Field(default="text/plain", max_length=200, pattern=_MEDIA_TYPE)
    """A media type with optional parameters (`text/xml`, `application/json; charset=utf-8`)."""
    body: str = Field(default="", max_length=MAX_BODY)

    @model_validator(mode="after")
    def _fits(self) -> SuccessReply:
        if len(self.body.encode()) > MAX_BODY:
            raise ValueError(f"body: at most {MAX_BODY} bytes as UTF-8")
        if self.status == 204 and self.body:
            raise ValueError("body: a 204 reply has no body")
        return self

    def encoded(self) -> tuple[int, bytes, bytes]:
        """Status, body bytes and content type as sent."""
        return self.status, self.body.encode(), self.content_type.encode()
