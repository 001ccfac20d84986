-- V18: the operators of the platform, and the audit log of the admin API.

-- Platform admins run the whole service: they create and suspend tenants
-- and may act in any of them. They belong to no tenant, so the table has
-- no row-level security; only the admin API and the CLI read it.
CREATE TABLE mneme.platform_admins (
    id             uuid PRIMARY KEY,
    email          text NOT NULL UNIQUE
                   CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 254
                          AND email ~ '^[^@[:space:]]+@[^@[:space:]]+$'),
    password_hash  text NOT NULL,
    status         text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    last_login_at  timestamptz
);
GRANT SELECT, INSERT, UPDATE ON mneme.platform_admins TO mneme_service;

-- Who changed what in a tenant through the admin API, when, and from where.
-- Rows about a tenant (even its creation by a platform admin) belong to
-- that tenant, so its admins see them and no other tenant does.
CREATE TABLE mneme.admin_audit (
    tenant_id   uuid NOT NULL REFERENCES mneme.tenants (id),
    id          bigserial,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    actor_kind  text NOT NULL CHECK (actor_kind IN ('platform', 'user', 'cli')),
    action      text NOT NULL,
    target      text NOT NULL DEFAULT '',
    detail      jsonb NOT NULL DEFAULT '{}',
    ip          inet,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX admin_audit_recent ON mneme.admin_audit (tenant_id, id DESC);
ALTER TABLE mneme.admin_audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.admin_audit FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.admin_audit
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
-- Append-only: the service may write and read entries, never change them.
GRANT SELECT, INSERT ON mneme.admin_audit TO mneme_service;
GRANT USAGE ON SEQUENCE mneme.admin_audit_id_seq TO mneme_service;
