-- V33: whether mneme made a link on its own (`temporal` neighbours,
-- `related` by shared keywords, `co_retrieved`) or an agent did (`link`,
-- `linkedTo`, `reflect`, ...).
--
-- Consolidation makes a memory with 5 links permanent and keeps memories
-- with links from expiring: a sign that agents connected it to others.
-- Counting mneme's own links, every memory of a topic with five
-- neighbours in a day became permanent at the first run, so it never
-- decayed or expired. Only links an agent made count now.
ALTER TABLE mneme.fragment_links ADD COLUMN automatic boolean NOT NULL DEFAULT false;

-- Existing links: temporal and co-retrieval links are always mneme's;
-- related links of weight 0.5 are those of shared keywords (an agent's
-- link weighs 1 unless it said otherwise). Row-level security is forced on
-- the owner too, so the update lifts it (the transaction keeps the table
-- locked meanwhile).
ALTER TABLE mneme.fragment_links NO FORCE ROW LEVEL SECURITY;
UPDATE mneme.fragment_links
   SET automatic = true
 WHERE relation_type IN ('temporal', 'co_retrieved')
    OR (relation_type = 'related' AND weight = 0.5);
ALTER TABLE mneme.fragment_links FORCE ROW LEVEL SECURITY;
