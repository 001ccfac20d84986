-- V27: new fragments waiting for their automatic links (temporal
-- neighbours, shared keywords).
--
-- A write enqueues its new fragments in its own transaction, so links can
-- no longer be lost to a crash or an in-memory queue that overflowed, and
-- an import is acknowledged without waiting for them. The remember service
-- drains the queue in batches with `FOR UPDATE SKIP LOCKED`, so any number
-- of its pods can share it. Fragment ids are UUIDv7, so the primary key
-- orders the queue by age; a fragment forgotten before it is linked simply
-- leaves its row to be taken and dropped.
CREATE TABLE mneme.auto_link_queue (
    tenant_id   uuid NOT NULL REFERENCES mneme.tenants (id),
    fragment_id uuid NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, fragment_id)
);
ALTER TABLE mneme.auto_link_queue ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.auto_link_queue FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.auto_link_queue
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
-- UPDATE: `FOR UPDATE` takes a batch.
GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.auto_link_queue TO mneme_service;
