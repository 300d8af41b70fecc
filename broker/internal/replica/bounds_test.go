package replica

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"
)

// TestLogMemoryBoundedInBytes: a group whose entries are large snapshots
// by the bytes it holds in memory, long before SnapshotEntries entries: on
// every node the raft log in memory stays under MaxLogBytes (plus the one
// entry a Ready may add), where it would otherwise hold every entry.
func TestLogMemoryBoundedInBytes(t *testing.T) {
	const bound, entry, n = 1 << 20, 64 << 10, 48 // 3 MiB proposed
	c := newCluster(t, 3, func(cfg *Config) { cfg.MaxLogBytes = bound })
	lead := c.leader(10 * time.Second)
	data := bytes.Repeat([]byte("x"), entry)
	var peak int64
	for i := range n {
		copy(data, fmt.Sprintf("%04d", i))
		if err := c.propose(lead, string(data), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		for _, id := range c.live() {
			held := c.group(id).store.heldBytes()
			peak = max(peak, held)
			if held > bound+entry+proposalHeader {
				t.Fatalf("after %d entries of %d B node %d holds %d B of raft log in memory, bound %d B", i+1, entry, id, held, bound)
			}
		}
	}
	for _, id := range c.live() {
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d to apply every entry", id), func() bool { return len(c.sm(id).list()) == n })
		if first := c.group(id).FirstIndex(); first <= 2 {
			t.Errorf("node %d never compacted its log (first index %d)", id, first)
		}
	}
	t.Logf("%d entries, %d KiB: peak %d KiB of raft log in memory on a node (bound %d KiB)", n, n*entry>>10, peak>>10, bound>>10)
}

type nopFrames struct{}

func (nopFrames) handleFrame(*connState, uint64, byte, uint64, []byte) {}
func (nopFrames) connEnded(*connState)                                 {}

// TestPeerQueueBoundedInBytes: frames for a peer that does not take them
// (its handshake never answers) queue up to QueueBytes of payload, not
// QueueLen frames of any size; the rest are dropped and counted, and send
// reports false so that raft is told the peer is unreachable.
func TestPeerQueueBoundedInBytes(t *testing.T) {
	// A peer whose kernel accepts the connection and nothing more.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	const bound, frame, n = 1 << 20, 64 << 10, 64
	tr, err := newTransport(1, "127.0.0.1:0", []byte("berth-test-cluster-secret-0123456789"), 4096, bound, slog.New(slog.DiscardHandler), nopFrames{})
	if err != nil {
		t.Fatal(err)
	}
	tr.start()
	defer tr.close()
	tr.addPeer(2, silent.Addr().String())
	payload := make([]byte, frame)
	queued := 0
	for range n {
		if tr.send(2, kindRaft, testGroup, payload) {
			queued++
		}
	}
	if queued != bound/frame {
		t.Errorf("%d frames of %d B queued for an unresponsive peer, want %d (%d B)", queued, frame, bound/frame, bound)
	}
	if d := tr.Stats().Dropped; d < uint64(n-bound/frame) {
		t.Errorf("%d drops counted, want at least %d", d, n-bound/frame)
	}
	t.Logf("queued %d × %d B, dropped %d", queued, frame, tr.Stats().Dropped)
}
