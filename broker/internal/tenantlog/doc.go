// Package tenantlog is a tenant's store (store.WAL: the message log, the
// retained messages and the sessions) made the state machine of the
// tenant's Raft group (package replica): what the leader's shard writes is
// proposed to the group and appended to the store on every replica, in
// commit order, once a quorum has it.
//
// # Leader and followers
//
//	                 leader node                                 follower nodes
//	shard ─ Append(key, payload) ─▶ Log: offset = next++,        Apply(entry):
//	      (message log records)         record into the batch      append each record
//	store.WAL.SaveSession etc. ───▶ ReplicateKeyed: into the       to the store here
//	      (retained, sessions)          batch, wait for commit
//	                                proposer goroutine: one batch = one entry,
//	                                Propose, the next batch meanwhile (group commit)
//	                                Apply(entry): append to the store here,
//	                                Propose nil: Durable() moves (own mark),
//	                                acks waiting on it go out
//
// The leader does not write its store itself: every node, the leader too,
// writes only what Apply gives it, so a store never holds a record the
// group did not commit and a deposed leader has nothing to undo. The
// leader names a message-log record's offset when the shard appends it
// (the shard queues the message by it at once, but delivers it, as it
// acknowledges it, only once Durable passes it); Apply checks the record
// lands there. A
// record the shard reads back before it is applied (a stored message, a
// replay) waits for Durable (shard.Replication).
//
// Durability belongs to one leadership: WaitDurable and Durable count only
// offsets below both the applied log's end and an own mark, set by Lead to
// the log's end after the barrier and moved only when Propose returns nil
// for this node's batch. A deposed leader applying another leader's record
// at an offset it handed out never reports that offset durable.
//
// Lead runs when the node wins the group: a barrier entry is proposed and
// applied first, so the store holds everything committed before this term
// and the shard opened on it serves exactly what the old leader
// acknowledged. Stop (or any failed proposal) ends the leadership: every
// waiter and every later Append and ReplicateKeyed fail, so nothing more
// is acknowledged.
//
// After a restart the replica group applies again the entries after its
// last snapshot: a message-log record below the log's next offset is
// already there and skipped; keyed records are applied again in order,
// which leaves each key with its newest value. Snapshot fsyncs the store
// and compacts its keyed logs before the group deletes raft log entries.
//
// A follower too far behind for the leader's raft log gets the store
// itself (replica.FileState): the leader checkpoints it (Checkpoint:
// sealed segments hard-linked, active ones copied, between two applied
// entries) and streams the files; the follower swaps its store for them
// (Install: close, two renames, reopen; store.OpenWAL finishes or undoes
// an interrupted swap), then applies what follows.
//
// Segment removal (the shard's retention and its removal of segments no
// session needs) is replicated too (RemoveBefore, kind 4), so every
// replica's message log is bounded like the leader's.
//
// # Entry format (all integers big-endian). NEVER CHANGE: bytes on disk.
//
//	entry    version 1 B (1) | record ...          (no record: a barrier)
//	record   kind 1 B | kind's fields
//	  kind 1  message log   offset 8 B | count 4 B | key len 4 B | key | payload len 4 B | payload
//	  kind 2  retained      key len 4 B | key (topic)     | payload len 4 B | payload
//	  kind 3  sessions      key len 4 B | key (client id) | payload len 4 B | payload
//	  kind 4  remove        offset 8 B | keep since 8 B (unix ns, 0: none)
//	          (message-log segments wholly below offset, and older than
//	          keep since, are deleted on every replica when applied)
//
// Keyed payloads are store.WAL's records as they would be on its disk
// (empty: a tombstone). The snapshot data is the message log's next
// offset, 8 B.
package tenantlog
