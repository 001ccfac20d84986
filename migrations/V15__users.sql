-- V15: the people of a tenant. They sign in (with email and password) to
-- approve connectors and, later, the dashboard; API keys stay the
-- credentials of agents.

CREATE TABLE mneme.users (
    id                   uuid PRIMARY KEY,
    tenant_id            uuid NOT NULL REFERENCES mneme.tenants (id),
    -- Lower-cased; unique across tenants, so sign-in needs no tenant name.
    email                text NOT NULL UNIQUE
                         CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 254
                                AND email ~ '^[^@[:space:]]+@[^@[:space:]]+$'),
    password_hash        text NOT NULL,
    role                 text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    status               text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    created_at           timestamptz NOT NULL DEFAULT now(),
    password_changed_at  timestamptz NOT NULL DEFAULT now(),
    last_login_at        timestamptz,
    UNIQUE (tenant_id, id)
);

ALTER TABLE mneme.users ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.users FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.users
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
-- Sign-in finds an account before it knows the tenant: it may read the one
-- row whose email it names.
CREATE POLICY user_resolution ON mneme.users FOR SELECT
    USING (email = current_setting('mneme.user_email', true));

GRANT SELECT, INSERT, UPDATE ON mneme.users TO mneme_service;
