-- V32: an automatic link (`related`, `temporal`) joins a pair of memories
-- once. Until now memories written together each linked to the other, so
-- most pairs held the same link both ways, doubling the links the graph,
-- `memory_stats` and spreading activation counted. New automatic links are
-- stored once per pair (services/lib/store/src/links.rs::upsert_undirected_edges);
-- this removes the second link of each existing pair, keeping an active
-- link over a soft-deleted one, then the heavier, then either.
--
-- Row-level security is forced on the owner too, so a migration sees no
-- tenant's rows unless it lifts that for the statement (the transaction
-- keeps the table locked meanwhile).
ALTER TABLE mneme.fragment_links NO FORCE ROW LEVEL SECURITY;
DELETE FROM mneme.fragment_links l
 USING mneme.fragment_links r
 WHERE r.tenant_id = l.tenant_id
   AND r.from_id = l.to_id
   AND r.to_id = l.from_id
   AND r.relation_type = l.relation_type
   AND l.relation_type IN ('related', 'temporal')
   AND (l.deleted_at IS NULL, l.weight, l.from_id) < (r.deleted_at IS NULL, r.weight, r.from_id);
ALTER TABLE mneme.fragment_links FORCE ROW LEVEL SECURITY;
