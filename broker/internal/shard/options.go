package shard

import (
	"errors"
	"log/slog"
	"time"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// Options configure one shard. The zero value of a field means its
// default (see the field).
type Options struct {
	// Logger receives connection and shard events; nil discards them.
	Logger *slog.Logger
	// Poller, when set, parks the idle plain-socket connections handed to
	// Serve: they hold no goroutine until input comes, their keep alive
	// runs out or they are kicked (park.go, broker/internal/poller). One
	// poller serves every shard of a process; nil keeps a goroutine per
	// connection.
	Poller Poller
	// Store persists retained messages and sessions; nil means a fresh
	// store.Memory, closed by Shutdown. A Store passed in is the
	// caller's to close, after Shutdown.
	Store store.Store
	// MessageLog, when set, is the tenant's message log (see
	// store.WAL.Messages): every QoS 1/2 message is appended to it, offline
	// persistent sessions keep offsets into it instead of copies, and
	// pending messages are rebuilt from it after a restart. Under
	// wal.SyncAlways a PUBACK/PUBREC goes out only once its record is
	// fsynced. The caller closes it, after Shutdown.
	MessageLog *wal.Log
	// Replication, with a MessageLog, replicates the message log through
	// the tenant's Raft group (see Replication); the Store is then
	// replicated too (store.WAL.Replicate). Acknowledgements wait for a
	// quorum's commit whatever the log's fsync policy.
	Replication Replication
	// CheckpointInterval is how often sessions' log cursors are saved and
	// message-log segments no session needs are deleted. Default 1 s.
	CheckpointInterval time.Duration
	// ReplayHistory is how long message-log segments are kept after no
	// session needs them, for berth-replay-from subscribers. 0 keeps only
	// what sessions need.
	ReplayHistory time.Duration
	// Retention bounds the message log by bytes and age whatever sessions
	// still need (see retention.go); SetRetention changes it live. The
	// zero value bounds nothing.
	Retention Retention

	// MaxPacketSize is the largest packet accepted from a client, fixed
	// header included, and announced as Maximum Packet Size in an MQTT 5
	// CONNACK. Default 1 MiB.
	MaxPacketSize int
	// ReceiveMaximum is how many QoS 2 PUBLISH packets a client may have
	// unacknowledged towards the broker (announced in CONNACK). Default 1024.
	ReceiveMaximum uint16
	// MaxInflight caps the outbound window per client, below the client's
	// own Receive Maximum. Default 1024.
	MaxInflight int
	// MaxQueuedMessages and MaxQueuedBytes bound the messages a session
	// holds in memory (connected and slow; offline too without a
	// MessageLog); past them a copy is dropped (DropQueueFull). Defaults
	// 10,000 messages and 16 MiB. With a MessageLog a persistent session's
	// QoS 1/2 messages are never dropped for them: offline it holds only
	// log offsets, and connected, a full queue moves to the log as offsets
	// (order kept); Retention alone bounds that backlog, by bytes and age.
	MaxQueuedMessages int
	MaxQueuedBytes    int
	// SlowConsumerTimeout is how long a connected client's queue may stay
	// full before the client is disconnected (0x97). Default 10 s.
	SlowConsumerTimeout time.Duration
	// WriteTimeout bounds one write to a client socket. Default 30 s.
	WriteTimeout time.Duration
	// ConnectTimeout is how long a new connection has to send CONNECT.
	// Default 10 s.
	ConnectTimeout time.Duration
	// MaxKeepAlive caps the client's Keep Alive (seconds); a larger or
	// zero value is replaced and announced as Server Keep Alive in MQTT 5.
	// 0 means no cap.
	MaxKeepAlive uint16
	// MaxSessionExpiry caps the Session Expiry Interval (seconds), an MQTT
	// 3.1.1 clean-session-0 session's included. 0 means no cap.
	// SetSessionCaps changes it live (sessioncap.go).
	MaxSessionExpiry uint32
	// MaxSessions bounds the sessions the shard holds, connected and
	// offline: a CONNECT that would create one more is refused with
	// CONNACK 0x97 (3.1.1: 3). 0 means no cap. SetSessionCaps changes it
	// live (sessioncap.go).
	MaxSessions int
	// TopicAliasMaximum is the number of inbound topic aliases a client
	// may use. Default 64; negative disables aliases.
	TopicAliasMaximum int
	// SysInterval is how often $SYS/broker/... topics are published.
	// 0 means every 10 s; negative disables them.
	SysInterval time.Duration
	// MaxSubscriptionsPerClient bounds subscriptions per session (0x97 in
	// SUBACK past it). Default 1000.
	MaxSubscriptionsPerClient int
	// DeadLetters publishes a copy of every QoS 1/2 message dropped for a
	// subscriber (or refused by a quota) to $berth/dlq/<reason> in this
	// shard (see deadletter.go).
	DeadLetters bool
	// Latency receives the latency of every delivery, acknowledgement and
	// connect (see Latency); a nil histogram is replaced by one of the
	// shard's own.
	Latency Latency
	// Tracing traces sampled messages (see trace.go); the zero value traces
	// none.
	Tracing Tracing

	// poisonFreed overwrites every buffer given back to a pool (poison.go):
	// a test hook that turns a use after release into a wrong payload.
	poisonFreed bool
	// probe counts what woken connections hold at once (probe.go): a
	// test hook.
	probe *probe
	// handshakes is how many handshakes of connections that can park run
	// at once (handshakes.go); 0: defaultHandshakes per processor. A test
	// hook.
	handshakes int
}

// Defaults.
const (
	defaultMaxPacketSize       = 1 << 20
	defaultReceiveMaximum      = 1024
	defaultMaxInflight         = 1024
	defaultMaxQueuedMessages   = 10_000
	defaultMaxQueuedBytes      = 16 << 20
	defaultSlowConsumerTimeout = 10 * time.Second
	defaultWriteTimeout        = 30 * time.Second
	defaultConnectTimeout      = 10 * time.Second
	defaultTopicAliasMaximum   = 64
	defaultSysInterval         = 10 * time.Second
	defaultMaxSubscriptions    = 1000
)

// ErrInvalidOptions is returned by Options.Validate.
var ErrInvalidOptions = errors.New("shard: invalid options")

// withDefaults fills unset fields.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Store == nil {
		o.Store = store.NewMemory()
	}
	o.Latency = o.Latency.withDefaults()
	setInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setInt(&o.MaxPacketSize, defaultMaxPacketSize)
	setInt(&o.MaxInflight, defaultMaxInflight)
	setInt(&o.MaxQueuedMessages, defaultMaxQueuedMessages)
	setInt(&o.MaxQueuedBytes, defaultMaxQueuedBytes)
	setInt(&o.MaxSubscriptionsPerClient, defaultMaxSubscriptions)
	if o.ReceiveMaximum == 0 {
		o.ReceiveMaximum = defaultReceiveMaximum
	}
	if o.SlowConsumerTimeout <= 0 {
		o.SlowConsumerTimeout = defaultSlowConsumerTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = defaultWriteTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = defaultConnectTimeout
	}
	switch {
	case o.TopicAliasMaximum == 0:
		o.TopicAliasMaximum = defaultTopicAliasMaximum
	case o.TopicAliasMaximum < 0:
		o.TopicAliasMaximum = 0
	case o.TopicAliasMaximum > 65535:
		o.TopicAliasMaximum = 65535
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = time.Second
	}
	if o.SysInterval == 0 {
		o.SysInterval = defaultSysInterval
	}
	return o
}

