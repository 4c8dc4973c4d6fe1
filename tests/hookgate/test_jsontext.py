"""``hookgate.jsontext.unstorable``: what jsonb cannot hold is found whatever form the number or escape takes."""

from __future__ import annotations

import json

import pytest

from hookgate import jsontext

TOO_LARGE = "a number is too large to store"


@pytest.mark.parametrize("text", ['{"n":1e400}', '{"n":1E400}', '{"n":-1e+400}', '[2E+999]', '{"a":"1e5","n":9e999}',
                                  '{"n":' + "1" * 400 + ".5}"])
def test_an_infinite_number_is_found_in_every_notation(text):
    raw = text.encode()
    assert jsontext.unstorable(raw, json.loads(raw)) == TOO_LARGE


@pytest.mark.parametrize("text", ['{"n":1e5,"sha":"0e3f9a0e","word":"open"}', '{"n":1e-400}', '[1E99]',
                                  '{"n":' + "9" * 400 + "}", '{"n":123456789,"e":"eee"}', '{"s":"a%5Cb"}'])
def test_a_storable_body_passes(text):
    raw = text.encode()
    assert jsontext.unstorable(raw, json.loads(raw)) is None


@pytest.mark.parametrize("text", ['{"s":"a\\u0000b"}', '{"s":"\\ud800"}', '{"s":"\\uDBFF"}'])
def test_a_nul_or_a_lone_surrogate_is_found(text):
    raw = text.encode()
    assert jsontext.unstorable(raw, json.loads(raw)) == "text contains a NUL character or a lone surrogate"
