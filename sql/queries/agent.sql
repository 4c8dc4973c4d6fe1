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
-- One agent of a workspace. $1 = workspace, $2 = agent id.
SELECT * FROM agent WHERE workspace_id = $1 AND id = $2;

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
