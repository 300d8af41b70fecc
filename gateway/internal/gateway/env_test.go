package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"berth.dev/broker/jwtauth"
	"berth.dev/broker/proxyproto"
	"berth.dev/gateway/internal/connlimit"
	"berth.dev/gateway/internal/revocation"
	"berth.dev/gateway/internal/route"
	"berth.dev/testenv"
)

// testEnv is a whole gateway on 127.0.0.1 ports with real Postgres, Redis,
// a JWKS server, and a node stand-in (see testNode).
type testEnv struct {
	pool   *pgxpool.Pool
	redis  testenv.RedisSpace
	priv   ed25519.PrivateKey
	node   *testNode
	gw     *Gateway
	cfg    Config
	secret []byte
	nextID atomic.Int32
	dead   string // address of ten_dead's node, where nobody listens
}

type envOptions struct {
	maxConns int // quotas.max_connections of ten_acme; 0 leaves the tenant without quotas
	config   func(*Config)
	tracer   func(*pgxpool.Pool) trace.TracerProvider // the gateway's, given the test's database; none when nil
	logger   *slog.Logger                             // the gateway's; discarded when nil
	prepare  func(*Gateway)                           // called between New and Start
}

// Tenants seeded by newEnv.
const (
	tenantAcme     = "ten_acme"     // slug acme, on the test node
	tenantDead     = "ten_dead"     // on a node nobody listens for
	tenantUnplaced = "ten_unplaced" // no node
)

func newEnv(t testing.TB, o envOptions) *testEnv {
	t.Helper()
	ctx := context.Background()
	e := &testEnv{pool: testenv.Postgres(t), redis: testenv.Redis(t), secret: []byte("test-proxy-secret-0123456789abcd")}
	e.node = newTestNode(t, e.secret)

	// The API's JWKS, served by a real HTTP server (the API is another team's).
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e.priv = priv
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
			"kty": "OKP", "crv": "Ed25519", "x": base64.RawURLEncoding.EncodeToString(pub), "kid": "k1", "alg": "EdDSA", "use": "sig",
		}}})
	}))
	t.Cleanup(jwks.Close)

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	e.dead = deadAddr
	dead.Close()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')`, nil},
		{`INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity) VALUES ('node_1', $1, '127.0.0.1:1', 10), ('node_dead', $2, '127.0.0.1:1', 10)`, []any{e.node.addr(), deadAddr}},
		{`INSERT INTO tenants (id, account_id, slug, plan, node_id) VALUES
			('ten_acme', 'acc_1', 'acme', 'free', 'node_1'), ('ten_dead', 'acc_1', 'dead', 'free', 'node_dead'),
			('ten_unplaced', 'acc_1', 'unplaced', 'free', NULL)`, nil},
	} {
		if _, err := e.pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	if o.maxConns > 0 {
		if _, err := e.pool.Exec(ctx, `INSERT INTO quotas (tenant_id, max_connections, max_msgs_per_sec, max_bytes_per_sec,
			client_msgs_per_sec, client_bytes_per_sec, max_message_size, max_subscriptions, max_retained_messages,
			max_retained_bytes, retention_seconds, retention_bytes, max_inflight, max_queued_bytes, monthly_messages)
			VALUES ('ten_acme', $1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)`, o.maxConns); err != nil {
			t.Fatal(err)
		}
	}

	e.cfg = DefaultConfig()
	e.cfg.ListenTCP, e.cfg.ListenWS, e.cfg.MetricsListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	e.cfg.ListenTLS, e.cfg.ListenWSS = "127.0.0.1:0", "127.0.0.1:0" // served only when o.config gives a certificate
	e.cfg.JWKSURL = jwks.URL
	e.cfg.GatewayID = "gw-test"
	e.cfg.ConnectTimeout = 3 * time.Second
	// The tests of the userspace limits (RST at accept) run without the
	// kernel SYN filter, which would drop their SYNs first; synfilter_test
	// turns it on.
	e.cfg.SYNFilter = false
	if o.config != nil {
		o.config(&e.cfg)
	}

	ks := jwtauth.NewKeySet(jwtauth.KeySetOptions{URL: e.cfg.JWKSURL})
	rev := revocation.New(e.pool, revocation.Options{RetryMin: 10 * time.Millisecond})
	if err := rev.Start(ctx); err != nil {
		t.Fatal(err)
	}
	routes := route.New(e.pool, route.Options{RetryMin: 10 * time.Millisecond})
	if err := routes.Start(ctx); err != nil {
		t.Fatal(err)
	}
	lim, err := connlimit.New(e.redis.Client, connlimit.Options{GatewayID: e.cfg.GatewayID, Prefix: e.redis.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	lim.Start(ctx)
	signer, err := proxyproto.NewSigner(e.secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tp trace.TracerProvider
	if o.tracer != nil {
		tp = o.tracer(e.pool)
	}
	e.gw, err = New(e.cfg, Deps{
		Auth:    jwtauth.NewVerifier(ks, jwtauth.VerifierOptions{Issuer: e.cfg.Issuer}),
		Revoked: rev, Routes: routes, Limits: lim, Signer: signer, Tracer: tp, Logger: o.logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.prepare != nil {
		o.prepare(e.gw)
	}
	if err := e.gw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.gw.Shutdown(ctx)
		lim.Shutdown(ctx)
		routes.Shutdown(ctx)
		rev.Shutdown(ctx)
	})
	return e
}

func (e *testEnv) addr(kind string) string { return e.gw.Addr(kind).String() }

// credential inserts a credential for tenant and returns its id and token.
func (e *testEnv) credential(t testing.TB, tenant string, mod func(claims map[string]any)) (id, token string) {
	t.Helper()
	id = fmt.Sprintf("crd_%03d", e.nextID.Add(1))
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO credentials (id, tenant_id, name, acl) VALUES ($1, $2, $1, $3)`,
		id, tenant, `{"pub":["devices/#"],"sub":["devices/#"]}`); err != nil && tenant == tenantAcme {
		t.Fatal(err)
	}
	claims := map[string]any{
		"iss": "berth", "sub": id, "tid": tenant, "jti": "j-" + id, "iat": time.Now().Unix(),
		"acl": map[string]any{"pub": []string{"devices/#"}, "sub": []string{"devices/#"}},
	}
	if mod != nil {
		mod(claims)
	}
	return id, e.sign(t, claims)
}

func (e *testEnv) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	h, _ := json.Marshal(map[string]any{"alg": "EdDSA", "typ": "JWT", "kid": "k1"})
	c, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	in := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(e.priv, []byte(in)))
}

// revoke does what the API's DELETE .../credentials/{cid} does.
func (e *testEnv) revoke(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `UPDATE credentials SET revoked_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `SELECT pg_notify('berth_credentials', $1)`, id); err != nil {
		t.Fatal(err)
	}
}
