-- V4: the symbolic layer (behind MNEME_SYMBOLIC_*): claims extracted from
-- fragments, and each key's opt-in to the policy hard gate.
--
-- Claims are tenant-owned like everything else: tenant_id leads the primary
-- key and every index, the table is hash-partitioned like the fragments it
-- describes, and row-level security is enabled and forced.

-- Whether writes of this key that break a policy rule are refused (true)
-- or only warned about (false). Set with SQL by an operator.
ALTER TABLE mneme.api_keys ADD COLUMN symbolic_hard_gate boolean NOT NULL DEFAULT false;

CREATE TABLE mneme.fragment_claims (
    tenant_id     uuid NOT NULL,
    id            bigserial,
    fragment_id   uuid NOT NULL,
    -- The key that wrote the fragment (always the fragment's own key).
    key_id        uuid NOT NULL,
    subject       text NOT NULL CHECK (length(subject) BETWEEN 1 AND 200),
    predicate     text NOT NULL CHECK (length(predicate) BETWEEN 1 AND 100),
    -- '' when the claim has no object, so the unique key below holds.
    object        text NOT NULL DEFAULT '' CHECK (length(object) <= 200),
    polarity      text NOT NULL CHECK (polarity IN ('positive', 'negative', 'uncertain')),
    confidence    real NOT NULL CHECK (confidence BETWEEN 0 AND 1),
    extractor     text NOT NULL CHECK (extractor IN ('rule', 'llm', 'manual')),
    rule_version  text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    -- One claim per statement and fragment; a repeated extraction is a no-op.
    UNIQUE (tenant_id, fragment_id, subject, predicate, object),
    FOREIGN KEY (tenant_id, fragment_id) REFERENCES mneme.fragments (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, key_id) REFERENCES mneme.api_keys (tenant_id, id)
) PARTITION BY HASH (tenant_id);

DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format(
            'CREATE TABLE mneme.fragment_claims_p%1$s PARTITION OF mneme.fragment_claims
                 FOR VALUES WITH (MODULUS 16, REMAINDER %2$s)',
            lpad(i::text, 2, '0'), i);
    END LOOP;
END
$$;

-- Polarity conflicts look up claims by statement.
CREATE INDEX fragment_claims_statement
    ON mneme.fragment_claims (tenant_id, subject, predicate, object);

ALTER TABLE mneme.fragment_claims ENABLE ROW LEVEL SECURITY;
ALTER TABLE mneme.fragment_claims FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mneme.fragment_claims
    USING (tenant_id = mneme.current_tenant_id())
    WITH CHECK (tenant_id = mneme.current_tenant_id());

GRANT SELECT, INSERT, UPDATE, DELETE ON mneme.fragment_claims TO mneme_service;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA mneme TO mneme_service;
