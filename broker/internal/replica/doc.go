// Package replica replicates a log across nodes with etcd's Raft
// (go.etcd.io/raft/v3, PreVote and CheckQuorum on). Berth supplies what the
// library leaves to its user: durable storage, the Ready loop, the apply
// loop, an authenticated transport between nodes, and quiescence so that
// idle groups cost nothing. docs/replication.md has the design and what is
// not done yet; this file draws the formats.
//
// # Use
//
//	h, err := replica.New(replica.Config{NodeID: 1, Listen: ":7881", Secret: s, Dir: dir, Quiesce: true})
//	h.AddPeer(2, "10.0.0.2:7881")                  // every other node
//	g, err := h.OpenGroup(groupID, []uint64{1, 2, 3}, sm)
//	err = g.Propose(ctx, data)                     // nil: committed by a quorum and applied here
//
// # The Ready loop (one goroutine per group)
//
// Each turn takes a tick, a batch of peer messages or a batch of proposals
// (up to batchMax: group commit), then for every Ready: persist the
// snapshot, entries and HardState as one WAL write and fsync it (policy
// always; a changed term or vote is fsynced under every policy), send the
// messages, apply the committed entries to the StateMachine, Advance, and
// compact every SnapshotEntries applied entries. A follower therefore answers
// an append only once it is on its disk, and an entry is committed only when
// a quorum has it on disk.
//
// # The raft log on disk (a wal.Log per group, in <dir>/<group>/log)
//
// Every record is a record of the segmented WAL (29-byte header, key,
// payload, CRC-32C; see package wal); the raft record kind is the first byte
// of the key. All integers big-endian. NEVER CHANGE these layouts.
//
//	entry         key: 0x01 | term 8 B | index 8 B | entry type 1 B      payload: entry data
//	HardState     key: 0x02 | term 8 B | vote 8 B | commit 8 B          payload: empty
//	snapshot      key: 0x03 | index 8 B | term 8 B                       payload: empty
//	  (restored: the log was replaced by a snapshot from the leader)
//	snapshot      key: 0x04 | index 8 B | term 8 B                       payload: empty
//	  (compacted: entries up to index live in the snapshot)
//
// The log is only ever appended. Replay keeps the newest marker, the entries
// after it and the newest HardState; an entry whose index is at or below the
// last one replaces it and everything after it (raft truncated them). A
// compaction writes its marker and the HardState again, rolls the segment
// and deletes whole segments below the first record still needed. Entry data
// starts with the proposing node id and its sequence number (8 B each) so the
// proposer recognises its entry when it is applied; the sequence starts at
// a random number each time the group opens (no match across restarts).
//
// # Snapshot files (<dir>/<group>/snap/NNNNNNNNNNNNNNNNNNNN.snap, the index)
//
//	"BSN1" | CRC-32C of the rest, 4 B | raftpb.Snapshot (protobuf)
//
// Written to a .tmp file, fsynced, renamed, directory fsynced, before the
// marker that names it is appended.
//
// # Peer transport (TCP)
//
// Each node dials every peer and only sends on the connection it dialed. A
// connection opens with a mutual HMAC-SHA256 challenge-response over the
// cluster secret (the idea of the gateway's signed PROXY header, made
// interactive so no replay cache is needed):
//
//	dialer → "BRF1" | from id 8 B | to id 8 B | client nonce 16 B
//	listener → "BRF1" | server nonce 16 B | HMAC(secret, "berth raft v1 server proof" | from | to | cn | sn)
//	dialer → HMAC(secret, "berth raft v1 client proof" | from | to | cn | sn)
//	session key = HMAC(secret, "berth raft v1 session key" | from | to | cn | sn)
//
// then frames, each MAC'd with the session key over a sequence number both
// ends count (no replay, reorder or drop inside a connection):
//
//	length 4 B | kind 1 B | group id 8 B | payload | HMAC(key, seq 8 B | length | kind | group | payload)
//
// Kinds: 1 raft message (protobuf raftpb.Message), 2 quiesce heartbeat (a
// MsgHeartbeat), 3 node liveness (group 0; payload: the sender's current
// raft id, 8 B, then its flags, 1 B, when any is set: 1 draining, 2 asks
// for a rebalance, 4 rebalancing, 8 rebalance work left; identity.go). A snapshot of a
// FileState group goes on a connection dialed for it alone (same
// handshake), written blocking: 4 begin (index 8 B), 5 chunk (path len
// 2 B | path, relative, "/"-separated | offset 8 B | ≤ 1 MiB of the file),
// 6 end (file count 4 B | byte count 8 B | the MsgSnap, protobuf); the
// sender then half-closes and waits for the follower to close
// (snapstream.go; the follower side in snapin.go). A listener refuses an
// unknown node, a wrong proof, a bad MAC (it closes the connection) and a
// message whose From is not the authenticated peer or whose To is not
// itself. Frames are authenticated, not encrypted.
package replica
