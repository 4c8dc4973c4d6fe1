-- name: agent_insert_http
-- An agent we push to. $1 = workspace, $2 = name, $3 = owner member, $4 = visibility, $5 = endpoint URL,
-- $6 = timeout seconds, $7 = signing secret ciphertext, $8 = its hint, $9 = max concurrency.
INSERT INTO agent (workspace_id, name, owner_id, visibility, runtime_kind, endpoint_url, timeout_s,
                   signing_secret_ct, signing_secret_hint, max_concurrency)
VALUES ($1, $2, $3, $4, 'http', $5, $6, $7, $8, $9)
RETURNING *;

-- name: agent_insert_pull
-- A runtime that pulls work. $1 = workspace, $2 = name, $3 = owner member, $4 = visibility,
-- $5 = runtime token digest, $6 = its hint, $7 = max concurrency.
INSERT INTO agent (workspace_id, name, owner_id, visibility, runtime_kind, runtime_token_digest,
                   runtime_token_hint, max_concurrency)
VALUES ($1, $2, $3, $4, 'pull', $5, $6, $7)
RETURNING *;

-- name: agent_get
-- One agent of a workspace, with its health (agent_health; none: it never failed). $1 = workspace, $2 = id.
SELECT a.*, h.state AS health_state, h.since AS health_since, h.next_probe_at AS health_next_probe_at,
       h.failures AS health_failures, h.last_error AS health_last_error
FROM agent a LEFT JOIN agent_health h ON h.agent_id = a.id
WHERE a.workspace_id = $1 AND a.id = $2;

-- name: squad_insert
-- A squad led by an agent. $1 = workspace, $2 = name, $3 = leader agent.
INSERT INTO squad (workspace_id, name, leader_agent_id) VALUES ($1, $2, $3)
RETURNING *;

-- name: squad_member_insert
-- Add agent $2 to squad $1 (idempotent).
INSERT INTO squad_member (squad_id, agent_id) VALUES ($1, $2) ON CONFLICT DO NOTHING;

-- name: agent_set_signing_secret
-- Seal an http agent's signing secret to its row. $1 = agent id, $2 = ciphertext.
UPDATE agent SET signing_secret_ct = $2, updated_at = now() WHERE id = $1
RETURNING *;

-- name: agent_get_by_runtime_token
-- The live pull agent whose runtime token digest is $1.
SELECT id, workspace_id, name, max_concurrency FROM agent
WHERE runtime_token_digest = $1 AND runtime_kind = 'pull' AND archived_at IS NULL;
-- name: agent_list
-- Agents of workspace $1 after cursor id $2 (nullable), $3 at most, oldest first, with their health.
SELECT a.*, h.state AS health_state, h.since AS health_since, h.next_probe_at AS health_next_probe_at,
       h.failures AS health_failures, h.last_error AS health_last_error
FROM agent a LEFT JOIN agent_health h ON h.agent_id = a.id
WHERE a.workspace_id = $1 AND ($2::uuid IS NULL OR a.id > $2)
ORDER BY a.id
LIMIT $3;

-- name: squad_get
-- One squad of workspace $1 by id $2, with its member agent ids.
SELECT s.*, coalesce(array_agg(m.agent_id ORDER BY m.agent_id) FILTER (WHERE m.agent_id IS NOT NULL),
                     '{}') AS member_ids
FROM squad s LEFT JOIN squad_member m ON m.squad_id = s.id
WHERE s.workspace_id = $1 AND s.id = $2
GROUP BY s.id;

-- name: squad_list
-- Squads of workspace $1 after cursor id $2 (nullable), $3 at most, with their member agent ids.
SELECT s.*, coalesce(array_agg(m.agent_id ORDER BY m.agent_id) FILTER (WHERE m.agent_id IS NOT NULL),
                     '{}') AS member_ids
FROM squad s LEFT JOIN squad_member m ON m.squad_id = s.id
WHERE s.workspace_id = $1 AND ($2::uuid IS NULL OR s.id > $2)
GROUP BY s.id
ORDER BY s.id
LIMIT $3;

-- name: assignee_exists
-- Whether assignee ($2 type 'agent'|'squad', $3 id) exists in workspace $1 (an agent must not be archived).
SELECT CASE $2::text
         WHEN 'agent' THEN EXISTS (SELECT 1 FROM agent WHERE workspace_id = $1 AND id = $3 AND archived_at IS NULL)
         WHEN 'squad' THEN EXISTS (SELECT 1 FROM squad WHERE workspace_id = $1 AND id = $3)
         ELSE false
       END;

-- name: agent_archive
-- Archive agent $2 of workspace $1 (runs assigned to it are skipped from now on). Returns the row; an
-- already archived agent keeps its first archive time.
UPDATE agent SET archived_at = coalesce(archived_at, now()), updated_at = now()
WHERE workspace_id = $1 AND id = $2
RETURNING *;

-- name: agent_update
-- Edit agent $1: name $2, endpoint URL $3, push timeout $4 (s), concurrency cap $5, visibility $6, retry
-- schedule $7 (seconds; an empty one puts the agent back on the default); a null keeps the current value. A
-- changed cap needs agent_slots_resize in the same transaction. Returns the row.
UPDATE agent
SET name = coalesce($2, name), endpoint_url = coalesce($3, endpoint_url), timeout_s = coalesce($4, timeout_s),
    max_concurrency = coalesce($5, max_concurrency), visibility = coalesce($6, visibility),
    retry_schedule = CASE WHEN $7::double precision[] IS NULL THEN retry_schedule
                          WHEN cardinality($7::double precision[]) = 0 THEN NULL ELSE $7 END,
    updated_at = now()
WHERE id = $1
RETURNING *;

-- name: agent_slots_resize
-- Reshape agent $1's concurrency slots to its (just changed) cap, running tasks kept (hookgate_slots_resize).
SELECT hookgate_slots_resize($1);

-- name: agent_rotate_signing_secret
-- Give http agent $1 the signing secret ciphertext $2 (hint $3). The current secret becomes the previous one,
-- valid $4 more seconds (pushes are signed with both meanwhile); an earlier previous secret is dropped.
UPDATE agent
SET previous_secret_ct = signing_secret_ct, previous_secret_expires_at = now() + make_interval(secs => $4),
    signing_secret_ct = $2, signing_secret_hint = $3, updated_at = now()
WHERE id = $1 AND runtime_kind = 'http'
RETURNING *;
