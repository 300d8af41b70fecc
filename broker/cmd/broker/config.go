package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Config is the broker binary's configuration.
type Config struct {
	Listen         string
	WSListen       string
	AllowAnonymous bool
	Username       string
	Password       string
	DataDir        string
	LogFormat      string // "text" or "json"
	LogLevel       string
	MaxPacketSize  int
	MaxQueued      int
	MaxInflight    int
	MaxKeepAlive   int
	SysInterval    time.Duration
	ShutdownGrace  time.Duration
}

// defaultConfig is the one place defaults live.
func defaultConfig() Config {
	return Config{
		Listen:        "127.0.0.1:1883",
		LogFormat:     "text",
		LogLevel:      "info",
		MaxPacketSize: 1 << 20,
		MaxQueued:     10_000,
		MaxInflight:   1024,
		SysInterval:   10 * time.Second,
		ShutdownGrace: 10 * time.Second,
	}
}

// parseConfig reads flags from args; a flag not given on the command line
// takes the BERTH_<NAME> environment variable (dashes as underscores) if
// set.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
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
	fs.StringVar(&cfg.DataDir, "data", cfg.DataDir, "data directory (created if missing); state is in memory until the storage engine lands, so nothing survives a restart yet")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log format: text or json")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log level: debug, info, warn, error")
	fs.IntVar(&cfg.MaxPacketSize, "max-packet-size", cfg.MaxPacketSize, "largest accepted MQTT packet in bytes")
	fs.IntVar(&cfg.MaxQueued, "max-queued", cfg.MaxQueued, "messages queued per session before drops")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", cfg.MaxInflight, "outbound QoS 1/2 window per client")
	fs.IntVar(&cfg.MaxKeepAlive, "max-keepalive", cfg.MaxKeepAlive, "cap on client keep alive in seconds (MQTT 5); 0 = none")
	fs.DurationVar(&cfg.SysInterval, "sys-interval", cfg.SysInterval, "$SYS publish interval; negative disables")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", cfg.ShutdownGrace, "how long SIGTERM waits for clients to be flushed")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := "BERTH_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
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
