from hookgate.context import open_context
from tests import databases
from tests.conftest import asgi_client, make_settings


async def test_healthz_and_readyz_answer_on_a_migrated_database(client):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


async def test_readyz_is_503_while_migrations_are_pending(server_url, db_url):
    async with databases.scratch(server_url, "hg_unmigrated") as url:
        settings = make_settings(url)
        async with open_context(settings, migrate=False) as ctx:
            async with asgi_client(ctx) as http:
                answer = await http.get("/readyz")
        assert answer.status_code == 503
        assert answer.json()["error"] == "migrations_pending"


async def test_readyz_is_503_while_a_function_file_is_not_applied(client, conn):
    await conn.execute("UPDATE hookgate_functions SET checksum = 'older' WHERE name = 'hookgate_pace_take'")
    answer = await client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["error"] == "migrations_pending"
    assert answer.json()["pending"] == ["functions/hookgate_pace_take.sql"]


async def test_unknown_routes_and_methods_are_json_errors(client):
    missing = await client.get("/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    wrong = await client.post("/healthz")
    assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"
