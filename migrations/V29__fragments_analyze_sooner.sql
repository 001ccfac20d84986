-- V29: the planner learns of a tenant new to a partition after 1 % of it
-- changed, not 10 %.
--
-- Plans estimate a tenant's rows from its partition's statistics. A tenant
-- the last ANALYZE did not see is estimated to have none, so until the next
-- one every index that starts with tenant_id looks as good as any other:
-- a new tenant's recall then walked all of its memories through such an
-- index and sorted them by distance instead of searching the HNSW graph
-- (115 ms against under 1 ms for 20,000 memories, docs/BENCHMARKS.md). At
-- autovacuum's default thresholds (50 rows + 10 %) a tenant importing
-- 50,000 memories into a partition of 1,000,000 is never analysed during
-- its import; at 500 rows + 1 % it is after 10,500 of them. ANALYZE reads a
-- fixed sample (30,000 rows at the default statistics target), so
-- analysing a large partition ten times as often costs little.
DO $$
DECLARE
    part regclass;
BEGIN
    FOR part IN
        SELECT inhrelid::regclass FROM pg_inherits
         WHERE inhparent = 'mneme.fragments'::regclass
    LOOP
        EXECUTE format(
            'ALTER TABLE %s SET (autovacuum_analyze_scale_factor = 0.01,
                                 autovacuum_analyze_threshold = 500)', part);
    END LOOP;
END
$$;
