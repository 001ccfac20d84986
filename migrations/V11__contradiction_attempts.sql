-- V11: a pending contradiction candidate the language model keeps failing
-- on (no verdict, errors) is parked after a few attempts instead of being
-- asked again, at a cost, on every run.
ALTER TABLE mneme.contradiction_candidates
    ADD COLUMN attempts  smallint NOT NULL DEFAULT 0,
    ADD COLUMN error     text,
    DROP CONSTRAINT contradiction_candidates_status_check,
    ADD CONSTRAINT contradiction_candidates_status_check
        CHECK (status IN ('pending', 'contradiction', 'compatible', 'parked'));
