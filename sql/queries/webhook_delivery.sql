-- name: delivery_complete
-- The delivery became run $3 (dispatched; no longer 'paced'). Guarded by $1 id + $2 lease token + status
-- queued: zero rows means another worker owns it now (harmless).
UPDATE webhook_delivery
SET status = 'dispatched', run_id = $3, lease_token = NULL, lease_expires_at = NULL,
    reason_code = CASE WHEN reason_code = 'paced' THEN NULL ELSE reason_code END,
    reason = CASE WHEN reason_code = 'paced' THEN NULL ELSE reason END, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'queued'
RETURNING id;

-- name: delivery_ignore
-- Crash-window recovery found the delivery not admissible (disabled trigger, paused autopilot, filtered
-- event): mark it ignored like ingress would have. $1 id, $2 lease token, $3 reason code, $4 reason.
UPDATE webhook_delivery
SET status = 'ignored', reason_code = $3, reason = $4, lease_token = NULL, lease_expires_at = NULL,
    updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'queued'
RETURNING id;

-- name: delivery_retry
-- Dispatch failed: spend an attempt and come back after $3 seconds, or give up ('failed',
-- dispatch_failed) once $4 attempts are spent. $1 id, $2 lease token, $5 error text. No longer 'paced'.
UPDATE webhook_delivery
SET dispatch_attempts = dispatch_attempts + 1,
    status = CASE WHEN dispatch_attempts + 1 >= $4 THEN 'failed' ELSE 'queued' END,
    reason_code = CASE WHEN dispatch_attempts + 1 >= $4 THEN 'dispatch_failed'
                       ELSE nullif(reason_code, 'paced') END,
    reason = $5,
    available_at = now() + make_interval(secs => $3),
    lease_token = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'queued'
RETURNING id, status, dispatch_attempts;

-- name: delivery_release
-- Give a leased delivery back at once (graceful shutdown). $1 id, $2 lease token.
UPDATE webhook_delivery
SET available_at = now(), lease_token = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND status = 'queued'
RETURNING id;

