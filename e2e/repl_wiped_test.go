package e2e

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// TestReplicationWipedNodeRejoins: a follower's data directory is wiped
// (stopped, rm -rf, restarted) while the load runs; it rejoins under a
// new raft id as a learner, catches up (the store streamed with a
// snapshot) and is promoted in place of its former id (its /readyz turns
// 200 only then), then the leader is killed and the wiped node is made to
// lead: an offline session finds every acknowledged message there, those
// from before the wipe included.
func TestReplicationWipedNodeRejoins(t *testing.T) {
	t.Parallel()
	e := newReplEnv(t)
	l := e.load(t, "repl/wipe")
	l.Park("repl-sub")
	for i := range 2 {
		l.Publish(fmt.Sprintf("repl-pub%d", i), 4)
	}
	lead, epoch := e.waitLeader(t, 0, 30*time.Second)
	l.WaitAcked(l.Acked()+500, 30*time.Second)
	var wiped, other = e.s.Cluster[0], e.s.Cluster[1]
	for _, n := range e.s.Cluster {
		if n != lead {
			wiped = n
			break
		}
	}
	for _, n := range e.s.Cluster {
		if n != lead && n != wiped {
			other = n
		}
	}
	before := l.Acked()
	wiped.Kill()
	wiped.Wipe(t)
	l.WaitAcked(l.Acked()+300, 30*time.Second) // two of three: still a quorum
	start := time.Now()
	wiped.Restart(t)
	waitNodeReady(t, wiped, 60*time.Second) // a voter again, caught up
	voting := time.Since(start)
	l.WaitAcked(l.Acked()+500, 30*time.Second)

	// The leader dies: the two left are a quorum, and the wiped node must
	// lead (drain hands it the leadership if the other won).
	lead.Kill()
	e.waitLeader(t, epoch, 30*time.Second) // a new term: the two left elected one
	at := e.moveLeadership(t, wiped)
	caughtUp := time.Since(start)
	l.WaitAcked(l.Acked()+300, 30*time.Second) // the wiped node acknowledges
	l.StopPublishing()
	l.Resume("repl-sub")
	r := l.Settle(30 * time.Second)
	logFault(t, "replica data directory wiped under QoS 1 load (3 nodes, 2 publishers x 4 pipelined, offline persistent session), then the leader killed",
		r, caughtUp, fmt.Sprintf("; %d acked before the wipe; restart to voting (ready) %v; wiped %s leads at epoch %d (other survivor %s), restart to leading %v",
			before, voting.Round(time.Millisecond), wiped.ID, at, other.ID, caughtUp.Round(time.Millisecond)))
}

// waitNodeReady polls the node's GET /readyz until it answers 200.
func waitNodeReady(t *testing.T, n *stack.ClusterNode, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	client := &http.Client{Timeout: 2 * time.Second}
	last := ""
	for time.Now().Before(deadline) {
		resp, err := client.Get("http://" + n.Admin + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not ready within %v: %s", n.ID, within, last)
}
