// Package plan is Berth's catalogue of plans: each plan's default quotas and
// the bounds a tenant may set its live quotas within. The API applies the
// defaults when a tenant is created and checks every quota update against
// the bounds; broker nodes enforce whatever the quotas table then says.
package plan

import (
	"errors"
	"fmt"
	"time"
)

// Quotas are a tenant's live limits. Field names match the quotas table's
// columns (snake case in JSON and SQL).
type Quotas struct {
	MaxConnections      int64 `json:"max_connections"`
	MaxMsgsPerSec       int64 `json:"max_msgs_per_sec"`
	MaxBytesPerSec      int64 `json:"max_bytes_per_sec"`
	ClientMsgsPerSec    int64 `json:"client_msgs_per_sec"`
	ClientBytesPerSec   int64 `json:"client_bytes_per_sec"`
	MaxMessageSize      int64 `json:"max_message_size"`
	MaxSubscriptions    int64 `json:"max_subscriptions"`
	MaxRetainedMessages int64 `json:"max_retained_messages"`
	MaxRetainedBytes    int64 `json:"max_retained_bytes"`
	RetentionSeconds    int64 `json:"retention_seconds"`
	RetentionBytes      int64 `json:"retention_bytes"`
	MaxInflight         int64 `json:"max_inflight"`
	MaxQueuedBytes      int64 `json:"max_queued_bytes"`
	MonthlyMessages     int64 `json:"monthly_messages"`
	// MaxSessions bounds the sessions a tenant's shard holds: connected
	// ones (clean or not) plus offline persistent ones.
	MaxSessions int64 `json:"max_sessions"`
	// MaxSessionExpiry caps a session's expiry interval in seconds (MQTT 5
	// Session Expiry Interval, and how long an MQTT 3.1.1 clean-session-0
	// session, which never expires in the protocol, outlives its
	// connection).
	MaxSessionExpiry int64 `json:"max_session_expiry"`
}

// Field is one quota, by its JSON/SQL name, with access to its value. The
// list is the single place that enumerates quotas for validation and SQL.
type Field struct {
	Name string
	Get  func(*Quotas) *int64
}

// Fields lists every quota in column order.
var Fields = []Field{
	{"max_connections", func(q *Quotas) *int64 { return &q.MaxConnections }},
	{"max_msgs_per_sec", func(q *Quotas) *int64 { return &q.MaxMsgsPerSec }},
	{"max_bytes_per_sec", func(q *Quotas) *int64 { return &q.MaxBytesPerSec }},
	{"client_msgs_per_sec", func(q *Quotas) *int64 { return &q.ClientMsgsPerSec }},
	{"client_bytes_per_sec", func(q *Quotas) *int64 { return &q.ClientBytesPerSec }},
	{"max_message_size", func(q *Quotas) *int64 { return &q.MaxMessageSize }},
	{"max_subscriptions", func(q *Quotas) *int64 { return &q.MaxSubscriptions }},
	{"max_retained_messages", func(q *Quotas) *int64 { return &q.MaxRetainedMessages }},
	{"max_retained_bytes", func(q *Quotas) *int64 { return &q.MaxRetainedBytes }},
	{"retention_seconds", func(q *Quotas) *int64 { return &q.RetentionSeconds }},
	{"retention_bytes", func(q *Quotas) *int64 { return &q.RetentionBytes }},
	{"max_inflight", func(q *Quotas) *int64 { return &q.MaxInflight }},
	{"max_queued_bytes", func(q *Quotas) *int64 { return &q.MaxQueuedBytes }},
	{"monthly_messages", func(q *Quotas) *int64 { return &q.MonthlyMessages }},
	{"max_sessions", func(q *Quotas) *int64 { return &q.MaxSessions }},
	{"max_session_expiry", func(q *Quotas) *int64 { return &q.MaxSessionExpiry }},
}

