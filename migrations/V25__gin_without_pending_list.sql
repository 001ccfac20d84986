-- V25: the GIN indexes take new entries at once instead of through a
-- pending list.
--
-- With `fastupdate` (PostgreSQL's default) a GIN index appends new entries
-- to an unsorted pending list, merged into the index only by VACUUM or once
-- the list passes `gin_pending_list_limit` (4 MB). Every search reads the
-- whole list, and the planner, which counts its pages, then often prefers a
-- sequential scan of the partition. mneme searches these indexes on every
-- write (conflict hints, automatic keyword links) and every recall (full
-- text, keywords), so the list cost each of them: on a 1,000-memory tenant
-- after seeding, a write's conflict lookup was a sequential scan taking
-- 4-5 ms under load, 0.16 ms through the index once the list was merged
-- (docs/BENCHMARKS.md). Between autovacuum runs a busy partition's list
-- can hold megabytes, and the insert that finally overflows it pays the
-- whole merge. Without the list, each insert updates the index itself
-- (a fraction of a millisecond per memory) and searches stay fast.
--
-- A partitioned index takes no storage parameters, so each partition's
-- index is altered; then its existing list is merged once.
DO $$
DECLARE
    index_name regclass;
BEGIN
    FOR index_name IN
        SELECT i.indexrelid::regclass
          FROM pg_index i
          JOIN pg_class c ON c.oid = i.indexrelid
          JOIN pg_am am ON am.oid = c.relam
         WHERE am.amname = 'gin'
           AND c.relkind = 'i'
           AND c.relnamespace = 'mneme'::regnamespace
    LOOP
        EXECUTE format('ALTER INDEX %s SET (fastupdate = off)', index_name);
        PERFORM gin_clean_pending_list(index_name);
    END LOOP;
END
$$;
