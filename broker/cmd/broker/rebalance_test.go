package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/placement"
)

// runRebalanceCmd runs broker rebalance with args and returns its exit
// status and output.
func runRebalanceCmd(t *testing.T, getenv func(string) string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runRebalance(context.Background(), args, getenv, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestRebalanceUsage: bad invocations exit 2 before anything is asked.
func TestRebalanceUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(string) string
		args []string
		want string
	}{
		{"no token", drainEnv(""), nil, "BERTH_NODE_TOKEN"},
		{"argument", drainEnv(drainToken), []string{"node-1"}, "unexpected argument"},
		{"token as a flag", drainEnv(drainToken), []string{"-token", drainToken}, "flag provided but not defined"},
		{"zero timeout", drainEnv(drainToken), []string{"-timeout", "0s"}, "-timeout"},
		{"timeout too long", drainEnv(drainToken), []string{"-timeout", "61m"}, "-timeout"},
		{"address without a port", drainEnv(drainToken), []string{"-admin", "127.0.0.1"}, "-admin"},
		{"bad env", func(k string) string {
			if k == "BERTH_REBALANCE_TIMEOUT" {
				return "soon"
			}
			return drainEnv(drainToken)(k)
		}, nil, "BERTH_REBALANCE_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runRebalanceCmd(t, tc.env, tc.args...)
			if code != rebalanceExitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d saying %q", code, stderr, rebalanceExitUsage, tc.want)
			}
		})
	}
}

// leadsTarget matches a node's share line: "  drain-2: target 3 replicas, 1 leaderships".
var leadsTarget = regexp.MustCompile(`(?m)^  (\S+): target \d+ replicas, 1 leaderships`)

// TestRebalanceCommand: broker rebalance against real replicating nodes
// (three, one pro tenant). A wrong token exits 1; a 1 ms timeout exits 1
// (not balanced: the node answers only after every node followed for
// 750 ms) and names the node that should lead the tenant. That node is
// made to lead nothing (a drain that keeps its replicas, then ended);
// the rebalance, asked of another node through BERTH_REBALANCE_ADMIN,
// exits 0 and the tenant's placement names that node at a higher epoch.
// A second rebalance exits 0 and moves nothing.
func TestRebalanceCommand(t *testing.T) {
	const tenant = "ten_rebal"
	nodes, pool := startDrainCluster(t, tenant)
	before := placedOn(t, pool, tenant, "")
	admin := nodes[before.Leader].AdminAddr().String()

	code, _, stderr := runRebalanceCmd(t, drainEnv("wrong-token-0123456789"), "-admin", admin)
	if code != rebalanceExitFailed || !strings.Contains(stderr, "401") {
		t.Fatalf("wrong token: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runRebalanceCmd(t, drainEnv(drainToken), "-admin", admin, "-timeout", "1ms")
	m := leadsTarget.FindStringSubmatch(stderr)
	if code != rebalanceExitFailed || !strings.Contains(stderr, "not balanced") || m == nil || nodes[m[1]] == nil {
		t.Fatalf("1 ms rebalance: exit %d, stderr %q", code, stderr)
	}
	preferred := m[1]
	if before.Leader == preferred {
		// Off target first: the preferred node hands its leadership over.
		pa := nodes[preferred].AdminAddr().String()
		if code, stdout, stderr := runDrainCmd(t, drainEnv(drainToken), "-admin", pa, "-timeout", "30s", "-replicas", "keep"); code != drainExitDrained {
			t.Fatalf("drain %s: exit %d, %q %q", preferred, code, stdout, stderr)
		}
		req, _ := http.NewRequest(http.MethodDelete, "http://"+pa+"/admin/drain", nil)
		req.Header.Set("Authorization", "Bearer "+drainToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("DELETE /admin/drain: %s", resp.Status)
		}
		before = placedOn(t, pool, tenant, preferred)
	}
	var other string
	for id := range nodes {
		if id != preferred {
			other = id
		}
	}
	t.Logf("%s led by %s at epoch %d; preferred: %s; asking %s", tenant, before.Leader, before.Epoch, preferred, other)

	start := time.Now()
	code, stdout, stderr := runRebalanceCmd(t, func(k string) string {
		if k == "BERTH_REBALANCE_ADMIN" { // the env fallback of -admin
			return nodes[other].AdminAddr().String()
		}
		return drainEnv(drainToken)(k)
	}, "-timeout", "30s")
	if code != rebalanceExitBalanced || !strings.Contains(stdout, "cluster balanced (asked "+other+")") {
		t.Fatalf("rebalance: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	t.Logf("rebalanced in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stdout))
	after := placedBy(t, pool, tenant, preferred)
	if after.Epoch <= before.Epoch {
		t.Fatalf("placement moved from %+v to %+v without a higher epoch", before, after)
	}
	t.Logf("placement %s@%d -> %s@%d", before.Leader, before.Epoch, after.Leader, after.Epoch)

	code, stdout, stderr = runRebalanceCmd(t, drainEnv(drainToken), "-admin", admin, "-timeout", "30s")
	if code != rebalanceExitBalanced || !strings.Contains(stdout, "moved 0 leadership(s) and 0 replica(s)") {
		t.Fatalf("second rebalance: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if p := placedBy(t, pool, tenant, preferred); p.Epoch != after.Epoch {
		t.Fatalf("the second rebalance moved the leadership: %+v -> %+v", after, p)
	}
}

// placedBy waits until tenant_placement names leader as the tenant's
// leader, and returns the row.
func placedBy(t *testing.T, pool *pgxpool.Pool, tenant, leader string) placement.Placement {
	t.Helper()
	store := placement.NewStore(pool)
	deadline := time.Now().Add(15 * time.Second)
	for {
		p, err := store.Get(context.Background(), tenant)
		if err == nil && p.Leader == leader {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not placed on %s within 15s: %+v %v", tenant, leader, p, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRebalanceUnreachable: a node that does not answer is a failure (1),
// not a usage error.
func TestRebalanceUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, stderr := runRebalanceCmd(t, drainEnv(drainToken), "-admin", addr, "-timeout", "1s")
	if code != rebalanceExitFailed || !strings.Contains(stderr, addr) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
