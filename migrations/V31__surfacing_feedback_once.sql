-- V31: one rating per rated thing. An event's whole-block rating and each of
-- its memories' ratings are stored once; rating the same thing again
-- replaces the rating (services/lib/store/src/surfacing.rs::record_feedback).
--
-- Before, every call added a row: an agent retrying a rating after a
-- timeout, or rating one block twenty times, counted twenty times in the
-- tool's statistics and moved its auto-tuned threshold by itself. Earlier
-- duplicates keep their latest rating.
--
-- Row-level security is forced on the owner too, so a migration sees no
-- tenant's rows unless it lifts that for the statement (the transaction
-- keeps the table locked meanwhile).
ALTER TABLE mneme.surfacing_feedback NO FORCE ROW LEVEL SECURITY;
DELETE FROM mneme.surfacing_feedback f
 USING mneme.surfacing_feedback newer
 WHERE newer.tenant_id = f.tenant_id
   AND newer.surfacing_id = f.surfacing_id
   AND newer.memory_id IS NOT DISTINCT FROM f.memory_id
   AND newer.id > f.id;
ALTER TABLE mneme.surfacing_feedback FORCE ROW LEVEL SECURITY;

-- NULLS NOT DISTINCT: the whole-block rating (memory_id NULL) is one thing.
-- It also serves every lookup of an event's ratings, as the index it
-- replaces did.
CREATE UNIQUE INDEX surfacing_feedback_once
    ON mneme.surfacing_feedback (tenant_id, surfacing_id, memory_id) NULLS NOT DISTINCT;
DROP INDEX mneme.surfacing_feedback_event;
