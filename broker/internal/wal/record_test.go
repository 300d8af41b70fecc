package wal

import (
	"bytes"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

// goldenRecord is one record, field by field. If this test fails the disk
// format changed: that is never allowed (see doc.go).
var goldenRecord = strings.Join([]string{
	"b7",               // magic
	"17d074e882920000", // timestamp: 1716000000000000000 ns (2024-05-18T02:40:00Z)
	"000000000000002a", // offset 42
	"00000005",         // key size 5
	"00000002",         // payload size 2
	"00000001",         // record count 1
	"612f622f63",       // key "a/b/c"
	"6869",             // payload "hi"
	"274bcf0c",         // CRC-32C (Castagnoli) of everything above
}, "")

func TestGoldenRecord(t *testing.T) {
	want, err := hex.DecodeString(goldenRecord)
	if err != nil {
		t.Fatal(err)
	}
	key, payload := []byte("a/b/c"), []byte("hi")
	got := make([]byte, RecordOverhead+len(key)+len(payload))
	encodeRecord(got, 1716000000000000000, 42, key, payload, 1)
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded record\n got %x\nwant %x", got, want)
	}
	if err := checkRecord(want); err != nil {
		t.Fatalf("checkRecord(golden) = %v", err)
	}
	h := decodeHeader(want)
	if h != (header{magic: Magic, ts: 1716000000000000000, offset: 42, keyLen: 5, payLen: 2, count: 1}) {
		t.Fatalf("decodeHeader = %+v", h)
	}
}

// TestCastagnoliVector pins the checksum to CRC-32C's published check value.
func TestCastagnoliVector(t *testing.T) {
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xE3069283 {
		t.Fatalf("crc32c(123456789) = %#x, want 0xe3069283", got)
	}
}

func TestCheckRecord(t *testing.T) {
	good, _ := hex.DecodeString(goldenRecord)
	otherVersion := bytes.Clone(good)
	otherVersion[0] = 0xB8
	n := len(otherVersion) - CRCSize
	c := crc32.Checksum(otherVersion[:n], castagnoli)
	otherVersion[n], otherVersion[n+1], otherVersion[n+2], otherVersion[n+3] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
	badMagic := bytes.Clone(good)
	badMagic[0] = 0
	flipped := bytes.Clone(good)
	flipped[30] ^= 1
	tests := []struct {
		name string
		rec  []byte
		want error
	}{
		{"good", good, nil},
		{"other version with valid crc", otherVersion, ErrUnsupportedVersion},
		{"zeroed magic", badMagic, ErrBadMagic},
		{"flipped key bit", flipped, ErrChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkRecord(tt.rec)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("checkRecord = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestSegmentName(t *testing.T) {
	if got := segmentName(4096); got != "00000000000000004096.wal" {
		t.Fatalf("segmentName(4096) = %q", got)
	}
	for _, tt := range []struct {
		name string
		base uint64
		ok   bool
	}{
		{"00000000000000004096.wal", 4096, true},
		{"18446744073709551615.wal", 1<<64 - 1, true},
		{"4096.wal", 0, false},
		{"00000000000000004096.idx", 0, false},
		{"0000000000000000409x.wal", 0, false},
	} {
		base, ok := parseSegmentName(tt.name)
		if ok != tt.ok || base != tt.base {
			t.Errorf("parseSegmentName(%q) = %d, %v; want %d, %v", tt.name, base, ok, tt.base, tt.ok)
		}
	}
}
