-- V21: automatic reflection of idle and closed MCP sessions. The activity
-- log itself is in Redis (bounded, may be lost); this table is the durable
-- claim that makes each stretch of a session's activity reflected once
-- across every remember pod, and the record of what came of it.
CREATE TABLE mneme.session_reflections (
    tenant_id      uuid NOT NULL,
    session_id     text NOT NULL,
    -- The last activity the reflection covers (Unix ms): a session that is
    -- used again after being reflected gets a new row for the new stretch.
    activity_until bigint NOT NULL,
    key_id         uuid NOT NULL,
    state          text NOT NULL
                   CHECK (state IN ('claimed', 'reflected', 'skipped', 'failed', 'paused')),
    -- Why a reflection was skipped, failed or paused (`nothing worth
    -- keeping`, `token budget of the day spent`, ...).
    reason         text,
    calls          int NOT NULL DEFAULT 0,
    fragments      int NOT NULL DEFAULT 0,
    episode_id     uuid,
    attempts       int NOT NULL DEFAULT 1,
    claimed_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    PRIMARY KEY (tenant_id, session_id, activity_until)
);
CREATE INDEX session_reflections_recent ON mneme.session_reflections (tenant_id, claimed_at DESC);

ALTER TABLE mneme.session_reflections ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.session_reflections FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.session_reflections
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.session_reflections TO mneme_service;
