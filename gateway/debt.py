"""The bad-credential debt at every door: webhooks, the admin API, the runtime API and the dashboard login.

One per-IP debt per gateway process (:class:`gateway.ratelimit.RateGates`, which the ingress owns;
``HOOKGATE_IP_BAD_CREDENTIAL_CAP`` per ``HOOKGATE_RATE_WINDOW_S``), so guessing at one door counts at all of
them. Each door asks :meth:`Debtor.due` before it looks a credential up in the database (429 + Retry-After
while the address is over the cap, whatever it sends: its own step 1 for the ingress), and charges one for
each credential it refuses (missing, malformed, unknown or revoked). A valid credential never adds to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from gateway import ratelimit
from gateway.errors import ApiError
from gateway.ingress.endpoint import ingress_state

#: The ``rate_limited`` message of the APIs (the ingress answers its own fixed bytes).
MESSAGE = "too many bad credentials from this address"


@dataclass(frozen=True)
class Debtor:
    """The caller's address in its process's bad-credential debt."""

    gates: ratelimit.RateGates
    key: bytes

    def due(self) -> int | None:
        """Whole seconds to wait while the address is over its cap, else None (counts nothing)."""
        return self.gates.indebted(self.key)

    def admit(self) -> None:
        """429 ``rate_limited`` with Retry-After while the address is over its cap."""
        if (wait := self.due()) is not None:
            raise ApiError(429, "rate_limited", MESSAGE, {"Retry-After": str(wait)})

    def charge(self) -> None:
        """Add one refused credential to the address's debt."""
        self.gates.charge(self.key)

    def refuse(self, error: ApiError) -> ApiError:
        """``error`` (a refused credential) to raise, once it is charged to the address."""
        self.charge()
        return error


def gates(request: Request) -> ratelimit.RateGates:
    """The per-IP gates of the request's app (the ingress's step 1 holds them, created on first use)."""
    return ingress_state(request.app).gates


def debtor(request: Request) -> Debtor:
    """The request's client address (as the gates see it, trusted proxies included) in the debt."""
    found = gates(request)
    peer = request.client.host if request.client else None
    return Debtor(found, ratelimit.client_key(peer, request.headers, found.trusted))


def admitted(request: Request) -> Debtor:
    """The request's address in the debt, once let through: 429 + Retry-After while it is over the cap."""
    found = debtor(request)
    found.admit()
    return found
