-- V2: key groups, amendment history, cases and their events, feedback, and
-- search observability. Every table is tenant-owned: it carries tenant_id,
-- names it in its primary key, and is under forced row-level security.

-- When the remembered thing happened, if the agent knows (time-range filters
-- use it before created_at).
ALTER TABLE mneme.fragments ADD COLUMN occurred_at timestamptz;
CREATE INDEX fragments_case ON mneme.fragments (tenant_id, case_id) WHERE case_id IS NOT NULL;
CREATE INDEX fragments_session ON mneme.fragments (tenant_id, session_id, created_at)
    WHERE session_id IS NOT NULL;

-- Keys of one tenant that read each other's fragments.
CREATE TABLE mneme.key_groups (
    tenant_id    uuid NOT NULL REFERENCES mneme.tenants (id),
    id           uuid NOT NULL,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    description  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, name)
);

CREATE TABLE mneme.key_group_members (
    tenant_id  uuid NOT NULL,
    group_id   uuid NOT NULL,
    key_id     uuid NOT NULL,
    PRIMARY KEY (tenant_id, group_id, key_id),
    FOREIGN KEY (tenant_id, group_id) REFERENCES mneme.key_groups (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, key_id) REFERENCES mneme.api_keys (tenant_id, id)
);
CREATE INDEX key_group_members_key ON mneme.key_group_members (tenant_id, key_id);

-- The state of a fragment before each amendment.
CREATE TABLE mneme.fragment_versions (
    tenant_id    uuid NOT NULL,
    id           bigserial,
    fragment_id  uuid NOT NULL,
    content      text NOT NULL,
    topic        text NOT NULL,
    keywords     text[] NOT NULL,
    type         text NOT NULL,
    importance   real NOT NULL,
    is_anchor    boolean NOT NULL,
    amended_by   uuid NOT NULL,
    amended_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, fragment_id) REFERENCES mneme.fragments (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX fragment_versions_fragment ON mneme.fragment_versions (tenant_id, fragment_id, id);

-- Cases: what happened while working on one problem, as a DAG of events.
CREATE TABLE mneme.case_events (
    tenant_id           uuid NOT NULL,
    id                  uuid NOT NULL,
    key_id              uuid NOT NULL,
    case_id             text NOT NULL,
    session_id          text,
    event_type          text NOT NULL
                        CHECK (event_type IN ('milestone_reached', 'hypothesis_proposed',
                                              'hypothesis_rejected', 'decision_committed',
                                              'error_observed', 'fix_attempted',
                                              'verification_passed', 'verification_failed')),
    summary             text NOT NULL,
    entity_keys         text[] NOT NULL DEFAULT '{}',
    source_fragment_id  uuid,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, source_fragment_id) REFERENCES mneme.fragments (tenant_id, id)
        ON DELETE SET NULL (source_fragment_id)
);
CREATE INDEX case_events_case ON mneme.case_events (tenant_id, case_id, created_at);
CREATE INDEX case_events_session ON mneme.case_events (tenant_id, session_id, created_at);
CREATE INDEX case_events_entities ON mneme.case_events USING gin (entity_keys);

CREATE TABLE mneme.case_event_edges (
    tenant_id   uuid NOT NULL,
    from_event  uuid NOT NULL,
    to_event    uuid NOT NULL,
    edge_type   text NOT NULL
                CHECK (edge_type IN ('caused_by', 'resolved_by', 'preceded_by', 'contradicts')),
    confidence  real NOT NULL DEFAULT 1.0 CHECK (confidence BETWEEN 0 AND 1),
    PRIMARY KEY (tenant_id, from_event, to_event, edge_type),
    CHECK (from_event <> to_event),
    FOREIGN KEY (tenant_id, from_event) REFERENCES mneme.case_events (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, to_event) REFERENCES mneme.case_events (tenant_id, id) ON DELETE CASCADE
);

CREATE TABLE mneme.fragment_evidence (
    tenant_id    uuid NOT NULL,
    fragment_id  uuid NOT NULL,
    event_id     uuid NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('supports', 'contradicts', 'produced_by')),
    confidence   real NOT NULL DEFAULT 1.0 CHECK (confidence BETWEEN 0 AND 1),
    PRIMARY KEY (tenant_id, fragment_id, event_id, kind),
    FOREIGN KEY (tenant_id, fragment_id) REFERENCES mneme.fragments (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, event_id) REFERENCES mneme.case_events (tenant_id, id) ON DELETE CASCADE
);

