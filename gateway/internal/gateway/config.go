package gateway

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"berth.dev/broker/tracing"
	"berth.dev/flagenv"
	"berth.dev/gateway/internal/redisconn"
)

// Config is the gateway's whole configuration. Defaults live in
// DefaultConfig; RegisterFlags binds every field to a flag; EnvRule fills
// the flags that were not given from the environment.
type Config struct {
	ListenTCP     string // MQTT over TCP; "" disables
	ListenTLS     string // MQTT over TLS; used only with TLSCert and TLSKey
	ListenWS      string // MQTT over WebSocket at /mqtt; "" disables
	ListenWSS     string // MQTT over WebSocket over TLS at /mqtt; used only with TLSCert and TLSKey
	MetricsListen string // Prometheus /metrics; "" disables

	TLSCert, TLSKey string
	TLSReloadCheck  time.Duration // how often a handshake may stat the files for a new certificate
	// TenantDomain: over TLS and WSS, an SNI of <slug>.<TenantDomain> must
	// name the token's tenant. Other server names (or none) are not checked.
	TenantDomain string

	DatabaseURL string
	Redis       redisconn.Config // one server by URL, Sentinel or Cluster
	RedisPrefix string           // every Redis key starts with it
	ProxySecret string           // shared with the nodes; signs the PROXY header
	JWKSURL     string
	Issuer      string
	GatewayID   string

	ConnectTimeout time.Duration // TLS handshake + CONNECT must arrive within this
	MaxConnectSize int           // bytes; a larger CONNECT is refused unread, a smaller one read as it arrives
	DialTimeout    time.Duration // to the node

	PerIPRate   float64 // new connections per second per client IP
	PerIPBurst  int
	AcceptRate  float64 // new connections per second, whole gateway
	AcceptBurst int
	// MaxPendingPerIP caps the connections of one source (an IPv4
	// address, an IPv6 /64) that are accepted but not yet authenticated
	// and relayed; over it a new connection is closed at once, unread.
	MaxPendingPerIP int
	// SYNFilter drops a source's SYNs over PerIPRate/PerIPBurst in the
	// kernel (package synfilter), before a SYN-ACK or an accept; off
	// behind a load balancer, and off (logged) without CAP_BPF.
	SYNFilter bool
	// FloodCooldown is how long a source is refused once its CONNECTs
	// keep failing for its own fault (bad token, malformed, timed out)
	// faster than a quarter of its per-IP rate, past a quarter of its
	// burst: its SYNs are
	// dropped in the kernel (or its connections reset at accept) for that
	// long, and then it gets its rate without a fresh burst (cooldown.go).
	// 0 turns it off.
	FloodCooldown time.Duration
	// MaxHandshakes bounds the CONNECTs whose token is verified, or whose
	// refusal is sent and closed, at once (handshake.go); 0 means
	// max(1, GOMAXPROCS/2). One that finds none free waits up to
	// HandshakeWait; a token still unverified then is refused with 0x89
	// Server busy (3.1.1: 0x03).
	MaxHandshakes int
	HandshakeWait time.Duration
	// BehindLoadBalancer: devices reach the gateway through a load
	// balancer that hides their addresses (SNAT), so every connection's
	// source is the balancer's. Turns the SYN filter off.
	BehindLoadBalancer bool
	// ProxyProtocolFrom lists the balancers (CIDR[,CIDR], or bare
	// addresses) whose connections start with a PROXY protocol header,
	// version 1 or 2, naming the device: they must send one, and the
	// per-IP limits, the pending cap, the logs and the node's view of the
	// connection then use the device's address. Others may not: their
	// bytes are read as MQTT. Set, it turns the SYN filter off.
	ProxyProtocolFrom string
	// ProxyProtocolTimeout: a balancer's connection whose header has not
	// arrived within it is closed.
	ProxyProtocolTimeout time.Duration
	// ProxyProtocolMaxWaiting caps the balancers' connections, all
	// listeners together, whose PROXY header has not arrived yet (they
	// are counted per device only once it has); over it a new one is
	// closed at accept.
	ProxyProtocolMaxWaiting int

	DefaultMaxConnections int           // for tenants without a quotas row
	HeartbeatTTL          time.Duration // connection-limit lease TTL
	LimitFailClosed       bool          // refuse when Redis is down (default: admit)
	DrainGrace            time.Duration // SIGTERM: how long live connections may stay
	LogFormat             string        // json or text

	// TraceSample is the share of connects traced, 0 to 1. A connect whose
	// MQTT 5 CONNECT carries a W3C traceparent follows that parent's
	// sampled flag instead. 0 turns tracing off entirely.
	TraceSample  float64
	OTLPEndpoint string // OTLP/HTTP collector base URL; "" exports nothing (spans still kept in Postgres)
	// HandoffDir holds the handoff sockets (*.sock) of the nodes on this
	// host (their -handoff-listen): a plain-TCP device whose tenant one of
	// them serves gets its socket handed to that node instead of relayed
	// (handoff.go). "" turns it off.
	HandoffDir string
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		ListenTCP:               ":1883",
		ListenTLS:               ":8883",
		ListenWS:                ":8083",
		ListenWSS:               ":8084",
		MetricsListen:           "127.0.0.1:9101", // internal: not on the devices' interfaces
		Issuer:                  "berth",
		RedisPrefix:             "berth:",
		GatewayID:               fmt.Sprintf("%s-%d", host, os.Getpid()),
		TLSReloadCheck:          time.Second,
		ConnectTimeout:          10 * time.Second,
		MaxConnectSize:          64 << 10,
		DialTimeout:             3 * time.Second,
		PerIPRate:               20,
		PerIPBurst:              40,
		AcceptRate:              2000,
		AcceptBurst:             4000,
		MaxPendingPerIP:         64,
		SYNFilter:               true,
		FloodCooldown:           30 * time.Second,
		HandshakeWait:           time.Second,
		ProxyProtocolTimeout:    5 * time.Second,
		ProxyProtocolMaxWaiting: 1024,
		DefaultMaxConnections:   1000,
		HeartbeatTTL:            10 * time.Second,
		DrainGrace:              25 * time.Second,
		LogFormat:               "json",
		TraceSample:             0.01,
	}
}

