package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"berth.dev/broker/internal/wal"
	"berth.dev/flagenv"
)

// Config is the broker binary's configuration.
type Config struct {
	Listen         string
	WSListen       string
	AllowAnonymous bool
	Username       string
	Password       string
	DataDir        string
	Fsync          string        // -fsync: always, interval or never
	FsyncInterval  time.Duration // -fsync-interval, for interval
	ReplayHistory  time.Duration // -replay-history: log kept for berth-replay-from
	RetentionBytes int64         // -retention-bytes: with -data, the message log's bound in bytes (0: none)
	RetentionAge   time.Duration // -retention-age: with -data, the message log's bound in age (0: none)
	LogFormat      string        // "text" or "json"
	LogLevel       string
	MaxPacketSize  int
	MaxQueued      int
	MaxInflight    int
	MaxKeepAlive   int
	SysInterval    time.Duration
	ShutdownGrace  time.Duration
	// MemReturnEvery: at most one return of free heap to the system per
	// this long, after an allocation burst (memtrim); 0 disables.
	MemReturnEvery time.Duration
	HeapProfileDir string // on SIGUSR1, a heap profile goes here too

	// Node mode (set by -node-id): tenant shards behind a PROXY-v2-only
	// listener, fed by gateways; see nodeConfig.
	NodeID         string
	InternalListen string
	AdminListen    string
	AdvertiseMQTT  string
	AdvertiseAdmin string
	HandoffListen  string // node: Unix socket for a co-located gateway's socket handoffs
	PublicHost     string // node: where devices reach this node's host (nodes.public_host)
	DatabaseURL    string
	ProxySecret    string
	NodeToken      string
	Capacity       int
	UsageInterval  time.Duration
	JWKSURL        string        // node: the API's JWKS, for MQTT 5 re-authentication
	Issuer         string        // node: the tokens' iss
	IdleTimeout    time.Duration // node: a tenant shard without connections closes after this
	OTLPEndpoint   string        // node: OTLP/HTTP collector for message-path spans
	TraceCap       int           // node: traced messages per tenant per second, at most
	// Node replication (issue #17): -peers id=host:port[@zone],... makes
	// every tenant a Raft group over -replicas nodes (see parsePeers).
	Peers          string
	PeerListen     string
	PeerSecret     string // never logged; prefer BERTH_PEER_SECRET or -peer-secret-file
	PeerSecretFile string
	Zone           string
	Replicas       int
	// MoveDisconnectRate: devices disconnected per second at most when
	// their tenant's leadership moves off this node (drain, rebalance).
	MoveDisconnectRate int

	// ProxySecretPrevious and NodeTokenPrevious are accepted beside the
	// current values while those are rotated (docs/operations.md).
	ProxySecretPrevious string
	NodeTokenPrevious   string

	ShowVersion bool // -version: print the version and revision, and exit
}

// defaultConfig is the one place defaults live.
func defaultConfig() Config {
	return Config{
		Listen:         "127.0.0.1:1883",
		LogFormat:      "text",
		LogLevel:       "info",
		MaxPacketSize:  1 << 20,
		Fsync:          "interval",
		FsyncInterval:  100 * time.Millisecond,
		ReplayHistory:  time.Hour,
		MaxQueued:      10_000,
		MaxInflight:    1024,
		SysInterval:    10 * time.Second,
		ShutdownGrace:  10 * time.Second,
		MemReturnEvery: time.Minute,

		InternalListen: ":7883",
		AdminListen:    ":7880",
		Capacity:       1000,
		UsageInterval:  10 * time.Second,
		Issuer:         "berth",
		IdleTimeout:    10 * time.Minute,
		TraceCap:       100,
		PeerListen:     ":7881",
		Replicas:       3,

		MoveDisconnectRate: 500,
	}
}