-- name: delivery_drop_bodies
-- Retention: clear the raw body of up to $2 finished deliveries (not queued) received before $1; the
-- row, its envelope and its headers stay for audit. Returns how many bodies were dropped.
WITH dropped AS (
    UPDATE webhook_delivery SET body = NULL
    WHERE id IN (SELECT id FROM webhook_delivery
                 WHERE body IS NOT NULL AND status <> 'queued' AND received_at < $1
                 ORDER BY received_at
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) AS dropped FROM dropped;
-- name: ingress_trigger_lookup
-- Ingress step 2 (and the facts of steps 4, 9, 10) in one round trip: the live webhook trigger whose
-- token digest is $1, its autopilot, its signing secrets (the previous one only while its grace window
-- is open), and the admission facts of ARCHITECTURE §6 with the same column names as admission_facts, so
-- autopilot.admission.evaluate can judge them. $2 = runtime heartbeat timeout (s), $3 = now override
-- (nullable; tests). The fingerprint covers every trigger/autopilot field ingress decides on; the
-- persisting statement recomputes it (keep the two expressions identical) to detect a stale read.
WITH clock AS (SELECT coalesce($3::timestamptz, now()) AS now)
SELECT t.id AS trigger_id, t.workspace_id, t.autopilot_id, t.provider, t.signature_scheme, t.dedupe_key_source,
       t.event_source, t.event_filters, t.handshake, t.verify_token_ct, t.reply, t.payload_filter,
       t.enabled AS trigger_enabled, (t.deleted_at IS NOT NULL) AS trigger_deleted,
       t.signing_secret_ct,
       CASE WHEN t.previous_secret_expires_at > clock.now THEN t.previous_secret_ct END AS previous_secret_ct,
       CASE WHEN t.previous_secret_expires_at > clock.now
            THEN extract(epoch FROM t.previous_secret_expires_at - clock.now)::float8 END AS previous_secret_ttl_s,
       md5(row(t.enabled, t.provider, t.signature_scheme, t.dedupe_key_source, t.event_source, t.event_filters,
                t.handshake, t.verify_token_ct, t.reply, t.payload_filter, t.signing_secret_ct, t.previous_secret_ct,
                t.previous_secret_expires_at > clock.now, a.status, a.execution_mode, a.assignee_type,
                a.assignee_id, a.workspace_id)::text) AS fingerprint,
       -- Step 4: a trigger must belong to its autopilot's workspace; any disagreement is a 404.
       (a.workspace_id = t.workspace_id) AS consistent,
       extract(epoch FROM clock.now)::float8 AS db_epoch,
       a.status AS autopilot_status, a.execution_mode, a.assignee_type, a.assignee_id, a.created_by,
       t.published_by_id AS trigger_publisher_id,
       rv.id AS rule_version_id, rv.publisher_id AS rule_publisher_id,
       ag.id AS agent_id, ag.archived_at IS NOT NULL AS agent_archived, ag.runtime_kind,
       ag.visibility AS agent_visibility, ag.owner_id AS agent_owner_id,
       rt.ready AS runtime_ready,
       (SELECT id FROM member o WHERE o.workspace_id = a.workspace_id AND o.role = 'owner'
          AND o.disabled_at IS NULL ORDER BY o.created_at, o.id LIMIT 1) AS owner_id,
       NULL::uuid AS clicker_id, NULL::text AS clicker_role, false AS clicker_can_write,
       publisher.id AS publisher_live_id
FROM autopilot_trigger t
CROSS JOIN clock
JOIN autopilot a ON a.id = t.autopilot_id
LEFT JOIN LATERAL (SELECT id, publisher_id FROM autopilot_rule_version v
                   WHERE v.autopilot_id = a.id ORDER BY v.version DESC LIMIT 1) rv ON true
LEFT JOIN LATERAL hookgate_assignee_agent(a.assignee_type, a.assignee_id, a.workspace_id) ag ON true
CROSS JOIN LATERAL hookgate_runtime_ready(ag.id, ag.runtime_kind, ag.endpoint_url, $2, clock.now) rt
LEFT JOIN member publisher ON publisher.id = coalesce(t.published_by_id, rv.publisher_id)
                          AND publisher.disabled_at IS NULL
WHERE t.token_digest = $1 AND t.kind = 'webhook' AND t.deleted_at IS NULL;

-- name: delivery_ingest
-- Ingress steps 7-10 for one or many requests in one statement, so one atomic commit: the ingress's group
-- commit (gateway/ingress/batch.py) has concurrent requests share one round trip and one commit; a request
-- written alone passes one-element arrays. Per plan (so per trigger lookup): re-check that its trigger still
-- has the token digest and the fingerprint of ingress_trigger_lookup (a rotated token, a new signing secret, an
-- edited trigger or autopilot persists nothing: live = 0 and the caller looks up again); per request: insert
-- the delivery with its final status and the run if one is admitted. A dedupe-key collision inserts nothing (delivery_id NULL with
-- live = 1: the caller takes the duplicate path): the insert trigger webhook_delivery_dedupe_claim skips a
-- row whose key is held (webhook_delivery_dedupe); requests of one batch that share a key are inserted in
-- array order, so the first wins. Rejected rows claim no key, so a forged request never collides. The
-- worker's wake-up (step 11): $27 = the channel to announce the queued deliveries it inserted on, by id, in
-- this commit, or NULL to leave it to the caller, who sends it right after the commit
-- (gateway/ingress/notifier.py). A NOTIFY in a transaction takes a database-wide lock at commit that
-- serialises every notifying commit (and its WAL flush), which cut ingress throughput by about half; so the
-- caller passes a channel only for a request written alone, with no other batch in flight
-- (gateway/ingress/batch.py), where it saves the wake-up its own round trip.
-- Two sets of parallel arrays. What the trigger and the decision fix, and the request's fields that nearly always
-- repeat, once per distinct set of them in the batch (usually one: every accepted request of a trigger shares
-- its plan and, from one sender, its content type, event, dedupe source and signature status): $1 = trigger
-- ids, $2 = token digests, $3 = fingerprints, $4 = providers, $5 = delivery statuses, $6 = delivery reason codes,
-- $7 = response statuses, $8 = response bodies without ids (delivery_id, and run_id when a run is made, are
-- added here), $9 = run statuses ('pending', 'skipped', or NULL for no run), $10 = rule versions, $11 =
-- accountable members, $12 = run reason codes, $13 = run reasons, $14 = the deliveries' reasons (text), $15 =
-- content types, $16 = events, $17 = dedupe sources, $18 = signature statuses. Then one element per request:
-- $19 = its set (1-based position in $1..$18), $20 = received_at in microseconds since the Unix epoch, $21 = raw
-- bodies, $22 = selected headers as JSON text, $23 = envelopes as JSON text (the run payloads; text, so the
-- caller can splice the body's own JSON text in as the payload instead of encoding it again), $24 = dedupe keys,
-- $25 = the new deliveries' ids, $26 = the new runs' ids (NULL: no run), both UUIDv7 made by the caller
-- (hookgate_uuid7() in SQL cost more than all the rest of the statement's expressions together). asyncpg's
-- encoding of the arrays is a large part of the gateway's CPU per request, and it goes by element: hence the
-- sets sent once rather than per request, the times as integers and the headers as text (asyncpg encodes each
-- timestamptz or jsonb element in Python: 2-5 µs a request), and four fewer text elements per request (a str
-- element costs about 1 µs, most of it asyncpg's check of whether it is a sub-array). Returns one row per
-- request: n (its 1-based position), live, delivery_id, status, run_id, woken (1 when this statement announced
-- the batch's queued deliveries).
WITH p AS (
    SELECT * FROM unnest($1::uuid[], $2::bytea[], $3::text[], $4::text[], $5::text[], $6::text[], $7::integer[],
                         $8::jsonb[], $9::text[], $10::uuid[], $11::uuid[], $12::text[], $13::text[], $14::text[],
                         $15::text[], $16::text[], $17::text[], $18::text[])
        WITH ORDINALITY AS p(trigger_id, digest, fingerprint, provider, status, reason_code, response_status,
                             response, run_status, rule_version_id, accountable_id, run_reason_code, run_reason,
                             reason, content_type, event, dedupe_source, signature_status, plan)
), x AS (
    SELECT r.n, plan, 'epoch'::timestamptz + r.received_us * interval '1 microsecond' AS received_at, r.body,
           p.content_type, r.headers::jsonb AS headers, r.envelope::jsonb AS envelope, p.event, r.dedupe_key,
           p.dedupe_source, p.signature_status, r.delivery_id, r.run_id, p.trigger_id, p.digest, p.fingerprint,
           p.provider, p.status, p.reason_code, p.response_status, p.response, p.run_status, p.rule_version_id,
           p.accountable_id, p.run_reason_code, p.run_reason, p.reason
    FROM unnest($19::integer[], $20::bigint[], $21::bytea[], $22::text[], $23::text[], $24::text[], $25::uuid[],
                $26::uuid[])
        WITH ORDINALITY AS r(plan, received_us, body, headers, envelope, dedupe_key, delivery_id, run_id, n)
    JOIN p USING (plan)
), live_plan AS (
    -- Per plan, so per lookup: a batch may span triggers, and one may change between two requests' lookups.
    SELECT p.plan, t.workspace_id, t.autopilot_id
    FROM p JOIN autopilot_trigger t ON t.id = p.trigger_id AND t.token_digest = p.digest AND t.deleted_at IS NULL
    JOIN autopilot a ON a.id = t.autopilot_id
    WHERE md5(row(t.enabled, t.provider, t.signature_scheme, t.dedupe_key_source, t.event_source, t.event_filters,
                  t.handshake, t.verify_token_ct, t.reply, t.payload_filter, t.signing_secret_ct,
                  t.previous_secret_ct,
                  t.previous_secret_expires_at > now(), a.status, a.execution_mode, a.assignee_type,
                  a.assignee_id, a.workspace_id)::text) = p.fingerprint
), live AS (
    SELECT x.n, live_plan.workspace_id, live_plan.autopilot_id FROM x JOIN live_plan USING (plan)
), delivery AS (
    -- The envelope is stored once: as the run's payload when a run is made, else on the delivery (the worker
    -- admits a queued delivery that has no run yet from it). Readers take coalesce(d.envelope, r.payload)
    -- (delivery_get, the replays). A second copy made the delivery row pass PostgreSQL's 2 KB TOAST
    -- threshold, so every accepted webhook paid a pglz compression of it (about 6 % of the ingest's
    -- PostgreSQL CPU) and its WAL (docs/BENCHMARKS.md, "Envelope stored once").
    INSERT INTO webhook_delivery (id, workspace_id, trigger_id, autopilot_id, received_at, body, content_type,
                                  headers, envelope, provider, event, dedupe_key, dedupe_source,
                                  signature_status, status, reason_code, reason, response_status, response_body,
                                  run_id)
    SELECT x.delivery_id, live.workspace_id, x.trigger_id, live.autopilot_id, x.received_at, x.body,
           x.content_type, x.headers, CASE WHEN x.run_id IS NULL THEN x.envelope END, x.provider, x.event, x.dedupe_key, x.dedupe_source,
           x.signature_status, x.status, x.reason_code, x.reason, x.response_status,
           x.response || jsonb_build_object('delivery_id', x.delivery_id)
               || CASE WHEN x.run_id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('run_id', x.run_id) END,
           x.run_id
    FROM x JOIN live USING (n)
    ORDER BY x.n
    RETURNING id, status, run_id
), run AS (
    INSERT INTO autopilot_run (id, workspace_id, autopilot_id, trigger_id, webhook_delivery_id, source, status,
                               rule_version_id, payload, accountable_id, reason_code, reason, finished_at)
    SELECT d.run_id, live.workspace_id, live.autopilot_id, x.trigger_id, d.id, 'webhook', x.run_status,
           x.rule_version_id, x.envelope, x.accountable_id, x.run_reason_code, x.run_reason,
           CASE WHEN x.run_status = 'skipped' THEN now() END
    FROM delivery d JOIN x ON x.delivery_id = d.id JOIN live USING (n)
    WHERE d.run_id IS NOT NULL
    RETURNING id
), woke AS (
    -- The payload names the ids as notify.name_deliveries does (the caller passes $27 for one request only).
    SELECT pg_notify($27::text, string_agg(d.id::text, ',' ORDER BY d.id))
    FROM delivery d WHERE $27::text IS NOT NULL AND d.status = 'queued'
    HAVING count(*) > 0
)
SELECT x.n, (live.n IS NOT NULL)::integer AS live, d.id AS delivery_id, d.status, r.id AS run_id,
       (SELECT count(*) FROM woke)::integer AS woken
FROM x LEFT JOIN live USING (n) LEFT JOIN delivery d ON d.id = x.delivery_id LEFT JOIN run r ON r.id = d.run_id
ORDER BY x.n;

-- name: delivery_duplicate
-- Ingress step 7, duplicate path: a correctly signed request with raw body $3 whose dedupe key $2 collided
-- on trigger $1. Count the provider's retry on the original, and count it in body_mismatch_count too when
-- its body differs from the stored one; return the original's ids and status (the caller wakes the worker
-- if it is still queued) (run_id NULL while the worker has not admitted it yet) and body_matches (NULL when
-- retention already dropped the stored body: nothing to compare, nothing counted). The bytes are compared
-- here, on the duplicate path only, so the accepted path stores no digest and does no extra work.
WITH hit AS (
    -- The holder of the key, found by its id (one partition) through the keys table.
    UPDATE webhook_delivery d
    SET attempt_count = d.attempt_count + 1, updated_at = now(),
        body_mismatch_count = d.body_mismatch_count + (d.body IS NOT NULL AND d.body <> $3)::integer
    FROM webhook_delivery_dedupe k
    WHERE k.trigger_id = $1 AND k.dedupe_key = $2 AND d.id = k.delivery_id AND d.status NOT IN ('rejected', 'failed')
    RETURNING d.id, d.status, d.run_id, d.body = $3 AS body_matches
)
SELECT hit.id AS delivery_id, hit.status, hit.body_matches,
       coalesce(hit.run_id, (SELECT r.id FROM autopilot_run r WHERE r.webhook_delivery_id = hit.id)) AS run_id
FROM hit;

-- name: delivery_list
-- Deliveries of workspace $1, newest first. Filters (nullable): $2 = trigger, $3 = status,
-- $4 = cursor (last id seen). $5 = at most. The body is left out of lists.
SELECT id, workspace_id, trigger_id, autopilot_id, received_at, content_type, provider, event, dedupe_key,
       dedupe_source, signature_status, status, attempt_count, body_mismatch_count, dispatch_attempts,
       reason_code, reason, response_status, run_id, replayed_from_delivery_id, available_at, updated_at
FROM webhook_delivery
WHERE workspace_id = $1 AND ($2::uuid IS NULL OR trigger_id = $2) AND ($3::text IS NULL OR status = $3)
  AND ($4::uuid IS NULL OR id < $4)
ORDER BY id DESC
LIMIT $5;

-- name: delivery_get
-- One delivery of workspace $1 by id $2, with its stored body and selected headers, and its envelope: the
-- delivery's own, or (stored once since ingress makes the run in the same statement) its run's payload.
SELECT d.id, d.workspace_id, d.trigger_id, d.autopilot_id, d.received_at, d.body, d.content_type, d.headers,
       coalesce(d.envelope, r.payload) AS envelope, d.provider, d.event, d.dedupe_key, d.dedupe_source,
       d.signature_status, d.status, d.attempt_count, d.dispatch_attempts, d.available_at, d.lease_token,
       d.lease_expires_at, d.reason_code, d.reason, d.response_status, d.response_body, d.run_id,
       d.replayed_from_delivery_id, d.updated_at, d.body_mismatch_count
FROM webhook_delivery d
LEFT JOIN autopilot_run r ON r.id = d.run_id AND d.envelope IS NULL
WHERE d.workspace_id = $1 AND d.id = $2;

-- name: delivery_insert_replays
-- Replays of deliveries $1 (distinct ids), in one statement: per original a NEW delivery with the same body,
-- headers and envelope (the original's, or its run's payload: see delivery_get), no dedupe key (a replay must never collide with the original), linked by
-- replayed_from_delivery_id. Parallel arrays, one element per original: $2 = statuses ('queued', or
-- 'ignored' when the trigger no longer admits it), $3 = reason codes, $4 = reasons. Returns one row per
-- copy: its id and the original it copies (RETURNING order is not array order; match on the original).
INSERT INTO webhook_delivery (workspace_id, trigger_id, autopilot_id, body, content_type, headers, envelope,
                              provider, event, signature_status, status, reason_code, reason,
                              replayed_from_delivery_id)
SELECT d.workspace_id, d.trigger_id, d.autopilot_id, d.body, d.content_type, d.headers,
       coalesce(d.envelope, r.payload), d.provider, d.event, d.signature_status, x.status, x.reason_code, x.reason,
       d.id
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS x(id, status, reason_code, reason, n)
JOIN webhook_delivery d ON d.id = x.id
LEFT JOIN autopilot_run r ON r.id = d.run_id AND d.envelope IS NULL
ORDER BY x.n
RETURNING id, replayed_from_delivery_id;

-- name: delivery_set_runs
-- Link each delivery of $1 to the run admitted for it. Parallel arrays: $2 = run ids, $3 = delivery
-- statuses ('queued': a pending run for the worker to dispatch; 'dispatched': the run was skipped, nothing
-- is left to do), $4 = their reason codes. Returns how many deliveries were linked.
WITH linked AS (
    UPDATE webhook_delivery d
    SET run_id = x.run_id, status = x.status, reason_code = x.reason_code, updated_at = now()
    FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[]) AS x(id, run_id, status, reason_code)
    WHERE d.id = x.id
    RETURNING 1
)
SELECT count(*) AS linked FROM linked;

-- name: delivery_replay_select
-- The deliveries a bulk replay selects in workspace $1, oldest first, at most $9: never rejected ones (a
-- bad signature is not replayable) nor those of deleted triggers. Filters (nullable): $2 = trigger,
-- $3 = autopilot, $4 = statuses, $5 = event (exact), $6 = received at or after, $7 = received before,
-- $10 = statuses of the delivery's run (a delivery without a run never matches). $8 = the caller when only
-- the autopilots they may write count (creator or collaborator; NULL for owners and admins, who write every
-- autopilot). The columns a replay needs, the body left out; the envelope as delivery_get reads it.
SELECT d.id, d.workspace_id, d.trigger_id, d.autopilot_id, d.event, coalesce(d.envelope, r.payload) AS envelope,
       d.run_id, d.status
FROM webhook_delivery d
JOIN autopilot_trigger t ON t.id = d.trigger_id AND t.deleted_at IS NULL
JOIN autopilot a ON a.id = d.autopilot_id
LEFT JOIN autopilot_run r ON r.id = d.run_id
WHERE d.workspace_id = $1 AND d.status <> 'rejected'
  AND ($2::uuid IS NULL OR d.trigger_id = $2) AND ($3::uuid IS NULL OR d.autopilot_id = $3)
  AND ($4::text[] IS NULL OR d.status = ANY ($4)) AND ($5::text IS NULL OR d.event = $5)
  AND ($6::timestamptz IS NULL OR d.received_at >= $6) AND ($7::timestamptz IS NULL OR d.received_at < $7)
  AND ($10::text[] IS NULL OR r.status = ANY ($10))
  AND ($8::uuid IS NULL OR a.created_by = $8
       OR EXISTS (SELECT 1 FROM autopilot_collaborator c WHERE c.autopilot_id = a.id AND c.member_id = $8))
ORDER BY d.received_at, d.id
LIMIT $9;

-- name: delivery_take
-- The worker's claim and dispatch, one round trip (sql/functions/hookgate_delivery_take.sql): claim up to $1
-- due deliveries round-robin across workspaces, then their triggers, with pacing ($2 lease seconds, $3
-- workspace cursor, $4 triggers per workspace at most, $12 each workspace's trigger cursor as a JSON object,
-- $5 clock override, nullable), dispatch the plain-pending ones ($6 max task attempts, $7 runtime heartbeat
-- timeout) and claim up to $9 of their HTTP agents' tasks for holder $8 (leased least(agent timeout, $10) + $11
-- s), at most $14[i] of agent $13[i] and $15 of any other agent, and at most $17[i] of workspace $16[i] and $18 of
-- any other workspace (the pusher's fair shares), no agent above $19 (HOOKGATE_AGENT_MAX_CONCURRENCY; NULL = no
-- bound). $20: take only these deliveries, by key, instead of walking the queue (NULL = walk). Rows: kind
-- 'dispatched' (task columns) or 'leased' (for the one-by-one path).
SELECT * FROM hookgate_delivery_take($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
                                     $19, $20);