-- Audit of link-weight learning. Rows outlive the links they describe.
CREATE TABLE mneme.link_reconsolidations (
    tenant_id       uuid NOT NULL,
    id              bigserial,
    from_id         uuid NOT NULL,
    to_id           uuid NOT NULL,
    relation_type   text NOT NULL,
    action          text NOT NULL
                    CHECK (action IN ('reinforce', 'decay', 'quarantine', 'restore', 'soft_delete')),
    old_weight      real NOT NULL,
    new_weight      real NOT NULL,
    old_confidence  real NOT NULL,
    new_confidence  real NOT NULL,
    reason          text,
    key_id          uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX link_reconsolidations_link
    ON mneme.link_reconsolidations (tenant_id, from_id, to_id, created_at);

-- One row per recall: what ran, how long it took, how much it found.
CREATE TABLE mneme.search_events (
    tenant_id       uuid NOT NULL,
    id              bigserial,
    key_id          uuid NOT NULL,
    session_id      text,
    query_type      text NOT NULL
                    CHECK (query_type IN ('text', 'keywords', 'topic', 'mixed', 'browse')),
    layers          text[] NOT NULL,
    vector_count    integer NOT NULL DEFAULT 0,
    fulltext_count  integer NOT NULL DEFAULT 0,
    keyword_count   integer NOT NULL DEFAULT 0,
    graph_count     integer NOT NULL DEFAULT 0,
    result_count    integer NOT NULL,
    latency_ms      real NOT NULL,
    filter_keys     text[] NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
) PARTITION BY HASH (tenant_id);

DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format(
            'CREATE TABLE mneme.search_events_p%1$s PARTITION OF mneme.search_events
                 FOR VALUES WITH (MODULUS 16, REMAINDER %2$s)',
            lpad(i::text, 2, '0'), i);
    END LOOP;
END
$$;
CREATE INDEX search_events_recent ON mneme.search_events (tenant_id, key_id, created_at);

CREATE TABLE mneme.tool_feedback (
    tenant_id        uuid NOT NULL,
    id               bigserial,
    key_id           uuid NOT NULL,
    session_id       text,
    tool_name        text NOT NULL,
    relevant         boolean NOT NULL,
    sufficient       boolean NOT NULL,
    suggestion       text,
    context          text,
    trigger_type     text NOT NULL DEFAULT 'voluntary'
                     CHECK (trigger_type IN ('sampled', 'voluntary')),
    search_event_id  bigint,
    fragment_ids     uuid[] NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX tool_feedback_recent ON mneme.tool_feedback (tenant_id, created_at);

CREATE TABLE mneme.task_feedback (
    tenant_id         uuid NOT NULL,
    id                bigserial,
    key_id            uuid NOT NULL,
    session_id        text,
    overall_success   boolean NOT NULL,
    tool_highlights   text[] NOT NULL DEFAULT '{}',
    tool_pain_points  text[] NOT NULL DEFAULT '{}',
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

-- The adaptive similarity floor, learned per key, query type and hour.
CREATE TABLE mneme.search_param_thresholds (
    tenant_id           uuid NOT NULL,
    key_id              uuid NOT NULL,
    query_type          text NOT NULL,
    hour_bucket         smallint NOT NULL CHECK (hour_bucket BETWEEN 0 AND 23),
    min_similarity      real NOT NULL,
    sample_count        integer NOT NULL DEFAULT 0,
    total_result_count  bigint NOT NULL DEFAULT 0,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key_id, query_type, hour_bucket)
);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['key_groups', 'key_group_members', 'fragment_versions', 'case_events',
                             'case_event_edges', 'fragment_evidence', 'link_reconsolidations',
                             'search_events', 'tool_feedback', 'task_feedback',
                             'search_param_thresholds'] LOOP
        EXECUTE format('ALTER TABLE mneme.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE mneme.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON mneme.%I
                            USING (tenant_id = mneme.current_tenant_id())
                            WITH CHECK (tenant_id = mneme.current_tenant_id())', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.%I TO mneme_service', t);
    END LOOP;
END
$$;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA mneme TO mneme_service;
