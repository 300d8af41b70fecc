package stack

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// ClusterNode is one broker node of a replicating stack (Options.Nodes >
// 1): its own node id, listeners, -data directory, -peer-listen and zone;
// every node lists the others in -peers and shares the stack's peer secret
// (BERTH_PEER_SECRET). Each registers itself in the nodes table when it
// starts, which placement needs (tenant_placement.leader references it).
type ClusterNode struct {
	*Proc
	ID    string
	MQTT  string // internal listener (PROXY v2 only)
	Admin string // admin HTTP listener
	Peer  string // Raft peer transport
	Data  string // -data

	bin       string
	args, env []string
	restarts  int
}

// startCluster starts n replicating nodes and returns once each listens.
// The first is also s.Node (NodeMQTT, NodeAdmin, NodeData), for the
// helpers that talk to "the node".
func (s *Stack) startCluster(t testing.TB, bin string, n int, opts Options, apiAddr string) {
	t.Helper()
	s.PeerSecret = randomHex(32)
	tag := randomHex(3)
	for i := range n {
		s.Cluster = append(s.Cluster, &ClusterNode{
			ID: fmt.Sprintf("node%d-%s", i+1, tag), MQTT: FreeAddr(t), Admin: FreeAddr(t), Peer: FreeAddr(t),
			Data: t.TempDir(), bin: bin,
		})
	}
	for i, c := range s.Cluster {
		var peers []string
		for j, o := range s.Cluster {
			if j != i {
				peers = append(peers, fmt.Sprintf("%s=%s@z%d", o.ID, o.Peer, j+1))
			}
		}
		c.args = []string{
			"-node-id", c.ID, "-internal-listen", c.MQTT, "-admin-listen", c.Admin, "-data", c.Data,
			"-peers", strings.Join(peers, ","), "-peer-listen", c.Peer, "-zone", fmt.Sprintf("z%d", i+1),
			"-log-format", "text", "-jwks-url", "http://" + apiAddr + "/v1/.well-known/jwks.json",
		}
		if opts.UsageInterval > 0 {
			c.args = append(c.args, "-usage-interval", opts.UsageInterval.String())
		}
		c.args = append(c.args, opts.NodeArgs...)
		c.env = []string{"DATABASE_URL=" + s.DatabaseURL, "BERTH_PROXY_SECRET=" + s.ProxySecret,
			"BERTH_NODE_TOKEN=" + s.NodeToken, "BERTH_PEER_SECRET=" + s.PeerSecret}
		c.Proc = Start(t, c.ID, c.bin, c.args, c.env)
	}
	for _, c := range s.Cluster {
		WaitListening(t, c.Proc, c.MQTT, 30*time.Second)
		WaitListening(t, c.Proc, c.Admin, 30*time.Second)
	}
	first := s.Cluster[0]
	s.Node, s.NodeMQTT, s.NodeAdmin, s.NodeData = first.Proc, first.MQTT, first.Admin, first.Data
}

// ClusterNode returns the node with that node id, nil when none has it.
func (s *Stack) ClusterNode(id string) *ClusterNode {
	for _, c := range s.Cluster {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// Restart starts the node again as the same node (id, ports, -data, peers)
// once its process has ended (Kill, Stop), and returns when it listens.
// The old process's log stays with it.
func (c *ClusterNode) Restart(t testing.TB) {
	t.Helper()
	if !c.Exited() {
		t.Fatalf("Restart %s: still running; Kill or Stop it first", c.ID)
	}
	c.restarts++
	c.Proc = Start(t, fmt.Sprintf("%s (restart %d)", c.ID, c.restarts), c.bin, c.args, c.env)
	WaitListening(t, c.Proc, c.MQTT, 30*time.Second)
	WaitListening(t, c.Proc, c.Admin, 30*time.Second)
}

// Wipe deletes everything in the node's data directory (its Raft logs and
// tenant stores), as a lost disk would; the node must have ended.
func (c *ClusterNode) Wipe(t testing.TB) {
	t.Helper()
	if !c.Exited() {
		t.Fatalf("Wipe %s: still running", c.ID)
	}
	if err := os.RemoveAll(c.Data); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(c.Data, 0o700); err != nil {
		t.Fatal(err)
	}
}

// Drain calls POST /admin/drain on the node (docs/replication.md, "Drain")
// with token and returns the status code and the body.
func (c *ClusterNode) Drain(t testing.TB, token string, timeout time.Duration) (int, string) {
	t.Helper()
	return c.admin(t, http.MethodPost, fmt.Sprintf("/admin/drain?timeout=%s", timeout), token, timeout+10*time.Second)
}

// Undrain ends draining (DELETE /admin/drain) and returns the status code.
func (c *ClusterNode) Undrain(t testing.TB, token string) int {
	t.Helper()
	code, _ := c.admin(t, http.MethodDelete, "/admin/drain", token, 10*time.Second)
	return code
}

func (c *ClusterNode) admin(t testing.TB, method, path, token string, within time.Duration) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+c.Admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: within}).Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, c.ID, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
