import base64
import os
import stat

import pytest

from hookgate import crypto
from hookgate.settings import ConfigError, decode_secret_key


def test_encrypted_secret_round_trips_and_is_bound_to_its_context():
    ring = crypto.Keyring([os.urandom(32)])
    blob = ring.encrypt("whsec_abc", "trigger:1:signing_secret")
    assert b"whsec_abc" not in blob
    assert ring.decrypt(blob, "trigger:1:signing_secret") == "whsec_abc"
    with pytest.raises(crypto.DecryptError):
        ring.decrypt(blob, "trigger:2:signing_secret")
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(crypto.DecryptError):
        ring.decrypt(tampered, "trigger:1:signing_secret")


def test_key_rotation_previous_key_still_decrypts_new_writes_use_current():
    old, new = os.urandom(32), os.urandom(32)
    blob = crypto.Keyring([old]).encrypt("s", "c")
    rotated = crypto.Keyring([new, old])
    assert rotated.decrypt(blob, "c") == "s"
    fresh = rotated.encrypt("s", "c")
    assert fresh[1:5] == crypto.key_id(new)
    with pytest.raises(crypto.DecryptError, match="not configured"):
        crypto.Keyring([new]).decrypt(blob, "c")


def test_tokens_have_the_documented_shape():
    token = crypto.new_token("awt_")
    assert len(token) == 47 and token.startswith("awt_")
    assert crypto.token_shape_ok(token, "awt_")
    assert not crypto.token_shape_ok(token[:-1], "awt_")
    assert not crypto.token_shape_ok("hgk_" + token[4:], "awt_")
    assert not crypto.token_shape_ok(token[:-1] + "!", "awt_")
    assert not crypto.token_shape_ok(token[:-1] + "\u00e9", "awt_")  # alphanumeric, but not ASCII
    assert not crypto.token_shape_ok(token + "\n", "awt_") and not crypto.token_shape_ok(token[:-1] + "\n", "awt_")
    assert crypto.token_shape_ok("awt_" + "-_" * 21 + "Z", "awt_")
    assert crypto.digest(token) != crypto.digest(crypto.new_token("awt_"))
    assert len(crypto.digest(token)) == 32


def test_secret_key_accepts_standard_and_urlsafe_base64_of_32_bytes():
    raw = bytes(range(250, 256)) * 5 + b"\xfb\xff"
    assert decode_secret_key(base64.b64encode(raw).decode()) == raw
    assert decode_secret_key(base64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw
    for bad in ("", "not base64!!", base64.b64encode(b"short").decode()):
        with pytest.raises(ConfigError, match="32 bytes"):
            decode_secret_key(bad)


def test_embedded_key_file_is_generated_once_with_mode_0600(tmp_path):
    first = crypto.ensure_key_file(tmp_path / "data")
    assert crypto.ensure_key_file(tmp_path / "data") == first
    mode = stat.S_IMODE((tmp_path / "data" / "secret.key").stat().st_mode)
    assert mode == 0o600
    assert len(decode_secret_key(first)) == 32


def test_no_key_configured_is_a_clear_error():
    with pytest.raises(ConfigError, match="HOOKGATE_SECRET_KEY"):
        crypto.Keyring([])
