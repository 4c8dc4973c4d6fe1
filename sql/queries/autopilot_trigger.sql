-- name: trigger_insert_webhook
-- A webhook trigger. $1 = workspace, $2 = autopilot, $3 = token digest, $4 = token ciphertext,
-- $5 = token hint, $6 = provider preset, $7 = event filters (jsonb array), $8 = rate limit per minute,
-- $9 = publisher type, $10 = publisher member, $11 = signature scheme (jsonb object), $12 = dedupe key source,
-- $13 = event source (each null: the preset's), $14 = handshake (jsonb object, null: the preset's),
-- $15 = reply (jsonb object, null: the JSON receipt), $16 = payload filter (jsonb object, null: every body).
INSERT INTO autopilot_trigger (workspace_id, autopilot_id, kind, token_digest, token_ct, token_hint, provider,
                               event_filters, rate_limit_per_minute, published_by_type, published_by_id,
                               signature_scheme, dedupe_key_source, event_source, handshake, reply, payload_filter)
VALUES ($1, $2, 'webhook', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
RETURNING *;

-- name: trigger_insert_schedule
-- A schedule trigger. $1 = workspace, $2 = autopilot, $3 = cron, $4 = IANA zone, $5 = overlap policy,
-- $6 = first fire time (UTC), $7 = publisher type, $8 = publisher member.
INSERT INTO autopilot_trigger (workspace_id, autopilot_id, kind, cron, timezone, overlap_policy, next_fire_at,
                               published_by_type, published_by_id)
VALUES ($1, $2, 'schedule', $3, $4, $5, $6, $7, $8)
RETURNING *;

-- name: trigger_get
-- One live trigger of a workspace. $1 = workspace, $2 = trigger id.
SELECT * FROM autopilot_trigger WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL;

-- name: trigger_set_signing_secret
-- Set a webhook trigger's signing secret, keeping the old one verifying for $4 seconds (0 = no grace).
-- $1 = trigger id, $2 = new secret ciphertext (nullable: remove), $3 = its hint.
UPDATE autopilot_trigger
SET previous_secret_ct = CASE WHEN $4 > 0 THEN signing_secret_ct END,
    previous_secret_expires_at = CASE WHEN $4 > 0 AND signing_secret_ct IS NOT NULL
                                      THEN now() + make_interval(secs => $4) END,
    signing_secret_ct = $2,
    signing_secret_hint = $3,
    updated_at = now()
WHERE id = $1 AND kind = 'webhook' AND deleted_at IS NULL
RETURNING id;

-- name: trigger_set_verify_token
-- Set or remove a webhook trigger's Meta verify token. $1 = trigger id, $2 = token ciphertext (nullable:
-- remove), $3 = its hint (the last four characters).
UPDATE autopilot_trigger
SET verify_token_ct = $2, verify_token_hint = $3, updated_at = now()
WHERE id = $1 AND kind = 'webhook' AND deleted_at IS NULL
RETURNING *;

