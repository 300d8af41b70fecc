// Package node is a Berth broker node: it hosts one fully isolated shard per
// tenant in one process, fed by connections that a gateway forwards to the
// internal listener behind a signed PROXY v2 header.
//
// A connection's path through the node:
//
//	accept ─▶ read PROXY header (deadline, size cap) ─▶ verify HMAC, age, nonce
//	       ─▶ tenant's shard (opened on first use, quotas from Postgres)
//	       ─▶ shard.ServeConn with the credential's ACL and token deadline
//
// Nothing of the client's MQTT bytes is read before the header verifies; a
// missing, forged, stale or replayed header closes the connection at once.
// Beside the listener the node registers itself in Postgres and heartbeats,
// follows quota changes and credential revocations (LISTEN/NOTIFY), flushes
// per-tenant usage idempotently, and serves an internal admin HTTP API.
//
// Credentials end in the protocol's words: at the token's expiry MQTT 5
// clients get DISCONNECT 0xA0, on revocation DISCONNECT 0x87 (3.1.1
// clients are closed). With Config.JWKSURL an MQTT 5 client extends its
// connection by re-authenticating (AUTH 0x19, method "berth-jwt", data = a
// fresh token for the same credential and tenant, verified against the
// API's JWKS by internal/jwtverify). Quota changes apply to live
// connections, max_inflight and max_queued_bytes included. Every tenant's
// dropped QoS 1/2 messages are copied to $berth/dlq/<reason>. A tenant's
// shard closes after Config.IdleTimeout without connections and reopens
// on demand (idle.go).
package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"berth.dev/broker/internal/msgtrace"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/tracing"
)

