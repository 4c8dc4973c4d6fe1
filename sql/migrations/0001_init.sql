-- 0001_init: the whole data model of ARCHITECTURE §3.
-- Constraints here are the contract: the promises of ARCHITECTURE §1 are enforced by the database itself,
-- so a bug in any process can fail a statement but can never double a delivery, a run or a firing.

-- Time-ordered UUIDs (UUIDv7 layout): 48-bit unix-millisecond prefix, then random bits. Index locality
-- for append-heavy tables, and ids that sort by creation. PostgreSQL 18 has uuidv7(); 15 does not.
CREATE FUNCTION hookgate_uuid7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

-- Append-only tables refuse UPDATE, DELETE and TRUNCATE in the database, whatever the client.
CREATE FUNCTION hookgate_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Tenancy and credentials
-- ---------------------------------------------------------------------------------------------
CREATE TABLE workspace (
    id          uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    name        text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE member (
    id            uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id  uuid NOT NULL REFERENCES workspace(id),
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    email         text,
    role          text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    disabled_at   timestamptz
);
CREATE INDEX member_workspace_idx ON member (workspace_id, id);

-- API keys are stored as SHA-256 digests only; the key itself is shown once at creation.
CREATE TABLE api_key (
    id            uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id  uuid NOT NULL REFERENCES workspace(id),
    member_id     uuid NOT NULL REFERENCES member(id),
    digest        bytea NOT NULL UNIQUE CHECK (length(digest) = 32),
    hint          text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz
);
CREATE INDEX api_key_member_idx ON api_key (member_id);

-- ---------------------------------------------------------------------------------------------
-- Agents and squads
-- ---------------------------------------------------------------------------------------------
CREATE TABLE agent (
    id                   uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id         uuid NOT NULL REFERENCES workspace(id),
    name                 text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    owner_id             uuid NOT NULL REFERENCES member(id),
    visibility           text NOT NULL DEFAULT 'workspace' CHECK (visibility IN ('workspace', 'private')),
    runtime_kind         text NOT NULL CHECK (runtime_kind IN ('http', 'pull')),
    -- http binding: where we push, how long we wait, and the secret we sign pushes with (encrypted).
    endpoint_url         text,
    timeout_s            double precision NOT NULL DEFAULT 10 CHECK (timeout_s > 0 AND timeout_s <= 300),
    signing_secret_ct    bytea,
    signing_secret_hint  text,
    -- pull binding: the runtime token's digest (hgr_…); the token is shown once.
    runtime_token_digest bytea UNIQUE CHECK (runtime_token_digest IS NULL OR length(runtime_token_digest) = 32),
    runtime_token_hint   text,
    max_concurrency      integer NOT NULL DEFAULT 4 CHECK (max_concurrency BETWEEN 1 AND 10000),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    archived_at          timestamptz,
    CHECK (runtime_kind <> 'http' OR (endpoint_url IS NOT NULL AND signing_secret_ct IS NOT NULL)),
    CHECK (runtime_kind <> 'pull' OR runtime_token_digest IS NOT NULL)
);
CREATE INDEX agent_workspace_idx ON agent (workspace_id, id);

-- One row per pull-runtime instance; online = heartbeat within the heartbeat timeout (ARCHITECTURE §11).
CREATE TABLE agent_instance (
    id            uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    agent_id      uuid NOT NULL REFERENCES agent(id),
    instance      text NOT NULL CHECK (length(instance) BETWEEN 1 AND 200),
    status        text NOT NULL DEFAULT 'online' CHECK (status IN ('online', 'offline')),
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (agent_id, instance)
);
CREATE INDEX agent_instance_heartbeat_idx ON agent_instance (heartbeat_at) WHERE status = 'online';

CREATE TABLE squad (
    id              uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id    uuid NOT NULL REFERENCES workspace(id),
    name            text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    leader_agent_id uuid NOT NULL REFERENCES agent(id),
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE squad_member (
    squad_id  uuid NOT NULL REFERENCES squad(id) ON DELETE CASCADE,
    agent_id  uuid NOT NULL REFERENCES agent(id),
    PRIMARY KEY (squad_id, agent_id)
);

-- ---------------------------------------------------------------------------------------------
-- Autopilots, rule versions, triggers
-- ---------------------------------------------------------------------------------------------
CREATE TABLE autopilot (
    id                    uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id          uuid NOT NULL REFERENCES workspace(id),
    title                 text NOT NULL CHECK (length(title) BETWEEN 1 AND 500),
    instructions          text NOT NULL DEFAULT '',
    assignee_type         text NOT NULL CHECK (assignee_type IN ('agent', 'squad')),
    assignee_id           uuid NOT NULL,
    execution_mode        text NOT NULL CHECK (execution_mode IN ('create_issue', 'run_only')),
    status                text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused', 'archived')),
    issue_title_template  text,
    created_by            uuid NOT NULL REFERENCES member(id),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX autopilot_workspace_idx ON autopilot (workspace_id, id);

CREATE TABLE autopilot_collaborator (
    autopilot_id  uuid NOT NULL REFERENCES autopilot(id),
    member_id     uuid NOT NULL REFERENCES member(id),
    added_by      uuid REFERENCES member(id),
    added_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (autopilot_id, member_id)
);

-- Append-only snapshot of an autopilot's rule, written in the same transaction as each substantive
-- change. A run records the version it was admitted under; the publisher is who is accountable.
CREATE TABLE autopilot_rule_version (
    id              uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    autopilot_id    uuid NOT NULL REFERENCES autopilot(id),
    version         integer NOT NULL CHECK (version >= 1),
    change          text NOT NULL,
    config          jsonb NOT NULL,
    digest          text NOT NULL,
    publisher_type  text NOT NULL CHECK (publisher_type IN ('member', 'system')),
    publisher_id    uuid REFERENCES member(id),
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (autopilot_id, version),
    CHECK (publisher_type <> 'member' OR publisher_id IS NOT NULL)
);
CREATE TRIGGER autopilot_rule_version_append_only
    BEFORE UPDATE OR DELETE ON autopilot_rule_version
    FOR EACH ROW EXECUTE FUNCTION hookgate_refuse_change();
CREATE TRIGGER autopilot_rule_version_no_truncate
    BEFORE TRUNCATE ON autopilot_rule_version
    FOR EACH STATEMENT EXECUTE FUNCTION hookgate_refuse_change();

CREATE TABLE autopilot_trigger (
    id                          uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id                uuid NOT NULL REFERENCES workspace(id),
    autopilot_id                uuid NOT NULL REFERENCES autopilot(id),
    kind                        text NOT NULL CHECK (kind IN ('schedule', 'webhook')),
    enabled                     boolean NOT NULL DEFAULT true,
    -- schedule: cron in an IANA zone, fire times persisted in UTC.
    cron                        text,
    timezone                    text,
    overlap_policy              text CHECK (overlap_policy IN ('skip', 'buffer_one', 'allow')),
    next_fire_at                timestamptz,
    last_fired_at               timestamptz,
    -- webhook: the awt_ token is looked up by digest; the ciphertext lets writers see it again.
    token_digest                bytea UNIQUE CHECK (token_digest IS NULL OR length(token_digest) = 32),
    token_ct                    bytea,
    token_hint                  text,
    provider                    text CHECK (provider IN ('generic', 'github', 'gitlab', 'stripe', 'slack',
                                                         'shopify', 'standard', 'linear', 'twilio')),
    signing_secret_ct           bytea,
    signing_secret_hint         text,
    previous_secret_ct          bytea,
    previous_secret_expires_at  timestamptz,
    event_filters               jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(event_filters) = 'array'),
    rate_limit_per_minute       integer NOT NULL DEFAULT 60 CHECK (rate_limit_per_minute BETWEEN 1 AND 1000000),
    published_by_type           text NOT NULL CHECK (published_by_type IN ('member', 'system')),
    published_by_id             uuid REFERENCES member(id),
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    deleted_at                  timestamptz,
    CHECK (kind <> 'schedule' OR (cron IS NOT NULL AND timezone IS NOT NULL AND overlap_policy IS NOT NULL
                                  AND token_digest IS NULL AND provider IS NULL)),
    CHECK (kind <> 'webhook' OR (cron IS NULL AND timezone IS NULL AND overlap_policy IS NULL
                                 AND provider IS NOT NULL
                                 AND (token_digest IS NOT NULL OR deleted_at IS NOT NULL)))
);
CREATE INDEX autopilot_trigger_autopilot_idx ON autopilot_trigger (autopilot_id);
-- The scheduler asks only for schedule triggers that are due: its cost follows the due count.
CREATE INDEX autopilot_trigger_due_idx ON autopilot_trigger (next_fire_at)
    WHERE kind = 'schedule' AND enabled AND deleted_at IS NULL;

-- ---------------------------------------------------------------------------------------------
-- Deliveries: every webhook request that passed the token and size gates.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE webhook_delivery (
    id                         uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id               uuid NOT NULL REFERENCES workspace(id),
    trigger_id                 uuid NOT NULL REFERENCES autopilot_trigger(id),
    autopilot_id               uuid NOT NULL REFERENCES autopilot(id),
    received_at                timestamptz NOT NULL DEFAULT now(),
    body                       bytea,
    content_type               text,
    headers                    jsonb NOT NULL DEFAULT '{}'::jsonb,
    envelope                   jsonb,
    provider                   text NOT NULL,
    event                      text NOT NULL,
    dedupe_key                 text,
    dedupe_source              text,
    signature_status           text NOT NULL CHECK (signature_status IN
                                   ('not_required', 'valid', 'invalid', 'missing', 'expired')),
    status                     text NOT NULL DEFAULT 'queued' CHECK (status IN
                                   ('queued', 'dispatched', 'rejected', 'ignored', 'failed')),
    attempt_count              integer NOT NULL DEFAULT 1 CHECK (attempt_count >= 1),
    dispatch_attempts          integer NOT NULL DEFAULT 0 CHECK (dispatch_attempts >= 0),
    available_at               timestamptz NOT NULL DEFAULT now(),
    lease_token                uuid,
    lease_expires_at           timestamptz,
    reason_code                text,
    reason                     text,
    response_status            integer,
    response_body              jsonb,
    run_id                     uuid,
    replayed_from_delivery_id  uuid REFERENCES webhook_delivery(id),
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    CHECK (status <> 'rejected' OR signature_status IN ('invalid', 'missing', 'expired'))
);
-- Promise 3: one delivery per (trigger, dedupe key) while it counts. Rejected (forged) and failed rows
-- do not hold the key, so a forged request can never block or learn about the real one.
CREATE UNIQUE INDEX webhook_delivery_dedupe_uq ON webhook_delivery (trigger_id, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status NOT IN ('rejected', 'failed');
-- The delivery worker's queue: small, because only queued rows are in it.
CREATE INDEX webhook_delivery_queue_idx ON webhook_delivery (available_at, received_at)
    WHERE status = 'queued';
CREATE INDEX webhook_delivery_trigger_idx ON webhook_delivery (trigger_id, id DESC);
CREATE INDEX webhook_delivery_workspace_idx ON webhook_delivery (workspace_id, id DESC);

-- ---------------------------------------------------------------------------------------------
-- Runs, issues, tasks
-- ---------------------------------------------------------------------------------------------
CREATE TABLE autopilot_run (
    id                    uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id          uuid NOT NULL REFERENCES workspace(id),
    autopilot_id          uuid NOT NULL REFERENCES autopilot(id),
    trigger_id            uuid REFERENCES autopilot_trigger(id),
    webhook_delivery_id   uuid REFERENCES webhook_delivery(id),
    source                text NOT NULL CHECK (source IN ('manual', 'schedule', 'webhook', 'api')),
    status                text NOT NULL DEFAULT 'pending' CHECK (status IN
                              ('pending', 'issue_created', 'queued', 'running',
                               'completed', 'failed', 'cancelled', 'skipped')),
    rule_version_id       uuid REFERENCES autopilot_rule_version(id),
    planned_at            timestamptz,
    payload               jsonb NOT NULL DEFAULT '{}'::jsonb,
    issue_id              uuid,
    task_id               uuid,
    originator_id         uuid REFERENCES member(id),
    accountable_id        uuid REFERENCES member(id),
    reason_code           text,
    reason                text,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    finished_at           timestamptz,
    CHECK (source <> 'manual' OR originator_id IS NOT NULL),
    CHECK (source = 'manual' OR originator_id IS NULL),
    CHECK (status <> 'skipped' OR reason_code IS NOT NULL),
    CHECK (planned_at IS NULL OR source = 'schedule')
);
-- Promise 2: a run for (trigger, planned_at) exists at most once.
CREATE UNIQUE INDEX autopilot_run_planned_uq ON autopilot_run (trigger_id, planned_at)
    WHERE planned_at IS NOT NULL;
-- Promise 3: one run per delivery.
CREATE UNIQUE INDEX autopilot_run_delivery_uq ON autopilot_run (webhook_delivery_id)
    WHERE webhook_delivery_id IS NOT NULL;
CREATE INDEX autopilot_run_autopilot_idx ON autopilot_run (autopilot_id, created_at DESC);
CREATE INDEX autopilot_run_workspace_idx ON autopilot_run (workspace_id, id DESC);
-- Overlap policy and half-made-run repair look for a trigger's unfinished runs.
CREATE INDEX autopilot_run_active_idx ON autopilot_run (trigger_id, created_at)
    WHERE status IN ('pending', 'issue_created', 'queued', 'running');

CREATE TABLE issue (
    id             uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id   uuid NOT NULL REFERENCES workspace(id),
    autopilot_id   uuid REFERENCES autopilot(id),
    run_id         uuid UNIQUE REFERENCES autopilot_run(id),
    title          text NOT NULL,
    body           text NOT NULL DEFAULT '',
    assignee_type  text CHECK (assignee_type IN ('agent', 'squad')),
    assignee_id    uuid,
    status         text NOT NULL DEFAULT 'todo' CHECK (status IN ('todo', 'in_progress', 'done', 'cancelled')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX issue_workspace_idx ON issue (workspace_id, id DESC);

CREATE TABLE agent_task (
    id                uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id      uuid NOT NULL REFERENCES workspace(id),
    run_id            uuid REFERENCES autopilot_run(id),
    issue_id          uuid REFERENCES issue(id),
    agent_id          uuid NOT NULL REFERENCES agent(id),
    payload           jsonb NOT NULL DEFAULT '{}'::jsonb,
    status            text NOT NULL DEFAULT 'queued' CHECK (status IN
                          ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    attempt           integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts      integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    lease_token       uuid,
    lease_expires_at  timestamptz,
    holder_instance   text,
    available_at      timestamptz NOT NULL DEFAULT now(),
    result            jsonb,
    error             text,
    retry_class       text,
    -- Promise 3: one task per run attempt, e.g. 'run:<run id>:1'.
    idempotency_key   text NOT NULL UNIQUE,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz,
    CHECK (status <> 'running' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE INDEX agent_task_queue_idx ON agent_task (agent_id, available_at) WHERE status = 'queued';
-- The watchdog scans running tasks by lease expiry; the concurrency cap counts running per agent.
CREATE INDEX agent_task_lease_idx ON agent_task (lease_expires_at) WHERE status = 'running';
CREATE INDEX agent_task_running_agent_idx ON agent_task (agent_id) WHERE status = 'running';
CREATE INDEX agent_task_run_idx ON agent_task (run_id);
CREATE INDEX agent_task_workspace_idx ON agent_task (workspace_id, id DESC);

-- ---------------------------------------------------------------------------------------------
-- Scheduler: one row per (job, scope, plan time). At once the distributed lock, the execution
-- audit log, the retry state, the lease and the catch-up watermark (ARCHITECTURE §3, §8).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE sys_cron_executions (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_name       text NOT NULL,
    scope_kind     text NOT NULL,
    scope_id       text NOT NULL,
    plan_time      timestamptz NOT NULL,
    status         text NOT NULL CHECK (status IN ('RUNNING', 'SUCCESS', 'FAILED')),
    attempt        integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    max_attempts   integer NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
    next_retry_at  timestamptz,
    runner_id      text,
    lease_token    uuid,
    heartbeat_at   timestamptz,
    stale_after    timestamptz,
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    duration_ms    integer,
    result         jsonb,
    error_code     text,
    error_message  text,
    UNIQUE (job_name, scope_kind, scope_id, plan_time),
    CHECK (status <> 'RUNNING' OR (lease_token IS NOT NULL AND stale_after IS NOT NULL))
);
CREATE INDEX sys_cron_executions_stale_idx ON sys_cron_executions (stale_after) WHERE status = 'RUNNING';
CREATE INDEX sys_cron_executions_retry_idx ON sys_cron_executions (next_retry_at) WHERE status = 'FAILED';
CREATE INDEX sys_cron_executions_scope_idx ON sys_cron_executions (job_name, scope_kind, scope_id, plan_time DESC);

-- ---------------------------------------------------------------------------------------------
-- Audit log: append-only, enforced by the database.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE audit_log (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id  uuid REFERENCES workspace(id),
    at            timestamptz NOT NULL DEFAULT now(),
    action        text NOT NULL CHECK (action ~ '^[A-Z][A-Z_]*$'),
    actor_type    text NOT NULL CHECK (actor_type IN ('member', 'agent', 'runtime', 'system', 'worker', 'scheduler')),
    actor_id      text,
    subject_type  text NOT NULL,
    subject_id    text,
    detail        jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_log_subject_idx ON audit_log (subject_id, id DESC);
CREATE INDEX audit_log_workspace_idx ON audit_log (workspace_id, id DESC);
CREATE INDEX audit_log_action_idx ON audit_log (action, at);
CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION hookgate_refuse_change();
CREATE TRIGGER audit_log_no_truncate
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION hookgate_refuse_change();

-- ---------------------------------------------------------------------------------------------
-- Idempotency-Key replay store for API writes (5-minute window, ARCHITECTURE §1).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE idempotency_key (
    workspace_id     uuid NOT NULL REFERENCES workspace(id),
    key              text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    route            text NOT NULL,
    request_digest   text NOT NULL,
    response_status  integer,
    response_body    jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, route, key)
);
CREATE INDEX idempotency_key_created_idx ON idempotency_key (created_at);
