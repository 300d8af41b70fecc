// Package config is the API's configuration: one Config on an explicit
// flag.FlagSet, with BERTH_* (and DATABASE_URL) environment variables
// filling flags that were not set (EnvRule), and defaults in one place.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"time"

	"berth.dev/billing/plan"
	"berth.dev/flagenv"
	"berth.dev/services/internal/credential"
)

// Config configures cmd/api.
type Config struct {
	Listen          string
	DatabaseURL     string
	Domain          string
	MQTTAddr        string
	MQTTTLSAddr     string // empty: no MQTT over TLS listener to tell users about
	MQTTWSURL       string // empty: no MQTT over WebSocket listener to tell users about
	MQTTWSSURL      string // empty: no MQTT over secure WebSocket listener to tell users about
	Issuer          string
	NodeToken       string
	CORSOrigin      string
	KeyEncryption   string // hex or base64 of 32 bytes; empty (only with Dev) stores signing keys unsealed
	KeyRotation     time.Duration
	KeyCheck        time.Duration
	SessionTTL      time.Duration
	RefreshTTL      time.Duration
	AuthRateLimit   int // signup/login/refresh requests per minute per client IP
	SecureCookies   bool
	LogFormat       string
	ShutdownTimeout time.Duration
	// Dev marks the local dev stack (`make run`): the only place signing
	// keys may be stored unsealed.
	Dev bool
	// MetricsListen is the internal listener of Prometheus /metrics, kept
	// off the public router; empty disables it.
	MetricsListen string
	// TrustedProxies are comma-separated CIDRs (or addresses) of the
	// operator's reverse proxies: from a peer in one of them the client's
	// address is taken from X-Forwarded-For (the login limiter keys on it).
	TrustedProxies string
	// Argon2Concurrency bounds concurrent argon2id password hashes.
	Argon2Concurrency int
	// OpenPlans are the comma-separated plans every account is entitled
	// to put its tenants on, until billing entitles accounts one by one;
	// "free" is always among them.
	OpenPlans string
	// Payment through Stripe (docs/billing.md, "Payment"): without a key,
	// payment is disabled and paid plans come from -open-plans or an
	// operator's `billing grant`.
	StripeKey           string
	StripeWebhookSecret string
	StripeURL           string
	PaymentGrace        time.Duration
	// AccountWriteRate and AccountWriteBurst are each account's token
	// bucket for authenticated REST writes: writes a second, bucket size.
	AccountWriteRate  float64
	AccountWriteBurst int
	// Data lifecycle (services/internal/lifecycle): how long spans and
	// minute usage/latency rows are kept, how many days of partitions are
	// made ahead, how often it runs.
	SpansRetention    time.Duration
	UsageRetention    time.Duration
	PartitionsAhead   int
	LifecycleInterval time.Duration
}

// EnvRule names the environment variable behind each flag: BERTH_<FLAG>
// (upper case, '-' as '_'), but BERTH_API_LISTEN for -listen and
// DATABASE_URL for -database-url; -version reads none.
func EnvRule() flagenv.Rule {
	return flagenv.Rule{
		Prefix: "BERTH_",
		Aliases: map[string][]string{
			"listen":       {"BERTH_API_LISTEN"},
			"database-url": {"DATABASE_URL"},
		},
		Skip:   []string{"version"},
		Secret: []string{"node-token", "key-encryption-key", "stripe-key", "stripe-webhook-secret"},
	}
}

