import pytest

from sql import Q, QueryFileError, load_queries, parse_queries


def test_every_query_file_loads_with_unique_object_verb_names():
    queries = load_queries()
    assert len(queries) >= 20
    for name, query in queries.items():
        assert query.doc, f"{name} has no description comment"
        assert "_" in name, f"{name} is not object_verb"


async def test_every_named_query_prepares_against_the_migrated_database(conn):
    failures = {}
    for name, query in load_queries().items():
        try:
            await conn.prepare(query.text)
        except Exception as exc:  # any error is a broken query
            failures[name] = f"{exc.__class__.__name__}: {exc}"
    assert not failures, failures


def test_loader_refuses_duplicates_and_sql_without_a_header():
    with pytest.raises(QueryFileError):
        parse_queries("SELECT 1;\n-- name: a_b\nSELECT 2;", "x.sql")
    with pytest.raises(QueryFileError):
        parse_queries("-- name: a_b\n-- only a comment\n", "x.sql")
    parsed = parse_queries("-- name: a_b\n-- does a thing. $1 = id.\nSELECT $1::int;\n", "x.sql")
    assert parsed[0].text == "SELECT $1::int" and parsed[0].doc == "does a thing. $1 = id."


def test_attribute_access_returns_sql_and_unknown_names_raise():
    assert Q.server_ping.strip() == "SELECT 1"
    with pytest.raises(AttributeError):
        _ = Q.no_such_query