// RegisterFlags binds c's fields to flags on fs, with c's current values
// as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ListenTCP, "listen", c.ListenTCP, "MQTT over TCP address (empty disables)")
	fs.StringVar(&c.ListenTLS, "listen-tls", c.ListenTLS, "MQTT over TLS address (needs -tls-cert and -tls-key)")
	fs.StringVar(&c.ListenWS, "listen-ws", c.ListenWS, "MQTT over WebSocket address, path /mqtt (empty disables)")
	fs.StringVar(&c.ListenWSS, "listen-wss", c.ListenWSS, "MQTT over secure WebSocket address, path /mqtt (needs -tls-cert and -tls-key; empty disables)")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "Prometheus /metrics address, internal by default (empty disables)")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "TLS certificate file (PEM); reloaded when it changes")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "TLS key file (PEM)")
	fs.DurationVar(&c.TLSReloadCheck, "tls-reload-check", c.TLSReloadCheck, "how often to look for a new certificate on disk")
	fs.StringVar(&c.TenantDomain, "tenant-domain", c.TenantDomain, "SNI <slug>.<domain> must match the token's tenant")
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "Postgres URL (env DATABASE_URL)")
	c.Redis.RegisterFlags(fs)
	fs.StringVar(&c.RedisPrefix, "redis-prefix", c.RedisPrefix, "prefix of every Redis key")
	fs.StringVar(&c.ProxySecret, "proxy-secret", c.ProxySecret, "PROXY header HMAC secret shared with nodes (env BERTH_PROXY_SECRET)")
	fs.StringVar(&c.JWKSURL, "jwks-url", c.JWKSURL, "the API's JWKS URL, e.g. http://api:8080/v1/.well-known/jwks.json")
	fs.StringVar(&c.Issuer, "issuer", c.Issuer, "required iss claim")
	fs.StringVar(&c.GatewayID, "gateway-id", c.GatewayID, "unique id of this gateway (connection-limit leases)")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", c.ConnectTimeout, "TLS handshake and CONNECT deadline")
	fs.IntVar(&c.MaxConnectSize, "max-connect-size", c.MaxConnectSize, "largest CONNECT packet accepted, bytes")
	fs.DurationVar(&c.DialTimeout, "dial-timeout", c.DialTimeout, "timeout dialing the node")
	fs.Float64Var(&c.PerIPRate, "per-ip-rate", c.PerIPRate, "new connections per second per client IP")
	fs.IntVar(&c.PerIPBurst, "per-ip-burst", c.PerIPBurst, "per-IP burst")
	fs.Float64Var(&c.AcceptRate, "accept-rate", c.AcceptRate, "new connections per second for the whole gateway")
	fs.IntVar(&c.AcceptBurst, "accept-burst", c.AcceptBurst, "global accept burst")
	fs.IntVar(&c.MaxPendingPerIP, "max-pending-per-ip", c.MaxPendingPerIP, "connections per client IPv4 address or IPv6 /64 not yet authenticated; more are closed at accept")
	fs.BoolVar(&c.SYNFilter, "syn-filter", c.SYNFilter, "drop SYNs over -per-ip-rate/-per-ip-burst per source in the kernel (eBPF; needs CAP_BPF or root, else off with an INFO line)")
	fs.IntVar(&c.MaxHandshakes, "max-handshakes", c.MaxHandshakes, "CONNECTs whose token is verified, or whose refusal is sent and closed, at once, so that a burst of them leaves Ps to the relays; 0 means max(1, GOMAXPROCS/2)")
	fs.DurationVar(&c.HandshakeWait, "handshake-wait", c.HandshakeWait, "how long a CONNECT waits for a -max-handshakes slot; a token still unverified then is refused with 0x89 Server busy (3.1.1: 0x03)")
	fs.DurationVar(&c.FloodCooldown, "flood-cooldown", c.FloodCooldown, "refuse a source for this long once its CONNECTs keep failing (bad token, malformed, timeout) faster than -per-ip-rate/4, past -per-ip-burst/4; 0 disables")
	fs.BoolVar(&c.BehindLoadBalancer, "behind-load-balancer", c.BehindLoadBalancer, "devices connect through a load balancer that hides their addresses (SNAT): turns -syn-filter off")
	fs.StringVar(&c.ProxyProtocolFrom, "proxy-protocol-from", c.ProxyProtocolFrom, "load balancers (CIDR[,CIDR]) whose connections must start with a PROXY protocol v1 or v2 header naming the device; limits and logs then use the device's address; turns -syn-filter off")
	fs.DurationVar(&c.ProxyProtocolTimeout, "proxy-protocol-timeout", c.ProxyProtocolTimeout, "how long a -proxy-protocol-from connection may take to send its PROXY header")
	fs.IntVar(&c.ProxyProtocolMaxWaiting, "proxy-protocol-max-waiting", c.ProxyProtocolMaxWaiting, "-proxy-protocol-from connections, all listeners together, whose PROXY header has not arrived yet; more are closed at accept")
	fs.IntVar(&c.DefaultMaxConnections, "default-max-connections", c.DefaultMaxConnections, "connection limit for tenants without quotas")
	fs.DurationVar(&c.HeartbeatTTL, "lease-ttl", c.HeartbeatTTL, "connection-limit heartbeat TTL (a dead gateway's slots free after it)")
	fs.BoolVar(&c.LimitFailClosed, "limit-fail-closed", c.LimitFailClosed, "refuse connections when Redis is unreachable (default admits)")
	fs.DurationVar(&c.DrainGrace, "drain-grace", c.DrainGrace, "on SIGTERM, how long live connections may stay")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "json or text")
	fs.Float64Var(&c.TraceSample, "trace-sample", c.TraceSample, "share of connects traced, 0 to 1 (0 turns tracing off)")
	fs.StringVar(&c.HandoffDir, "handoff-dir", c.HandoffDir, "directory of the handoff sockets (*.sock) of the nodes on this host: a plain-TCP device of a tenant one of them serves is handed to it, not relayed (empty disables)")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", c.OTLPEndpoint, "OTLP/HTTP collector base URL, e.g. http://collector:4318 (env OTEL_EXPORTER_OTLP_ENDPOINT)")
}

