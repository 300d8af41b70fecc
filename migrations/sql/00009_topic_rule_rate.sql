-- +goose Up
-- Topic rules act on broker nodes (docs/topic-rules.md): an optional rate per
-- rule, the messages per second on all topics the rule governs together, for
-- the tenant on its node; NULL (or 0) is no rate. Every change to a tenant's
-- rules is announced with NOTIFY berth_topic_rules '<tenant id>' in the same
-- transaction, and nodes apply it live. The UNIQUE (tenant_id, filter) of
-- 00001 stays the backstop against two rules for one filter.
ALTER TABLE topic_rules
    ADD COLUMN max_msgs_per_sec integer CHECK (max_msgs_per_sec >= 0),
    ADD CONSTRAINT topic_rules_retention_seconds_check CHECK (retention_seconds >= 0),
    ADD CONSTRAINT topic_rules_max_message_size_check CHECK (max_message_size >= 1);

-- +goose Down
ALTER TABLE topic_rules
    DROP CONSTRAINT topic_rules_max_message_size_check,
    DROP CONSTRAINT topic_rules_retention_seconds_check,
    DROP COLUMN max_msgs_per_sec;
