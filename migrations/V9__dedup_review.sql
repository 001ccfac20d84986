-- V9: semantic de-duplication in consolidation checks each fragment once
-- against similar older fragments of its key and topic.
ALTER TABLE mneme.fragments ADD COLUMN dedup_checked_at timestamptz;
