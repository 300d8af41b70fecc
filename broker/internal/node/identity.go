package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"berth.dev/broker/internal/replica"
	"berth.dev/broker/internal/wal"
)

// A node's identity in replication (docs/replication.md, "A node that lost
// its disk"). Its peer id (PeerID, from its node id) names it on the peer
// transport and never changes. Its raft id names it in its groups and is
// new whenever its raft state is: raft assumes a member never forgets its
// log or its votes, so a node whose data directory was wiped must join
// again as a new member (the leaders replace its former id, replication's
// memberLoop), never under the id whose state it lost. The raft id is
// derived from the node id and an incarnation, a random value written in
// the raft directory at its first start; a fresh directory is a fresh
// incarnation.

// incarnationFile is the incarnation's file in <data>/raft.
const incarnationFile = "incarnation"

// legacyIncarnation is the incarnation of a raft directory written before
// incarnations existed: its raft id is the peer id, as it was then.
const legacyIncarnation = "legacy"

// PeerID is a node id's id on the peer transport (replica.NameID): every
// node computes the same.
func PeerID(nodeID string) uint64 {
	return replica.NameID(nodeID)
}

// raftIDOf is the raft id of a node id in an incarnation.
func raftIDOf(nodeID, incarnation string) uint64 {
	if incarnation == legacyIncarnation {
		return PeerID(nodeID)
	}
	return replica.NameID(nodeID + "\x00" + incarnation)
}

// loadIncarnation reads the raft directory's incarnation, writing a new
// one (durably) at its first start; created reports that. A directory
// holding groups but no incarnation was written before incarnations: it
// keeps its raft id (legacyIncarnation).
func loadIncarnation(raftDir string) (inc string, created bool, err error) {
	path := filepath.Join(raftDir, incarnationFile)
	b, err := os.ReadFile(path)
	if err == nil {
		inc = strings.TrimSpace(string(b))
		if inc == "" {
			return "", false, fmt.Errorf("node: %s is empty", path)
		}
		return inc, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("node: incarnation: %w", err)
	}
	ents, err := os.ReadDir(raftDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("node: incarnation: %w", err)
	}
	if slices.ContainsFunc(ents, fs.DirEntry.IsDir) { // groups
		inc = legacyIncarnation
	} else {
		var r [16]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", false, err
		}
		inc = hex.EncodeToString(r[:])
	}
	if err := wal.WriteFileAtomic(wal.OSFS{}, path, []byte(inc+"\n")); err != nil {
		return "", false, fmt.Errorf("node: incarnation: %w", err)
	}
	return inc, true, nil
}
