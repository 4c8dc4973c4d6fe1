"""The ``hookgate`` command: run roles (serve, gateway, worker, scheduler), migrate, bootstrap, admin verbs.

Also ``listen`` (a pull runtime forwarding to a local URL) and ``completion``. Every flag has an environment
variable (``HOOKGATE_…``), named in ``--help``. Every error is one line, ``hookgate: error: …``, with exit
code 2 for bad input, configuration or a port already in use.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

from hookgate import admin_client, cli_file, completion, durability, listen, logs, send
from hookgate.context import Context, keyring_for, open_context, open_database
from hookgate.migrations import MigrationError
from hookgate.service import Service, handle_signals, run_services
from hookgate.settings import MAX_GATEWAY_WORKERS, ConfigError, Settings, load_settings

FIRST_KEY_FILE = "first-owner-key"
"""Where ``serve`` puts the first owner key when stdout is not a terminal (in the data dir)."""

log = logging.getLogger("hookgate.cli")
CLIENT_COMMANDS = ("listen", "send", "completion")
"""Commands that only talk HTTP (besides the admin verbs): they read no server settings and log nothing."""
#: What ``serve`` on its embedded database allows agents on when HOOKGATE_AGENT_ALLOW_CIDRS is unset.
EMBEDDED_AGENT_ALLOW = ["127.0.0.0/8", "::1/128"]

EPILOG = """\
environment:
  HOOKGATE_DATABASE_URL   PostgreSQL URL; unset = embedded PostgreSQL in HOOKGATE_DATA_DIR
  HOOKGATE_DIRECT_DATABASE_URL   URL for LISTEN, locks and migrations, straight to PostgreSQL when
                          HOOKGATE_DATABASE_URL is a PgBouncer's (default HOOKGATE_DATABASE_URL)
  HOOKGATE_POOLER         none, transaction (HOOKGATE_DATABASE_URL is a transaction-mode pooler's)
                          or detect (default detect)
  HOOKGATE_DATA_DIR       embedded database and generated secret key (default ./.hookgate)
  HOOKGATE_SECRET_KEY     base64 of 32 bytes encrypting secrets at rest (generated in embedded mode)
  HOOKGATE_PUBLIC_URL     base of the webhook URLs shown to admins (default http://<host>:<port>)
  HOOKGATE_HOST, HOOKGATE_PORT   HTTP bind address (default 127.0.0.1:8080)
  HOOKGATE_GATEWAY_WORKERS   gateway processes sharing the HTTP port (default 1; --workers)
  HOOKGATE_LOG_LEVEL      debug, info, warning, error (default info)
  HOOKGATE_METRICS_PORT   /metrics port of worker and scheduler processes (gateways use their HTTP port)
  HOOKGATE_AGENT_ALLOW_CIDRS   CIDRs agents may be pushed to although loopback/private/link-local
                          (default none; serve on its embedded database: 127.0.0.0/8,::1/128)
  HOOKGATE_PUSH_RETRY_SCHEDULE   delays between attempts of a task (default 5s,1m,5m,30m,2h,5h,10h,10h)
  HOOKGATE_AGENT_TRIP_AFTER   consecutive failed pushes that make an agent unhealthy (default 5)
  HOOKGATE_URL            gateway of the client commands; unset: HOOKGATE_HOST/HOOKGATE_PORT if set, else
                          the address a running serve wrote in HOOKGATE_DATA_DIR/cli.json, else 127.0.0.1:8080
  HOOKGATE_API_KEY        hgk_ key of the admin verbs; HOOKGATE_RUNTIME_TOKEN: hgr_ token of listen
See README.md and docs/OPERATIONS.md for every setting.
"""

CLIENT_EPILOG = """
client commands:
  every admin API operation has a verb: hookgate NOUN VERB (NOUN --help lists them), e.g.
    hookgate me                                  who your key is
    hookgate autopilots get|update|archive ID    hookgate triggers update|delete|preview ID
    hookgate tasks list|get, issues list|get|update, audit list, members create, keys create|revoke
  hookgate send TRIGGER --secret S               a signed sample event of the trigger's preset
  hookgate listen --forward-to URL               a pull agent's tasks against your local app
  tables by default, the API's JSON with --json; exit 1 when the API refuses, 2 when it is not answered
"""


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, ``hookgate: error: …``, exit code 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        """Print the one error line, pointing at this command's --help."""
        admin_client.fail(f"{message} (see '{self.prog} --help')")


def _role_services(ctx: Context, roles: Sequence[str]) -> list[Service]:
    found: list[Service] = []
    if "gateway" in roles:
        from gateway.server import HttpServer

        found.append(HttpServer(ctx))
    if "worker" in roles:
        from worker.role import services as worker_services

        found.extend(worker_services(ctx))
    if "scheduler" in roles:
        from scheduler.role import services as scheduler_services

        found.extend(scheduler_services(ctx))
    if "gateway" not in roles and ctx.settings.metrics_port is not None:
        from gateway.metrics_endpoint import metrics_server

        found.append(metrics_server(ctx, ctx.settings.metrics_port))
    return found


async def _run_roles(settings: Settings, roles: Sequence[str], *, announce: bool) -> None:
    if "gateway" in roles and settings.gateway_workers > 1:
        await _run_gateway_processes(settings, roles, announce=announce)
        return
    from gateway.server import HttpServer
    from gateway.sockets import CannotListen

    with handle_signals() as stop:
        async with open_context(settings) as ctx:
            await durability.log_at_start(ctx.pool)
            services = _role_services(ctx, roles)
            http = [s for s in services if isinstance(s, HttpServer)]
            try:
                for server in http:
                    server.bind()  # a taken port fails here, before anything says "ready"
            except CannotListen as exc:
                raise ConfigError(str(exc)) from None
            with contextlib.ExitStack() as published:
                if announce:
                    await _announce(ctx, http[0].port, published)
                elif "gateway" in roles:
                    print(f"hookgate ready on http://{_shown_host(ctx.settings.host)}:{http[0].port}",
                          file=sys.stderr, flush=True)
                await run_services(services, deadline=settings.shutdown_deadline, stop=stop,
                                   on_start=_settle_garbage_collector)


async def _run_gateway_processes(settings: Settings, roles: Sequence[str], *, announce: bool) -> None:
    """``--workers N``: N gateway processes on sockets bound here; the other roles of ``roles`` run here.

    This process opens the database first (embedded server, migrations: once, not once per gateway
    process), binds, starts the gateway processes and says "ready" once every one listens
    (:mod:`gateway.processes`).
    """
    from gateway.processes import GatewayProcesses, StartFailed, gateway_argv
    from gateway.sockets import BACKLOG, CannotListen, listen_per_process

    others = [role for role in roles if role != "gateway"]
    logs.bind_process()
    with handle_signals() as stop:
        async with contextlib.AsyncExitStack() as stack:
            ctx: Context | None = None
            if others:
                ctx = await stack.enter_async_context(open_context(settings))
                await durability.log_at_start(ctx.pool)  # the gateway processes each log their own
            else:
                keyring_for(settings)  # a missing or bad secret key is one error here, not one per process
                await stack.enter_async_context(open_database(settings))
            services = _role_services(ctx, others) if ctx is not None else []
            try:
                sockets = listen_per_process(settings.host, settings.port, BACKLOG, settings.gateway_workers)
            except CannotListen as exc:
                raise ConfigError(str(exc)) from None
            for sock in (sock for group in sockets for sock in group):
                stack.callback(sock.close)
            port = int(sockets[0][0].getsockname()[1])
            # What serve changed in its settings must hold in its gateway processes too.
            env = ({} if settings.agent_allow_cidrs is None
                   else {"HOOKGATE_AGENT_ALLOW_CIDRS": ",".join(settings.agent_allow_cidrs)})
            gateways = GatewayProcesses(sockets, gateway_argv(settings.host, port), deadline=settings.shutdown_deadline,
                                        env=env)
            try:
                await gateways.start()
            except StartFailed as failed:
                if failed.code > 0:
                    raise SystemExit(failed.code) from None  # it printed its error line
                admin_client.fail(str(failed), 1)
            if announce and ctx is not None:
                await _announce(ctx, port, stack)
            else:
                print(f"hookgate ready on http://{_shown_host(settings.host)}:{port}", file=sys.stderr, flush=True)
            await run_services([gateways, *services], deadline=settings.shutdown_deadline, stop=stop,
                               on_start=_settle_garbage_collector)


async def _run_gateway_process(settings: Settings, listen_fds: Sequence[int], parent_fd: int) -> None:
    """One gateway process of ``--workers N``: serves the sockets it was handed until stopped or orphaned."""
    from gateway.processes import ParentLink, inherited_sockets
    from gateway.server import HttpServer

    logs.bind_process()
    with handle_signals() as stop:
        async with open_context(settings, migrate=False) as ctx:  # the supervisor migrated
            await durability.log_at_start(ctx.pool)
            http = HttpServer(ctx, sockets=inherited_sockets(listen_fds))
            link = ParentLink(parent_fd, http.server.listening)
            await run_services([http, link], deadline=settings.shutdown_deadline, stop=stop,
                               on_start=_settle_garbage_collector)


def _shown_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _settle_garbage_collector() -> None:
    """Keep the cyclic garbage collector off the per-request path of a long-running process.

    Everything loaded at start (modules, the app, the pool) is moved out of the collector's sight, and
    the youngest generation is collected every 20,000 allocations instead of every 700: a request
    allocates a few hundred containers that mostly die by reference counting, and under load the
    default threshold ran a collection every other request (about 8 % of the gateway's CPU in a native
    profile, docs/BENCHMARKS.md). Cycles are still collected, only less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


async def _announce(ctx: Context, port: int, stack: contextlib.ExitStack | contextlib.AsyncExitStack) -> None:
    """Once the port is bound: ``cli.json`` for the client commands (removed when ``stack`` closes), the banner.

    First start on an empty database: a workspace, its owner key shown once or filed. Bootstrapping only
    after the bind means a failed start never makes a key that nobody was shown. Every banner names the
    dashboard and the ``export HOOKGATE_URL=…`` line of the client commands.
    """
    from autopilot.workspaces import bootstrap
    from sql import Q

    base = f"http://{_shown_host(ctx.settings.host)}:{port}"
    client = cli_file.local_url(ctx.settings.host, port)
    stack.enter_context(cli_file.published(ctx.settings.data_dir, client))
    export = f"export HOOKGATE_URL={client}"
    async with ctx.pool.acquire() as conn:
        if await conn.fetchval(Q.workspace_count):
            print(f"hookgate ready on {base}; dashboard: {base}/dashboard\n  {export}", file=sys.stderr, flush=True)
            return
        boot = await bootstrap(conn, "default")
    if sys.stdout.isatty():
        print(
            f"\nHookgate is ready on {base}\n"
            f"A workspace was created. Its owner API key (shown once, keep it):\n\n  {boot.api_key}\n\n"
            f"Dashboard: {base}/dashboard (log in with that key)\nTry it:\n  curl -s {base}/readyz\n"
            f"  curl -s -H 'Authorization: Bearer {boot.api_key}' {base}/v1/me\n"
            f"  {export} HOOKGATE_API_KEY={boot.api_key}; hookgate me\n",
            flush=True,
        )
        return
    # Not a terminal: stdout goes to a log or a journal, which must never hold a key.
    path = cli_file.write_private(ctx.settings.data_dir, FIRST_KEY_FILE, boot.api_key + "\n")
    print(
        f"hookgate ready on {base}; dashboard: {base}/dashboard (log in with the owner key)\n"
        f"  a workspace was created and its owner API key written to {path} "
        f"(mode 0600; read it, keep it elsewhere, delete the file)\n  {export}",
        file=sys.stderr, flush=True,
    )


async def _migrate(settings: Settings) -> None:
    async with open_context(settings, migrate=False) as ctx:
        from hookgate import database, migrations

        conn = await database.connect(ctx.direct_dsn)  # the migrations' advisory lock is a session's
        try:
            applied = await migrations.migrate(conn)
        finally:
            await conn.close()
    print(json.dumps({"applied": applied}))


async def _bootstrap(settings: Settings, workspace: str, as_json: bool) -> None:
    from autopilot.workspaces import bootstrap

    async with open_context(settings) as ctx, ctx.pool.acquire() as conn:
        boot = await bootstrap(conn, workspace)
    if as_json:
        print(json.dumps({"workspace_id": str(boot.workspace_id), "member_id": str(boot.member_id),
                          "api_key": boot.api_key}))
    else:
        print(f"workspace {workspace} ({boot.workspace_id})\nowner {boot.member_id}\napi key {boot.api_key}")


def build_parser() -> argparse.ArgumentParser:
    """The full command tree; every command's --help reads like a manual page."""
    parser = Parser(
        prog="hookgate", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG + CLIENT_EPILOG,
        description="Hookgate: webhooks and cron schedules in, durable exactly-once runs out.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in (
        ("serve", "gateway + worker + scheduler in one process (embedded PostgreSQL if no URL)"),
        ("gateway", "HTTP only: webhook ingress, admin and runtime APIs, dashboard"),
        ("worker", "delivery and push workers (admit, dispatch, deliver to agents)"),
        ("scheduler", "the DB-backed scheduler (cron triggers, lease watchdog, maintenance)"),
    ):
        role = sub.add_parser(name, help=text, description=text, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
        if name in ("serve", "gateway"):
            role.add_argument("--host", help="bind address (env HOOKGATE_HOST, default 127.0.0.1)")
            role.add_argument("--port", type=int, help="bind port (env HOOKGATE_PORT, default 8080)")
            role.add_argument("--workers", type=_process_count, metavar="N",
                              help="gateway processes sharing the port, one per core to use (env "
                                   "HOOKGATE_GATEWAY_WORKERS, default 1: the gateway runs in this process); "
                                   "per-process limits multiply by N, see docs/SCALING.md")
        if name == "gateway":  # how --workers starts its gateway processes (gateway/processes.py); not for people
            role.add_argument("--listen-fds", type=_descriptors, help=argparse.SUPPRESS)
            role.add_argument("--parent-fd", type=int, help=argparse.SUPPRESS)
    sub.add_parser("migrate", help="apply pending database migrations and exit",
                   description="Apply pending migrations in order, each in a transaction, then the SQL function "
                               "files that changed (safe to run twice).")
    boot = sub.add_parser("bootstrap", help="create a workspace and owner if missing; print a new owner key",
                          description="Idempotent per workspace name: a second call prints a new key "
                                      "for the same owner.")
    boot.add_argument("--workspace", default="default", help="workspace name (default: default)")
    boot.add_argument("--json", action="store_true", help='print {"workspace_id","member_id","api_key"}')
    admin_client.add_commands(sub)
    listen.add_command(sub)
    send.add_command(sub)
    completion.add_command(sub)
    return parser


def _process_count(text: str) -> int:
    """``--workers``: a whole number of processes from 1 to MAX_GATEWAY_WORKERS."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_GATEWAY_WORKERS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_GATEWAY_WORKERS}, not {text!r}")
    return count


def _descriptors(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of descriptors: {text!r}") from None


def serve_defaults(settings: Settings) -> Settings:
    """Settings of ``serve``: on its embedded database, agents on loopback are allowed by default.

    That is a single-machine setup (the README's walkthrough has its agent on 127.0.0.1). A set
    HOOKGATE_AGENT_ALLOW_CIDRS, even empty, stands. Says so in one log line.
    """
    if not settings.embedded or settings.agent_allow_cidrs is not None:
        return settings
    log.info("embedded database: agents on loopback may be pushed to; set HOOKGATE_AGENT_ALLOW_CIDRS "
             "(even empty) to change this", extra={"agent_allow_cidrs": ",".join(EMBEDDED_AGENT_ALLOW)})
    return settings.model_copy(update={"agent_allow_cidrs": list(EMBEDDED_AGENT_ALLOW)})


def _dispatch(args: argparse.Namespace) -> Callable[[Settings], Any]:
    roles = {"serve": ("gateway", "worker", "scheduler"), "gateway": ("gateway",),
             "worker": ("worker",), "scheduler": ("scheduler",)}
    if args.command == "serve":
        return lambda s: _run_roles(serve_defaults(s), roles["serve"], announce=True)
    if args.command == "gateway" and args.listen_fds is not None:
        if args.parent_fd is None:
            admin_client.fail("--listen-fds goes with --parent-fd")
        return lambda s: _run_gateway_process(s, args.listen_fds, args.parent_fd)
    if args.command in roles:
        return lambda s: _run_roles(s, roles[args.command], announce=False)
    if args.command == "migrate":
        return _migrate
    return lambda s: _bootstrap(s, args.workspace, args.json)


def run_loop(kind: str, main: Coroutine[Any, Any, None]) -> None:
    """Run a server role's ``main`` on the configured event loop (``auto``: uvloop when it is installed)."""
    factory, name = None, "asyncio"
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                main.close()
                raise ConfigError("HOOKGATE_EVENT_LOOP=uvloop, but uvloop is not installed") from None
        else:
            factory, name = uvloop.new_event_loop, "uvloop"
    log.debug("event loop", extra={"event_loop": name, "configured": kind})
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``hookgate`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "admin_verb", None) is not None or args.command in CLIENT_COMMANDS:
        _client(parser, args)
        return
    overrides = {k: v for k in ("host", "port") if (v := getattr(args, k, None)) is not None}
    if getattr(args, "workers", None) is not None:
        overrides["gateway_workers"] = args.workers
    try:
        settings = load_settings(**overrides)
        logs.configure(settings.log_level)
        run_loop(settings.event_loop, _dispatch(args)(settings))
    except (ConfigError, MigrationError) as exc:
        admin_client.fail(str(exc))
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def _client(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """An HTTP client command: no server settings are read, and only warnings are logged (stderr stays quiet)."""
    logs.configure("warning")
    try:
        if args.command == "completion":
            print(completion.script(parser, args.shell), end="")
        elif args.command == "listen":
            asyncio.run(listen.run(args))
        elif args.command == "send":
            asyncio.run(send.run(args))
        else:
            asyncio.run(admin_client.run(args))
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
