package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// castagnoli is the CRC-32C table. It is computed once and never written
// again (hash/crc32 uses the SSE4.2 instruction for it on amd64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sentinel errors. Callers match them with errors.Is.
var (
	ErrKeyTooLarge        = errors.New("wal: key too large")
	ErrPayloadTooLarge    = errors.New("wal: payload too large")
	ErrBadCount           = errors.New("wal: record count must be between 1 and MaxBatchCount")
	ErrEmptyBatch         = errors.New("wal: empty batch")
	ErrClosed             = errors.New("wal: log closed")
	ErrCorrupt            = errors.New("wal: corrupt record")
	ErrChecksum           = errors.New("wal: checksum mismatch")
	ErrBadMagic           = errors.New("wal: bad magic")
	ErrTornRecord         = errors.New("wal: record runs past end of segment")
	ErrUnsupportedVersion = errors.New("wal: unsupported record format version")
	ErrOutOfRange         = errors.New("wal: offset out of range")
	ErrNotOSFile          = errors.New("wal: segment file is not an *os.File")
)

// CorruptionError reports a damaged record that recovery must not guess
// about: a bad record inside a sealed segment, or one followed by valid
// records. It wraps ErrCorrupt and the specific cause.
type CorruptionError struct {
	Segment string // path of the .wal file
	Offset  uint64 // offset expected at the damaged position
	Pos     int64  // byte position of the damaged record in the segment
	Err     error  // ErrChecksum, ErrBadMagic, ErrTornRecord, ...
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("wal: corrupt record in %s at offset %d (byte %d): %v", e.Segment, e.Offset, e.Pos, e.Err)
}

// Unwrap lets errors.Is match both ErrCorrupt and the cause.
func (e *CorruptionError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// Record is one record read from the log. Key and Payload are views into the
// reader's buffer, valid until the next call on that reader.
type Record struct {
	Offset    uint64 // first offset covered
	Count     uint32 // offsets covered: Offset .. Offset+Count-1
	Timestamp int64  // Unix nanoseconds at append
	Key       []byte
	Payload   []byte
}

// header is a decoded record header.
type header struct {
	magic  byte
	ts     int64
	offset uint64
	keyLen uint32
	payLen uint32
	count  uint32
}

// size is the on-disk size of the whole record.
func (h header) size() int64 { return RecordOverhead + int64(h.keyLen) + int64(h.payLen) }

func decodeHeader(b []byte) header {
	_ = b[HeaderSize-1]
	return header{
		magic:  b[posMagic],
		ts:     int64(binary.BigEndian.Uint64(b[posTimestamp:])),
		offset: binary.BigEndian.Uint64(b[posOffset:]),
		keyLen: binary.BigEndian.Uint32(b[posKeySize:]),
		payLen: binary.BigEndian.Uint32(b[posPaySize:]),
		count:  binary.BigEndian.Uint32(b[posCount:]),
	}
}

// encodeRecord writes one whole record into dst, which must be exactly
// RecordOverhead+len(key)+len(payload) bytes long.
func encodeRecord(dst []byte, ts int64, offset uint64, key, payload []byte, count uint32) {
	dst[posMagic] = Magic
	binary.BigEndian.PutUint64(dst[posTimestamp:], uint64(ts))
	binary.BigEndian.PutUint64(dst[posOffset:], offset)
	binary.BigEndian.PutUint32(dst[posKeySize:], uint32(len(key)))
	binary.BigEndian.PutUint32(dst[posPaySize:], uint32(len(payload)))
	binary.BigEndian.PutUint32(dst[posCount:], count)
	n := HeaderSize
	n += copy(dst[n:], key)
	n += copy(dst[n:], payload)
	binary.BigEndian.PutUint32(dst[n:], crc32.Checksum(dst[:n], castagnoli))
}

// checkRecord verifies a whole encoded record (header, key, payload, CRC).
// It returns nil, ErrUnsupportedVersion (valid CRC, other magic),
// ErrBadMagic or ErrChecksum.
func checkRecord(rec []byte) error {
	n := len(rec) - CRCSize
	ok := crc32.Checksum(rec[:n], castagnoli) == binary.BigEndian.Uint32(rec[n:])
	switch {
	case rec[posMagic] != Magic && ok:
		return fmt.Errorf("%w: magic %#x", ErrUnsupportedVersion, rec[posMagic])
	case rec[posMagic] != Magic:
		return ErrBadMagic
	case !ok:
		return ErrChecksum
	}
	return nil
}
