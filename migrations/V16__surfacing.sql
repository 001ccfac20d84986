-- V16: active surfacing. Every surfacing that injected memories is an event;
-- agents rate events (or single memories of them); ratings drive demotion
-- and the per (tenant, server, tool) auto-tuned relevance threshold.

CREATE TABLE mneme.surfacing_events (
    tenant_id    uuid NOT NULL,
    -- Random, shown to the agent in the injected block and cited back in
    -- feedback; unguessable so one key cannot probe another's events.
    id           text NOT NULL,
    key_id       uuid NOT NULL,
    agent_id     text NOT NULL,
    session_id   text,
    server       text NOT NULL,
    tool         text NOT NULL,
    -- The query as text, a `sha256:` digest (MNEME_SURFACING_PERSIST_QUERY_TEXT
    -- off, or a sensitive query), or NULL once MNEME_SURFACING_QUERY_RETENTION_DAYS passed.
    query        text,
    query_stage  text NOT NULL,
    memory_ids   uuid[] NOT NULL,
    relevances   real[] NOT NULL,
    min_score    real NOT NULL,
    trace_id     text,
    source       text NOT NULL CHECK (source IN ('proxy', 'hook', 'api')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX surfacing_events_recent ON mneme.surfacing_events (tenant_id, created_at);
CREATE INDEX surfacing_events_tool ON mneme.surfacing_events (tenant_id, server, tool, created_at);

CREATE TABLE mneme.surfacing_feedback (
    tenant_id     uuid NOT NULL,
    id            bigserial,
    surfacing_id  text NOT NULL,
    key_id        uuid NOT NULL,
    -- NULL: the rating is for the whole event (every delivered memory).
    memory_id     uuid,
    rating        text NOT NULL
                  CHECK (rating IN ('helpful', 'partially_helpful', 'not_relevant', 'already_known')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, surfacing_id) REFERENCES mneme.surfacing_events (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX surfacing_feedback_event ON mneme.surfacing_feedback (tenant_id, surfacing_id);
CREATE INDEX surfacing_feedback_negative ON mneme.surfacing_feedback (tenant_id, key_id)
    WHERE rating IN ('not_relevant', 'already_known');

-- The tuned threshold per (tenant, server, tool), and the ratings gathered
-- since it last moved (the tuner decides on those only, so it never drifts
-- without new feedback).
CREATE TABLE mneme.surfacing_thresholds (
    tenant_id          uuid NOT NULL,
    server             text NOT NULL,
    tool               text NOT NULL,
    min_score          real NOT NULL CHECK (min_score >= 0 AND min_score <= 1),
    helpful            integer NOT NULL DEFAULT 0,
    partially_helpful  integer NOT NULL DEFAULT 0,
    not_relevant       integer NOT NULL DEFAULT 0,
    already_known      integer NOT NULL DEFAULT 0,
    last_direction     text CHECK (last_direction IN ('raise', 'lower')),
    adjustments        integer NOT NULL DEFAULT 0,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, server, tool)
);

-- Every move of a tuned threshold, for operators and the stats tool.
CREATE TABLE mneme.surfacing_threshold_adjustments (
    tenant_id       uuid NOT NULL,
    id              bigserial,
    server          text NOT NULL,
    tool            text NOT NULL,
    from_score      real NOT NULL,
    to_score        real NOT NULL,
    negative_share  real NOT NULL,
    helpful_share   real NOT NULL,
    samples         integer NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['surfacing_events', 'surfacing_feedback',
                             'surfacing_thresholds', 'surfacing_threshold_adjustments'] LOOP
        EXECUTE format('ALTER TABLE mneme.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE mneme.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON mneme.%I
                            USING (tenant_id = mneme.current_tenant_id())
                            WITH CHECK (tenant_id = mneme.current_tenant_id())', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.%I TO mneme_service', t);
    END LOOP;
END $$;
GRANT USAGE ON SEQUENCE mneme.surfacing_feedback_id_seq, mneme.surfacing_threshold_adjustments_id_seq
    TO mneme_service;