// Plan is a named offering.
type Plan struct {
	Name     string `json:"name"`
	Defaults Quotas `json:"defaults"`
	// Max bounds each quota from above; every quota is at least 1.
	Max Quotas `json:"max"`
	// TenantsPerAccount bounds how many tenants an account may have. It is
	// an account's bound, not a tenant's: an account's cap is the largest
	// among the plans it is entitled to (TenantCap), whatever plans its
	// tenants are on.
	TenantsPerAccount int `json:"tenants_per_account"`
}

const (
	kib = 1024
	mib = 1024 * kib
	gib = 1024 * mib
	day = int64(24 * time.Hour / time.Second)
)

// Sessions and their expiry (max_sessions, max_session_expiry):
//   - max_sessions is ten times max_connections, default and bound alike:
//     room for a fleet whose devices come and go while their persistent
//     sessions wait offline, and no more. An idle session costs its node
//     about a kilobyte, so business's bound (a million) is about 1 GiB of
//     one node's memory: the node, not the price, sets it.
//   - max_session_expiry follows retention_seconds (default and bound): an
//     offline session holds offsets into the message log, which keeps its
//     messages only that long, so a session outliving them would keep just
//     its subscriptions, and the node's memory, for nothing.
var catalogue = map[string]Plan{
	"free": {
		Name: "free", TenantsPerAccount: 3,
		Defaults: Quotas{
			MaxConnections: 10, MaxMsgsPerSec: 100, MaxBytesPerSec: 256 * kib,
			ClientMsgsPerSec: 20, ClientBytesPerSec: 64 * kib, MaxMessageSize: 64 * kib,
			MaxSubscriptions: 50, MaxRetainedMessages: 100, MaxRetainedBytes: 1 * mib,
			RetentionSeconds: day, RetentionBytes: 64 * mib, MaxInflight: 20,
			MaxQueuedBytes: 1 * mib, MonthlyMessages: 1_000_000,
			MaxSessions: 100, MaxSessionExpiry: day,
		},
		Max: Quotas{
			MaxConnections: 25, MaxMsgsPerSec: 200, MaxBytesPerSec: 512 * kib,
			ClientMsgsPerSec: 50, ClientBytesPerSec: 128 * kib, MaxMessageSize: 256 * kib,
			MaxSubscriptions: 100, MaxRetainedMessages: 1000, MaxRetainedBytes: 4 * mib,
			RetentionSeconds: 3 * day, RetentionBytes: 128 * mib, MaxInflight: 50,
			MaxQueuedBytes: 4 * mib, MonthlyMessages: 1_000_000,
			MaxSessions: 250, MaxSessionExpiry: 3 * day,
		},
	},
	"pro": {
		Name: "pro", TenantsPerAccount: 25,
		Defaults: Quotas{
			MaxConnections: 1000, MaxMsgsPerSec: 5000, MaxBytesPerSec: 10 * mib,
			ClientMsgsPerSec: 200, ClientBytesPerSec: 1 * mib, MaxMessageSize: 1 * mib,
			MaxSubscriptions: 500, MaxRetainedMessages: 10_000, MaxRetainedBytes: 64 * mib,
			RetentionSeconds: 7 * day, RetentionBytes: 4 * gib, MaxInflight: 100,
			MaxQueuedBytes: 16 * mib, MonthlyMessages: 100_000_000,
			MaxSessions: 10_000, MaxSessionExpiry: 7 * day,
		},
		Max: Quotas{
			MaxConnections: 10_000, MaxMsgsPerSec: 50_000, MaxBytesPerSec: 100 * mib,
			ClientMsgsPerSec: 2000, ClientBytesPerSec: 10 * mib, MaxMessageSize: 16 * mib,
			MaxSubscriptions: 5000, MaxRetainedMessages: 100_000, MaxRetainedBytes: 512 * mib,
			RetentionSeconds: 30 * day, RetentionBytes: 64 * gib, MaxInflight: 1000,
			MaxQueuedBytes: 256 * mib, MonthlyMessages: 1_000_000_000,
			MaxSessions: 100_000, MaxSessionExpiry: 30 * day,
		},
	},
	// business is for fleets that push the broker: its bounds are set by
	// what one node can carry, not by price.
	"business": {
		Name: "business", TenantsPerAccount: 250,
		Defaults: Quotas{
			MaxConnections: 10_000, MaxMsgsPerSec: 50_000, MaxBytesPerSec: 100 * mib,
			ClientMsgsPerSec: 1000, ClientBytesPerSec: 10 * mib, MaxMessageSize: 1 * mib,
			MaxSubscriptions: 1000, MaxRetainedMessages: 100_000, MaxRetainedBytes: 512 * mib,
			RetentionSeconds: 14 * day, RetentionBytes: 64 * gib, MaxInflight: 1000,
			MaxQueuedBytes: 64 * mib, MonthlyMessages: 10_000_000_000,
			MaxSessions: 100_000, MaxSessionExpiry: 14 * day,
		},
		Max: Quotas{
			MaxConnections: 100_000, MaxMsgsPerSec: 10_000_000, MaxBytesPerSec: 10 * gib,
			ClientMsgsPerSec: 1_000_000, ClientBytesPerSec: 1 * gib, MaxMessageSize: 64 * mib,
			MaxSubscriptions: 10_000, MaxRetainedMessages: 1_000_000, MaxRetainedBytes: 4 * gib,
			RetentionSeconds: 90 * day, RetentionBytes: 1024 * gib, MaxInflight: 65535,
			MaxQueuedBytes: 1 * gib, MonthlyMessages: 1_000_000_000_000,
			MaxSessions: 1_000_000, MaxSessionExpiry: 90 * day,
		},
	},
}

