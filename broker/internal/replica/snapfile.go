package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Snapshot file constants. NEVER CHANGE: bytes on disk.
const (
	snapMagic  = "BSN1"
	snapSuffix = ".snap"
	snapDigits = 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrSnapCorrupt is a snapshot file that fails its checksum or decoding.
var ErrSnapCorrupt = errors.New("replica: corrupt snapshot file")

// snapDir keeps snapshot files, one per snapshot, named by index:
// NNNNNNNNNNNNNNNNNNNN.snap = magic "BSN1" | CRC-32C (4 B, big-endian) of the
// rest | the raftpb.Snapshot in protobuf encoding.
type snapDir struct{ dir string }

func (s snapDir) path(index uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%0*d%s", snapDigits, index, snapSuffix))
}

// save writes a snapshot durably: temp file, fsync, rename, fsync directory.
func (s snapDir) save(snap *pb.Snapshot) error {
	body, err := proto.Marshal(snap)
	if err != nil {
		return err
	}
	b := make([]byte, 8, 8+len(body))
	copy(b, snapMagic)
	binary.BigEndian.PutUint32(b[4:8], crc32.Checksum(body, castagnoli))
	b = append(b, body...)
	final := s.path(snap.GetMetadata().GetIndex())
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("replica: save snapshot: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("replica: save snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("replica: save snapshot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("replica: save snapshot: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("replica: save snapshot: %w", err)
	}
	return syncDir(s.dir)
}

// load reads the snapshot at index.
func (s snapDir) load(index uint64) (*pb.Snapshot, error) {
	b, err := os.ReadFile(s.path(index))
	if err != nil {
		return nil, fmt.Errorf("replica: load snapshot %d: %w", index, err)
	}
	if len(b) < 8 || string(b[:4]) != snapMagic || binary.BigEndian.Uint32(b[4:8]) != crc32.Checksum(b[8:], castagnoli) {
		return nil, fmt.Errorf("%w: %s", ErrSnapCorrupt, s.path(index))
	}
	var snap pb.Snapshot
	if err := proto.Unmarshal(b[8:], &snap); err != nil || snap.GetMetadata().GetIndex() != index {
		return nil, fmt.Errorf("%w: %s", ErrSnapCorrupt, s.path(index))
	}
	return &snap, nil
}

// removeBelow deletes snapshot files older than index and leftover temp
// files; the snapshot at index is kept.
func (s snapDir) removeBelow(index uint64) error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			errs = append(errs, os.Remove(filepath.Join(s.dir, name)))
			continue
		}
		n, ok := strings.CutSuffix(name, snapSuffix)
		if !ok {
			continue
		}
		if i, err := strconv.ParseUint(n, 10, 64); err == nil && i < index {
			errs = append(errs, os.Remove(filepath.Join(s.dir, name)))
		}
	}
	return errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
