package replica

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"
)

// TestProposalIDsDifferAcrossRestarts: a proposer knows its entry by the
// (node, sequence) header when it is applied. Entries a node proposed
// before a restart are still in its raft log (applied again after the
// restart, or sent back by another leader), so the proposals of the next
// boot must never carry the same header: else an old entry would complete
// a new proposal that was never committed. Asserted on the raft log on
// disk across three boots of a one-node group.
func TestProposalIDsDifferAcrossRestarts(t *testing.T) {
	c := newCluster(t, 1, nil)
	for boot := range 3 {
		if boot > 0 {
			c.kill(1)
			c.restart(1)
		}
		c.leader(10 * time.Second)
		for i := range 3 {
			if err := c.propose(1, fmt.Sprintf("boot %d entry %d", boot, i), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	g := c.group(1)
	first, _ := g.store.FirstIndex()
	last, _ := g.store.LastIndex()
	ents, err := g.store.Entries(first, last+1, math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]uint64]string{}
	n := 0
	for _, e := range ents {
		d := e.GetData()
		if len(d) < proposalHeader {
			continue // a leader's empty entry
		}
		n++
		id := [2]uint64{binary.BigEndian.Uint64(d[0:8]), binary.BigEndian.Uint64(d[8:16])}
		if prev, dup := seen[id]; dup {
			t.Errorf("%q and %q carry the same proposal header (node %d, seq %d)", prev, d[proposalHeader:], id[0], id[1])
		}
		seen[id] = string(d[proposalHeader:])
	}
	if n != 9 {
		t.Fatalf("raft log holds %d proposed entries, want 9", n)
	}
}
