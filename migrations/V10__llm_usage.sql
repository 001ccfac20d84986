-- V10: tokens the language model spent on each tenant per day (UTC), for
-- the per-tenant daily budget of the LLM-backed consolidation stages.
CREATE TABLE mneme.llm_usage (
    tenant_id  uuid NOT NULL REFERENCES mneme.tenants (id),
    day        date NOT NULL,
    tokens     bigint NOT NULL DEFAULT 0,
    calls      integer NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day)
);
ALTER TABLE mneme.llm_usage ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.llm_usage FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.llm_usage
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.llm_usage TO mneme_service;
