-- V14: the OAuth authorization server's registered clients and refresh
-- tokens. Authorization codes live in Redis (minutes, single use); access
-- tokens are signed JWTs and stored nowhere.

-- Clients registered through RFC 7591 (DCR). They are platform records,
-- like tenants: a connector registers before anyone has signed in, so a
-- client belongs to no tenant unless an API key bound it at registration.
-- Clients identified by a metadata-document URL (CIMD) are not stored.
CREATE TABLE mneme.oauth_clients (
    client_id          text PRIMARY KEY,
    client_name        text NOT NULL CHECK (length(client_name) BETWEEN 1 AND 200),
    redirect_uris      text[] NOT NULL CHECK (cardinality(redirect_uris) BETWEEN 1 AND 20),
    token_endpoint_auth_method text NOT NULL
                       CHECK (token_endpoint_auth_method IN ('none', 'client_secret_post', 'client_secret_basic')),
    -- SHA-256 of the secret, for confidential clients.
    client_secret_hash bytea,
    -- Set when an API key registered the client: it may act only as that key.
    bound_tenant_id    uuid,
    bound_key_id       uuid,
    created_at         timestamptz NOT NULL DEFAULT now(),
    last_used_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((bound_tenant_id IS NULL) = (bound_key_id IS NULL)),
    FOREIGN KEY (bound_tenant_id, bound_key_id) REFERENCES mneme.api_keys (tenant_id, id)
);
CREATE INDEX oauth_clients_last_used ON mneme.oauth_clients (last_used_at);

-- Refresh tokens, stored as SHA-256 hashes. Each use replaces a token by a
-- new one of the same family; presenting a replaced token again means it
-- leaked, and the whole family is revoked.
CREATE TABLE mneme.oauth_refresh_tokens (
    id           uuid PRIMARY KEY,
    family_id    uuid NOT NULL,
    tenant_id    uuid NOT NULL,
    key_id       uuid NOT NULL,
    client_id    text NOT NULL,
    subject      text NOT NULL,
    scope        text NOT NULL,
    resource     text NOT NULL,
    token_hash   bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    replaced_at  timestamptz,
    revoked_at   timestamptz,
    FOREIGN KEY (tenant_id, key_id) REFERENCES mneme.api_keys (tenant_id, id)
);
CREATE INDEX oauth_refresh_tokens_family ON mneme.oauth_refresh_tokens (tenant_id, family_id);
CREATE INDEX oauth_refresh_tokens_expiry ON mneme.oauth_refresh_tokens (expires_at);

ALTER TABLE mneme.oauth_refresh_tokens ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.oauth_refresh_tokens FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.oauth_refresh_tokens
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
-- The token endpoint must find a token before it knows the tenant: it may
-- read the one row whose (unguessable) hash it names.
CREATE POLICY token_resolution ON mneme.oauth_refresh_tokens FOR SELECT
    USING (token_hash = decode(current_setting('mneme.refresh_token_hash', true), 'hex'));

GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.oauth_clients TO mneme_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.oauth_refresh_tokens TO mneme_service;
