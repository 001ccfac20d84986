-- V17: a tenant's upstream MCP servers, re-exposed through mneme's proxy as
-- `prefix__tool`. Numeric settings left NULL follow the operator's defaults
-- (MNEME_PROXY_*), so changing a default reaches every upstream that never
-- chose its own.

CREATE TABLE mneme.upstream_servers (
    tenant_id          uuid NOT NULL REFERENCES mneme.tenants (id),
    id                 uuid NOT NULL,
    name               text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    prefix             text NOT NULL CHECK (prefix ~ '^[a-z0-9][a-z0-9_-]{0,23}$' AND prefix NOT LIKE '%\_\_%'),
    transport          text NOT NULL CHECK (transport IN ('streamable_http', 'sse')),
    url                text NOT NULL,
    -- XChaCha20-Poly1305 of the JSON header map (nonce first), keyed by
    -- MNEME_PROXY_HEADER_KEY; NULL when there are no headers. Never returned
    -- by any API.
    headers_sealed     bytea,
    header_names       text[] NOT NULL DEFAULT '{}',
    enabled            boolean NOT NULL DEFAULT true,
    surfacing_enabled  boolean NOT NULL DEFAULT true,
    exclude_tools      text[] NOT NULL DEFAULT '{}',
    compression        text CHECK (compression IN ('none', 'truncate', 'progressive')),
    max_result_chars   integer CHECK (max_result_chars > 0),
    cache_ttl_secs     integer CHECK (cache_ttl_secs >= 0),
    connect_timeout_ms integer CHECK (connect_timeout_ms > 0),
    call_timeout_ms    integer CHECK (call_timeout_ms > 0),
    overall_timeout_ms integer CHECK (overall_timeout_ms > 0),
    max_retries        integer CHECK (max_retries >= 0 AND max_retries <= 10),
    breaker_failures   integer CHECK (breaker_failures >= 0),
    breaker_reset_ms   integer CHECK (breaker_reset_ms > 0),
    max_concurrency    integer CHECK (max_concurrency > 0),
    -- Per upstream tool: {"tool": {"compression", "maxResultChars",
    -- "cacheTtlSecs", "hidden", "description"}}.
    tool_overrides     jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(tool_overrides) = 'object'),
    -- Bumped on every change: pods compare it to drop stale connections.
    version            bigint NOT NULL DEFAULT 1,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, name),
    UNIQUE (tenant_id, prefix)
);

ALTER TABLE mneme.upstream_servers ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.upstream_servers FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.upstream_servers
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.upstream_servers TO mneme_service;
