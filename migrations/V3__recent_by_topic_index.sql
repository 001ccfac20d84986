-- V3: the nearest fragments of a key and topic in time (temporal links on
-- every remember) come from an index range instead of a topic scan.
CREATE INDEX fragments_key_topic_recent ON mneme.fragments (tenant_id, key_id, topic, created_at);