// Register defines the flags on fs, writing into c.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", ":8080", "HTTP listen address")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "Postgres URL")
	fs.StringVar(&c.Domain, "domain", "mqtt.localhost", "tenant endpoints are <slug>.<domain>")
	fs.StringVar(&c.MQTTAddr, "mqtt-addr", "127.0.0.1:1883", "gateway host:port returned to users; {slug} in it stands for the tenant's slug")
	fs.StringVar(&c.MQTTTLSAddr, "mqtt-tls-addr", "", "gateway MQTT over TLS host:port returned to users, {slug} as in -mqtt-addr (empty: none)")
	fs.StringVar(&c.MQTTWSURL, "mqtt-ws-url", "", "gateway MQTT over WebSocket URL returned to users, e.g. ws://127.0.0.1:8083/mqtt (empty: none)")
	fs.StringVar(&c.MQTTWSSURL, "mqtt-wss-url", "", "gateway MQTT over secure WebSocket URL returned to users, e.g. wss://mqtt.example.com:8084/mqtt (empty: none)")
	fs.StringVar(&c.Issuer, "issuer", "berth", "iss claim of credential tokens")
	fs.StringVar(&c.NodeToken, "node-token", "", "bearer token for the nodes' admin API")
	fs.StringVar(&c.CORSOrigin, "cors-origin", "", "dashboard origin allowed by CORS (empty: none)")
	fs.StringVar(&c.KeyEncryption, "key-encryption-key", "", "32-byte key (hex/base64) sealing signing keys at rest; required unless -dev")
	fs.BoolVar(&c.Dev, "dev", false, "local dev stack: allow signing keys stored unsealed (no -key-encryption-key)")
	fs.StringVar(&c.MetricsListen, "metrics-listen", "127.0.0.1:9102", "internal listener for Prometheus /metrics (empty: none)")
	fs.StringVar(&c.TrustedProxies, "trusted-proxies", "", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For names the client (empty: none)")
	fs.IntVar(&c.Argon2Concurrency, "argon2-concurrency", max(2, runtime.GOMAXPROCS(0)), "most argon2id password hashes at once (signup, login)")
	fs.StringVar(&c.OpenPlans, "open-plans", "free", "comma-separated plans every account is entitled to (beside those its payment method or an operator's grant gives it); must include free")
	fs.StringVar(&c.StripeKey, "stripe-key", "", "Stripe secret key; empty: payment disabled, paid plans by -open-plans or `billing grant`")
	fs.StringVar(&c.StripeWebhookSecret, "stripe-webhook-secret", "", "signing secret of the Stripe webhook endpoint POST /v1/billing/webhook (required with -stripe-key)")
	fs.StringVar(&c.StripeURL, "stripe-url", "", "Stripe API base URL (empty: Stripe's; tests: stripe-mock)")
	fs.DurationVar(&c.PaymentGrace, "payment-grace", 7*24*time.Hour, "how long after a failed payment an account keeps its quotas before the billing worker caps them to the free plan's bounds")
	fs.Float64Var(&c.AccountWriteRate, "account-write-rate", 20, "authenticated REST writes (POST/PUT/PATCH/DELETE) a second per account, over all its keys and sessions")
	fs.IntVar(&c.AccountWriteBurst, "account-write-burst", 40, "burst of -account-write-rate: writes an account may make at once")
	fs.DurationVar(&c.KeyRotation, "key-rotation", 30*24*time.Hour, "rotate the signing key when it is older than this")
	fs.DurationVar(&c.KeyCheck, "key-check", time.Hour, "how often to check whether the signing key is due")
	fs.DurationVar(&c.SessionTTL, "session-ttl", 15*time.Minute, "dashboard session token lifetime")
	fs.DurationVar(&c.RefreshTTL, "refresh-ttl", 30*24*time.Hour, "refresh token lifetime")
	fs.IntVar(&c.AuthRateLimit, "auth-rate-limit", 20, "signup/login/refresh requests per minute per IP")
	fs.BoolVar(&c.SecureCookies, "secure-cookies", true, "mark session cookies Secure")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "graceful shutdown budget")
	fs.DurationVar(&c.SpansRetention, "spans-retention", 7*24*time.Hour, "keep sampled spans at least this long (dropped a whole UTC day at a time)")
	fs.DurationVar(&c.UsageRetention, "usage-retention", 35*24*time.Hour, "keep minute usage and latency rows at least this long (dropped a whole UTC day at a time; hourly and daily rollups are kept)")
	fs.IntVar(&c.PartitionsAhead, "partitions-ahead", 3, "days of spans/usage/latency partitions made beyond today")
	fs.DurationVar(&c.LifecycleInterval, "lifecycle-interval", time.Hour, "how often partitions, rollups and retention are done")
}

// Parse registers the flags on fs, parses args, fills unset flags from
// getenv (EnvRule) and validates the result.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	c, _, err := Load(fs, args, getenv)
	return c, err
}

// Load is Parse, also reporting which variables set which flags.
func Load(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, flagenv.Report, error) {
	var c Config
	c.Register(fs)
	rep, err := EnvRule().Parse(fs, args, getenv)
	if err != nil {
		return c, rep, err
	}
	return c, rep, c.Validate()
}

