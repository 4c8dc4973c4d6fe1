-- name: channel_insert
-- A new notification channel of workspace $1: name $2, URL $3, events $4 (text[]), sealed signing secret $5
-- (a placeholder until channel_set_secret seals it to the new id), its hint $6, created by member $7.
INSERT INTO notification_channel (workspace_id, name, url, events, signing_secret_ct, signing_secret_hint,
                                  created_by)
VALUES ($1, $2, $3, $4::text[], $5, $6, $7)
RETURNING *;

-- name: channel_set_secret
-- Seal channel $1's signing secret: $2 = ciphertext bound to the channel's id.
UPDATE notification_channel SET signing_secret_ct = $2 WHERE id = $1
RETURNING *;

-- name: channel_get
-- One channel of workspace $1 by id $2.
SELECT * FROM notification_channel WHERE workspace_id = $1 AND id = $2;

-- name: channel_list
-- Channels of workspace $1 after cursor id $2 (nullable), $3 at most, oldest first.
SELECT * FROM notification_channel
WHERE workspace_id = $1 AND ($2::uuid IS NULL OR id > $2)
ORDER BY id
LIMIT $3;

-- name: channel_delete
-- Delete channel $2 of workspace $1 with its notifications (sent, queued or being sent: a sender holding
-- one finds its lease gone). Returns the deleted row, none if there was no such channel.
DELETE FROM notification_channel WHERE workspace_id = $1 AND id = $2
RETURNING id, name, url, events;
