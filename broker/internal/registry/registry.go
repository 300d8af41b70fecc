// Package registry keeps a broker node's row in the nodes table: it
// registers the node at start (id, internal MQTT and admin addresses,
// capacity), heartbeats while it runs so placement sees it as live, and
// marks it draining and then removes it on a graceful stop.
package registry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Node is what placement needs to know about a node.
type Node struct {
	ID        string
	MQTTAddr  string // internal listener, PROXY v2 only
	AdminAddr string
	Capacity  int // tenants the node is sized for
	// PublicHost is the host name or IP at which devices reach this node's
	// host (its co-located gateway); empty when not set. Gateways' DNS
	// answers a tenant endpoint with its leader's (docs/deploy.md).
	PublicHost string
}

// Registration is a node's live row.
type Registration struct {
	pool     *pgxpool.Pool
	node     Node
	interval time.Duration
	log      *slog.Logger

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Register upserts the node's row (a restarted node takes its row over) and
// returns a Registration whose Start heartbeats every interval.
func Register(ctx context.Context, pool *pgxpool.Pool, n Node, interval time.Duration, log *slog.Logger) (*Registration, error) {
	_, err := pool.Exec(ctx, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity, public_host, started_at, heartbeat_at, draining)
		VALUES ($1, $2, $3, $4, $5, now(), now(), false)
		ON CONFLICT (id) DO UPDATE SET mqtt_addr = EXCLUDED.mqtt_addr, admin_addr = EXCLUDED.admin_addr,
			capacity = EXCLUDED.capacity, public_host = EXCLUDED.public_host,
			started_at = now(), heartbeat_at = now(), draining = false`,
		n.ID, n.MQTTAddr, n.AdminAddr, n.Capacity, n.PublicHost)
	if err != nil {
		return nil, fmt.Errorf("registry: register %s: %w", n.ID, err)
	}
	return &Registration{pool: pool, node: n, interval: interval, log: log, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// Start heartbeats until Shutdown.
func (r *Registration) Start() {
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.interval)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), r.interval)
				if err := r.Heartbeat(ctx); err != nil {
					r.log.Warn("node heartbeat failed", "node_id", r.node.ID, "err", err)
				}
				cancel()
			}
		}
	}()
}

// Heartbeat marks the node alive now.
func (r *Registration) Heartbeat(ctx context.Context) error {
	tag, err := r.pool.Exec(ctx, `UPDATE nodes SET heartbeat_at = now() WHERE id = $1`, r.node.ID)
	if err != nil {
		return fmt.Errorf("registry: heartbeat: %w", err)
	}
	if tag.RowsAffected() == 0 { // removed by an operator: come back
		_, err := Register(ctx, r.pool, r.node, r.interval, r.log)
		return err
	}
	return nil
}

// Drain marks the node as draining so placement sends it no new tenants.
func (r *Registration) Drain(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, `UPDATE nodes SET draining = true WHERE id = $1`, r.node.ID)
	return err
}

// Shutdown stops heartbeating and deregisters the node. Its tenants keep
// their node id until the API places them again; a node that restarts under
// the same id takes them back.
func (r *Registration) Shutdown(ctx context.Context) error {
	r.once.Do(func() { close(r.stop) })
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	_, err := r.pool.Exec(ctx, `UPDATE nodes SET draining = true, heartbeat_at = now() - interval '1 hour' WHERE id = $1`, r.node.ID)
	if err != nil {
		return fmt.Errorf("registry: deregister: %w", err)
	}
	return nil
}
