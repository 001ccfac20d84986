-- V19: splitting long fragments (a language model cuts a fragment over the
-- length threshold into atomic ones) looks at each fragment once.
ALTER TABLE mneme.fragments ADD COLUMN split_checked_at timestamptz;
