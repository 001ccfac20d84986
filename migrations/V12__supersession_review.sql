-- V12: the supersession review (a language model decides whether a new
-- fragment replaces a similar older one) looks at each fragment once.
ALTER TABLE mneme.fragments ADD COLUMN supersession_checked_at timestamptz;
