-- V1: tenants, API keys, fragments and their links.
--
-- Isolation is enforced three times (docs/ARCHITECTURE.md, "Tenancy"):
--   1. every query names tenant_id;
--   2. the big tables are hash-partitioned by tenant_id, so each tenant's rows
--      and its HNSW graph live in one partition;
--   3. row-level security, forced even for the table owner, filters every
--      tenant-owned table by the `mneme.tenant_id` transaction setting.
-- Services connect as a role that is granted `mneme_service` and owns nothing.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE SCHEMA IF NOT EXISTS mneme;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mneme_service') THEN
        CREATE ROLE mneme_service NOLOGIN;
    END IF;
END
$$;

-- The tenant of the current transaction, set with
-- `SELECT set_config('mneme.tenant_id', $1, true)`. Unset → NULL → no rows.
CREATE FUNCTION mneme.current_tenant_id() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('mneme.tenant_id', true), '')::uuid $$;

-- Tenants are the platform's registry of customers, not tenant-owned data,
-- so they carry no row-level security (platform operations list them).
CREATE TABLE mneme.tenants (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE
                CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    status      text NOT NULL DEFAULT 'active'
                CHECK (status IN ('active', 'suspended')),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- API keys: `mn_<key_prefix>_<secret>`. Only SHA-256 of the whole key is
-- stored; the key is shown once, when it is created.
CREATE TABLE mneme.api_keys (
    id                 uuid PRIMARY KEY,
    tenant_id          uuid NOT NULL REFERENCES mneme.tenants (id),
    name               text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    key_prefix         text NOT NULL UNIQUE,
    secret_hash        bytea NOT NULL,
    permissions        text[] NOT NULL
                       CHECK (cardinality(permissions) > 0
                              AND permissions <@ ARRAY['read', 'write', 'admin']),
    status             text NOT NULL DEFAULT 'active'
                       CHECK (status IN ('active', 'revoked')),
    default_workspace  text,
    default_mode       text,
    -- NULL = unlimited. Enforced by the remember service.
    fragment_limit     integer CHECK (fragment_limit >= 0),
    daily_call_limit   integer CHECK (daily_call_limit >= 0),
    expires_at         timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    last_used_at       timestamptz,
    UNIQUE (tenant_id, id),
    UNIQUE (tenant_id, name)
);

-- Fragments: the memories. Columns follow the LTM reference data model.
CREATE TABLE mneme.fragments (
    tenant_id          uuid NOT NULL,
    id                 uuid NOT NULL,
    -- Keys are revoked, never deleted, so a fragment never loses its owner.
    key_id             uuid NOT NULL,
    agent_id           text NOT NULL DEFAULT 'default',
    workspace          text,
    session_id         text,
    content            text NOT NULL,
    content_hash       text NOT NULL,
    topic              text NOT NULL,
    keywords           text[] NOT NULL DEFAULT '{}',
    type               text NOT NULL
                       CHECK (type IN ('fact', 'decision', 'error', 'preference',
                                       'procedure', 'relation', 'episode')),
    importance         real NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    ttl_tier           text NOT NULL DEFAULT 'warm'
                       CHECK (ttl_tier IN ('short', 'hot', 'warm', 'cold', 'permanent')),
    is_anchor          boolean NOT NULL DEFAULT false,
    utility_score      real NOT NULL DEFAULT 1.0,
    access_count       integer NOT NULL DEFAULT 0,
    accessed_at        timestamptz,
    ema_activation     real NOT NULL DEFAULT 0,
    valid_from         timestamptz NOT NULL DEFAULT now(),
    valid_to           timestamptz,
    case_id            text,
    goal               text,
    outcome            text,
    phase              text,
    resolution_status  text CHECK (resolution_status IN ('open', 'resolved', 'abandoned')),
    assertion_status   text NOT NULL DEFAULT 'observed'
                       CHECK (assertion_status IN ('observed', 'inferred', 'verified', 'rejected')),
    affect             text NOT NULL DEFAULT 'neutral'
                       CHECK (affect IN ('neutral', 'frustration', 'confidence', 'surprise',
                                         'doubt', 'satisfaction')),
    context_summary    text,
    source             text,
    idempotency_key    text,
    estimated_tokens   integer NOT NULL DEFAULT 0,
    quality_verified   boolean,
    last_decay_at      timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    -- Filled after commit by the embedding worker; NULL = still queued.
    -- The dimension is a deploy setting (MNEME_EMBED_DIM); services refuse to
    -- start when it differs from this column.
    embedding          vector(384),
    embedding_model    text,
    -- Lexemes computed in Rust (mneme_core::text), so Korean and English are
    -- tokenised identically for documents and queries.
    search_tsv         tsvector NOT NULL DEFAULT ''::tsvector,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, key_id) REFERENCES mneme.api_keys (tenant_id, id),
    UNIQUE (tenant_id, key_id, content_hash),
    UNIQUE (tenant_id, key_id, idempotency_key)
) PARTITION BY HASH (tenant_id);

