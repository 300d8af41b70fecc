// Package store is the persistence boundary of one tenant shard: the
// retained messages and the persistent sessions a shard must find again
// after a restart. The shard talks only to the Store interface. Memory
// keeps everything in memory (tests, no -data); WAL keeps it in
// write-ahead logs (package wal) and also owns the tenant's message log,
// which the shard appends QoS 1/2 messages to.
//
// # What is stored
//
//	retained:  topic name ─▶ Message (the newest retained PUBLISH;
//	           an empty payload deletes it [MQTT-3.3.1-6])
//	sessions:  client id  ─▶ Session (owning credential, expiry interval,
//	           subscriptions, message-log cursor)
//
// Values handed to a Store are owned by the store afterwards: callers pass
// copies and never modify them again. Values handed out by a Store are
// shared and must be treated as read-only.
//
// # Directory layout (WAL)
//
// Tenant ids never become file names: TenantDir hashes them.
//
//	<root>/<hex(sha256(tenant id))[:32]>/
//	    messages/   the message log: one record per QoS 1/2 message
//	    retained/   keyed log, key = topic; empty payload = tombstone
//	    sessions/   keyed log, key = client id; empty payload = tombstone
//
// The keyed logs are compacted (newest record per key) when the store is
// opened and on Compact. Topics and client ids are record keys, never
// paths.
//
// # Record formats (all integers big-endian). NEVER CHANGE: bytes on disk.
//
// Message metadata (AppendMeta): the key of a message-log record, whose
// payload is the application payload as received, so it can be sent from
// the file with sendfile.
//
//	+--------+-------+-----------+-----------+-----------+-------+----------+
//	| ver=1  | flags | created   | expires   | topic len | topic | prop mask|
//	| 1 B    | 1 B   | unix ns 8B| unix ns 8B| 2 B       |       | 8 B      |
//	+--------+-------+-----------+-----------+-----------+-------+----------+
//	flags: bits 0-1 QoS, bit 2 RETAIN. expires 0 = never.
//	If prop mask != 0 (bits are MQTT 5 property ids) there follow:
//	payload format 1 B | message expiry 4 B | content type (2 B len + bytes)
//	| response topic (2 B len + bytes) | correlation data (2 B len + bytes)
//	| user property count 2 B | per pair: key (2 B len + bytes), value (same)
//
// Version 2 (an inbound QoS 2 PUBLISH, AppendOrigin) is version 1
// followed by its origin: the message awaits the PUBREL of that session's
// packet id from when the record is durable (one record: no message
// without its mark, no mark without its message). Version 1 records are
// still read (no origin) and still written for every other message.
//
//	+-------+------------------------------+-----------+---------------------------+
//	| ver=2 | ... as version 1 ...         | packet id | client id (2 B len+bytes) |
//	| 1 B   |                              | 2 B       |                           |
//	+-------+------------------------------+-----------+---------------------------+
//
// Session state records (message log: the QoS 2 flows and QoS 1
// acknowledgements; kind >= 0x80 so never a meta version; IsStateKey).
// Each covers one offset; readers of messages skip them. Key: kind 1 B | client id (2 B len + bytes). Payload by kind:
//
//	0x81 StateInReleased    packet id 2 B (the client's PUBREL came)
//	0x82 StateOutSent       n × (message log offset 8 B | packet id 2 B),
//	                        durable before those PUBLISH packets are sent
//	0x83 StateOutReleased   packet id 2 B (PUBREC came), durable before PUBREL
//	0x84 StateOutCompleted  packet id 2 B (PUBCOMP, or a failed PUBREC)
//	0x85 StateAcked         QoS 1 deliveries PUBACKed: message log offsets,
//	                        ascending, uvarint first then uvarint deltas
//	0x86 StateInAwaiting    packet id 2 B (still awaiting PUBREL: the mark
//	                        of a message record retention deleted)
//
// Retained record payload: metadata length 4 B | metadata | payload.
//
// Session record payload:
//
//	+-------+-------------+----------------+-----------+-----------+
//	| ver=1 | expiry 4 B  | disconnected   | cursor 8 B| subs 2 B  |
//	| 1 B   | seconds     | unix ns 8 B    |           | count     |
//	+-------+-------------+----------------+-----------+-----------+
//	per subscription: filter (2 B len + bytes) | QoS 1 B | flags 1 B
//	(bit 0 No Local, bit 1 Retain As Published) | retain handling 1 B
//	| subscription identifier 4 B
//
// Version 2 (a session with an owner: the credential id that created it)
// inserts the owner after the version byte; the rest is as version 1.
// Version 1 records are still read (no owner) and still written for a
// session without one (standalone mode).
//
//	+-------+-----------------------------+-------------------------------
//	| ver=2 | owner (2 B len + bytes)     | expiry 4 B | ... as version 1
//	+-------+-----------------------------+-------------------------------
//
// Either version may end with extensions after the subscriptions: tag 1 B
// | length 2 B | body; decoders skip tags they do not know, and decoders
// from before extensions never read past the subscriptions. Tag 1: QoS 2
// position, 8 B (Session.QoS2From: the log offset plus one from which the
// session's QoS 2 state is rebuilt, written only when below the cursor).
//
// # Durability
//
// Under wal.SyncAlways every Set/Save/Delete returns once its record is
// fsynced; under SyncInterval and SyncNever once it is written.
package store
