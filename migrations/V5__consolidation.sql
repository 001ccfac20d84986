-- V5: consolidation bookkeeping.
--
-- consolidation_state holds one row per tenant; a consolidator takes a
-- tenant by locking its row (FOR UPDATE SKIP LOCKED) in a transaction it
-- keeps open for the whole run: the lock is the lease. Other pods skip the
-- tenant while it is held; if the holder dies its connection closes, the
-- lock goes with it and another pod takes the tenant at its next poll.
--
-- consolidation_runs records every run (scheduled, manual, dry run) with the
-- result of each stage, for operators and the dashboard.

CREATE TABLE mneme.consolidation_state (
    tenant_id         uuid PRIMARY KEY REFERENCES mneme.tenants (id),
    last_started_at   timestamptz,
    last_finished_at  timestamptz,
    runs              bigint NOT NULL DEFAULT 0
);

CREATE TABLE mneme.consolidation_runs (
    tenant_id    uuid NOT NULL REFERENCES mneme.tenants (id),
    id           uuid NOT NULL,
    trigger      text NOT NULL CHECK (trigger IN ('schedule', 'manual')),
    dry_run      boolean NOT NULL,
    status       text NOT NULL CHECK (status IN ('finished', 'failed')),
    -- [{"stage": name, "affected": n, "millis": n, "error": text|null}]
    stages       jsonb NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX consolidation_runs_recent ON mneme.consolidation_runs (tenant_id, started_at DESC);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['consolidation_state', 'consolidation_runs'] LOOP
        EXECUTE format('ALTER TABLE mneme.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE mneme.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON mneme.%I
                            USING (tenant_id = mneme.current_tenant_id())
                            WITH CHECK (tenant_id = mneme.current_tenant_id())', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.%I TO mneme_service', t);
    END LOOP;
END
$$;
