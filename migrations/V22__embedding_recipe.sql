-- V22: which text a stored vector was computed from. Passages are embedded
-- as "topic: content" since recipe 1 (the topic is context the content
-- often leaves implicit); recipe 0 is the content alone, what every vector
-- stored before this migration holds. The embedding worker re-embeds
-- vectors of another recipe or model in the background, so changing either
-- needs no manual step. The default is catalog-only: no table rewrite.
ALTER TABLE mneme.fragments
    ADD COLUMN embedding_recipe smallint NOT NULL DEFAULT 0;