// EnvRule names the environment variables that fill the flags not given
// on the command line, first match wins: BERTH_<FLAG> (upper case, '-' as
// '_'), except the aliases listed.
func EnvRule() flagenv.Rule {
	return flagenv.Rule{
		Prefix: "BERTH_",
		Aliases: map[string][]string{
			"database-url":  {"DATABASE_URL", "BERTH_DATABASE_URL"},
			"redis-url":     {"REDIS_URL", "BERTH_REDIS_URL"},
			"otlp-endpoint": {"OTEL_EXPORTER_OTLP_ENDPOINT", "BERTH_OTLP_ENDPOINT"},
		},
		Skip:   []string{"version"},
		Secret: []string{"proxy-secret", "redis-password", "redis-sentinel-password"},
	}
}

// ApplyEnv sets every flag of fs that was not set on the command line from
// the environment (EnvRule; lookup is os.LookupEnv in production, an empty
// value counts as unset).
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	_, err := EnvRule().Apply(fs, func(k string) string { v, _ := lookup(k); return v })
	return err
}

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	req := func(v, name string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
	}
	req(c.DatabaseURL, "-database-url (DATABASE_URL)")
	if err := c.Redis.Validate(); err != nil {
		errs = append(errs, err)
	}
	req(c.JWKSURL, "-jwks-url")
	req(c.GatewayID, "-gateway-id")
	if len(c.ProxySecret) < 16 {
		errs = append(errs, errors.New("-proxy-secret (BERTH_PROXY_SECRET) must be at least 16 bytes"))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("-tls-cert and -tls-key go together"))
	}
	if c.ListenTCP == "" && c.ListenWS == "" && (c.TLSCert == "" || (c.ListenTLS == "" && c.ListenWSS == "")) {
		errs = append(errs, errors.New("no listener enabled"))
	}
	if c.ConnectTimeout <= 0 || c.DialTimeout <= 0 || c.HeartbeatTTL <= 0 {
		errs = append(errs, errors.New("timeouts must be positive"))
	}
	if c.MaxConnectSize < 128 {
		errs = append(errs, errors.New("-max-connect-size must be at least 128"))
	}
	if c.PerIPRate <= 0 || c.PerIPBurst < 1 || c.AcceptRate <= 0 || c.AcceptBurst < 1 {
		errs = append(errs, errors.New("rates and bursts must be positive"))
	}
	if c.FloodCooldown < 0 {
		errs = append(errs, errors.New("-flood-cooldown must not be negative"))
	}
	if c.MaxHandshakes < 0 || c.HandshakeWait <= 0 {
		errs = append(errs, errors.New("-max-handshakes must not be negative and -handshake-wait must be positive"))
	}
	if c.MaxPendingPerIP < 1 {
		errs = append(errs, errors.New("-max-pending-per-ip must be at least 1"))
	}
	if _, err := parseTrusted(c.ProxyProtocolFrom); err != nil {
		errs = append(errs, fmt.Errorf("-proxy-protocol-from: %w", err))
	}
	if c.ProxyProtocolTimeout <= 0 {
		errs = append(errs, errors.New("-proxy-protocol-timeout must be positive"))
	}
	if c.ProxyProtocolMaxWaiting < 1 {
		errs = append(errs, errors.New("-proxy-protocol-max-waiting must be at least 1"))
	}
	if c.TraceSample < 0 || c.TraceSample > 1 {
		errs = append(errs, errors.New("-trace-sample must be within [0, 1]"))
	}
	if c.OTLPEndpoint != "" {
		if _, err := tracing.TracesURL(c.OTLPEndpoint); err != nil {
			errs = append(errs, fmt.Errorf("-otlp-endpoint: %w", err))
		}
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, errors.New("-log-format must be json or text"))
	}
	return errors.Join(errs...)
}
