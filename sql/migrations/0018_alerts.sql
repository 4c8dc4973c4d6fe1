-- 0018_alerts: notification channels per workspace, and the durable queue of the notifications sent to them.
--
-- A channel is a URL that hears chosen events (run.failed, agent.unhealthy, …), signed Standard-Webhooks-style
-- with its own whsec_ secret, sealed like an agent's (same keyring, a per-channel context). A notification is
-- one event for one channel: queued in the transaction that raised it, then claimed by a worker under a lease
-- token and sent, retried on the push retry schedule, and finally sent or failed. Deleting a channel deletes
-- its notifications (and its secret): nothing is left to send to a URL nobody wants any more.
CREATE TABLE notification_channel (
    id                   uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id         uuid NOT NULL REFERENCES workspace(id),
    name                 text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    url                  text NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
    events               text[] NOT NULL CHECK (cardinality(events) >= 1 AND events <@ ARRAY[
                             'run.failed', 'agent.unhealthy', 'agent.recovered', 'autopilot.paused',
                             'trigger.rejections_spike']::text[]),
    signing_secret_ct    bytea NOT NULL,
    signing_secret_hint  text NOT NULL,
    created_by           uuid REFERENCES member(id),
    created_at           timestamptz NOT NULL DEFAULT now()
);
-- Raising an event looks up the workspace's channels: an index probe, nothing when there are none.
CREATE INDEX notification_channel_workspace_idx ON notification_channel (workspace_id, id);

CREATE TABLE notification (
    id                uuid PRIMARY KEY DEFAULT hookgate_uuid7(),
    workspace_id      uuid NOT NULL REFERENCES workspace(id),
    channel_id        uuid NOT NULL REFERENCES notification_channel(id) ON DELETE CASCADE,
    event             text NOT NULL CHECK (event ~ '^[a-z][a-z_]*(\.[a-z][a-z_]*)*$'),
    payload           jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(payload) = 'object'),
    status            text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'sending', 'sent', 'failed')),
    attempt           integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    available_at      timestamptz NOT NULL DEFAULT now(),
    lease_token       uuid,
    lease_expires_at  timestamptz,
    last_error        text,
    response_status   integer,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    CHECK (status <> 'sending' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CHECK ((status IN ('sent', 'failed')) = (finished_at IS NOT NULL))
);
-- The sender's queue (due rows) and its recovery of a crashed sender's rows (expired leases): both small.
CREATE INDEX notification_due_idx ON notification (available_at) WHERE status = 'queued';
CREATE INDEX notification_lease_idx ON notification (lease_expires_at) WHERE status = 'sending';
-- Retention deletes old finished rows; deleting a channel finds its rows.
CREATE INDEX notification_finished_idx ON notification (finished_at) WHERE status IN ('sent', 'failed');
CREATE INDEX notification_channel_idx ON notification (channel_id);

-- trigger.rejections_spike: the maintenance job counts a trigger's rejected deliveries of the last minutes.
-- Rejected rows are written once, by ingress, and are few next to accepted ones: this partial index holds
-- only them, so accepted deliveries cost ingress nothing more than the predicate's evaluation.
CREATE INDEX webhook_delivery_rejected_idx ON webhook_delivery (received_at, trigger_id) WHERE status = 'rejected';

-- When a trigger's last rejections spike was raised: at most one per trigger per window, whichever scheduler
-- (or a restarted one) runs the job, since the row is claimed with a guarded upsert.
CREATE TABLE trigger_rejection_alert (
    trigger_id  uuid PRIMARY KEY REFERENCES autopilot_trigger(id) ON DELETE CASCADE,
    raised_at   timestamptz NOT NULL
);
