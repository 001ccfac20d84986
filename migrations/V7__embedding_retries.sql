-- V7: a fragment whose text the embedding provider keeps rejecting must not
-- block its tenant's queue. Failed attempts are counted and retried with
-- backoff (embedding_retry_at); after the last one the fragment is parked
-- (embedding_parked_at) with the provider's reason, out of the queue. It is
-- still found by full text and keywords.
ALTER TABLE mneme.fragments
    ADD COLUMN embedding_attempts   smallint NOT NULL DEFAULT 0,
    ADD COLUMN embedding_retry_at   timestamptz,
    ADD COLUMN embedding_parked_at  timestamptz,
    ADD COLUMN embedding_error      text;

DROP INDEX mneme.fragments_embedding_queue;
CREATE INDEX fragments_embedding_queue ON mneme.fragments (tenant_id, created_at)
    WHERE embedding IS NULL AND embedding_parked_at IS NULL;
