package stack

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"berth.dev/testenv"
)

// Options shape a stack.
type Options struct {
	Gateways int           // how many gateways; default 1
	LeaseTTL time.Duration // gateways' connection-limit lease TTL; default 3 s
	// TLSCert and TLSKey, when set, give every gateway a TLS listener;
	// TenantDomain makes it check SNI <slug>.<domain> against the token.
	TLSCert, TLSKey, TenantDomain string
	// UsageInterval is the node's -usage-interval; 0 keeps its default
	// (10 s).
	UsageInterval time.Duration
	// OpenPlans is the API's -open-plans, the plans every account is
	// entitled to (comma-separated); empty keeps its default (free only).
	OpenPlans string
	// AccountWriteRate and AccountWriteBurst are the API's
	// -account-write-rate and -account-write-burst, for tests that make
	// many writes at once in one account; 0 keeps the defaults (20 a
	// second, bursts of 40).
	AccountWriteRate  float64
	AccountWriteBurst int
	// DatabaseURL, when set, is the migrated database every process uses
	// instead of a fresh one on the shared Postgres: a fault test's own
	// server (testenv.NewPostgresServer) that it stops and starts.
	DatabaseURL string
	// RedisURL, when set, is the gateways' Redis instead of the shared
	// one (testenv.NewRedisServer), with a fresh key prefix.
	RedisURL string
	// NodeArgs is added to the node's flags, GatewayArgs[i] to gateway
	// i's (a later flag wins over the stack's own).
	NodeArgs    []string
	GatewayArgs [][]string
	// GatewayBins[i], when set, is gateway i's program instead of the
	// one built from this tree: another build of it, to compare.
	GatewayBins []string
	// Stripe runs the API with payment through Stripe's stripe-mock
	// (testenv.StripeURL) and a webhook signing secret of its own
	// (Stack.StripeWebhookSecret); StartBilling's workers get the same
	// Stripe. Off: payment is disabled, as without a Stripe key.
	Stripe bool
	// NodeData, when set, is the node's -data directory instead of a
	// fresh t.TempDir(): a test's own filesystem (a small tmpfs for disk
	// full, say), which the test mounts and unmounts itself.
	NodeData string
	// Nodes is how many broker nodes; 0 or 1: one node, not replicating.
	// More: that many nodes replicating every tenant through its own Raft
	// group (-peers, docs/replication.md), in Stack.Cluster; NodeData is
	// then ignored (each node has a fresh directory).
	Nodes int
	// GatewayIP, when set, is the address gateways listen on instead of
	// 127.0.0.1: a local address a test gave a veth of its own network
	// namespace, so that traffic from that namespace reaches them.
	GatewayIP string
}

// Gateway is one running gateway.
type Gateway struct {
	*Proc
	ID      string
	MQTT    string // MQTT over TCP, host:port
	WS      string // MQTT over WebSocket, host:port (path /mqtt)
	TLS     string // MQTT over TLS, host:port, when Options.TLSCert is set
	Metrics string
	args    []string
	env     []string
	bin     string
}

