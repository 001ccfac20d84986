-- V20: the quality review (a language model judges whether a decision,
-- preference or relation is sound) looks at each fragment once; its verdict
-- goes to quality_verified, which the tier transition reads.
ALTER TABLE mneme.fragments ADD COLUMN quality_checked_at timestamptz;
