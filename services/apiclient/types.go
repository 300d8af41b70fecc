package apiclient

import "time"

// The API's objects, with the fields berthctl shows; see openapi.json for all.

// Session is POST /v1/login's answer.
type Session struct {
	AccountID string    `json:"account_id"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// APIKey is an account's API key; Secret only in POST's answer.
type APIKey struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Secret string `json:"secret,omitempty"`
}

// Tenant is one tenant of the account.
type Tenant struct {
	ID        string    `json:"id"`
	Slug      string    `json:"slug"`
	Plan      string    `json:"plan"`
	CreatedAt time.Time `json:"created_at"`
	Endpoints struct {
		MQTT string `json:"mqtt"`
	} `json:"endpoints"`
}

// ACL is what a credential may publish and subscribe to.
type ACL struct {
	Pub []string `json:"pub"`
	Sub []string `json:"sub"`
}

// Credential is a device credential.
type Credential struct {
	ID        string     `json:"id"`
	Kind      string     `json:"kind"`
	Name      string     `json:"name"`
	ACL       ACL        `json:"acl"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
	// In POST's answer only:
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	MQTTAddr string `json:"mqtt_addr,omitempty"`
}

// IssuedToken is a fresh MQTT password for a credential.
type IssuedToken struct {
	Username  string     `json:"username"`
	Password  string     `json:"password"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// TopicRule is a per-topic-filter rule.
type TopicRule struct {
	ID               string `json:"id"`
	Filter           string `json:"filter"`
	RetentionSeconds *int64 `json:"retention_seconds"`
	RetainedAllowed  bool   `json:"retained_allowed"`
	MaxMessageSize   *int64 `json:"max_message_size"`
	MaxMsgsPerSec    *int64 `json:"max_msgs_per_sec"`
}

// MQTTSession is a client session on the tenant's node.
type MQTTSession struct {
	ClientID        string `json:"client_id"`
	Connected       bool   `json:"connected"`
	ProtocolVersion int    `json:"protocol_version"`
	RemoteAddr      string `json:"remote_addr"`
	Subscriptions   int    `json:"subscriptions"`
	QueuedMessages  int    `json:"queued_messages"`
	Inflight        int    `json:"inflight"`
	Dropped         int    `json:"dropped"`
}

// List is the API's paged listing.
type List[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}
