-- V30: the keyword index holds each keyword hashed with its tenant.
--
-- The (tenant_id, keywords) index of V23 answers `tenant_id = $1 AND
-- keywords && …` by intersecting the keywords' posting lists with the
-- tenant's, and the tenant's lists every memory of the tenant. Each search
-- read that list again: the automatic `related` links of a batch of 200
-- memories probe the index 3,000 times, and on a 25,000-memory tenant each
-- probe read 27 index pages, 6 with an index on the keywords alone. The
-- probes then took 1.0-1.8 s a batch instead of 0.5 s, and more as the
-- tenant grew (docs/BENCHMARKS.md, "Keyword hashes per tenant").
--
-- `keyword_hashes` holds a 64-bit hash of each keyword seeded with the
-- tenant, so one entry of its index lists one tenant's memories carrying
-- one keyword: a search reads only the entries it names, however large the
-- tenant and however many other tenants share the partition. Searches
-- compare the hashes (`keyword_hashes && mneme.keyword_hashes($1, …)`) and,
-- where a hash collision would matter, the keywords themselves.
--
-- A stored generated column rather than an index on the expression: under
-- row-level security an index serves only leakproof conditions (V23), a
-- function applied to a row's columns is leakproof only if a superuser
-- marks it so, and a migration cannot. Comparing a column with `&&`
-- (arrayoverlap, marked by the set-up) needs nothing more.
--
-- Adding the column rewrites every partition and rebuilds its indexes,
-- the HNSW graphs included, under an exclusive lock: 9.7 s for 25,709
-- memories on 2 cores with maintenance_work_mem = 2GB (docs/OPERATIONS.md,
-- "Migrations").
CREATE FUNCTION mneme.keyword_hashes(tenant uuid, keywords text[]) RETURNS bigint[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN ARRAY(SELECT pg_catalog.hashtextextended(keyword, pg_catalog.uuid_hash_extended(tenant, 0))
                   FROM pg_catalog.unnest(keywords) AS keyword);

ALTER TABLE mneme.fragments
    ADD COLUMN keyword_hashes bigint[] GENERATED ALWAYS AS (mneme.keyword_hashes(tenant_id, keywords)) STORED;

CREATE INDEX fragments_keyword_hashes ON mneme.fragments USING gin (keyword_hashes);
DROP INDEX mneme.fragments_tenant_keywords;

-- Without a pending list, as every GIN index here (V25); a partitioned
-- index takes no storage parameters, so each partition's is set.
DO $$
DECLARE
    index_name regclass;
BEGIN
    FOR index_name IN
        SELECT inhrelid::regclass FROM pg_inherits
         WHERE inhparent = 'mneme.fragments_keyword_hashes'::regclass
    LOOP
        EXECUTE format('ALTER INDEX %s SET (fastupdate = off)', index_name);
    END LOOP;
END
$$;
