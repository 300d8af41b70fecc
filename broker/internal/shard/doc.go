// Package shard is one tenant's complete, isolated MQTT 3.1.1 / 5.0
// broker: its own topic tree, sessions, retained messages and statistics.
// A node hosts many shards in one process; nothing is shared between them,
// so a '#' subscription never sees another tenant.
//
//	New(Options) → Start(ctx) → ServeConn(conn, ConnInfo) ... → Shutdown(ctx)
//
// # Connections
//
// ServeConn runs one client connection on the caller's goroutine (the
// reader) and starts exactly one writer goroutine for it:
//
//	socket ──▶ reader: decode, ACL, route ──▶ session queues (any session)
//	                          │
//	                          └─▶ conn.ctrl (acks, SUBACK, PINGRESP, DISCONNECT)
//	writer: ctrl + queue ──(one writev per batch, net.Buffers)──▶ socket
//
// The reader hands a PUBLISH to every matching session queue and only
// then acknowledges it (PUBACK or PUBREC): a QoS 1/2 message is never
// acknowledged and then silently lost. A queue that is full drops the copy
// for that subscriber only and counts it by DropReason; a connected client
// whose queue stays full longer than SlowConsumerTimeout is disconnected
// (0x97) and its QoS 1/2 messages stay queued in its session.
//
// # Fan-out without copies
//
// A message is copied once, out of the publisher's read buffer, into an
// immutable message shared by every queue. The writer sends each copy as
// two vectors, a per-subscriber header and the shared payload:
//
//	cached header (per message, per protocol version and QoS, built once)
//	┌──────┬────────┬───────────┬──────────┬────────────┐   ┌─────────┐
//	│ type │ remain │ topic     │ packet id│ properties │ + │ payload │ shared
//	│ DUP  │ length │ len+bytes │ (patched)│            │   │         │
//	│ RETAIN (patched)                                  │   └─────────┘
//	└──────┴────────┴───────────┴──────────┴────────────┘
//
// The cached header is copied into the writer's arena and the packet id,
// DUP and RETAIN bits are patched in place. A header that differs per
// subscriber (MQTT 5 subscription identifiers, an outbound topic alias, a
// remaining message expiry) is encoded as a variant straight into the
// arena. Routing a publish into queues and building headers allocate
// nothing per subscriber (pinned by TestRouteAllocations and
// TestEncodeAllocations).
//
// # Locks
//
// Shard.mu (sessions, connections) is taken before session.mu, never the
// other way round; topic.Tree has its own lock. No lock is held across a
// socket write: the writer builds a batch under session.mu and writes it
// after unlocking.
package shard
