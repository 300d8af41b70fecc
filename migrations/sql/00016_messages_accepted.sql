-- +goose Up
-- Bill only accepted messages (issue #16). messages_in stays what it was:
-- every PUBLISH packet a node read from the tenant's clients, refused ones
-- included (an operator's meter). messages_accepted is the part of them the
-- node accepted: past the ACL, the quotas, the topic rules and the payload
-- format check, and in the message log when QoS 1/2 goes there; plus HTTP
-- publishes and wills published. It is what the monthly_messages quota
-- counts and what the billing "messages" meter bills (docs/contracts.md,
-- "Usage meters"; docs/billing.md, "Meters").
--
-- A column added to the partitioned usage table is added to every partition.
-- Rows written before this migration did not tell refused messages apart:
-- they keep messages_accepted = messages_in, as they were counted for the
-- monthly quota and billed until now.
ALTER TABLE usage ADD COLUMN messages_accepted bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN messages_accepted bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN messages_accepted bigint NOT NULL DEFAULT 0;
UPDATE usage SET messages_accepted = messages_in WHERE messages_in <> 0;
UPDATE usage_hourly SET messages_accepted = messages_in WHERE messages_in <> 0;
UPDATE usage_daily SET messages_accepted = messages_in WHERE messages_in <> 0;

COMMENT ON COLUMN usage.messages_in IS 'PUBLISH packets read from clients, refused ones too, plus HTTP publishes and wills published';
COMMENT ON COLUMN usage.messages_accepted IS 'the messages of messages_in the node accepted: what the monthly quota counts and billing bills';
COMMENT ON COLUMN billing_meters.messages IS 'messages accepted (usage.messages_accepted)';

-- +goose Down
COMMENT ON COLUMN billing_meters.messages IS NULL;
COMMENT ON COLUMN usage.messages_in IS NULL;
ALTER TABLE usage_daily DROP COLUMN messages_accepted;
ALTER TABLE usage_hourly DROP COLUMN messages_accepted;
ALTER TABLE usage DROP COLUMN messages_accepted;
