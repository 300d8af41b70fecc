package node

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrapeMetrics reads n's /metrics.
func scrapeMetrics(t *testing.T, n *testNode) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+n.AdminAddr().String()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// metricValue is the value of the series (name with its labels, as the
// text format writes them) in body; -1 when absent.
func metricValue(body, series string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// TestRaftMetrics: three nodes, a pro tenant. The leader's /metrics counts
// one group led, each follower's one followed, all with a leader, and the
// transport's frames and bytes. A follower is killed and the leader takes
// 50 QoS 1 messages: its follower lag grows to at least 20 entries (the
// messages' entries, some batched). The
// leader is killed too: the last node's group has no leader, and the node
// is not ready.
func TestRaftMetrics(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	const tenant = replTenant
	lead := c.leader(t, tenant, nil)
	poll(t, 10*time.Second, "three voters", func() bool { return len(c.voterNodes(tenant)) == 3 })
	var followers []*testNode
	for _, n := range c.nodes {
		if n != lead {
			followers = append(followers, n)
		}
	}
	body := scrapeMetrics(t, lead)
	for series, want := range map[string]float64{
		`berth_raft_groups{role="leader"}`: 1, `berth_raft_groups{role="follower"}`: 0, `berth_raft_groups_without_leader`: 0,
	} {
		if got := metricValue(body, series); got != want {
			t.Fatalf("leader: %s = %v, want %v\n%s", series, got, want, body)
		}
	}
	for _, series := range []string{`berth_raft_transport_messages_total{direction="sent"}`, `berth_raft_transport_bytes_total{direction="received"}`} {
		if got := metricValue(body, series); got <= 0 {
			t.Fatalf("leader: %s = %v, want > 0", series, got)
		}
	}
	for _, f := range followers {
		poll(t, 10*time.Second, f.cfg.ID+" counts one group followed, with a leader, and is ready", func() bool {
			b := scrapeMetrics(t, f)
			return metricValue(b, `berth_raft_groups{role="follower"}`) == 1 && metricValue(b, `berth_raft_groups_without_leader`) == 0 &&
				metricValue(b, "berth_node_ready") == 1
		})
	}

	followers[0].kill(t)
	startDrainLoad(t, lead, cred{tenant: tenant, id: "cred_m", acl: allowAll}) // 50 QoS 1 messages acknowledged
	var lag float64
	poll(t, 10*time.Second, "the leader's follower lag at 20 entries or more", func() bool {
		lag = metricValue(scrapeMetrics(t, lead), "berth_raft_follower_lag_entries")
		return lag >= 20
	})
	t.Logf("follower killed, 50 messages taken: the leader's follower lag is %v entries", lag)

	lead.kill(t)
	last := followers[1]
	poll(t, 10*time.Second, "the last node's group without a leader, the node not ready", func() bool {
		b := scrapeMetrics(t, last)
		return metricValue(b, "berth_raft_groups_without_leader") == 1 && metricValue(b, "berth_node_ready") == 0
	})
}