// envRule names the environment variables behind the flags: BERTH_<FLAG>
// (upper case, dashes as underscores), DATABASE_URL and
// OTEL_EXPORTER_OTLP_ENDPOINT after their BERTH_ names.
func envRule() flagenv.Rule {
	return flagenv.Rule{
		Prefix: "BERTH_",
		Aliases: map[string][]string{
			"database-url":  {"BERTH_DATABASE_URL", "DATABASE_URL"},
			"otlp-endpoint": {"BERTH_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"},
		},
		Skip:   []string{"version"},
		Secret: []string{"password", "proxy-secret", "proxy-secret-previous", "node-token", "node-token-previous", "peer-secret"},
	}
}

// parseConfig reads flags from args; a flag not given on the command line
// takes its environment variable (envRule) if set.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	cfg, _, err := loadConfig(args, getenv, out)
	return cfg, err
}

// loadConfig is parseConfig, also reporting which variables set what.
func loadConfig(args []string, getenv func(string) string, out io.Writer) (Config, flagenv.Report, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, `Usage: broker [flags]

Runs a standalone single-tenant MQTT 3.1.1/5.0 broker.
Every flag can also be set with the environment variable BERTH_<FLAG>
(upper case, dashes as underscores), e.g. BERTH_LISTEN=:1883.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "MQTT over TCP listen address")
	fs.StringVar(&cfg.WSListen, "ws-listen", cfg.WSListen, "MQTT over WebSocket listen address (path /mqtt); empty disables")
	fs.BoolVar(&cfg.AllowAnonymous, "allow-anonymous", cfg.AllowAnonymous, "accept clients without a user name")
	fs.StringVar(&cfg.Username, "username", cfg.Username, "user name clients may connect with (with -password); without it only anonymous clients are served")
	fs.StringVar(&cfg.Password, "password", cfg.Password, "password for -username (prefer BERTH_PASSWORD)")
	fs.StringVar(&cfg.DataDir, "data", cfg.DataDir, "data directory (created if missing): sessions, queued and retained messages survive restarts; empty keeps everything in memory")
	fs.StringVar(&cfg.Fsync, "fsync", cfg.Fsync, "with -data: always (QoS 1/2 acknowledged after fsync, group commit), interval or never")
	fs.DurationVar(&cfg.FsyncInterval, "fsync-interval", cfg.FsyncInterval, "with -data -fsync interval: the bound on unsynced time")
	fs.DurationVar(&cfg.ReplayHistory, "replay-history", cfg.ReplayHistory, "with -data: how long QoS 1/2 messages stay in the log for berth-replay-from subscribers once no session needs them")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log format: text or json")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log level: debug, info, warn, error")
	fs.IntVar(&cfg.MaxPacketSize, "max-packet-size", cfg.MaxPacketSize, "largest accepted MQTT packet in bytes")
	fs.IntVar(&cfg.MaxQueued, "max-queued", cfg.MaxQueued, "messages a session holds in memory before drops; with -data a persistent session's QoS 1/2 messages go to the log instead, bounded by -retention-bytes and -retention-age, never by a count")
	fs.Int64Var(&cfg.RetentionBytes, "retention-bytes", cfg.RetentionBytes, "with -data: bound on the message log's size; offline sessions lose their oldest messages beyond it (counted as retention drops); 0 = no bound")
	fs.DurationVar(&cfg.RetentionAge, "retention-age", cfg.RetentionAge, "with -data: bound on the age of the message log's messages; older ones are deleted even if sessions still need them (counted as retention drops); 0 = no bound")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", cfg.MaxInflight, "outbound QoS 1/2 window per client")
	fs.IntVar(&cfg.MaxKeepAlive, "max-keepalive", cfg.MaxKeepAlive, "cap on client keep alive in seconds (MQTT 5); 0 = none")
	fs.DurationVar(&cfg.SysInterval, "sys-interval", cfg.SysInterval, "$SYS publish interval; negative disables")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "how long SIGTERM waits for clients to be flushed")
	fs.DurationVar(&cfg.MemReturnEvery, "mem-return-every", cfg.MemReturnEvery, "after a burst of allocation (a connect storm) has settled, return the free heap to the system (a collection, then debug.FreeOSMemory), at most once per this long; 0 disables")
	fs.StringVar(&cfg.HeapProfileDir, "heap-profile-dir", cfg.HeapProfileDir, "on SIGUSR1 the broker logs its memory classes; with this set it also writes a heap profile here")
	fs.StringVar(&cfg.NodeID, "node-id", cfg.NodeID, "run as a Berth node with this id (multi-tenant, behind gateways) instead of standalone")
	fs.StringVar(&cfg.InternalListen, "internal-listen", cfg.InternalListen, "node: MQTT listener for gateways (PROXY v2 header required)")
	fs.StringVar(&cfg.AdminListen, "admin-listen", cfg.AdminListen, "node: internal admin HTTP listener")
	fs.StringVar(&cfg.AdvertiseMQTT, "advertise-mqtt", cfg.AdvertiseMQTT, "node: address gateways dial (default: the bound -internal-listen)")
	fs.StringVar(&cfg.AdvertiseAdmin, "advertise-admin", cfg.AdvertiseAdmin, "node: address the API dials (default: the bound -admin-listen)")
	fs.StringVar(&cfg.HandoffListen, "handoff-listen", cfg.HandoffListen, "node: Unix socket (mode 0600) on which a gateway on this host hands over device sockets; empty: off")
	fs.StringVar(&cfg.PublicHost, "public-host", cfg.PublicHost, "node: host name or IP at which devices reach this node's host (its co-located gateway's MQTT port), registered as nodes.public_host; the gateways' DNS (-dns-listen) answers a tenant endpoint with its leader's; empty: not set")
	fs.StringVar(&cfg.DatabaseURL, "database-url", cfg.DatabaseURL, "node: Postgres URL (also DATABASE_URL)")
	fs.StringVar(&cfg.ProxySecret, "proxy-secret", cfg.ProxySecret, "node: HMAC secret shared with the gateways (prefer BERTH_PROXY_SECRET)")
	fs.StringVar(&cfg.NodeToken, "node-token", cfg.NodeToken, "node: bearer token of the admin API (prefer BERTH_NODE_TOKEN)")
	fs.StringVar(&cfg.ProxySecretPrevious, "proxy-secret-previous", cfg.ProxySecretPrevious, "node: during a rotation, the previous proxy secret, also accepted (prefer BERTH_PROXY_SECRET_PREVIOUS)")
	fs.StringVar(&cfg.NodeTokenPrevious, "node-token-previous", cfg.NodeTokenPrevious, "node: during a rotation, the previous admin token, also accepted (prefer BERTH_NODE_TOKEN_PREVIOUS)")
	fs.IntVar(&cfg.Capacity, "capacity", cfg.Capacity, "node: tenants this node is sized for (placement)")
	fs.DurationVar(&cfg.UsageInterval, "usage-interval", cfg.UsageInterval, "node: how often usage is flushed to Postgres")
	fs.StringVar(&cfg.JWKSURL, "jwks-url", cfg.JWKSURL, "node: the API's JWKS URL (/v1/.well-known/jwks.json); enables MQTT 5 re-authentication (AUTH, method berth-jwt)")
	fs.StringVar(&cfg.Issuer, "issuer", cfg.Issuer, "node: the iss of credential tokens")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "node: close a tenant's shard after this long without connections")
	fs.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", cfg.OTLPEndpoint, "node: OTLP/HTTP collector base URL for message-path spans, e.g. http://collector:4318 (also OTEL_EXPORTER_OTLP_ENDPOINT); spans go to Postgres either way")
	fs.IntVar(&cfg.TraceCap, "trace-cap", cfg.TraceCap, "node: most messages traced per tenant per second (sampled by rate or by a device's traceparent)")
	fs.StringVar(&cfg.Peers, "peers", cfg.Peers, "node: the nodes of a replicated cluster, id=host:port[@zone],... (their -node-id and -peer-listen; this node's own entry is skipped, its zone used without -zone); set, every tenant is replicated by its own Raft group")
	fs.StringVar(&cfg.PeerListen, "peer-listen", cfg.PeerListen, "node: with -peers, the Raft peer transport's listen address")
	fs.StringVar(&cfg.PeerSecret, "peer-secret", cfg.PeerSecret, "node: with -peers, the cluster secret authenticating peers, at least 16 bytes (prefer BERTH_PEER_SECRET or -peer-secret-file)")
	fs.StringVar(&cfg.PeerSecretFile, "peer-secret-file", cfg.PeerSecretFile, "node: with -peers, a file holding the cluster secret (trailing newline ignored)")
	fs.StringVar(&cfg.Zone, "zone", cfg.Zone, "node: this node's failure domain; a tenant's replicas go to distinct zones first")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "node: with -peers, the replicas (Raft voters) of every tenant, at most the cluster's size")
	fs.IntVar(&cfg.MoveDisconnectRate, "move-disconnect-rate", cfg.MoveDisconnectRate, "node: devices disconnected per second at most (DISCONNECT 0x9C) when their tenant's leadership moves off this node (drain, rebalance)")
	fs.BoolVar(&cfg.ShowVersion, "version", false, "print the version and revision, and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, flagenv.Report{}, err
	}
	if cfg.ShowVersion { // before the environment and validation
		return cfg, flagenv.Report{}, nil
	}
	rep, err := envRule().Apply(fs, getenv)
	if err != nil {
		return cfg, rep, err
	}
	if cfg.PeerSecret == "" && cfg.PeerSecretFile != "" {
		b, err := os.ReadFile(cfg.PeerSecretFile)
		if err != nil {
			return cfg, rep, fmt.Errorf("config: -peer-secret-file: %w", err)
		}
		cfg.PeerSecret = strings.TrimRight(string(b), "\r\n")
	}
	return cfg, rep, cfg.Validate()
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID != "" {
		return c.validateNode()
	}
	if _, err := wal.ParsePolicy(c.Fsync); err != nil {
		errs = append(errs, fmt.Errorf("config: -fsync: %w", err))
	}
	if c.FsyncInterval <= 0 {
		errs = append(errs, errors.New("config: -fsync-interval must be positive"))
	}
	if c.ReplayHistory < 0 {
		errs = append(errs, errors.New("config: -replay-history must not be negative"))
	}
	if c.RetentionBytes < 0 || c.RetentionAge < 0 {
		errs = append(errs, errors.New("config: -retention-bytes and -retention-age must not be negative"))
	}
	if c.Listen == "" && c.WSListen == "" {
		errs = append(errs, errors.New("config: -listen or -ws-listen is required"))
	}
	if (c.Username == "") != (c.Password == "") {
		errs = append(errs, errors.New("config: -username and -password go together"))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("config: -log-format %q: want text or json", c.LogFormat))
	}
	if c.MaxPacketSize < 64 || c.MaxPacketSize > 268_435_460 {
		errs = append(errs, fmt.Errorf("config: -max-packet-size %d out of range", c.MaxPacketSize))
	}
	if c.MaxQueued <= 0 || c.MaxInflight <= 0 || c.MaxInflight > 65535 {
		errs = append(errs, errors.New("config: -max-queued and -max-inflight must be positive (inflight <= 65535)"))
	}
	if c.MemReturnEvery < 0 {
		errs = append(errs, errors.New("config: -mem-return-every must not be negative"))
	}
	if c.MaxKeepAlive < 0 || c.MaxKeepAlive > 65535 {
		errs = append(errs, errors.New("config: -max-keepalive out of range"))
	}
	return errors.Join(errs...)
}

// ensureDataDir creates the data directory if one is configured.
func (c Config) ensureDataDir() error {
	if c.DataDir == "" {
		return nil
	}
	return os.MkdirAll(c.DataDir, 0o750)
}
