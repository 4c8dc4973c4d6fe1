-- 0016_delivery_reliability: dispatch that survives an agent's outage, and every attempt on record.
--
-- An agent may have its own retry schedule (seconds between attempts; NULL = HOOKGATE_PUSH_RETRY_SCHEDULE).
-- agent_health is the circuit breaker of HTTP agents: a row appears with an agent's first failed push; after
-- HOOKGATE_AGENT_TRIP_AFTER consecutive failures the agent is 'unhealthy' and gets no concurrency slot but one
-- probe per probe interval (hookgate_slots_take). task_attempt keeps one row per push attempt and per pull
-- runtime's lease outcome. agent_task.attempt_started_at is when its current attempt was claimed.

ALTER TABLE agent ADD COLUMN retry_schedule double precision[]
    CHECK (retry_schedule IS NULL OR cardinality(retry_schedule) BETWEEN 1 AND 20);

CREATE TABLE agent_health (
    agent_id          uuid PRIMARY KEY REFERENCES agent(id),
    state             text NOT NULL DEFAULT 'healthy' CHECK (state IN ('healthy', 'unhealthy')),
    since             timestamptz NOT NULL DEFAULT now(),
    failures          integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    last_error        text,
    last_failure_at   timestamptz,
    -- While unhealthy: the next probe may start at next_probe_at; the interval doubles up to probe_max_s.
    next_probe_at     timestamptz,
    probe_interval_s  double precision,
    probe_max_s       double precision,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (state = 'healthy' OR (next_probe_at IS NOT NULL AND probe_interval_s > 0 AND probe_max_s > 0))
);

ALTER TABLE agent_task ADD COLUMN attempt_started_at timestamptz;

CREATE TABLE task_attempt (
    id                uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id      uuid NOT NULL,
    -- No foreign key: tasks are never deleted, and the check would lock each pushed task's row once more on
    -- the push path (attempts go by retention; a task's attempts are read by task_id).
    task_id           uuid NOT NULL,
    run_id            uuid,
    agent_id          uuid NOT NULL,
    attempt           integer NOT NULL,
    started_at        timestamptz NOT NULL,
    finished_at       timestamptz NOT NULL,
    duration_ms       integer NOT NULL CHECK (duration_ms >= 0),
    outcome           text NOT NULL CHECK (outcome IN ('succeeded', 'accepted', 'failed', 'timeout', 'unreachable',
                                                      'egress_forbidden', 'lease_lost', 'cancelled')),
    http_status       integer,
    error             text,
    response_headers  jsonb,
    response_body     text CHECK (octet_length(response_body) <= 4096)
);
CREATE INDEX task_attempt_task_idx ON task_attempt (task_id, id);
CREATE INDEX task_attempt_finished_idx ON task_attempt (finished_at);
