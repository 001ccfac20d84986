-- V24: room on every fragments page for updated rows to stay there.
--
-- Recall's access statistics (and consolidation's decay) update rows all
-- the time without touching an indexed column. Such an update is "HOT"
-- (it adds no index entry) only if the new version fits on the row's page;
-- on pages filled to 100 % it never does, and every access then added an
-- entry to each of the table's indexes, the HNSW graph included: about
-- 180 buffers a row, 0.5-1.9 s per access flush on a 100,000-memory tenant.
-- With 30 % of each page kept free, 99.8 % of those updates were HOT and
-- recall went from 75 to 84 recalls/s at 20 clients (docs/BENCHMARKS.md),
-- for a heap about 40 % larger (the HNSW index, which is larger than the
-- heap, is unchanged).
--
-- The setting applies to pages written from now on; existing pages gain
-- the room when the partition is rewritten (VACUUM FULL or pg_repack), which
-- a large deployment may schedule at a quiet hour.
DO $$
DECLARE
    part regclass;
BEGIN
    FOR part IN
        SELECT inhrelid::regclass FROM pg_inherits
         WHERE inhparent = 'mneme.fragments'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s SET (fillfactor = 70)', part);
    END LOOP;
END
$$;
