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
// reader); at most one writer goroutine runs beside it, started when
// there is output the reader did not write itself and gone after
// writerIdle without work. Serve does the same but, with Options.Poller,
// parks a plain-socket connection that has had nothing to read for
// parkAfter: it then holds no goroutine until input, its keep alive or a
// kick resumes it (park.go, docs/idle-connections.md):
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
// (0x97) and its QoS 1/2 messages stay queued in its session. A reader
// whose every copy since its last flush went to subscribers behind (queue
// half full) pauses up to stallWait for one of them to drain instead of
// reading on to drop at their queues; never for a subscriber that is
// stalled, and never when it fed one that keeps up (stall.go).
//
// A connection's output (its own acknowledgements, and deliveries of a
// publish to at most inlineFanout subscribers) is gathered in the reader's
// outbox and flushed when the reader has no whole packet buffered, or
// after outboxPackets packets: each connection in it is written inline by
// the reader when its writer is idle and its socket takes the whole batch
// without blocking (conn.writeInline), else its writer is woken and sends
// the rest first. A lone PUBLISH thus reaches its subscriber without a
// goroutine hand-off, and a burst costs one write per connection. A wider
// fan-out wakes the subscribers' writers at once, to write in parallel.
//
// A reader with nothing buffered waits for input holding neither its
// read buffer nor its decoding scratch (both pooled per shard), and a
// connection that stopped writing gives its write state back at the next
// sweeps (Shard.sweepBatches). A parked connection holds no goroutine,
// buffer, scratch or channel (its writer's wake-up channel and the one
// to wait for its end are made on first use). One quiet since CONNECT,
// or woken only by PINGREQs since its last park, and with no write state
// parks without its net.Conn too: a duplicated descriptor keeps the
// socket open and armed in the poller, and a new net.Conn is built on it
// when the reader or a writer needs one; publishers write to it inline
// on the descriptor (detach.go). With its session it costs about 2 KiB of
// heap, both ends of a loopback socket counted (TestHeldConnectionCost,
// TestConnStateSize).
//
// # Fan-out without copies
//
// A message is copied once, out of the publisher's read buffer, into an
// immutable message shared by every queue. Packets read together share
// the memory of their messages (slab), so a publisher sending back to back
// costs a few allocations per read, not two per message; what holds a
// message for long (the retained store, offline sessions, and a session
// whose queue would hold many chunks mostly of other queues' messages)
// holds a copy of its own instead (pinned by TestSlabAllocations,
// TestSlabMessagesKeptLongAreOwned and
// TestSlabInterleavedPublishersKeepTheirChunks: a slow subscriber fed
// whole chunks by many publishers keeps them, as copying would cost what
// it saves). The writer sends each copy as a per-subscriber header and
// the shared payload. A payload of up to copyPayloadMax (512) bytes is
// copied into the batch right after its header, while the queue entry
// still holds the message, so a run of small packets goes out as one
// vector (a copy of a few hundred bytes is cheaper than the kernel's work
// per vector); a bigger one is a vector of its own, sent from the message
// itself (pinned by TestSmallDeliveriesShareOneVector). A message with
// properties caches its headers (hdrCache, out of line: the message
// struct stays small, TestMessageStructSize); the header of one without
// is encoded per delivery (appendBareHeader):
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
// Small messages in slab chunks are never reused: the garbage collector
// frees them once no queue, inflight window, retained store, replay or
// writer holds them. A small message without properties that came alone
// in its read (a publisher at a steady rate, one packet per wake) comes
// instead from a per-shard pool, the message and its bytes in one
// object counted like a big message's buffer (smallmsg.go): a lone
// message allocates nothing (TestLoneMessageAllocations). A big message (over slabMaxCopy, up to 1 MiB) is
// built in a size-classed buffer from a per-shard pool and counts its
// holders: reader, queue entries, inflight entries, the writer's batch
// until written, pending dead letters; the last to let go gives the
// buffer back (msgbuf.go). Its PUBLISH body is read from the socket
// straight into that buffer, once the fixed header has passed the size
// checks, and the message is built around the bytes where they landed,
// so the payload is never copied in user space (bodyread.go). The
// retained store, wills and other long-lived messages take unpooled
// copies. Read buffers and the writer's batch arena are pooled too;
// nothing may point into them once given back.
// Tests run shards in a poisoning mode (poison.go) that overwrites every
// pooled buffer as it is given back, with self-describing payloads
// checked byte for byte (TestBuffersNotReusedWhileHeld,
// FuzzBufferSchedule, TestPooledPayloadOutlivesEarlyPuback): a holder
// left pointing into a recycled buffer delivers a wrong payload there;
// TestMessageBuffersReturned counts that every buffer comes back.
//
// # Durability (Options.MessageLog)
//
// With a message log (store.WAL.Messages) every QoS 1/2 PUBLISH is
// appended to the tenant's log while the shard's read lock is held, then
// routed; QoS 0 never touches the log. Record key = the message metadata
// (store.AppendMeta), payload = the application payload as-is.
//
//	reader: decode ─▶ append (write(2)) ─▶ route ─▶ ack parked on the conn
//	writer: queued message not durable yet ─▶ stop, conn registered
//	ackLoop: WaitDurable(highest parked offset) ─▶ release acks ─▶ writer
//
// Under wal.SyncAlways a PUBACK/PUBREC goes out only once its record is
// fsynced, but the reader never waits: acks are parked in order
// [MQTT-4.6.0-2] and one goroutine per shard group-commits them. Under
// SyncInterval and SyncNever acks go out at once. Subscribers see only
// what is durable, as acknowledgements: under SyncAlways (and replicated)
// a writer stops at a queued message whose record is not yet durable
// (conn.deliverableLocked) and the same ack wave wakes it; stored entries
// wait in waitReadable, and a retained message is shown only once stored.
// A logged retained message is stored only once its append succeeded (and,
// under SyncAlways, its record is fsynced): a PUBLISH the log refuses
// leaves the retained message as it was (Shard.retainLogged).
// The retained store keeps a copy of its own, never in the log; the copy
// a queue or inflight window owns (message.own) carries its record's
// offset, so it is gated like the message.
//
// A session's pending messages that live in the log are storedEntry
// values (offset, QoS, RETAIN, subscription id: 16 bytes), in the
// session's stored ring, which the writer drains before its in-memory
// queue. An offline persistent session receives only these; on
// disconnect its queued logged messages are turned into them. No message
// count bounds a stored ring, only Retention: a connected persistent
// session whose in-memory queue is full (MaxQueuedMessages,
// MaxQueuedBytes) moves that queue's logged messages into it, in order,
// rather than dropping the new copy (except while a berth-replay-from
// replay is being collected), so a subscriber returning to a long backlog
// loses none of the live messages that arrive meanwhile. The writer
// sends a stored message as its per-subscriber header (writev) followed by
// the payload straight from the segment file (sendfile(2) at an explicit
// offset, through the raw socket), or through a pooled buffer on TLS and
// WebSocket connections:
//
//	writev [ctrl, hdr1] ─▶ sendfile(seg, pos1, n1) ─▶ writev [hdr2] ─▶ ...
//
// Every CheckpointInterval each changed session's cursor (the lowest log
// offset it still needs) is computed under the shard lock (so no message
// is appended but unrouted) and saved with the session record; segments
// below every cursor (and older than ReplayHistory) are deleted.
// Options.Retention (SetRetention, live) bounds the log by bytes and age
// whatever sessions need: every CheckpointInterval the oldest segments
// beyond it are deleted, after every session dropped its stored entries
// into them (each copy counted as DropRetention, "retention"); see
// retention.go. After a restart the pending rings are
// rebuilt by scanning the log from the lowest cursor and matching each
// message against the restored subscriptions. A stale cursor means QoS 1
// redelivery after a crash, never loss; and little of it: a reader logs
// the offsets its persistent session PUBACKed as one StateAcked record per
// outbox flush (never waited for), which the restart scan takes out of the
// rebuilt rings (ackrecord.go).
//
// QoS 2 is exactly-once across a crash (qos2.go): an inbound message's
// record also marks it awaiting PUBREL, and state records in the same log
// note a PUBREL received, an outbound QoS 2 PUBLISH about to be sent (its
// packet id), its PUBREC and its PUBCOMP; the acknowledgement or PUBLISH
// that depends on one waits for its fsync like a PUBACK. Checkpoints save
// each session's lowest QoS 2 position with its cursor, and the restart
// scan rebuilds awaitingRel and the outbound flows from there
// (qos2_rebuild.go). Retention carries the QoS 2 state of the segments it
// deletes to the log's end first (carryQoS2Locked).
//
// A v5 SUBSCRIBE with the user property berth-replay-from (RFC 3339 time
// or log offset) subscribes under the shard lock, noting the log end, then
// hands the session the stored messages matching the filter from there to
// that end; the writer holds live messages back until they are in place.
//
// # Sessions belong to a credential
//
// A session belongs to the credential that created it (ConnInfo.
// CredentialID, kept in its store record). attach refuses another
// credential naming its client id with CONNACK 0x85 (3.1.1: return code 2),
// clean start or not, before touching the session or its connection; an
// ownerless session (standalone, or an old record) goes to the first
// credential that resumes it. A resumed session keeps only the
// subscriptions ConnInfo.Authorizer still allows (the others are dropped
// under the shard lock, counted in SessionInfo.SubscriptionsRevoked and
// Stats.SubscriptionsRevoked, and logged). EndSessionsOf(cred, reason)
// ends every session of a revoked credential, connected or offline.
//
// # Ending connections, re-authentication, live limits
//
// End(nc, reason) ends the connection that was handed to ServeConn as nc
// (MQTT 5: DISCONNECT reason first; 3.1.1: close), e.g. 0x87 when its
// credential is revoked. ConnInfo.Deadline ends it with 0xA0 at the
// credential's expiry. With ConnInfo.AuthMethod a CONNECT may name that
// method (CONNACK names it back) and the client may re-authenticate:
//
//	client: AUTH 0x19 {Authentication Method, Authentication Data = new credential}
//	shard:  ConnInfo.Reauthenticate(data) ─▶ new Deadline ─▶ AUTH 0x00 {method}
//	                                      └▶ error       ─▶ DISCONNECT 0x87
//	another method: DISCONNECT 0x82 (protocol error) [MQTT-4.12.1-1]
//
// SetLimits changes MaxInflight and MaxQueuedBytes of the live shard
// (atomics; connected clients' windows follow at once). SetSessionCaps
// changes MaxSessions (a new session over it: CONNACK 0x97) and
// MaxSessionExpiry (offline sessions above a lowered cap are re-armed);
// see sessioncap.go.
//
// # Topic rules (SetTopicRules)
//
// The tenant's topic rules (topicrule.Set, swapped live through an atomic
// pointer) admit every message before the quotas, on every way in: device
// PUBLISH (size: DISCONNECT 0x95; RETAIN refused: DISCONNECT 0x9A, 3.1.1
// sent without it; rate: PUBACK 0x97, 3.1.1 throttled), HTTP publish
// (RuleRefusal), wills (at CONNECT and when due). Their retention is
// applied where messages are read back from the log (the stored writer,
// replay). A tenant without rules pays one pointer load per message; see
// topicrules.go.
//
// # Dead letters (Options.DeadLetters)
//
// QoS 1/2 messages dropped for a subscriber (queue full, expired, too
// large) or refused by a quota are copied to $berth/dlq/<reason> within
// the shard; see deadletter.go for the format. Dead letters are never
// dead-lettered again.
//
// # Locks
//
// Shard.mu (sessions, connections) is taken before session.mu, never the
// other way round; topic.Tree has its own lock. No lock is held across a
// socket write: the writer builds a batch under session.mu and writes it
// after unlocking. writeState.mu (whoever writes a connection's socket:
// its writer or an inline writer) is taken before session.mu, and only
// tried, never waited for, by an inline writer.
package shard