// Validate reports every invalid setting.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config: "+format, a...)) }
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("-listen %q: %v", c.Listen, err)
	}
	if c.DatabaseURL == "" {
		bad("-database-url (DATABASE_URL) is required")
	} else if _, err := url.Parse(c.DatabaseURL); err != nil {
		// url.Error quotes the whole URL, password included.
		bad("-database-url does not parse as a URL (a password's '%%', '#', '/' or '@' must be percent-encoded)")
	}
	if c.Domain == "" || strings.HasPrefix(c.Domain, ".") || strings.ContainsAny(c.Domain, "/: ") {
		bad("-domain %q is not a domain name", c.Domain)
	}
	// {slug} (httpapi.SlugPlaceholder) may stand for the tenant's slug in
	// the host of any of the four addresses: checked as a slug would fill it.
	filled := func(v string) string { return strings.ReplaceAll(v, "{slug}", "slug") }
	if _, _, err := net.SplitHostPort(filled(c.MQTTAddr)); err != nil {
		bad("-mqtt-addr %q: %v", c.MQTTAddr, err)
	}
	if c.MQTTTLSAddr != "" {
		if _, _, err := net.SplitHostPort(filled(c.MQTTTLSAddr)); err != nil {
			bad("-mqtt-tls-addr %q: %v", c.MQTTTLSAddr, err)
		}
	}
	for _, u := range []struct{ flag, scheme, value string }{
		{"-mqtt-ws-url", "ws", c.MQTTWSURL}, {"-mqtt-wss-url", "wss", c.MQTTWSSURL},
	} {
		if u.value == "" {
			continue
		}
		if p, err := url.Parse(filled(u.value)); err != nil || p.Scheme != u.scheme || p.Host == "" {
			bad("%s %q must be a URL like %s://host:port/mqtt", u.flag, u.value, u.scheme)
		}
	}
	if c.Issuer == "" {
		bad("-issuer is required")
	}
	if c.CORSOrigin != "" {
		if u, err := url.Parse(c.CORSOrigin); err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			bad("-cors-origin %q must be an origin like https://dash.example.com", c.CORSOrigin)
		}
	}
	if kek, err := credential.ParseKEK(c.KeyEncryption); err != nil {
		bad("-key-encryption-key: %v", err)
	} else if kek == nil && !c.Dev {
		bad("-key-encryption-key (BERTH_KEY_ENCRYPTION_KEY) is required: signing keys are sealed at rest outside the local dev stack (-dev)")
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			bad("-metrics-listen %q: %v", c.MetricsListen, err)
		}
	}
	if _, err := ParsePrefixes(c.TrustedProxies); err != nil {
		bad("-trusted-proxies: %v", err)
	}
	if c.Argon2Concurrency < 1 {
		bad("-argon2-concurrency must be at least 1")
	}
	if plans, err := c.OpenPlanNames(); err != nil {
		bad("-open-plans: %v", err)
	} else if !slices.Contains(plans, "free") {
		bad("-open-plans %q must include free (signup puts every account's first tenant on it)", c.OpenPlans)
	}
	if c.StripeKey != "" && c.StripeWebhookSecret == "" {
		bad("-stripe-webhook-secret (BERTH_STRIPE_WEBHOOK_SECRET) is required with -stripe-key: Stripe's webhooks are verified with it")
	}
	if c.PaymentGrace <= 0 {
		bad("-payment-grace must be positive")
	}
	if !(c.AccountWriteRate >= 0.001 && c.AccountWriteRate <= 1e6) {
		bad("-account-write-rate %v must be between 0.001 and 1000000 writes a second", c.AccountWriteRate)
	}
	if c.AccountWriteBurst < 1 || c.AccountWriteBurst > 1_000_000 {
		bad("-account-write-burst %d must be between 1 and 1000000", c.AccountWriteBurst)
	}
	if c.KeyRotation < time.Hour {
		bad("-key-rotation %v must be at least 1h", c.KeyRotation)
	}
	if c.KeyCheck <= 0 {
		bad("-key-check must be positive")
	}
	if c.SessionTTL < time.Minute || c.RefreshTTL < c.SessionTTL {
		bad("-session-ttl must be at least 1m and -refresh-ttl at least -session-ttl")
	}
	if c.AuthRateLimit < 1 {
		bad("-auth-rate-limit must be at least 1")
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		bad("-log-format %q: want json or text", c.LogFormat)
	}
	if c.ShutdownTimeout <= 0 {
		bad("-shutdown-timeout must be positive")
	}
	if c.SpansRetention < 24*time.Hour {
		bad("-spans-retention %v must be at least 24h", c.SpansRetention)
	}
	// Nodes read the current month's minute usage for the monthly quota.
	if c.UsageRetention < 32*24*time.Hour {
		bad("-usage-retention %v must be at least 32 days (768h): the monthly quota reads the month's minute rows", c.UsageRetention)
	}
	if c.PartitionsAhead < 1 || c.PartitionsAhead > 60 {
		bad("-partitions-ahead %d must be between 1 and 60", c.PartitionsAhead)
	}
	if c.LifecycleInterval < time.Minute || c.LifecycleInterval > 6*time.Hour {
		bad("-lifecycle-interval %v must be between 1m and 6h", c.LifecycleInterval)
	}
	return errors.Join(errs...)
}

// OpenPlanNames returns the parsed -open-plans: known plan names, each
// once, in the order given.
func (c Config) OpenPlanNames() ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(c.OpenPlans, ",") {
		f = strings.TrimSpace(f)
		if f == "" || slices.Contains(out, f) {
			continue
		}
		if _, err := plan.Lookup(f); err != nil {
			return nil, fmt.Errorf("%q is not a plan (plans: %s)", f, strings.Join(plan.Names(), ", "))
		}
		out = append(out, f)
	}
	return out, nil
}

// TrustedProxyPrefixes returns the parsed -trusted-proxies (nil when
// empty or invalid; Validate reports an invalid list).
func (c Config) TrustedProxyPrefixes() []netip.Prefix {
	p, _ := ParsePrefixes(c.TrustedProxies)
	return p
}

// ParsePrefixes parses comma-separated CIDRs; a bare address is its own
// single-address prefix.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR or an address", f)
			}
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR or an address", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Redacted returns c with secrets masked, for logging.
func (c Config) Redacted() Config {
	mask := func(s string) string {
		if s == "" {
			return ""
		}
		return "REDACTED"
	}
	c.NodeToken = mask(c.NodeToken)
	c.KeyEncryption = mask(c.KeyEncryption)
	c.StripeKey = mask(c.StripeKey)
	c.StripeWebhookSecret = mask(c.StripeWebhookSecret)
	c.DatabaseURL = flagenv.Redact(c.DatabaseURL)
	return c
}