// ErrUnknown is returned for a plan name that is not in the catalogue.
var ErrUnknown = errors.New("plan: unknown plan")

// Lookup returns the plan called name.
func Lookup(name string) (Plan, error) {
	p, ok := catalogue[name]
	if !ok {
		return Plan{}, fmt.Errorf("%w %q", ErrUnknown, name)
	}
	return p, nil
}

// Names lists the plans, cheapest first.
func Names() []string { return []string{"free", "pro", "business"} }

// TenantCap returns how many tenants an account entitled to the plans
// named may have: the largest TenantsPerAccount among them.
//
// Each tenant is a shard of its own on a node (sessions, topic tree, a
// message log directory) and takes one of the node's placement slots, so
// tenants are what an account could multiply to take a node's room. free
// allows 3 (development, staging and production while trying Berth out),
// pro 25 (a tenant per customer or site of a product), business 250 (a
// fleet of them: still small beside a node's capacity, and the per-tenant
// work of the control plane, such as usage flushes and quota
// notifications, stays small with it).
func TenantCap(names []string) (int, error) {
	most := 0
	for _, n := range names {
		p, err := Lookup(n)
		if err != nil {
			return 0, err
		}
		most = max(most, p.TenantsPerAccount)
	}
	if most == 0 {
		return 0, errors.New("plan: no plans to take a tenant cap from")
	}
	return most, nil
}

// BoundError says which quota is out of its plan's bounds.
type BoundError struct {
	Field    string
	Value    int64
	Min, Max int64
}

func (e *BoundError) Error() string {
	return fmt.Sprintf("plan: %s = %d is outside [%d, %d]", e.Field, e.Value, e.Min, e.Max)
}

// Check returns a *BoundError for the first quota in q outside p's bounds.
func (p Plan) Check(q Quotas) error {
	for _, f := range Fields {
		v, hi := *f.Get(&q), *f.Get(&p.Max)
		if v < 1 || v > hi {
			return &BoundError{Field: f.Name, Value: v, Min: 1, Max: hi}
		}
	}
	return nil
}
