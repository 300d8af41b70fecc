package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/node"
	"berth.dev/broker/internal/tenanttest"
	"berth.dev/testenv"
)

// The secrets of a rotation: the gateways and the API move from old to new.
const (
	oldProxySecret = "old-proxy-secret-0123456789abcdef"
	newProxySecret = "new-proxy-secret-0123456789abcdef"
	oldNodeToken   = "old-node-token-0123456789"
	newNodeToken   = "new-node-token-0123456789"
	rotateTenant   = "ten_rotate"
)

// startRotationNode starts a node from the environment env (flags empty),
// as the broker command would, and returns it.
func startRotationNode(t *testing.T, url, id string, env map[string]string) *node.Node {
	t.Helper()
	env["BERTH_DATABASE_URL"] = url
	cfg, err := parseConfig([]string{"-node-id", id, "-internal-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(cfg.nodeConfig(slog.New(slog.NewTextHandler(io.Discard, nil))))
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
	return n
}

// connectVia opens a connection to n as a gateway signing with secret would
// and sends an MQTT 5 CONNECT; it reports whether a successful CONNACK came
// back (false: the node closed the connection unanswered).
func connectVia(t *testing.T, n *node.Node, secret, clientID string) bool {
	t.Helper()
	conn := dialAsGateway(t, n, secret, rotateTenant, "crd_rotate")
	defer conn.Close()
	cl := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := cl.Connect(ctx, &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: true})
	if err != nil || ack == nil || ack.ReasonCode != 0 {
		return false
	}
	_ = cl.Disconnect(&paho.Disconnect{})
	return true
}

// adminStatus is the status of GET /metrics on n's admin API with token.
func adminStatus(t *testing.T, n *node.Node, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+n.AdminAddr().String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRotationOverlap: a node given a current and a previous proxy secret
// (BERTH_PROXY_SECRET_PREVIOUS) serves gateways signing with either, and a
// node token with BERTH_NODE_TOKEN_PREVIOUS accepts both tokens; a node
// with only the new values refuses the old ones. This is the overlap
// window docs/operations.md's rotation procedure relies on.
func TestRotationOverlap(t *testing.T) {
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tenanttest.Seed(t, pool, rotateTenant, tenanttest.Pro())
	if _, err := pool.Exec(context.Background(), `INSERT INTO credentials (id, tenant_id, name, acl) VALUES ('crd_rotate', $1, 'rotate', '{}')`, rotateTenant); err != nil {
		t.Fatal(err)
	}

	both := startRotationNode(t, url, "rotate-both", map[string]string{
		"BERTH_PROXY_SECRET": newProxySecret, "BERTH_PROXY_SECRET_PREVIOUS": oldProxySecret,
		"BERTH_NODE_TOKEN": newNodeToken, "BERTH_NODE_TOKEN_PREVIOUS": oldNodeToken,
	})
	onlyNew := startRotationNode(t, url, "rotate-new", map[string]string{
		"BERTH_PROXY_SECRET": newProxySecret, "BERTH_NODE_TOKEN": newNodeToken,
	})
	for _, tc := range []struct {
		name   string
		n      *node.Node
		secret string
		want   bool
	}{
		{"gateway with the new secret, node with both", both, newProxySecret, true},
		{"gateway with the old secret, node with both", both, oldProxySecret, true},
		{"gateway with the new secret, node with the new only", onlyNew, newProxySecret, true},
		{"gateway with the old secret, node with the new only", onlyNew, oldProxySecret, false},
		{"gateway with another secret, node with both", both, "other-secret-0123456789abcdef", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := connectVia(t, tc.n, tc.secret, "c-"+tc.name[:20]); got != tc.want {
				t.Fatalf("connected %v, want %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		n     *node.Node
		token string
		want  int
	}{
		{"new token, node with both", both, newNodeToken, http.StatusOK},
		{"old token, node with both", both, oldNodeToken, http.StatusOK},
		{"new token, node with the new only", onlyNew, newNodeToken, http.StatusOK},
		{"old token, node with the new only", onlyNew, oldNodeToken, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := adminStatus(t, tc.n, tc.token); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
	// A previous value too short to be a secret is a configuration error.
	_, err = parseConfig([]string{"-node-id", "n"}, func(k string) string {
		return map[string]string{"BERTH_DATABASE_URL": url, "BERTH_PROXY_SECRET": newProxySecret, "BERTH_NODE_TOKEN": newNodeToken,
			"BERTH_PROXY_SECRET_PREVIOUS": "short"}[k]
	}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "previous proxy secret") {
		t.Fatalf("a 5-byte previous proxy secret: %v, want refused", err)
	}
}
