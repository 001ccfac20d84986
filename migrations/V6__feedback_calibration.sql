-- V6: feedback calibration marks the tool feedback it has applied, so a
-- repeated or resumed consolidation never applies the same feedback twice.
ALTER TABLE mneme.tool_feedback ADD COLUMN calibrated_at timestamptz;
CREATE INDEX tool_feedback_uncalibrated ON mneme.tool_feedback (tenant_id, id)
    WHERE calibrated_at IS NULL;
