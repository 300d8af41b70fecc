// Package redisconn provides the gateway's Redis client in one of three
// topologies, all through go-redis' UniversalClient:
//
//   - url: one server, -redis-url redis://[user:password@]host:port/db
//     (rediss:// for TLS);
//   - sentinel: -redis-sentinel-master NAME -redis-addrs s1:26379,s2:26379,…
//     (the sentinels); the client asks them for the current master and
//     follows failovers;
//   - cluster: -redis-cluster -redis-addrs n1:6379,n2:6379,… (seed nodes);
//     the client routes each key to the node that serves its slot.
//
// For sentinel and cluster the data nodes' credentials come from
// -redis-username and -redis-password (BERTH_REDIS_PASSWORD), the
// sentinels' from -redis-sentinel-password (BERTH_REDIS_SENTINEL_PASSWORD);
// -redis-tls turns on TLS to every node. Users of the client keep each
// command's keys in one Cluster slot (see package connlimit).
package redisconn

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// errBadURL refuses a -redis-url go-redis cannot parse. Its parse error is
// not wrapped: it quotes the URL, password included.
var errBadURL = errors.New("redisconn: -redis-url is not a redis:// or rediss:// URL go-redis accepts " +
	"(a password's '%', '#', '/' or '@' must be percent-encoded)")

// Modes, as Config.Mode reports them.
const (
	ModeURL      = "url"
	ModeSentinel = "sentinel"
	ModeCluster  = "cluster"
)

// Config selects and configures the Redis topology. Exactly one of URL,
// SentinelMaster (with Addrs) or Cluster (with Addrs) is used.
type Config struct {
	URL            string // single server: redis:// or rediss://
	Addrs          string // comma-separated host:port: the sentinels, or the cluster's seed nodes
	SentinelMaster string // the master's name at the sentinels
	Cluster        bool
	Username       string // data nodes (sentinel and cluster modes)
	Password       string
	SentinelPass   string // the sentinels' own password, if any
	DB             int    // sentinel mode; a cluster has only DB 0
	TLS            bool   // sentinel and cluster modes; the URL says it with rediss://

	// Per-command timeouts; set by the caller (the gateway keeps them tight).
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
}

// RegisterFlags binds c's fields to flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "redis-url", c.URL, "Redis URL of a single server (env REDIS_URL)")
	fs.StringVar(&c.Addrs, "redis-addrs", c.Addrs, "comma-separated host:port of the Redis sentinels (with -redis-sentinel-master) or cluster seed nodes (with -redis-cluster)")
	fs.StringVar(&c.SentinelMaster, "redis-sentinel-master", c.SentinelMaster, "Redis Sentinel: the master's name")
	fs.BoolVar(&c.Cluster, "redis-cluster", c.Cluster, "Redis Cluster: -redis-addrs are seed nodes")
	fs.StringVar(&c.Username, "redis-username", c.Username, "Redis ACL user (sentinel and cluster modes)")
	fs.StringVar(&c.Password, "redis-password", c.Password, "Redis password (sentinel and cluster modes; env BERTH_REDIS_PASSWORD)")
	fs.StringVar(&c.SentinelPass, "redis-sentinel-password", c.SentinelPass, "the sentinels' password (env BERTH_REDIS_SENTINEL_PASSWORD)")
	fs.IntVar(&c.DB, "redis-db", c.DB, "Redis database number (sentinel mode)")
	fs.BoolVar(&c.TLS, "redis-tls", c.TLS, "TLS to the Redis nodes (sentinel and cluster modes)")
}

// Mode reports the topology c selects, or "" when it selects none.
func (c *Config) Mode() string {
	switch {
	case c.SentinelMaster != "":
		return ModeSentinel
	case c.Cluster:
		return ModeCluster
	case c.URL != "":
		return ModeURL
	}
	return ""
}

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	addrs := c.addrs()
	switch c.Mode() {
	case "":
		errs = append(errs, errors.New("redisconn: -redis-url (REDIS_URL), or -redis-addrs with -redis-sentinel-master or -redis-cluster, is required"))
	case ModeURL:
		if len(addrs) > 0 {
			errs = append(errs, errors.New("redisconn: -redis-addrs needs -redis-sentinel-master or -redis-cluster"))
		}
		if _, err := redis.ParseURL(c.URL); err != nil {
			errs = append(errs, errBadURL)
		}
	default:
		if c.URL != "" {
			errs = append(errs, errors.New("redisconn: give -redis-url or -redis-addrs, not both"))
		}
		if c.SentinelMaster != "" && c.Cluster {
			errs = append(errs, errors.New("redisconn: -redis-sentinel-master and -redis-cluster exclude each other"))
		}
		if len(addrs) == 0 {
			errs = append(errs, fmt.Errorf("redisconn: %s mode needs -redis-addrs", c.Mode()))
		}
		for _, a := range addrs {
			if i := strings.LastIndexByte(a, ':'); i <= 0 || i == len(a)-1 {
				errs = append(errs, fmt.Errorf("redisconn: -redis-addrs: %q is not host:port", a))
			}
		}
		if c.Cluster && c.DB != 0 {
			errs = append(errs, errors.New("redisconn: a cluster has only database 0"))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) addrs() []string {
	var out []string
	for a := range strings.SplitSeq(c.Addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Options returns the go-redis options c describes; c must be valid.
func (c *Config) Options() (*redis.UniversalOptions, error) {
	o := &redis.UniversalOptions{
		DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
	}
	switch c.Mode() {
	case ModeURL:
		u, err := redis.ParseURL(c.URL)
		if err != nil {
			return nil, errBadURL
		}
		o.Addrs, o.Username, o.Password, o.DB, o.TLSConfig = []string{u.Addr}, u.Username, u.Password, u.DB, u.TLSConfig
		o.ClientName, o.Protocol, o.PoolSize, o.MinIdleConns, o.MaxRetries = u.ClientName, u.Protocol, u.PoolSize, u.MinIdleConns, u.MaxRetries
	case ModeSentinel, ModeCluster:
		o.Addrs, o.Username, o.Password = c.addrs(), c.Username, c.Password
		o.MasterName, o.IsClusterMode = c.SentinelMaster, c.Cluster
		o.SentinelPassword, o.DB = c.SentinelPass, c.DB
		if c.TLS {
			o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	default:
		return nil, errors.New("redisconn: no Redis configured")
	}
	return o, nil
}

// NewClient returns the client c describes: a *redis.Client (url), a
// sentinel-backed *redis.Client (sentinel) or a *redis.ClusterClient.
func (c *Config) NewClient() (redis.UniversalClient, error) {
	o, err := c.Options()
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(o), nil
}