// Authorizer decides what one connection may do. It is called on the
// connection's own goroutine for every PUBLISH (and the will topic, at
// CONNECT) and every SUBSCRIBE filter, given as the client sent it
// ($share/{name}/ prefix included).
type Authorizer interface {
	CanPublish(topic []byte) bool
	CanSubscribe(filter string) bool
}

// ConnInfo is what the accepting side knows about a connection before its
// first byte is read.
type ConnInfo struct {
	// RemoteAddr is the client's address, for logs.
	RemoteAddr string
	// TenantID names the tenant in logs.
	TenantID string
	// CredentialID is the credential the connection authenticated with
	// (the gateway's PROXY TLV); empty in standalone mode. A session
	// belongs to the credential that created it: another credential
	// naming its client id is refused with CONNACK 0x85 (3.1.1: return
	// code 2) and the session is left as it is. Empty checks nothing.
	CredentialID string
	// Authorizer checks publish and subscribe; nil allows everything.
	Authorizer Authorizer
	// Deadline ends the connection (DISCONNECT 0xA0 in MQTT 5) when the
	// credential expires; zero means never. A successful re-authentication
	// (Reauthenticate) moves it.
	Deadline time.Time
	// AuthMethod is the MQTT 5 enhanced authentication method this
	// connection may name, e.g. "berth-jwt"; empty means none. A CONNECT
	// naming it is admitted (the credentials were checked before the
	// connection reached the shard) and its CONNACK names it back
	// [MQTT-4.12.0-5]; a CONNECT naming another method is refused with
	// CONNACK 0x8C, an AUTH naming another one ends the connection with
	// DISCONNECT 0x82 (0x8C is no DISCONNECT reason code).
	AuthMethod string
	// Reauthenticate checks the Authentication Data of an AUTH packet
	// with reason 0x19 (re-authenticate) and AuthMethod. It returns the
	// connection's new Deadline (zero: none) or an error, which ends the
	// connection with DISCONNECT 0x87. It runs on the connection's reader
	// goroutine and may block briefly (a key fetch). nil refuses every
	// re-authentication (DISCONNECT 0x87).
	Reauthenticate func(data []byte) (time.Time, error)
	// AllowAnonymous admits a CONNECT without a user name.
	AllowAnonymous bool
	// Refuse, when not 0, answers the CONNECT with this reason code (3.1.1:
	// its return code) and closes: the connection was refused before it
	// reached the shard (a revoked credential at the node), and the client
	// must be told why rather than see the socket close.
	Refuse packet.ReasonCode
	// Authenticate checks a user name and password; nil accepts any
	// credentials (a gateway already checked them).
	Authenticate func(username, password []byte) bool
	// Limiter enforces the tenant's live quotas on this connection; nil
	// means no quotas beyond Options.
	Limiter Limiter
	// Traffic, when not nil, counts what this connection reads and writes
	// (as the shard's Stats do) for its owner, e.g. per credential. The
	// shard only adds to it, atomically and without allocating; the owner
	// reads it (Swap) whenever it likes, during the connection and after.
	Traffic *Traffic
}
