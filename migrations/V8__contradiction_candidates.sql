-- V8: contradiction detection in consolidation. Each fragment is checked
-- once against similar older fragments of its key and topic
-- (contradiction_checked_at); pairs the rules decide are recorded with
-- their verdict, and very similar undecided pairs wait as `pending` for a
-- language model to judge.
ALTER TABLE mneme.fragments ADD COLUMN contradiction_checked_at timestamptz;

CREATE TABLE mneme.contradiction_candidates (
    tenant_id   uuid NOT NULL,
    newer_id    uuid NOT NULL,
    older_id    uuid NOT NULL,
    similarity  real NOT NULL,
    status      text NOT NULL CHECK (status IN ('pending', 'contradiction', 'compatible')),
    -- The rule or judge behind the verdict (`polarity`, `numeric_mismatch`, ...).
    reason      text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    decided_at  timestamptz,
    PRIMARY KEY (tenant_id, newer_id, older_id),
    FOREIGN KEY (tenant_id, newer_id) REFERENCES mneme.fragments (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, older_id) REFERENCES mneme.fragments (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX contradiction_candidates_pending ON mneme.contradiction_candidates (tenant_id, created_at)
    WHERE status = 'pending';

ALTER TABLE mneme.contradiction_candidates ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.contradiction_candidates FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.contradiction_candidates
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.contradiction_candidates TO mneme_service;
