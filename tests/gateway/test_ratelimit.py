"""Per-IP gates of the ingress: windows, debt, the memory bound, trusted-proxy client IPs."""

import ipaddress
import sys

import pytest
from starlette.datastructures import Headers

from gateway import ratelimit
from gateway.ingress.endpoint import IngressState
from gateway.ratelimit import RateGates, Window, client_address, parse_networks, rate_key
from hookgate import crypto
from tests.conftest import make_settings
from tests.gateway import ingress_kit as kit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_window_caps_each_key_and_says_when_to_retry() -> None:
    clock = Clock()
    window = Window(cap=3, window_s=60, max_keys=100, clock=clock)
    assert [window.hit(b"a") for _ in range(3)] == [None, None, None]
    clock.now += 20
    assert window.hit(b"a") == 40 and window.retry_after(b"a") == 40
    assert window.hit(b"b") is None  # keys are independent
    clock.now += 40
    assert window.hit(b"a") is None and window.retry_after(b"a") is None  # a fresh window


def test_debt_blocks_every_request_but_only_bad_credentials_add_to_it() -> None:
    clock = Clock()
    gates = RateGates(make_settings("postgresql://x/y", ip_request_cap=100, ip_bad_credential_cap=2), clock)
    one, other = _key("1.2.3.4"), _key("5.6.7.8")
    assert all(gates.admit(one) is None for _ in range(10))  # valid traffic never adds debt
    gates.charge(one)
    gates.charge(one)
    assert gates.admit(one) == 60
    assert gates.admit(other) is None
    clock.now += 61
    assert gates.admit(one) is None


def test_rate_tables_stay_bounded_under_a_flood_of_distinct_ips() -> None:
    settings = make_settings("postgresql://x/y", rate_table_size=1000, ip_bad_credential_cap=1)
    gates = RateGates(settings)
    before = sys.getsizeof(gates.requests._slots)
    for n in range(50_000):
        key = _key(f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")
        gates.admit(key)
        gates.charge(key)
    assert len(gates.requests) == 1000 and len(gates.debt) == 1000
    assert sys.getsizeof(gates.requests._slots) < before + 200_000
    # The most recent offenders are still tracked; the oldest were evicted.
    assert gates.admit(_key("10.0.195.79")) is not None and gates.admit(_key("10.0.0.1")) is None


def _key(text: str) -> bytes:
    return rate_key(ipaddress.ip_address(text))


@pytest.mark.parametrize(("peer", "headers", "expected"), [
    ("198.51.100.9", {"x-forwarded-for": "1.1.1.1"}, "198.51.100.9"),  # untrusted peer: header ignored
    ("10.0.0.5", {"x-forwarded-for": "1.1.1.1"}, "1.1.1.1"),
    ("10.0.0.5", {"x-forwarded-for": "6.6.6.6, 1.1.1.1, 10.0.0.7"}, "1.1.1.1"),  # right-most untrusted hop
    ("10.0.0.5", {"x-forwarded-for": "10.0.0.8, 10.0.0.7"}, "10.0.0.8"),
    ("10.0.0.5", {"x-forwarded-for": "not-an-ip"}, "10.0.0.5"),
    ("10.0.0.5", {"x-forwarded-for": " "}, "10.0.0.5"),
    ("10.0.0.5", {"x-forwarded-for": "::ffff:1.1.1.1"}, "1.1.1.1"),
    ("10.0.0.5", {"x-real-ip": "2001:DB8:0::1"}, "2001:db8::1"),
    ("10.0.0.5", {"x-real-ip": "fe80::1%eth0"}, "fe80::1"),
    ("10.0.0.5", {}, "10.0.0.5"),
    ("::ffff:10.0.0.5", {"x-forwarded-for": "1.1.1.1"}, "1.1.1.1"),  # a mapped peer is still trusted
    (None, {"x-forwarded-for": "1.1.1.1"}, None),
])
def test_client_address_believes_forwarded_headers_only_from_trusted_proxies(peer, headers, expected) -> None:
    address = client_address(peer, Headers(headers=headers), parse_networks(["10.0.0.0/8"]))
    assert (str(address) if address is not None else None) == expected


def test_rate_keys_are_sixteen_bytes_one_per_ipv4_address_and_per_ipv6_slash_64() -> None:
    keys = {text: _key(text) for text in ("1.2.3.4", "1.2.3.5", "2001:db8::1", "2001:db8::ffff:1", "2001:db8:0:1::1")}
    assert {len(k) for k in keys.values()} == {ratelimit.KEY_BYTES}
    assert keys["2001:db8::1"] == keys["2001:db8::ffff:1"]  # one /64
    assert len({keys["1.2.3.4"], keys["1.2.3.5"], keys["2001:db8::1"], keys["2001:db8:0:1::1"]}) == 4
    assert rate_key(None) == ratelimit.UNKNOWN_KEY and ratelimit.UNKNOWN_KEY not in keys.values()


async def test_over_the_request_cap_is_429_with_retry_after(db_url) -> None:
    async with kit.app_client(db_url, ip_request_cap=3) as (ctx, client):
        h = await kit.hook(ctx)
        for _ in range(3):
            assert (await kit.post_github(client, h, {"action": "opened"})).status_code == 200
        raw, headers = kit.github({"action": "opened"})
        r = await client.post(h.path, content=raw, headers=headers)
        assert r.status_code == 429 and r.json()["error"] == "rate_limited" and r.json()["message"]
        assert 1 <= int(r.headers["retry-after"]) <= 60


async def test_unknown_tokens_charge_debt_until_429(db_url) -> None:
    async with kit.app_client(db_url, ip_bad_credential_cap=3) as (_, client):
        statuses = [(await client.post("/hooks/" + crypto.new_token("awt_"), json={})).status_code
                    for _ in range(5)]
        assert statuses == [404, 404, 404, 429, 429]


async def test_spoofed_forwarded_for_from_an_untrusted_peer_does_not_dodge_the_gate(db_url) -> None:
    async with kit.app_client(db_url, ip_bad_credential_cap=2) as (_, client):
        statuses = [(await client.post("/hooks/awt_x", json={}, headers={"x-forwarded-for": f"9.9.9.{n}"}))
                    .status_code for n in range(3)]
        assert statuses == [404, 404, 429]


async def test_trusted_proxy_forwarded_clients_are_gated_separately(db_url) -> None:
    async with kit.app_client(db_url, ip_bad_credential_cap=2, trusted_proxies="203.0.113.0/24") as (_, client):
        def post(ip: str):
            return client.post("/hooks/awt_x", json={}, headers={"x-forwarded-for": ip})

        assert [(await post("9.9.9.1")).status_code for _ in range(3)] == [404, 404, 429]
        assert (await post("9.9.9.2")).status_code == 404  # another client behind the same proxy
        state: IngressState = client._transport.app.state.ingress  # type: ignore[attr-defined]
        assert set(state.gates.debt._slots) == {_key("9.9.9.1"), _key("9.9.9.2")}
