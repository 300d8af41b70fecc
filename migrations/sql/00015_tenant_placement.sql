-- +goose Up
-- Replicated placement (issue #17, docs/replication.md): per tenant, the node
-- leading its Raft group, the nodes holding a replica (the voters, leader
-- included) and the epoch, the Raft term the leader was elected in. The
-- leader records it when it wins an election (broker/internal/placement);
-- a row only moves forward: a write whose epoch is not above the stored one
-- changes nothing (`ON CONFLICT ... WHERE epoch < EXCLUDED.epoch`), so a
-- deposed leader's late write cannot undo its successor's.
--
-- Gateways route to leader when a row names one and fall back to
-- tenants.node_id otherwise (tenants not replicated yet). Every insert,
-- update or delete NOTIFYs berth_placement with the tenant id, in the
-- writer's transaction (the trigger below), as a move of tenants.node_id does.
CREATE TABLE tenant_placement (
    tenant_id  text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    leader     text REFERENCES nodes (id) ON DELETE SET NULL,
    replicas   text[] NOT NULL DEFAULT '{}',
    epoch      bigint NOT NULL CHECK (epoch > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tenant_placement_leader ON tenant_placement (leader);

-- +goose StatementBegin
CREATE FUNCTION tenant_placement_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('berth_placement', OLD.tenant_id);
    ELSE
        PERFORM pg_notify('berth_placement', NEW.tenant_id);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER tenant_placement_changed AFTER INSERT OR UPDATE OR DELETE ON tenant_placement
    FOR EACH ROW EXECUTE FUNCTION tenant_placement_notify();

-- +goose Down
DROP TABLE tenant_placement;
DROP FUNCTION tenant_placement_notify();
