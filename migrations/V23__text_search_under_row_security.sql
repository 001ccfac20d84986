-- V23: full-text and keyword search use their indexes under row-level
-- security.
--
-- Row-level security evaluates a query's own conditions after the policy,
-- unless they are leakproof; `tsvector @@ tsquery` (ts_match_vq) and
-- `anyarray && anyarray` (arrayoverlap) are not marked so. For the service
-- role the GIN indexes could therefore never answer `search_tsv @@ q` or
-- `keywords && $n`: every full-text and keyword search read all of the
-- tenant's memories and filtered them (on a 100,000-memory tenant, 22,000
-- buffers and 750 ms per full-text query under load; docs/BENCHMARKS.md).
--
-- 1. Both functions are marked LEAKPROOF. They raise no error that depends
--    on a row's content, and RLS here is a safety net under mneme's own
--    tenant predicates, not a barrier against SQL written by tenants (they
--    never write SQL). Only a superuser may do this: when migrations run as
--    the database owner, the block below leaves a notice, and the services
--    warn at start-up (docs/OPERATIONS.md, "Search operators") until a
--    superuser runs the two ALTER FUNCTION statements, as
--    deploy/local/setup.sh and deploy/docker/initdb.sql do.
-- 2. The indexes lead with tenant_id (btree_gin, a trusted extension), so
--    the index itself intersects the tenant with the term instead of
--    returning every tenant's matches of the partition: on a test
--    partition of 40 tenants x 10,000 memories, a term with 59 matches in
--    the tenant (3,234 in the partition) read 12 index pages instead of 80.
--    key_id is not an index column: queries name a set of keys (`= ANY`),
--    which a GIN index cannot search.
--
-- On a large existing deployment, build the new indexes on each partition
-- with CREATE INDEX CONCURRENTLY first: CREATE INDEX on the parent then
-- attaches them instead of building under a write lock.
DO $$
BEGIN
    ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF;
    ALTER FUNCTION pg_catalog.arrayoverlap(anyarray, anyarray) LEAKPROOF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'ts_match_vq and arrayoverlap need a superuser to be marked LEAKPROOF; '
        'until then full-text and keyword search scan every memory of a tenant';
END
$$;

CREATE EXTENSION IF NOT EXISTS btree_gin;

CREATE INDEX IF NOT EXISTS fragments_tenant_search_tsv
    ON mneme.fragments USING gin (tenant_id, search_tsv);
CREATE INDEX IF NOT EXISTS fragments_tenant_keywords
    ON mneme.fragments USING gin (tenant_id, keywords);
DROP INDEX IF EXISTS mneme.fragments_search_tsv;
DROP INDEX IF EXISTS mneme.fragments_keywords;
