"""Body parsing and the run envelope (ARCHITECTURE §4 step 5)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.envelope import (
    BodyError,
    InvalidBody,
    UnsupportedMediaType,
    body_format,
    build_envelope,
    envelope_text,
    media_type,
    parse_body,
    parse_body_with_text,
)

FORM = "application/x-www-form-urlencoded"


# -- JSON ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON;charset=UTF-8",
        "application/vnd.github+json",
        "application/cloudevents+json; charset=utf-8",
        None,
        "",
    ],
)
def test_json_object_is_accepted_for_json_types_and_missing_content_type(content_type: str | None) -> None:
    assert parse_body(b'{"a": 1}', content_type) == {"a": 1}


def test_json_array_body_is_kept_as_a_list() -> None:
    assert parse_body(b'[{"id": 1}, {"id": 2}]', "application/json") == [{"id": 1}, {"id": 2}]


def test_utf8_bom_is_ignored() -> None:
    assert parse_body(b'\xef\xbb\xbf{"caf\xc3\xa9": true}', "application/json") == {"café": True}


@pytest.mark.parametrize("raw", [b"", b"   \n\t", b"\xef\xbb\xbf", b"\xef\xbb\xbf  "])
def test_empty_body_is_invalid(raw: bytes) -> None:
    with pytest.raises(InvalidBody) as caught:
        parse_body(raw, "application/json")
    assert caught.value.code == "invalid_body"
    assert caught.value.detail == "empty body"


@pytest.mark.parametrize("raw", [b"1", b'"text"', b"true", b"null", b"3.5"])
def test_scalar_json_is_invalid(raw: bytes) -> None:
    with pytest.raises(InvalidBody, match="object or an array"):
        parse_body(raw, "application/json")


@pytest.mark.parametrize("raw", [b"{", b'{"a": 1,}', b"{'a': 1}", b'{"a": 1} junk', b"NaN", b'{"a": NaN}'])
def test_invalid_json_is_invalid_body(raw: bytes) -> None:
    with pytest.raises(InvalidBody):
        parse_body(raw, "application/json")


def test_infinity_is_not_json() -> None:
    with pytest.raises(InvalidBody, match="unsupported number"):
        parse_body(b'{"a": Infinity}', "application/json")


def test_json_nested_too_deeply_is_invalid_not_a_crash() -> None:
    with pytest.raises(InvalidBody, match="nested too deeply"):
        parse_body(b"[" * 200_000 + b"]" * 200_000, "application/json")


def test_invalid_json_detail_never_echoes_the_body() -> None:
    secret_looking = b'{"token": "sk_live_' + b"x" * 5000 + b'"'  # unterminated object
    with pytest.raises(InvalidBody) as caught:
        parse_body(secret_looking, "application/json")
    assert "sk_live" not in caught.value.detail
    assert len(caught.value.detail) < 100


def test_missing_content_type_with_a_non_json_body_is_invalid_body_not_415() -> None:
    with pytest.raises(InvalidBody):
        parse_body(b"a=1&b=2", None)


@pytest.mark.parametrize("raw", [b'{"a": "\xff"}', b'{"a": "\xc3"}', b"\xfe\xff\x00{"])
def test_invalid_utf8_is_invalid_body(raw: bytes) -> None:
    with pytest.raises(InvalidBody, match="UTF-8"):
        parse_body(raw, "application/json")


def test_charset_parameter_is_accepted_and_body_is_read_as_utf8() -> None:
    assert parse_body('{"n": "ü"}'.encode(), "application/json; charset=ISO-8859-1") == {"n": "ü"}


# -- media types ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["multipart/form-data; boundary=x", "application/jsonx", "+json", "application/octet-stream", "image/png"],
)
def test_other_content_types_are_unsupported(content_type: str) -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        parse_body(b'{"a": 1}', content_type)
    assert caught.value.code == "unsupported_media_type"
    assert isinstance(caught.value, BodyError)


def test_unsupported_media_type_wins_over_an_empty_body() -> None:
    with pytest.raises(UnsupportedMediaType):
        parse_body(b"", "application/octet-stream")


@pytest.mark.parametrize("content_type", ["text/plain", "text/xml; charset=utf-8", "application/xml",
                                          "application/atom+xml", "text/csv"])
def test_text_and_xml_bodies_are_kept_as_their_text(content_type: str) -> None:
    raw = b'\xef\xbb\xbf<Response a="1">caf\xc3\xa9 {"not": "parsed"}</Response>'
    assert parse_body(raw, content_type) == '<Response a="1">café {"not": "parsed"}</Response>'
    envelope = build_envelope("x", parse_body(raw, content_type), datetime(2024, 1, 1, tzinfo=UTC), content_type)
    assert envelope["request"]["format"] == "text"


@pytest.mark.parametrize(("raw", "content_type"), [(b"", "text/plain"), (b"  \n", "application/xml"),
                                                   (b"\xff\xfe", "text/plain")])
def test_an_empty_or_undecodable_text_body_is_invalid(raw: bytes, content_type: str) -> None:
    with pytest.raises(InvalidBody):
        parse_body(raw, content_type)


# -- forms ----------------------------------------------------------------------------------------------


def test_form_becomes_an_object_of_strings() -> None:
    raw = b"From=%2B12349013030&Body=hello+world&Empty="
    assert parse_body(raw, FORM) == {"From": "+12349013030", "Body": "hello world", "Empty": ""}


def test_form_with_charset_parameter_is_accepted() -> None:
    assert parse_body(b"a=1", FORM + "; charset=utf-8") == {"a": "1"}


def test_form_repeated_keys_keep_every_value_in_order() -> None:
    assert parse_body(b"tag=b&x=1&tag=a&tag=c", FORM) == {"tag": ["b", "a", "c"], "x": "1"}


def test_form_with_percent_encoded_invalid_utf8_is_invalid_body() -> None:
    with pytest.raises(InvalidBody, match="UTF-8"):
        parse_body(b"a=%FF", FORM)


def test_empty_form_is_invalid_body() -> None:
    with pytest.raises(InvalidBody, match="empty"):
        parse_body(b"", FORM)


def test_slack_interactivity_payload_field_is_parsed_as_the_object() -> None:
    inner = {"type": "block_actions", "user": {"id": "U1"}, "actions": [{"action_id": "approve"}]}
    raw = urlencode({"payload": json.dumps(inner)}).encode()
    assert parse_body(raw, FORM) == inner


def test_form_payload_field_that_is_not_json_stays_a_form() -> None:
    assert parse_body(b"payload=hello", FORM) == {"payload": "hello"}
    assert parse_body(b"payload=42", FORM) == {"payload": "42"}


def test_payload_field_next_to_other_fields_stays_a_form() -> None:
    raw = urlencode({"payload": '{"a": 1}', "other": "x"}).encode()
    assert parse_body(raw, FORM) == {"payload": '{"a": 1}', "other": "x"}


def test_form_with_bom_is_parsed() -> None:
    assert parse_body(b"\xef\xbb\xbfa=1", FORM) == {"a": "1"}


# -- envelope -------------------------------------------------------------------------------------------


def test_envelope_shape_and_utc_rfc3339_time() -> None:
    received = datetime(2024, 5, 1, 14, 30, 5, 123456, tzinfo=timezone(timedelta(hours=2)))
    envelope = build_envelope("github.push", {"ref": "main"}, received, "application/json")
    assert envelope == {
        "event": "github.push",
        "payload": {"ref": "main"},
        "request": {"received_at": "2024-05-01T12:30:05.123456Z", "content_type": "application/json",
                    "format": "json"},
    }


def test_envelope_keeps_array_payload_and_missing_content_type() -> None:
    envelope = build_envelope("webhook.received", [1, 2], datetime(2024, 1, 1, tzinfo=UTC), None)
    assert envelope["payload"] == [1, 2]
    assert envelope["request"]["content_type"] is None
    assert envelope["request"]["received_at"] == "2024-01-01T00:00:00.000000Z"


def test_envelope_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        build_envelope("e", {}, datetime(2024, 1, 1), None)


def test_envelope_is_json_serialisable() -> None:
    payload = parse_body(b'{"a": [1, {"b": null}]}', "application/json")
    envelope = build_envelope("e", payload, datetime.now(UTC), "application/json")
    assert json.loads(json.dumps(envelope)) == envelope


# -- properties -----------------------------------------------------------------------------------------

content_types = st.sampled_from(
    [None, "", "application/json", "application/x-www-form-urlencoded", "text/plain", "application/a+json",
     "application/xml", "image/png"]
)


@given(raw=st.binary(max_size=300), content_type=content_types)
def test_parse_body_gives_object_or_array_or_text_or_a_body_error(raw: bytes, content_type: str | None) -> None:
    try:
        parsed = parse_body(raw, content_type)
    except BodyError as exc:
        assert exc.code in ("invalid_body", "unsupported_media_type")
        assert len(exc.detail) < 120
    else:
        # Text and XML are kept as the text they are; everything else parses to an object or an array.
        text = body_format(media_type(content_type)) == "text"  # body_format takes a media type, never None
        assert isinstance(parsed, str if text else dict | list)
        if text:
            assert parsed.encode() == raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM is dropped


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(value=st.dictionaries(st.text(), json_values, max_size=5) | st.lists(json_values, max_size=5))
def test_any_json_object_or_array_round_trips(value: dict[str, object] | list[object]) -> None:
    assert parse_body(json.dumps(value).encode(), "application/json") == value


# -- the envelope as JSON text ----------------------------------------------------------------------------

#: Bodies whose own text is stored as the payload: duplicate keys, escapes, a surrogate pair, a big integer,
#: -0, whitespace and a BOM; each must make the same jsonb as the parsed payload encoded again.
EXACT_BODIES = [
    b'{"a": 1, "a": 2, "b": [true, false, null, -0, 123456789012345678901234567890]}',
    b'{"s": "\\u00e9\\ud83d\\ude00 \\" \\\\ \\n", "t": "\xc3\xa9"}',
    b'\xef\xbb\xbf \n [ {"z": {}}, [], "x" ] \n',
]
#: Bodies encoded again instead: a number with a fraction or an exponent, a form, a text body.
ENCODED_BODIES = [(b'{"f": 1.10}', "application/json"), (b'{"e": 1e2}', None), (b"a=1&a=2", FORM),
                  (b"<x/>", "application/xml")]


@pytest.mark.parametrize("raw", EXACT_BODIES)
def test_json_body_text_is_kept_when_it_denotes_the_payload_exactly(raw: bytes) -> None:
    payload, text = parse_body_with_text(raw, "application/json")
    assert text == raw.removeprefix(b"\xef\xbb\xbf").decode() and payload == parse_body(raw, "application/json")


@pytest.mark.parametrize(("raw", "content_type"), ENCODED_BODIES)
def test_a_fraction_an_exponent_a_form_or_text_is_encoded_again(raw: bytes, content_type: str | None) -> None:
    payload, text = parse_body_with_text(raw, content_type)
    assert text is None and payload == parse_body(raw, content_type)


@pytest.mark.parametrize(("raw", "content_type"), [(raw, "application/json") for raw in EXACT_BODIES]
                         + ENCODED_BODIES)
async def test_envelope_text_is_the_same_jsonb_as_the_envelope_encoded(conn, raw: bytes,
                                                                       content_type: str | None) -> None:
    payload, text = parse_body_with_text(raw, content_type)
    envelope = build_envelope("github.issues.opened", payload, datetime.now(UTC), content_type)
    assert json.loads(envelope_text(envelope, text)) == envelope
    assert await conn.fetchval("SELECT $1::text::jsonb = $2::jsonb", envelope_text(envelope, text), envelope)
    assert await conn.fetchval("SELECT $1::text::jsonb::text = $2::jsonb::text", envelope_text(envelope, text),
                               envelope)