CREATE TABLE mneme.fragment_links (
    tenant_id         uuid NOT NULL,
    from_id           uuid NOT NULL,
    to_id             uuid NOT NULL,
    relation_type     text NOT NULL
                      CHECK (relation_type IN ('related', 'caused_by', 'resolved_by', 'part_of',
                                               'contradicts', 'superseded_by', 'co_retrieved',
                                               'temporal')),
    weight            real NOT NULL DEFAULT 1.0,
    confidence        real NOT NULL DEFAULT 1.0 CHECK (confidence BETWEEN 0 AND 1),
    quarantine_state  text CHECK (quarantine_state IN ('soft', 'released')),
    deleted_at        timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, from_id, to_id, relation_type),
    CHECK (from_id <> to_id),
    FOREIGN KEY (tenant_id, from_id) REFERENCES mneme.fragments (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, to_id) REFERENCES mneme.fragments (tenant_id, id) ON DELETE CASCADE
) PARTITION BY HASH (tenant_id);

DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format(
            'CREATE TABLE mneme.fragments_p%1$s PARTITION OF mneme.fragments
                 FOR VALUES WITH (MODULUS 16, REMAINDER %2$s)',
            lpad(i::text, 2, '0'), i);
        EXECUTE format(
            'CREATE TABLE mneme.fragment_links_p%1$s PARTITION OF mneme.fragment_links
                 FOR VALUES WITH (MODULUS 16, REMAINDER %2$s)',
            lpad(i::text, 2, '0'), i);
    END LOOP;
END
$$;

-- One HNSW graph per partition; queries run with hnsw.iterative_scan so the
-- tenant and key filters cannot starve the result.
CREATE INDEX fragments_embedding_hnsw ON mneme.fragments
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
CREATE INDEX fragments_search_tsv ON mneme.fragments USING gin (search_tsv);
CREATE INDEX fragments_keywords ON mneme.fragments USING gin (keywords);
CREATE INDEX fragments_key_recent ON mneme.fragments (tenant_id, key_id, created_at DESC);
CREATE INDEX fragments_topic ON mneme.fragments (tenant_id, topic);
-- The embedding queue: rows waiting for the worker.
CREATE INDEX fragments_embedding_queue ON mneme.fragments (tenant_id, created_at)
    WHERE embedding IS NULL;
CREATE INDEX fragment_links_to ON mneme.fragment_links (tenant_id, to_id);

-- Row-level security on every tenant-owned table.
ALTER TABLE mneme.api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.api_keys FORCE ROW LEVEL SECURITY;
ALTER TABLE mneme.fragments ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.fragments FORCE ROW LEVEL SECURITY;
ALTER TABLE mneme.fragment_links ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.fragment_links FORCE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON mneme.api_keys
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
-- Authentication must find a key before it knows the tenant. It may read the
-- one row whose (random, unguessable) prefix it names in `mneme.key_prefix`,
-- and then verifies the secret hash in constant time.
CREATE POLICY key_resolution ON mneme.api_keys FOR SELECT
    USING (key_prefix = current_setting('mneme.key_prefix', true));
CREATE POLICY tenant_isolation ON mneme.fragments
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());
CREATE POLICY tenant_isolation ON mneme.fragment_links
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());

GRANT USAGE ON SCHEMA mneme TO mneme_service;
GRANT EXECUTE ON FUNCTION mneme.current_tenant_id() TO mneme_service;
GRANT SELECT, INSERT, UPDATE ON mneme.tenants TO mneme_service;
GRANT SELECT, INSERT, UPDATE ON mneme.api_keys TO mneme_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.fragments, mneme.fragment_links TO mneme_service;
