-- V26: full-text documents label where each term comes from.
--
-- A fragment's `search_tsv` now carries its topic's positions with weight
-- A and its keywords' with B (content stays D, unlabelled), so that recall
-- can count a query term naming a memory's topic more than one the memory
-- mentions in passing (MNEME_RECALL_FULLTEXT_TOPIC_WEIGHT; see
-- `mneme_core::text::Field` and docs/BENCHMARKS.md). Documents written
-- before are unlabelled: they keep matching as before, and the
-- consolidator's `search_reindex` stage tokenises them again.
--
-- `search_version` is the tokenisation a document was written with
-- (`mneme_core::text::SEARCH_DOCUMENT_VERSION`). Existing rows are
-- version 1; new rows take the column default, which moves with every
-- change of the rules. The partial index finds a tenant's stale documents
-- without reading the current ones, and is empty once they are all redone.
ALTER TABLE mneme.fragments ADD COLUMN search_version smallint NOT NULL DEFAULT 1;
ALTER TABLE mneme.fragments ALTER COLUMN search_version SET DEFAULT 2;

CREATE INDEX fragments_stale_search_documents
    ON mneme.fragments (tenant_id)
    WHERE search_version < 2;
