-- +goose Up
-- The host name or IP at which devices reach a node's host (its co-located
-- gateway's MQTT port): the node's -public-host, written where it writes
-- mqtt_addr. The gateways' DNS responder (gateway -dns-listen) answers a
-- tenant endpoint <slug>.<domain> with its leader's public_host, so a
-- device lands on the host where its socket can be handed to the node
-- (docs/deploy.md, "Tenant endpoint DNS"). Empty: not set; the responder
-- answers with its -dns-fallback (the load balancer) instead.
ALTER TABLE nodes ADD COLUMN public_host text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE nodes DROP COLUMN public_host;
