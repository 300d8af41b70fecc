// Package quotas is Berth's tenancy contract for a tenant's live limits:
// the Quotas type (the quotas table's columns), the list of its fields and
// the check that a set of quotas lies within bounds. Broker nodes, the
// gateway, the API and billing import it; what bounds apply to a tenant (its
// plan) is billing's business, which the broker and the gateway never
// import.
package quotas

import "fmt"

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

// BoundError says which quota is out of its bounds.
type BoundError struct {
	Field    string
	Value    int64
	Min, Max int64
}

func (e *BoundError) Error() string {
	return fmt.Sprintf("quotas: %s = %d is outside [%d, %d]", e.Field, e.Value, e.Min, e.Max)
}

// Within returns a *BoundError for the first quota in q outside [1, max]
// (max taken field by field), or nil.
func (q Quotas) Within(max Quotas) error {
	for _, f := range Fields {
		v, hi := *f.Get(&q), *f.Get(&max)
		if v < 1 || v > hi {
			return &BoundError{Field: f.Name, Value: v, Min: 1, Max: hi}
		}
	}
	return nil
}
