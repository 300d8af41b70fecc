// Package config reads the billing worker's configuration from an explicit
// flag.FlagSet, with BERTH_* (and DATABASE_URL) environment variables
// filling flags not given.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"time"
)

// Config is the billing worker's configuration.
type Config struct {
	DatabaseURL     string
	Interval        time.Duration
	Grace           time.Duration
	Poll            time.Duration
	LogFormat       string
	ShutdownTimeout time.Duration
	// Payment through Stripe (docs/billing.md, "Payment"); no key: disabled.
	StripeKey string
	StripeURL string
}

var env = map[string]string{
	"database-url":     "DATABASE_URL",
	"interval":         "BERTH_BILLING_INTERVAL",
	"grace":            "BERTH_BILLING_GRACE",
	"leader-poll":      "BERTH_BILLING_LEADER_POLL",
	"log-format":       "BERTH_LOG_FORMAT",
	"shutdown-timeout": "BERTH_SHUTDOWN_TIMEOUT",
	"stripe-key":       "BERTH_STRIPE_KEY",
	"stripe-url":       "BERTH_STRIPE_URL",
}

// Register declares the flags, with their defaults, on fs.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.DatabaseURL, "database-url", "", "Postgres URL (DATABASE_URL)")
	fs.DurationVar(&c.Interval, "interval", time.Minute, "how often the leader recomputes meters and drafts (BERTH_BILLING_INTERVAL)")
	fs.DurationVar(&c.Grace, "grace", time.Hour, "how long after a month's end its invoices stay drafts, for late usage flushes (BERTH_BILLING_GRACE)")
	fs.DurationVar(&c.Poll, "leader-poll", 5*time.Second, "how often a waiting worker tries for the leader lock (BERTH_BILLING_LEADER_POLL)")
	fs.StringVar(&c.LogFormat, "log-format", "json", "json or text (BERTH_LOG_FORMAT)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a SIGTERM waits for the current run (BERTH_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.StripeKey, "stripe-key", "", "Stripe secret key; empty: payment disabled (BERTH_STRIPE_KEY)")
	fs.StringVar(&c.StripeURL, "stripe-url", "", "Stripe API base URL; empty: Stripe's (BERTH_STRIPE_URL)")
}

// Parse parses args into a Config, then fills flags not given from getenv,
// then validates.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	var c Config
	c.Register(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name, ok := env[f.Name]
		if !ok || set[f.Name] {
			return
		}
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("config: %s: %w", name, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Validate reports every invalid setting.
func (c *Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("config: -database-url (DATABASE_URL) is required"))
	}
	for name, d := range map[string]time.Duration{"interval": c.Interval, "grace": c.Grace, "leader-poll": c.Poll, "shutdown-timeout": c.ShutdownTimeout} {
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
	if u, err := url.Parse(c.DatabaseURL); err == nil {
		c.DatabaseURL = u.Redacted()
	} else {
		c.DatabaseURL = "(unparsable)"
	}
	return c
}
