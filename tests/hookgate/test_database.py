"""Every session Hookgate opens asks for a server that accepts writes, unless told otherwise."""

from __future__ import annotations

import asyncpg
import pytest

from hookgate import database

TWO_HOSTS = "postgresql://hookgate@db1:5432,db2:5432/hookgate"


def test_a_session_asks_for_read_write_unless_the_url_the_caller_or_the_environment_chose(monkeypatch):
    monkeypatch.delenv("PGTARGETSESSIONATTRS", raising=False)
    assert database.read_write(TWO_HOSTS, {"timeout": 5}) == {"timeout": 5, "target_session_attrs": "read-write"}
    assert database.read_write(f"{TWO_HOSTS}?target_session_attrs=any", {}) == {}
    assert database.read_write(TWO_HOSTS, {"target_session_attrs": "primary"}) == {"target_session_attrs": "primary"}
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "any")
    assert database.read_write(TWO_HOSTS, {}) == {}


def test_only_standbys_answering_is_said_in_one_line():
    exc = asyncpg.TargetServerAttributeNotMatched("None of the hosts match the target attribute requirement")
    assert database.describe_connect_error(exc) == ("no server in the database URL accepts writes "
                                                    "(only standbys answered)")


async def test_the_urls_own_choice_wins(db_url):
    separator = "&" if "?" in db_url else "?"
    with pytest.raises(asyncpg.TargetServerAttributeNotMatched):  # the test server is a primary
        await database.connect(f"{db_url}{separator}target_session_attrs=read-only", timeout=5)
