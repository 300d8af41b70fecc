package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Mode selects what a run measures.
type Mode string

// The modes; see the package comment.
const (
	ModeConn   Mode = "conn"
	ModePub    Mode = "pub"
	ModePubSub Mode = "pubsub"
)

// Limits that keep every run bounded.
const (
	MaxConnections = 200_000
	MaxClients     = 10_000 // publishers plus subscribers
	MaxDuration    = time.Hour
	MaxPayload     = 16 << 20
)

// ErrRemoteTarget is returned by Validate for an address outside loopback
// when AllowRemote is not set.
var ErrRemoteTarget = errors.New("loadgen: target is not a loopback address (set -allow-remote to load a remote broker)")

// Config is one run. The zero value is not valid; start from Defaults.
type Config struct {
	Addr        string // host:port
	User, Pass  string // CONNECT user name and password; empty means none
	Mode        Mode
	V5          bool // MQTT 5.0 instead of 3.1.1
	TLS         bool
	TLSInsecure bool   // skip certificate verification
	CAFile      string // PEM roots for TLS; empty means the system's
	WS          bool   // MQTT over WebSocket
	WSPath      string // request path for WebSocket, "/mqtt"
	AllowRemote bool

	// conn mode
	Levels          []int
	Hold            time.Duration
	DialConcurrency int
	MaxConnFailPct  float64 // failures above this percentage of a level fail the run
	// SourceAddrs are local addresses dials bind to, in turn: each has
	// its own ephemeral ports (about 28,000 on Linux), so several
	// 127.0.0.x of them hold more connections to one broker port than
	// one address can. Empty: the kernel's choice.
	SourceAddrs []netip.Addr
	// RSSPid is a process on this machine, the broker under test, whose
	// resident memory (VmRSS) is read at the end of each level's hold,
	// before the PINGREQ check wakes every connection
	// (LevelReport.HeldRSSKiB); 0 reads none.
	RSSPid int

	// pub and pubsub modes
	Pubs, Subs  int // Subs < 0 means the mode's default
	QoS         byte
	Payload     int
	Duration    time.Duration
	Rate        int // messages/s per publisher; 0 means as fast as possible
	Count       int // messages per publisher; 0 means until Duration
	Topics      int
	TopicPrefix string // empty means "berth-load/<run id>"
	Inflight    int    // QoS 1/2 window per publisher (capped by Receive Maximum)

	ConnectTimeout time.Duration
	Drain          time.Duration // wait for acks and deliveries after the last publish
	ClientPrefix   string        // client identifiers start with this
}

// Defaults returns the defaults shared by cmd/loadtest and tests.
func Defaults() Config {
	return Config{
		Addr:            "127.0.0.1:1883",
		Mode:            ModePub,
		WSPath:          "/mqtt",
		Levels:          []int{1000},
		Hold:            3 * time.Second,
		DialConcurrency: 200,
		MaxConnFailPct:  1,
		Pubs:            10,
		Subs:            -1,
		Payload:         64,
		Duration:        10 * time.Second,
		Topics:          1,
		Inflight:        100,
		ConnectTimeout:  10 * time.Second,
		Drain:           5 * time.Second,
		ClientPrefix:    "loadtest",
	}
}

// subscribers returns the number of subscribers the run uses: Subs, or the
// mode's default when Subs < 0 (pub: one counter at QoS 0, none at QoS 1
// and 2 where acknowledgements count; pubsub: one).
func (c *Config) subscribers() int {
	if c.Subs >= 0 {
		return c.Subs
	}
	if c.Mode == ModePub && c.QoS > 0 {
		return 0
	}
	return 1
}

// Validate checks the configuration, including that Addr is on loopback
// unless AllowRemote is set. It resolves the host name.
func (c *Config) Validate(ctx context.Context) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch c.Mode {
	case ModeConn:
		if len(c.Levels) == 0 {
			bad("-levels: at least one level")
		}
		prev := 0
		for _, l := range c.Levels {
			if l <= prev || l > MaxConnections {
				bad("-levels: %d: levels must increase and be 1..%d", l, MaxConnections)
			}
			prev = l
		}
		if c.Hold < 0 || c.Hold > 10*time.Minute {
			bad("-hold %v: must be 0..10m", c.Hold)
		}
		if c.DialConcurrency < 1 || c.DialConcurrency > 10_000 {
			bad("-dial-concurrency %d: must be 1..10000", c.DialConcurrency)
		}
		if c.RSSPid < 0 {
			bad("-rss-pid %d: a process id, or 0 for none", c.RSSPid)
		}
		if c.MaxConnFailPct < 0 || c.MaxConnFailPct > 100 {
			bad("-max-conn-fail %v: must be 0..100 (percent)", c.MaxConnFailPct)
		}
	case ModePub, ModePubSub:
		if c.Pubs < 1 {
			bad("-pubs %d: at least one publisher", c.Pubs)
		}
		if c.Mode == ModePubSub && c.subscribers() < 1 {
			bad("-subs %d: pubsub needs at least one subscriber", c.Subs)
		}
		if c.Pubs+c.subscribers() > MaxClients {
			bad("-pubs + -subs = %d: at most %d", c.Pubs+c.subscribers(), MaxClients)
		}
		if c.QoS > 2 {
			bad("-qos %d: must be 0, 1 or 2", c.QoS)
		}
		if c.Payload < stampSize || c.Payload > MaxPayload {
			bad("-payload %d: must be %d..%d bytes (the stamp takes %d)", c.Payload, stampSize, MaxPayload, stampSize)
		}
		if c.Duration <= 0 || c.Duration > MaxDuration {
			bad("-duration %v: must be >0 and at most %v", c.Duration, MaxDuration)
		}
		if c.Rate < 0 || c.Count < 0 {
			bad("-rate and -count must not be negative")
		}
		if c.Topics < 1 || c.Topics > MaxClients {
			bad("-topics %d: must be 1..%d", c.Topics, MaxClients)
		}
		if c.Inflight < 1 || c.Inflight > 65535 {
			bad("-inflight %d: must be 1..65535", c.Inflight)
		}
		if strings.ContainsAny(c.TopicPrefix, "+#") {
			bad("-topic-prefix %q: no wildcards", c.TopicPrefix)
		}
	default:
		bad("-mode %q: want conn, pub or pubsub", c.Mode)
	}
	if c.ConnectTimeout <= 0 || c.Drain < 0 || c.Drain > 5*time.Minute {
		bad("-connect-timeout must be >0 and -drain 0..5m")
	}
	for _, a := range c.SourceAddrs {
		if !a.IsLoopback() && !c.AllowRemote {
			bad("-source-addrs %s: not a loopback address", a)
		}
	}
	if c.WS && !strings.HasPrefix(c.WSPath, "/") {
		bad("-ws-path %q: must start with /", c.WSPath)
	}
	if len(errs) > 0 {
		return fmt.Errorf("loadgen: invalid config: %w", errors.Join(errs...))
	}
	if c.AllowRemote {
		return nil
	}
	return checkLoopback(ctx, c.Addr)
}

// checkLoopback resolves addr's host and requires every address to be a
// loopback one. An empty host means the local machine.
func checkLoopback(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("loadgen: address %q: %w", addr, err)
	}
	if host == "" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			return fmt.Errorf("%w: %s", ErrRemoteTarget, host)
		}
		return nil
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Errorf("loadgen: resolve %q: %w", host, err)
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return fmt.Errorf("%w: %s resolves to %s", ErrRemoteTarget, host, ip.IP)
		}
	}
	return nil
}