// Stack is a running Berth: api, one node, gateways.
type Stack struct {
	DatabaseURL string
	RedisURL    string
	RedisPrefix string
	API         string // base URL, http://host:port
	APIMetrics  string // the API's internal /metrics listener, host:port
	APIProc     *Proc
	Node        *Proc
	NodeMQTT    string
	NodeAdmin   string
	NodeData    string // the node's -data directory
	// Cluster is every node of a replicating stack (Options.Nodes > 1);
	// Node, NodeMQTT, NodeAdmin and NodeData are then its first.
	Cluster  []*ClusterNode
	Gateways []*Gateway

	ProxySecret string
	NodeToken   string
	PeerSecret  string // the nodes' BERTH_PEER_SECRET, in a replicating stack
	// KeyEncryptionKey seals the API's signing keys at rest (hex, 32
	// bytes): the stack runs the API as in production, not with -dev.
	KeyEncryptionKey string
	// With Options.Stripe: stripe-mock's URL, the test key the processes
	// use, and the secret the API verifies Stripe's webhooks with.
	StripeURL, StripeKey, StripeWebhookSecret string

	// How the node was started, for RestartNode.
	nodeBin           string
	nodeArgs, nodeEnv []string
	billingBin        string
	// How the API was started, for StartAPIWithoutPayment.
	apiBin          string
	apiArgs, apiEnv []string
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// New starts a stack on a fresh database and returns once every process
// listens.
func New(t testing.TB, bins Binaries, opts Options) *Stack {
	t.Helper()
	if opts.Gateways <= 0 {
		opts.Gateways = 1
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 3 * time.Second
	}
	s := &Stack{
		DatabaseURL: opts.DatabaseURL,
		RedisURL:    opts.RedisURL,
		RedisPrefix: "berth-e2e:" + randomHex(6) + ":",
		ProxySecret: randomHex(32),
		NodeToken:   randomHex(32),

		KeyEncryptionKey: randomHex(32),
	}
	if s.DatabaseURL == "" {
		s.DatabaseURL = testenv.DatabaseURL(t)
	}
	if s.RedisURL == "" {
		redis := testenv.Redis(t)
		s.RedisURL, s.RedisPrefix = redis.URL, redis.Prefix
	}
	apiAddr := FreeAddr(t)
	s.API = "http://" + apiAddr
	s.NodeMQTT, s.NodeAdmin = FreeAddr(t), FreeAddr(t)
	// Every gateway's addresses are chosen up front: the API tells users
	// the first gateway's (-mqtt-addr, -mqtt-ws-url).
	gwAddrs, wsAddrs := make([]string, opts.Gateways), make([]string, opts.Gateways)
	for i := range gwAddrs {
		gwAddrs[i], wsAddrs[i] = FreeAddr(t), FreeAddr(t)
		if opts.GatewayIP != "" {
			gwAddrs[i], wsAddrs[i] = onIP(t, gwAddrs[i], opts.GatewayIP), onIP(t, wsAddrs[i], opts.GatewayIP)
		}
	}

	if opts.Nodes > 1 {
		s.startCluster(t, bins.Broker, opts.Nodes, opts, apiAddr)
	} else {
		s.startNode(t, bins.Broker, opts, apiAddr)
	}

	s.APIMetrics = FreeAddr(t)
	apiArgs := []string{
		"-listen", apiAddr, "-metrics-listen", s.APIMetrics, "-mqtt-addr", gwAddrs[0], "-mqtt-ws-url", "ws://" + wsAddrs[0] + "/mqtt",
		"-log-format", "text", "-secure-cookies=false", "-auth-rate-limit", "1000",
	}
	if opts.OpenPlans != "" {
		apiArgs = append(apiArgs, "-open-plans", opts.OpenPlans)
	}
	if opts.AccountWriteRate > 0 {
		apiArgs = append(apiArgs, "-account-write-rate", strconv.FormatFloat(opts.AccountWriteRate, 'g', -1, 64))
	}
	if opts.AccountWriteBurst > 0 {
		apiArgs = append(apiArgs, "-account-write-burst", strconv.Itoa(opts.AccountWriteBurst))
	}
	// Another API (StartAPIWithoutPayment) shares all but the listeners and Stripe.
	s.apiBin, s.apiArgs = bins.API, slices.Clone(apiArgs[4:])
	s.apiEnv = []string{"DATABASE_URL=" + s.DatabaseURL, "BERTH_NODE_TOKEN=" + s.NodeToken, "BERTH_KEY_ENCRYPTION_KEY=" + s.KeyEncryptionKey}
	if opts.Stripe {
		s.StripeURL, s.StripeKey, s.StripeWebhookSecret = testenv.StripeURL(t), "sk_test_berthe2e", "whsec_"+randomHex(16)
		apiArgs = append(apiArgs, "-stripe-key", s.StripeKey, "-stripe-url", s.StripeURL, "-stripe-webhook-secret", s.StripeWebhookSecret)
	}
	s.billingBin = bins.Billing
	s.APIProc = Start(t, "api", bins.API, apiArgs, s.apiEnv)
	WaitListening(t, s.APIProc, apiAddr, 30*time.Second)

	for i := range opts.Gateways {
		g := &Gateway{ID: fmt.Sprintf("gw%d-%s", i, randomHex(3)), MQTT: gwAddrs[i], WS: wsAddrs[i], Metrics: FreeAddr(t), bin: bins.Gateway}
		tlsArgs := []string{"-listen-tls", "", "-listen-wss", ""}
		if opts.TLSCert != "" {
			g.TLS = FreeAddr(t)
			tlsArgs = []string{"-listen-tls", g.TLS, "-listen-wss", "", "-tls-cert", opts.TLSCert, "-tls-key", opts.TLSKey, "-tenant-domain", opts.TenantDomain}
		}
		g.args = append([]string{
			"-listen", g.MQTT, "-listen-ws", g.WS, "-metrics-listen", g.Metrics,
			"-jwks-url", s.API + "/v1/.well-known/jwks.json", "-gateway-id", g.ID,
			"-lease-ttl", opts.LeaseTTL.String(), "-drain-grace", "2s", "-log-format", "text",
			"-per-ip-rate", "1000", "-per-ip-burst", "1000", "-redis-prefix", s.RedisPrefix,
		}, tlsArgs...)
		if i < len(opts.GatewayArgs) {
			g.args = append(g.args, opts.GatewayArgs[i]...)
		}
		if i < len(opts.GatewayBins) && opts.GatewayBins[i] != "" {
			g.bin = opts.GatewayBins[i]
		}
		g.env = []string{"DATABASE_URL=" + s.DatabaseURL, "REDIS_URL=" + s.RedisURL, "BERTH_PROXY_SECRET=" + s.ProxySecret}
		g.Proc = Start(t, g.ID, g.bin, g.args, g.env)
		WaitListening(t, g.Proc, g.MQTT, 30*time.Second)
		s.Gateways = append(s.Gateways, g)
	}
	return s
}

// startNode starts the stack's one node (not replicating) and returns when
// it listens.
func (s *Stack) startNode(t testing.TB, bin string, opts Options, apiAddr string) {
	t.Helper()
	s.nodeBin = bin
	s.NodeData = opts.NodeData
	if s.NodeData == "" {
		s.NodeData = t.TempDir()
	}
	s.nodeArgs = []string{
		"-node-id", "node-" + randomHex(4),
		"-internal-listen", s.NodeMQTT, "-admin-listen", s.NodeAdmin,
		"-data", s.NodeData, "-log-format", "text", "-jwks-url", "http://" + apiAddr + "/v1/.well-known/jwks.json",
	}
	if opts.UsageInterval > 0 {
		s.nodeArgs = append(s.nodeArgs, "-usage-interval", opts.UsageInterval.String())
	}
	s.nodeArgs = append(s.nodeArgs, opts.NodeArgs...)
	s.nodeEnv = []string{"DATABASE_URL=" + s.DatabaseURL, "BERTH_PROXY_SECRET=" + s.ProxySecret, "BERTH_NODE_TOKEN=" + s.NodeToken}
	s.Node = Start(t, "node", s.nodeBin, s.nodeArgs, s.nodeEnv)
	WaitListening(t, s.Node, s.NodeMQTT, 30*time.Second)
}

// RestartNode starts the node again, as the same node (id, data directory,
// ports, secrets), once its process has ended (Node.Kill for a crash,
// Node.Stop for a graceful stop), and returns when it listens. s.Node is
// the new process; the old one's log stays with it.
func (s *Stack) RestartNode(t testing.TB) {
	t.Helper()
	if len(s.Cluster) > 0 {
		t.Fatal("RestartNode: a replicating stack restarts its nodes with Cluster[i].Restart")
	}
	if !s.Node.Exited() {
		t.Fatal("RestartNode: the node is still running; Kill or Stop it first")
	}
	s.Node = Start(t, "node (restarted)", s.nodeBin, s.nodeArgs, s.nodeEnv)
	WaitListening(t, s.Node, s.NodeMQTT, 30*time.Second)
	WaitListening(t, s.Node, s.NodeAdmin, 30*time.Second)
}

// Restart starts the gateway again, as the same gateway (id, program,
// flags, ports), once its process has ended (Kill for a crash, Stop for a
// graceful stop), and returns when it listens. g.Proc is the new process;
// the old one's log stays with it.
func (g *Gateway) Restart(t testing.TB) {
	t.Helper()
	if !g.Exited() {
		t.Fatalf("Restart: gateway %s is still running; Kill or Stop it first", g.ID)
	}
	g.Proc = Start(t, g.ID+" (restarted)", g.bin, g.args, g.env)
	WaitListening(t, g.Proc, g.MQTT, 30*time.Second)
}

// onIP is addr's port on ip.
func onIP(t testing.TB, addr, ip string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("onIP %q: %v", addr, err)
	}
	return net.JoinHostPort(ip, port)
}
