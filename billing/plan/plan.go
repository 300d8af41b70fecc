// Package plan is Berth's catalogue of plans: each plan's default quotas,
// the bounds a tenant may set its live quotas within (the quotas themselves
// are berth.dev/quotas, a tenancy contract) and its price. The API applies the
// defaults when a tenant is created and checks every quota update against
// the bounds; broker nodes enforce whatever the quotas table then says.
package plan

import (
	"errors"
	"fmt"
	"time"

	"berth.dev/quotas"
)

// Plan is a named offering.
type Plan struct {
	Name     string        `json:"name"`
	Defaults quotas.Quotas `json:"defaults"`
	// Max bounds each quota from above; every quota is at least 1.
	Max quotas.Quotas `json:"max"`
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
		Defaults: quotas.Quotas{
			MaxConnections: 10, MaxMsgsPerSec: 100, MaxBytesPerSec: 256 * kib,
			ClientMsgsPerSec: 20, ClientBytesPerSec: 64 * kib, MaxMessageSize: 64 * kib,
			MaxSubscriptions: 50, MaxRetainedMessages: 100, MaxRetainedBytes: 1 * mib,
			RetentionSeconds: day, RetentionBytes: 64 * mib, MaxInflight: 20,
			MaxQueuedBytes: 1 * mib, MonthlyMessages: 1_000_000,
			MaxSessions: 100, MaxSessionExpiry: day,
		},
		Max: quotas.Quotas{
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
		Defaults: quotas.Quotas{
			MaxConnections: 1000, MaxMsgsPerSec: 5000, MaxBytesPerSec: 10 * mib,
			ClientMsgsPerSec: 200, ClientBytesPerSec: 1 * mib, MaxMessageSize: 1 * mib,
			MaxSubscriptions: 500, MaxRetainedMessages: 10_000, MaxRetainedBytes: 64 * mib,
			RetentionSeconds: 7 * day, RetentionBytes: 4 * gib, MaxInflight: 100,
			MaxQueuedBytes: 16 * mib, MonthlyMessages: 100_000_000,
			MaxSessions: 10_000, MaxSessionExpiry: 7 * day,
		},
		Max: quotas.Quotas{
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
		Defaults: quotas.Quotas{
			MaxConnections: 10_000, MaxMsgsPerSec: 50_000, MaxBytesPerSec: 100 * mib,
			ClientMsgsPerSec: 1000, ClientBytesPerSec: 10 * mib, MaxMessageSize: 1 * mib,
			MaxSubscriptions: 1000, MaxRetainedMessages: 100_000, MaxRetainedBytes: 512 * mib,
			RetentionSeconds: 14 * day, RetentionBytes: 64 * gib, MaxInflight: 1000,
			MaxQueuedBytes: 64 * mib, MonthlyMessages: 10_000_000_000,
			MaxSessions: 100_000, MaxSessionExpiry: 14 * day,
		},
		Max: quotas.Quotas{
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

// Check returns a *quotas.BoundError for the first quota in q outside p's
// bounds.
func (p Plan) Check(q quotas.Quotas) error { return q.Within(p.Max) }
