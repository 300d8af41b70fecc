// Package config reads the billing worker's configuration from an explicit
// flag.FlagSet, with BERTH_* (and DATABASE_URL) environment variables
// filling flags not given.
package config

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"berth.dev/flagenv"
)

// Config is the billing worker's configuration.
type Config struct {
	DatabaseURL string
	Interval    time.Duration
	Grace       time.Duration
	Poll        time.Duration
	// CorrectionWindow is how long after a month's end late usage is
	// billed by a correction (docs/billing.md, "Credits and corrections").
	CorrectionWindow time.Duration
	LogFormat        string
	ShutdownTimeout  time.Duration
	// Payment through Stripe (docs/billing.md, "Payment"); no key: disabled.
	StripeKey string
	StripeURL string
	// WebhookAllowPrivate lets budget webhooks reach loopback and private
	// addresses (development); refused by default.
	WebhookAllowPrivate bool
	// Now, when set, is where the worker's clock starts; it runs on in
	// real time from there. For tests and operators only (docs/billing.md,
	// "The worker's clock"): it bills as if that were the time, e.g. to
	// close the running month on a test stack. Zero: the real clock.
	Now time.Time
}

// EnvRule names the environment variable behind each flag:
// BERTH_BILLING_<FLAG> (upper case, '-' as '_'), but DATABASE_URL and the
// names the API shares (BERTH_LOG_FORMAT, BERTH_SHUTDOWN_TIMEOUT,
// BERTH_STRIPE_KEY, BERTH_STRIPE_URL); -version reads none.
func EnvRule() flagenv.Rule {
	return flagenv.Rule{
		Prefix: "BERTH_BILLING_",
		Aliases: map[string][]string{
			"database-url":     {"DATABASE_URL"},
			"log-format":       {"BERTH_LOG_FORMAT"},
			"shutdown-timeout": {"BERTH_SHUTDOWN_TIMEOUT"},
			"stripe-key":       {"BERTH_STRIPE_KEY"},
			"stripe-url":       {"BERTH_STRIPE_URL"},
		},
		Skip:   []string{"version"},
		Secret: []string{"stripe-key"},
		Watch:  "BERTH_",
	}
}

// Register declares the flags, with their defaults, on fs.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.DatabaseURL, "database-url", "", "Postgres URL (DATABASE_URL)")
	fs.DurationVar(&c.Interval, "interval", time.Minute, "how often the leader recomputes meters and drafts (BERTH_BILLING_INTERVAL)")
	fs.DurationVar(&c.Grace, "grace", time.Hour, "how long after a month's end its invoices stay drafts, for late usage flushes (BERTH_BILLING_GRACE)")
	fs.DurationVar(&c.Poll, "leader-poll", 5*time.Second, "how often a waiting worker tries for the leader lock (BERTH_BILLING_LEADER_POLL)")
	fs.DurationVar(&c.CorrectionWindow, "correction-window", 72*time.Hour,
		"how long after a month's end usage landing late is billed by a correction (BERTH_BILLING_CORRECTION_WINDOW)")
	fs.StringVar(&c.LogFormat, "log-format", "json", "json or text (BERTH_LOG_FORMAT)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a SIGTERM waits for the current run (BERTH_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.StripeKey, "stripe-key", "", "Stripe secret key; empty: payment disabled (BERTH_STRIPE_KEY)")
	fs.StringVar(&c.StripeURL, "stripe-url", "", "Stripe API base URL; empty: Stripe's (BERTH_STRIPE_URL)")
	fs.BoolVar(&c.WebhookAllowPrivate, "webhook-allow-private", false,
		"let budget webhooks reach loopback and private addresses, for development (BERTH_BILLING_WEBHOOK_ALLOW_PRIVATE)")
	fs.Var((*timeFlag)(&c.Now), "now", "tests and operators only: start the worker's clock at this RFC 3339 time (it runs on from there), to bill as if it were then, e.g. close the running month early on a test stack; empty: the real clock (BERTH_BILLING_NOW)")
}

// timeFlag is a time.Time flag in RFC 3339; empty is the zero time.
type timeFlag time.Time

func (f *timeFlag) String() string {
	if f == nil || time.Time(*f).IsZero() {
		return ""
	}
	return time.Time(*f).Format(time.RFC3339)
}

func (f *timeFlag) Set(s string) error {
	if s == "" {
		*f = timeFlag{}
		return nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return errors.New("want an RFC 3339 time, such as 2026-02-01T01:00:01Z")
	}
	*f = timeFlag(t)
	return nil
}

// Parse parses args into a Config, then fills flags not given from getenv
// (EnvRule), then validates.
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
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("config: -database-url (DATABASE_URL) is required"))
	}
	for name, d := range map[string]time.Duration{"interval": c.Interval, "grace": c.Grace, "leader-poll": c.Poll, "correction-window": c.CorrectionWindow, "shutdown-timeout": c.ShutdownTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("config: -%s must be positive", name))
		}
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, errors.New("config: -log-format must be json or text"))
	}
	return errors.Join(errs...)
}

// Redacted is the config for logging: the database password and the
// Stripe key hidden.
func (c Config) Redacted() Config {
	if c.StripeKey != "" {
		c.StripeKey = "(set)"
	}
	c.DatabaseURL = flagenv.Redact(c.DatabaseURL)
	return c
}