// Config configures a node. Zero durations take the defaults noted.
type Config struct {
	ID             string // unique node id, registered in the nodes table
	InternalListen string // PROXY-v2-only MQTT listener, e.g. ":7883"
	AdminListen    string // internal admin HTTP, e.g. ":7880"
	// AdvertiseMQTT and AdvertiseAdmin are the addresses registered for
	// gateways and the API to dial; default: the bound listen addresses.
	AdvertiseMQTT  string
	AdvertiseAdmin string
	// HandoffListen, when set, is a Unix socket on which a gateway on this
	// host hands over device sockets (handoff.go; package handoff); empty:
	// off.
	HandoffListen string
	// PublicHost is the host name or IP at which devices reach this node's
	// host (its co-located gateway's MQTT port), registered as
	// nodes.public_host for the gateways' tenant DNS; empty: not set.
	PublicHost  string
	DatabaseURL string
	ProxySecret []byte // HMAC key shared with the gateways
	NodeToken   string // bearer token of the admin API
	// ProxySecretPrevious and NodeTokenPrevious are also accepted while
	// either is rotated (docs/operations.md); empty accepts only the current.
	ProxySecretPrevious []byte
	NodeTokenPrevious   string

	Capacity int // tenants this node is sized for; default 1000

	// DataDir holds one write-ahead-log store per tenant (a directory named
	// by a hash of its id); empty keeps tenants' state in memory only.
	DataDir       string
	Fsync         wal.Policy
	FsyncInterval time.Duration

	// JWKSURL is the API's JWKS (GET /v1/.well-known/jwks.json); with it
	// MQTT 5 clients may re-authenticate (AUTH, method "berth-jwt") with a
	// fresh token to extend their connection. Empty: a re-authentication
	// is refused (DISCONNECT 0x87); a CONNECT naming the method is still
	// admitted.
	JWKSURL string
	Issuer  string // the tokens' iss; default "berth"

	// IdleTimeout closes a tenant's shard that has had no connection for
	// this long (it reopens on the next connection or admin call); default
	// 10 min. Without a DataDir a shard holding sessions or retained
	// messages stays open.
	IdleTimeout time.Duration

	// OTLPEndpoint is the OpenTelemetry collector's base URL
	// (OTEL_EXPORTER_OTLP_ENDPOINT); "" exports message-path spans to
	// Postgres only.
	OTLPEndpoint string
	// TraceCap bounds the messages traced per tenant per second on this
	// node, sampled by the tenant's trace_sample_rate or by a device's
	// traceparent; default 100.
	TraceCap int

	// Peers, when set, replicate every tenant across the cluster (this node
	// and its peers) with one Raft group per tenant (replication.go); a
	// DataDir is then required. PeerListen is this node's peer transport
	// address, PeerSecret the cluster secret authenticating it (at least
	// 16 bytes), Zone this node's failure domain, Replicas the voters per
	// tenant (default 3, at most the cluster's size), RaftTick the raft
	// tick (default 100 ms; elections take 10–20 ticks) and ProposeTimeout
	// how long a leader waits for a commit before it stops serving
	// (default 5 s).
	Peers          []Peer
	PeerListen     string
	PeerSecret     []byte
	Zone           string
	Replicas       int
	RaftTick       time.Duration
	ProposeTimeout time.Duration
	// RaftSnapshotEntries and RaftCatchUpEntries override the groups'
	// compaction (replica.Config.SnapshotEntries, CatchUpEntries; 0: the
	// defaults, 10,000 and 5,000). Tests make them small.
	RaftSnapshotEntries, RaftCatchUpEntries uint64
	// MoveDisconnectRate bounds the devices this node disconnects per
	// second (DISCONNECT 0x9C, 3.1.1: close) when a tenant's leadership
	// moves to another node (drain, rebalance), across all its tenants
	// (moverate.go); default 500.
	MoveDisconnectRate int

	HeaderTimeout     time.Duration // for the PROXY header; default 5 s
	UsageInterval     time.Duration // usage flush period; default 10 s
	HeartbeatInterval time.Duration // default 10 s

	Logger *slog.Logger

	// removalFS is the filesystem of removed replicas' tombstones
	// (removal.go); nil: the OS's. Tests wrap it to watch the order of
	// the removes and directory fsyncs.
	removalFS wal.FS
	// storeFS is the filesystem of the tenants' stores under DataDir;
	// nil: the OS's. Tests block it to hold one tenant's open.
	storeFS wal.FS
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("node: invalid config")

func (c *Config) setDefaults() {
	if c.Capacity <= 0 {
		c.Capacity = 1000
	}
	if c.Issuer == "" {
		c.Issuer = "berth"
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 10 * time.Minute
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = 5 * time.Second
	}
	if c.UsageInterval <= 0 {
		c.UsageInterval = 10 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.TraceCap <= 0 {
		c.TraceCap = msgtrace.DefaultCap
	}
	if c.Replicas <= 0 {
		c.Replicas = 3
	}
	if c.RaftTick <= 0 {
		c.RaftTick = 100 * time.Millisecond
	}
	if c.ProposeTimeout <= 0 {
		c.ProposeTimeout = 5 * time.Second
	}
	if c.MoveDisconnectRate <= 0 {
		c.MoveDisconnectRate = defaultMoveDisconnectRate
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first missing or unusable setting.
func (c *Config) Validate() error {
	switch {
	case c.ID == "":
		return fmt.Errorf("%w: node id is required", ErrConfig)
	case c.InternalListen == "":
		return fmt.Errorf("%w: internal listen address is required", ErrConfig)
	case c.AdminListen == "":
		return fmt.Errorf("%w: admin listen address is required", ErrConfig)
	case c.DatabaseURL == "":
		return fmt.Errorf("%w: database URL is required", ErrConfig)
	case len(c.ProxySecret) < 16:
		return fmt.Errorf("%w: the proxy secret must be at least 16 bytes", ErrConfig)
	case len(c.NodeToken) < 16:
		return fmt.Errorf("%w: the node token must be at least 16 bytes", ErrConfig)
	case len(c.ProxySecretPrevious) > 0 && len(c.ProxySecretPrevious) < 16:
		return fmt.Errorf("%w: the previous proxy secret must be at least 16 bytes", ErrConfig)
	case c.NodeTokenPrevious != "" && len(c.NodeTokenPrevious) < 16:
		return fmt.Errorf("%w: the previous node token must be at least 16 bytes", ErrConfig)
	case c.JWKSURL != "":
		if u, err := url.Parse(c.JWKSURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: the JWKS URL must be an http(s) URL", ErrConfig)
		}
	}
	if c.PublicHost != "" && !validPublicHost(c.PublicHost) {
		return fmt.Errorf("%w: the public host %q must be an IP address or a host name (no port)", ErrConfig, c.PublicHost)
	}
	if c.OTLPEndpoint != "" {
		if _, err := tracing.TracesURL(c.OTLPEndpoint); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	return c.validatePeers()
}

// validatePeers checks the replication settings.
func (c *Config) validatePeers() error {
	if len(c.Peers) == 0 {
		return nil
	}
	switch {
	case c.DataDir == "":
		return fmt.Errorf("%w: replication (peers) needs a data directory", ErrConfig)
	case c.PeerListen == "":
		return fmt.Errorf("%w: replication (peers) needs a peer listen address", ErrConfig)
	case len(c.PeerSecret) < 16:
		return fmt.Errorf("%w: the peer secret must be at least 16 bytes", ErrConfig)
	}
	seen := map[uint64]string{PeerID(c.ID): c.ID}
	for _, p := range c.Peers {
		if p.ID == "" || p.Addr == "" {
			return fmt.Errorf("%w: a peer needs an id and an address", ErrConfig)
		}
		if other, dup := seen[PeerID(p.ID)]; dup {
			return fmt.Errorf("%w: peer %q given twice (or as this node, %q)", ErrConfig, p.ID, other)
		}
		seen[PeerID(p.ID)] = p.ID
	}
	return nil
}

// validPublicHost tells whether h is an IP address or a DNS host name
// (letters, digits and hyphens in labels of 1 to 63, at most 253 in all;
// a trailing dot allowed): what a DNS answer can name.
func validPublicHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