-- name: trigger_due_schedules
-- The schedule triggers due at $1 (now), at most $2, locked (SKIP LOCKED: two schedulers split the due
-- set instead of both planning it), read in index order from autopilot_trigger_due_idx without a sort,
-- so a tick costs the number of due triggers, not all triggers; only those after the cursor
-- ($4 next_fire_at, $5 id: the last trigger this tick's planners read; year 1 and the nil id at first), so that a
-- herd's later batches do not walk again over the entries of the triggers fired or locked before them. For each: the newest plan claimed by job
-- $3 and its flight slot (a RUNNING execution, or a FAILED one waiting for its retry), if taken; and what
-- the handler re-checks at fire time, with the columns of trigger_schedule_state (the trigger is locked, so
-- only its autopilot can change before the fire statement, which checks that again).
WITH due AS (
    SELECT t.id, t.autopilot_id, t.kind, t.enabled, (t.deleted_at IS NOT NULL) AS deleted, t.cron, t.timezone,
           t.overlap_policy, t.published_by_id, t.next_fire_at, t.last_fired_at, t.created_at
    FROM autopilot_trigger t
    WHERE t.kind = 'schedule' AND t.enabled AND t.deleted_at IS NULL AND t.next_fire_at <= $1
      AND (t.next_fire_at, t.id) > ($4::timestamptz, $5::uuid)
    ORDER BY t.next_fire_at, t.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
SELECT due.*, last.plan_time AS last_plan,
       flight.status AS flight_status, flight.next_retry_at AS flight_retry_at,
       flight.stale_after AS flight_stale_after,
       a.status AS autopilot_status,
       CASE WHEN due.overlap_policy IS DISTINCT FROM 'allow' THEN
           (SELECT count(*) FROM autopilot_run r
            WHERE r.trigger_id = due.id AND r.status IN ('pending', 'issue_created', 'queued', 'running'))
       END AS active_runs
FROM due
JOIN autopilot a ON a.id = due.autopilot_id
LEFT JOIN LATERAL (SELECT e.plan_time FROM sys_cron_executions e
                   WHERE e.job_name = $3 AND e.scope_kind = 'trigger' AND e.scope_id = due.id::text
                   ORDER BY e.plan_time DESC LIMIT 1) last ON true
LEFT JOIN LATERAL (SELECT e.status, e.next_retry_at, e.stale_after FROM sys_cron_executions e
                   WHERE e.job_name = $3 AND e.scope_kind = 'trigger' AND e.scope_id = due.id::text
                     AND e.single_flight
                     AND (e.status = 'RUNNING' OR (e.status = 'FAILED' AND e.next_retry_at IS NOT NULL))
                   LIMIT 1) flight ON true;

-- name: trigger_fire
-- Fire a batch of schedule occurrences in ONE statement, inside the transaction whose planner locked their
-- triggers and moved their next_fire_at: claim each occurrence (hookgate_cron_claim_done: the execution row
-- inserted already SUCCESS by INSERT ... ON CONFLICT DO NOTHING on its unique key, single flight), insert the
-- runs the handler decided (admission gate and overlap policy), and wake the workers for the pending ones
-- (NOTIFY hookgate_runs, payload = run id). Per occurrence, in (scope, plan) order: $8 = trigger ids,
-- $9 = plan times, $10 = its outcome (a 1-based index into the outcome arrays). Per outcome (few: occurrences
-- that share an autopilot, a publisher and a verdict share one): $11 = the autopilot status the handler saw
-- (an occurrence fires only if it still holds: if its autopilot changed since, the statement reports it and
-- the caller rolls back), $12 = a no-op's result (JSON text; NULL: insert a run), $13 = run status
-- ('pending' or 'skipped'), $14 = reason code, $15 = reason, $16 = workspace, $17 = rule version,
-- $18 = accountable member. $19/$20 = each distinct plan time and its text in the run's payload (ISO 8601).
-- $21 = per occurrence, its trigger's next evaluation (the next occurrence): the trigger moves there and its
-- last_fired_at to the plan (never back), in this statement (the planner left it due; see trigger_defer).
-- The claim: $1 = job, $2 = runner id, $3 = claim time, $4 = stale timeout (s), $5 = liveness key,
-- $6 = finish time, $7 = max attempts. Returns one row per occurrence claimed (id, scope_id, plan_time,
-- lease_token), each with how many runs were inserted (made) and wanted, and how many occurrences found their
-- autopilot changed (changed): the caller rolls the batch back unless every occurrence was claimed, every
-- run inserted (none existed before: a retry would reuse it) and nothing changed.
WITH o AS (
    SELECT * FROM unnest($11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::uuid[],
                         $17::uuid[], $18::uuid[])
        WITH ORDINALITY AS o(seen_status, noop, status, reason_code, reason, workspace_id, rule_version_id,
                             accountable_id, k)
), x AS MATERIALIZED (
    SELECT p.n, p.trigger_id, p.plan_time, p.again, o.noop, o.status, o.reason_code, o.reason, o.workspace_id,
           o.rule_version_id, o.accountable_id, iso.text AS planned_iso, t.autopilot_id, t.cron, t.timezone,
           CASE WHEN o.noop IS NULL THEN hookgate_uuid7() END AS run_id,
           a.status IS DISTINCT FROM o.seen_status AS changed
    FROM unnest($8::uuid[], $9::timestamptz[], $10::integer[], $21::timestamptz[])
        WITH ORDINALITY AS p(trigger_id, plan_time, k, again, n)
    JOIN o ON o.k = p.k
    JOIN unnest($19::timestamptz[], $20::text[]) AS iso(plan_time, text) ON iso.plan_time = p.plan_time
    JOIN autopilot_trigger t ON t.id = p.trigger_id
    LEFT JOIN autopilot a ON a.id = t.autopilot_id
), made AS (
    INSERT INTO autopilot_run (id, workspace_id, autopilot_id, trigger_id, source, status, rule_version_id,
                               planned_at, payload, accountable_id, reason_code, reason, finished_at)
    SELECT x.run_id, x.workspace_id, x.autopilot_id, x.trigger_id, 'schedule', x.status, x.rule_version_id,
           x.plan_time,
           jsonb_build_object('event', 'schedule.fired',
                              'payload', jsonb_build_object('trigger_id', x.trigger_id::text,
                                                            'planned_at', x.planned_iso, 'cron', x.cron,
                                                            'timezone', x.timezone)),
           x.accountable_id, x.reason_code, x.reason, CASE WHEN x.status = 'skipped' THEN now() END
    FROM x
    WHERE x.run_id IS NOT NULL AND NOT x.changed
    ORDER BY x.trigger_id, x.plan_time
    ON CONFLICT DO NOTHING
    RETURNING id, status
), claimed AS (
    SELECT c.*
    FROM hookgate_cron_claim_done(
        $1, 'trigger',
        (SELECT array_agg(x.trigger_id::text ORDER BY x.n) FROM x),
        (SELECT array_agg(x.plan_time ORDER BY x.n) FROM x),
        $7, $2, $3, $4, true, $5, $6,
        (SELECT array_agg(coalesce(x.noop,
                                   jsonb_build_object('run_id', x.run_id, 'status', x.status,
                                                      'reason_code', x.reason_code, 'reused', false)::text)
                          ORDER BY x.n) FROM x)) c
), woken AS (
    SELECT pg_notify('hookgate_runs', made.id::text) FROM made WHERE made.status = 'pending'
), advanced AS (
    UPDATE autopilot_trigger t
    SET next_fire_at = x.again, last_fired_at = greatest(coalesce(t.last_fired_at, x.plan_time), x.plan_time)
    FROM x
    WHERE t.id = x.trigger_id AND t.kind = 'schedule'
    RETURNING t.id
)
SELECT c.id, c.scope_id, c.plan_time, c.lease_token,
       (SELECT count(*) FROM made) AS made,
       (SELECT count(*) FROM x WHERE x.run_id IS NOT NULL) AS wanted,
       (SELECT count(*) FROM x WHERE x.changed) AS changed,
       (SELECT count(*) FROM woken) AS woken
FROM claimed c;

-- name: trigger_defer
-- Move the next evaluation of schedule triggers $1 to times $2 (the next occurrence, a pending retry, or when
-- an in-flight lease would go stale), so a blocked trigger does not stay due and spin the tick: the planner's
-- triggers that it does not plan, and a failed attempt's (due now). $3[i], when not NULL, is an occurrence
-- claimed: it becomes last_fired_at (never moving back). A planned trigger is moved by trigger_fire, which
-- claims its occurrence, so the common case writes each trigger row once per occurrence.
UPDATE autopilot_trigger t
SET next_fire_at = d.at,
    last_fired_at = CASE WHEN d.fired IS NULL THEN t.last_fired_at
                         ELSE greatest(coalesce(t.last_fired_at, d.fired), d.fired) END
FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[]) AS d(id, at, fired)
WHERE t.id = d.id AND t.kind = 'schedule';

-- name: trigger_schedule_state
-- What the schedule handler re-checks for triggers $1 at fire time: trigger and autopilot state, the
-- schedule as it is now, and how many runs of the trigger are still active (overlap policy; NULL, not
-- counted, under 'allow', which never looks at it).
SELECT t.id, t.autopilot_id, t.kind, t.enabled, (t.deleted_at IS NOT NULL) AS deleted, t.cron, t.timezone,
       t.overlap_policy, a.status AS autopilot_status,
       CASE WHEN t.overlap_policy IS DISTINCT FROM 'allow' THEN
           (SELECT count(*) FROM autopilot_run r
            WHERE r.trigger_id = t.id AND r.status IN ('pending', 'issue_created', 'queued', 'running'))
       END AS active_runs
FROM autopilot_trigger t
JOIN autopilot a ON a.id = t.autopilot_id
WHERE t.id = ANY($1::uuid[]);

-- name: trigger_mark_fired
-- After occurrence $2[i] of trigger $1[i] was handled: last_fired_at = that plan (never moving back),
-- next_fire_at = $3[i], unless the cron or zone was edited meanwhile ($4/$5 = the schedule fired), in
-- which case the editor's next_fire_at stands. Rows already right (the planner set both when it claimed
-- the occurrence) are not rewritten.
UPDATE autopilot_trigger t
SET last_fired_at = greatest(coalesce(t.last_fired_at, f.plan), f.plan),
    next_fire_at = CASE WHEN t.cron = f.cron AND t.timezone = f.tz THEN f.next ELSE t.next_fire_at END
FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[])
     AS f(id, plan, next, cron, tz)
WHERE t.id = f.id
  AND (t.last_fired_at IS NULL OR t.last_fired_at < f.plan
       OR (t.cron = f.cron AND t.timezone = f.tz AND t.next_fire_at IS DISTINCT FROM f.next));

-- name: trigger_next_due
-- When the next schedule trigger falls due (the scheduler sleeps until then), via the due index.
SELECT min(next_fire_at) AS at FROM autopilot_trigger
WHERE kind = 'schedule' AND enabled AND deleted_at IS NULL;
-- name: trigger_list_by_autopilot
-- Live triggers of autopilot $1 after cursor id $2 (nullable), $3 at most, oldest first.
SELECT * FROM autopilot_trigger
WHERE autopilot_id = $1 AND deleted_at IS NULL AND ($2::uuid IS NULL OR id > $2)
ORDER BY id
LIMIT $3;

-- name: trigger_lock
-- Lock live trigger $1 for an edit, rotation or deletion.
SELECT * FROM autopilot_trigger WHERE id = $1 AND deleted_at IS NULL FOR UPDATE;

-- name: trigger_hold
-- Hold the live triggers among $1 (ids) unchanged until commit (replays judge and copy against them), in id
-- order so concurrent holders take the locks in one order; returns the ids held (a deleted one is missing).
-- FOR SHARE, not FOR UPDATE: edits still wait, but the delivery worker's foreign-key checks on the trigger
-- (FOR KEY SHARE, e.g. its first trigger_pace row) do not. The worker takes them while it holds queued
-- deliveries FOR UPDATE, and a replay waits on the delivery it copies (its replayed_from key): with FOR
-- UPDATE here the two deadlocked.
SELECT id FROM autopilot_trigger WHERE id = ANY ($1::uuid[]) AND deleted_at IS NULL ORDER BY id FOR SHARE;

