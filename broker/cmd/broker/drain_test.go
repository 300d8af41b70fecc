package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/node"
	"berth.dev/broker/internal/placement"
	"berth.dev/broker/internal/tenanttest"
	"berth.dev/testenv"
)

const drainToken = "drain-token-0123456789"

// drainEnv is the environment broker drain sees: the node token only.
func drainEnv(token string) func(string) string {
	return func(k string) string {
		if k == "BERTH_NODE_TOKEN" {
			return token
		}
		return ""
	}
}

// runDrainCmd runs broker drain with args and returns its exit status and
// output.
func runDrainCmd(t *testing.T, getenv func(string) string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runDrain(context.Background(), args, getenv, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestDrainUsage: bad invocations exit 2 before anything is asked.
func TestDrainUsage(t *testing.T) {
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
		{"timeout too long", drainEnv(drainToken), []string{"-timeout", "11m"}, "-timeout"},
		{"address without a port", drainEnv(drainToken), []string{"-admin", "127.0.0.1"}, "-admin"},
		{"replicas neither move nor keep", drainEnv(drainToken), []string{"-replicas", "some"}, "-replicas"},
		{"bad env", func(k string) string {
			if k == "BERTH_DRAIN_TIMEOUT" {
				return "soon"
			}
			return drainEnv(drainToken)(k)
		}, nil, "BERTH_DRAIN_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runDrainCmd(t, tc.env, tc.args...)
			if code != drainExitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d saying %q", code, stderr, drainExitUsage, tc.want)
			}
		})
	}
}

// startDrainCluster starts three replicating nodes in this process (real
// TCP between them, Postgres for placement) holding one tenant, and
// returns them by node id with the pool.
func startDrainCluster(t *testing.T, tenant string) (map[string]*node.Node, *pgxpool.Pool) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tenanttest.Seed(t, pool, tenant, tenanttest.Pro())
	// Pro: three voters (a free tenant's group has one, whose leadership
	// has no one to go to without moving the replica).
	if _, err := pool.Exec(context.Background(), `UPDATE tenants SET plan = 'pro' WHERE id = $1`, tenant); err != nil {
		t.Fatal(err)
	}
	ids := []string{"drain-1", "drain-2", "drain-3"}
	var addrs []string
	for range ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	nodes := map[string]*node.Node{}
	for i, id := range ids {
		var peers []node.Peer
		for j, other := range ids {
			if j != i {
				peers = append(peers, node.Peer{ID: other, Addr: addrs[j], Zone: fmt.Sprintf("z%d", j)})
			}
		}
		n, err := node.New(node.Config{
			ID: id, InternalListen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", DataDir: t.TempDir(),
			DatabaseURL: url, ProxySecret: []byte("0123456789abcdef0123456789abcdef"), NodeToken: drainToken,
			UsageInterval: time.Hour, HeartbeatInterval: time.Hour,
			Peers: peers, PeerListen: addrs[i], PeerSecret: []byte("peer-secret-0123456789"), Zone: fmt.Sprintf("z%d", i),
			ProposeTimeout: 2 * time.Second, // raft at production timing (node tests: testRaftTick)
			Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = n.Shutdown(ctx)
		})
		nodes[id] = n
	}
	return nodes, pool
}

// placedOn waits until tenant_placement names a leader for tenant other
// than not, and returns the row.
func placedOn(t *testing.T, pool *pgxpool.Pool, tenant, not string) placement.Placement {
	t.Helper()
	store := placement.NewStore(pool)
	deadline := time.Now().Add(15 * time.Second)
	for {
		p, err := store.Get(context.Background(), tenant)
		if err == nil && p.Leader != "" && p.Leader != not {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not placed on a node other than %q within 15s: %+v %v", tenant, not, p, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDrainCommand: broker drain against real replicating nodes. A wrong
// token and a timeout too short for any handover exit 1; the drain of the
// tenant's leader exits 0 once the node leads nothing, and the tenant's
// placement has moved to another node at a higher epoch.
func TestDrainCommand(t *testing.T) {
	const tenant = "ten_drain"
	nodes, pool := startDrainCluster(t, tenant)
	before := placedOn(t, pool, tenant, "")
	lead := nodes[before.Leader]
	admin := lead.AdminAddr().String()

	code, _, stderr := runDrainCmd(t, drainEnv("wrong-token-0123456789"), "-admin", admin)
	if code != drainExitFailed || !strings.Contains(stderr, "401") {
		t.Fatalf("wrong token: exit %d, stderr %q", code, stderr)
	}
	// The node hands leaderships over from its leadership loop (every half
	// raft tick, 10 ms here): nothing can have moved within 1 ms.
	code, _, stderr = runDrainCmd(t, drainEnv(drainToken), "-admin", admin, "-timeout", "1ms")
	if code != drainExitFailed || !strings.Contains(stderr, "still leads 1 tenant") {
		t.Fatalf("1 ms drain: exit %d, stderr %q", code, stderr)
	}
	start := time.Now()
	code, stdout, stderr := runDrainCmd(t, func(k string) string {
		if k == "BERTH_DRAIN_ADMIN" { // the env fallback of -admin
			return admin
		}
		return drainEnv(drainToken)(k)
	}, "-timeout", "30s", "-replicas", "keep") // as the chart's preStop: the node restarts with its disk
	if code != drainExitDrained || !strings.Contains(stdout, "node "+before.Leader+" drained") || !strings.Contains(stdout, " 0 replicas moved") {
		t.Fatalf("drain: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	t.Logf("drained in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stdout))
	after := placedOn(t, pool, tenant, before.Leader)
	if after.Epoch <= before.Epoch {
		t.Fatalf("placement moved from %+v to %+v without a higher epoch", before, after)
	}
	t.Logf("placement %s@%d -> %s@%d", before.Leader, before.Epoch, after.Leader, after.Epoch)
}

// TestDrainUnreachable: a node that does not answer is a failure (1), not
// a usage error.
func TestDrainUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, stderr := runDrainCmd(t, drainEnv(drainToken), "-admin", addr, "-timeout", "1s")
	if code != drainExitFailed || !strings.Contains(stderr, addr) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
