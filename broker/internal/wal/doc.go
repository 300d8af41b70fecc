// Package wal is the write-ahead log of a tenant shard: an append-only,
// segmented, checksummed record log with group-committed fsync, torn-tail
// recovery, sparse mmapped indexes, retention, key compaction and a
// zero-copy (sendfile) replay path.
//
// # Use
//
//	l, err := wal.Open(wal.Options{Dir: dir, Fsync: wal.SyncAlways})
//	off, err := l.AppendSync(topic, payload, 1) // durable when err == nil: acknowledge
//	r, err := l.ReadFrom(cursor)                // r.Next(): views, no allocation per record
//	loc, err := r.NextLocation()                // header only: where the payload lies
//	s, err := wal.NewSender(tcpConn)            // once per connection
//	n, err := s.Send(loc.File, loc.PayloadPos(), int(loc.PayloadSize)) // sendfile(2)
//
// Reader.NextHeld is NextLocation whose Location keeps its segment open
// until Release (a payload sent after the Reader moved on). RemoveBefore
// deletes sealed segments wholly below an offset the owner no longer needs
// (the shard's lowest session cursor). RetentionCut names the offset
// below which a retention (given per call, so the owner may change it
// live) would delete segments, without deleting them: the owner lets go of
// what it holds there, then calls RemoveBefore(cut, time.Time{}).
//
// Append, AppendBatch, AppendSync, Reader.Next, Reader.NextLocation and
// Sender.Send allocate nothing in steady state (pinned by tests).
// ApplyRetention and Compact are called by the owner of the log (the tenant
// shard) on its own schedule; they never touch the active segment.
//
// # Directory layout
//
// A log is one directory. Each segment is a pair of files named by the
// offset of the first record it may hold (its base offset), zero-padded to
// 20 decimal digits:
//
//	00000000000000000000.wal   records, appended
//	00000000000000000000.idx   sparse index, written when the segment is sealed
//	00000000000000004096.wal   the active (tail) segment: no .idx, scanned on Open
//
// Files ending in ".tmp" are the leftovers of an interrupted seal or
// compaction and are removed on Open.
//
// # Record (all integers big-endian)
//
//	 0      1               9              17         21         25         29
//	+------+---------------+---------------+----------+----------+----------+
//	|magic | timestamp     | offset        | key size | payload  | record   |
//	| 1 B  | unix ns, 8 B  | 8 B           | 4 B      | size 4 B | count 4 B|
//	+------+---------------+---------------+----------+----------+----------+
//	| key (key size bytes) | payload (payload size bytes) | CRC-32C 4 B     |
//	+----------------------+------------------------------+-----------------+
//
// The CRC-32C (Castagnoli) covers header, key and payload. A record with
// count N covers offsets offset .. offset+N-1 (the broker encodes the batch
// inside the payload; the log treats key and payload as opaque bytes).
// Offsets are assigned by the log and strictly increase inside a log;
// compaction may leave gaps.
//
// Magic is the format version. A record whose magic differs but whose
// checksum is valid was written by another format version and is rejected at
// once (ErrUnsupportedVersion); a wrong magic with a bad checksum is damage.
//
// # Index entry (.idx, all integers big-endian)
//
//	 0                              8                 12
//	+------------------------------+-----------------+
//	| offset of the record, 8 B    | byte position   |
//	|                              | in .wal, 4 B    |
//	+------------------------------+-----------------+
//
// Entries are sorted by offset and by position. The first record of a
// segment is always indexed; after it, a record is indexed when at least
// Options.IndexInterval bytes were written since the last indexed record.
// A lookup binary-searches the greatest entry with offset <= target and scans
// forward. An index that is missing, short, or inconsistent with its .wal is
// rebuilt from the .wal on Open. Open checks the shape of a sealed
// segment's index (sorted, inside the .wal) and that its first and last
// entries point at the record headers they name, then scans the records
// after the last entry: a few KiB per segment, so Open's time grows with
// the number of segments, not with the bytes of the log (checking every
// entry read each sealed segment whole). A Reader checks the entry it
// starts from against the first record it reads; a wrong one (which could
// otherwise skip records silently) makes lookups in that segment start at
// its first record and removes the .idx, which the next Open rebuilds.
//
// # Durability
//
// Records are written with one write(2) per Append (or per AppendBatch).
// WaitDurable blocks until a record is fsynced; concurrent waiters share one
// fsync (group commit: the first waiter becomes the leader and fsyncs for
// everyone). An fsync error is sticky: it is returned to every waiter whose
// record was not yet durable and every later Append fails; nothing is ever
// reported durable that was not.
//
// # Recovery
//
// On Open the tail segment is scanned. A torn tail (a record running past
// the end of the file, or a bad checksum or magic with no valid record after
// it) is truncated and logged. A bad record followed by a valid one, or any
// bad record in a sealed segment, is corruption: a *CorruptionError wrapping
// ErrCorrupt, carrying the segment and the offset.
package wal

// Format constants. NEVER CHANGE these: they define bytes on disk.
const (
	// Magic is the record format version byte. Never change.
	Magic byte = 0xB7
	// HeaderSize is the fixed record header size. Never change.
	HeaderSize = 29
	// CRCSize is the size of the trailing CRC-32C. Never change.
	CRCSize = 4
	// RecordOverhead is the per-record overhead (header + CRC). Never change.
	RecordOverhead = HeaderSize + CRCSize
	// IndexEntrySize is the size of one .idx entry. Never change.
	IndexEntrySize = 12
	// SegmentSuffix and IndexSuffix name segment files. Never change.
	SegmentSuffix = ".wal"
	IndexSuffix   = ".idx"
	// baseDigits is the zero-padded width of a segment's base offset. Never change.
	baseDigits = 20
)

// Header field positions. Never change.
const (
	posMagic     = 0
	posTimestamp = 1
	posOffset    = 9
	posKeySize   = 17
	posPaySize   = 21
	posCount     = 25
)
