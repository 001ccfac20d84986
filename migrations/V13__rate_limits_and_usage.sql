-- V13: per-tenant and per-key rate-limit overrides, and the daily count of
-- tool calls per key that gateway pods flush from their counters.

-- Requests per rate-limit window (MNEME_RATE_LIMIT_WINDOW_SECS); NULL means
-- the deployment default (MNEME_RATE_LIMIT_TENANT / MNEME_RATE_LIMIT_KEY).
ALTER TABLE mneme.tenants
    ADD COLUMN rate_limit integer CHECK (rate_limit > 0);
ALTER TABLE mneme.api_keys
    ADD COLUMN rate_limit integer CHECK (rate_limit > 0);

CREATE TABLE mneme.api_key_usage (
    tenant_id   uuid NOT NULL,
    key_id      uuid NOT NULL,
    day         date NOT NULL,
    tool_calls  bigint NOT NULL DEFAULT 0 CHECK (tool_calls >= 0),
    PRIMARY KEY (tenant_id, key_id, day),
    FOREIGN KEY (tenant_id, key_id) REFERENCES mneme.api_keys (tenant_id, id)
);
ALTER TABLE mneme.api_key_usage ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.api_key_usage FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.api_key_usage
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.api_key_usage TO mneme_service;