-- name: trigger_update_webhook
-- Edit webhook trigger $1 and re-stamp its publisher. $2 = enabled, $3 = provider, $4 = event filters,
-- $5 = rate limit per minute, $6 = signature scheme, $7 = dedupe key source, $8 = event source, $9 = handshake
-- (each null: the preset's), $10 = reply (null: the JSON receipt), $11 = payload filter (null: every body),
-- $12 = publisher type, $13 = publisher member.
UPDATE autopilot_trigger
SET enabled = $2, provider = $3, event_filters = $4, rate_limit_per_minute = $5, signature_scheme = $6,
    dedupe_key_source = $7, event_source = $8, handshake = $9, reply = $10, payload_filter = $11,
    published_by_type = $12, published_by_id = $13, updated_at = now()
WHERE id = $1 AND kind = 'webhook' AND deleted_at IS NULL
RETURNING *;

-- name: trigger_update_schedule
-- Edit schedule trigger $1 and re-stamp its publisher. $2 = enabled, $3 = cron, $4 = IANA zone,
-- $5 = overlap policy, $6 = next fire time (UTC), $7 = publisher type, $8 = publisher member.
UPDATE autopilot_trigger
SET enabled = $2, cron = $3, timezone = $4, overlap_policy = $5, next_fire_at = $6,
    published_by_type = $7, published_by_id = $8, updated_at = now()
WHERE id = $1 AND kind = 'schedule' AND deleted_at IS NULL
RETURNING *;

-- name: trigger_restamp_autopilot
-- An autopilot edit makes its editor the publisher of every live trigger. $1 = autopilot,
-- $2 = publisher type, $3 = publisher member. Returns the re-stamped trigger ids.
UPDATE autopilot_trigger
SET published_by_type = $2, published_by_id = $3, updated_at = now()
WHERE autopilot_id = $1 AND deleted_at IS NULL
RETURNING id, kind;

-- name: trigger_delete
-- Soft-delete trigger $1. The token digest is dropped, so the old URL answers 404 on every gateway at once.
UPDATE autopilot_trigger
SET deleted_at = now(), enabled = false, token_digest = NULL, token_ct = NULL, updated_at = now()
WHERE id = $1 AND deleted_at IS NULL
RETURNING *;

-- name: trigger_rotate_token
-- Replace webhook trigger $1's token: $2 = new digest, $3 = its ciphertext, $4 = its hint. The old
-- digest is gone once this commits, so the old URL answers 404 on every gateway process at once.
UPDATE autopilot_trigger
SET token_digest = $2, token_ct = $3, token_hint = $4, updated_at = now()
WHERE id = $1 AND kind = 'webhook' AND deleted_at IS NULL
RETURNING *;

-- name: trigger_schedule_ids
-- Live schedule triggers of autopilot $1 (the schedulers are woken for each when the autopilot's status
-- changes, so a resume plans its next occurrence at once).
SELECT id FROM autopilot_trigger WHERE autopilot_id = $1 AND kind = 'schedule' AND deleted_at IS NULL;
