// Command broker runs a standalone single-tenant MQTT broker: one tenant
// shard behind a TCP listener and, optionally, a WebSocket listener; with
// -node-id, a Berth node. `broker drain` asks a running node to hand its
// tenants' leadership to other nodes (drain.go); `broker rebalance` asks
// the cluster to move to its target spread after a node joined
// (rebalance.go); `broker backup` and `broker restore` copy a node's data
// directory (backup.go).
//
//	broker -listen 127.0.0.1:1883 -allow-anonymous -ws-listen 127.0.0.1:8083
//	BERTH_NODE_TOKEN=… broker drain -admin 127.0.0.1:7880 -timeout 50s
//	BERTH_NODE_TOKEN=… broker rebalance -admin 127.0.0.1:7880 -timeout 10m
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"berth.dev/broker/internal/listener"
	"berth.dev/broker/internal/poller"
	"berth.dev/broker/internal/shard"
)

// version and revision are linked in by the image build (infra/images):
// -ldflags "-X main.version=… -X main.revision=…"; -version prints them.
var version, revision = "dev", "unknown"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "drain" { // drain.go: the node's preStop hook
		code := runDrain(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == "rebalance" { // rebalance.go: after a node joined
		code := runRebalance(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if len(os.Args) > 1 && (os.Args[1] == "backup" || os.Args[1] == "restore") { // backup.go
		stop()
		os.Exit(runBackup(os.Args[1] == "restore", os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	}
	if err := run(ctx, os.Args[1:], os.Getenv, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "broker:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends (SIGTERM), then shuts down gracefully. ready,
// if set, is called with the bound listener addresses.
func run(ctx context.Context, args []string, getenv func(string) string, ready func(tcp, ws net.Addr)) error {
	cfg, envSet, err := loadConfig(args, getenv, os.Stderr)
	if err != nil {
		return err
	}
	if cfg.ShowVersion {
		fmt.Printf("broker %s (revision %s)\n", version, revision)
		return nil
	}
	log := newLogger(cfg)
	envSet.Log(log, os.Environ()) // the process's own environment, whatever getenv is
	if err := cfg.ensureDataDir(); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	startMemory(ctx, cfg, log) // memory.go: return after bursts, SIGUSR1 report
	if cfg.NodeID != "" {
		return runNode(ctx, cfg, log)
	}

	sopts := shard.Options{
		Logger:            log,
		MaxPacketSize:     cfg.MaxPacketSize,
		MaxQueuedMessages: cfg.MaxQueued,
		MaxInflight:       cfg.MaxInflight,
		MaxKeepAlive:      uint16(cfg.MaxKeepAlive),
		SysInterval:       cfg.SysInterval,
	}
	st, err := openStorage(cfg, log)
	if err != nil {
		return err
	}
	if st != nil {
		defer func() { _ = st.Close() }() // after the shard's Shutdown
		sopts.Store, sopts.MessageLog = st, st.Messages()
		sopts.ReplayHistory = cfg.ReplayHistory
		// The log, not -max-queued, bounds persistent sessions' backlogs.
		sopts.Retention = shard.Retention{Bytes: cfg.RetentionBytes, Age: cfg.RetentionAge}
	}
	if poller.Supported {
		// Idle plain-TCP connections park without a goroutine
		// (docs/idle-connections.md); closed after the shard's Shutdown.
		p, err := poller.New(log)
		if err != nil {
			return fmt.Errorf("poller: %w", err)
		}
		defer func() { _ = p.Close() }()
		sopts.Poller = p
	}
	sh := shard.New(sopts)
	if err := sh.Start(ctx); err != nil {
		return err
	}
	info := shard.ConnInfo{AllowAnonymous: cfg.AllowAnonymous, Authenticate: checkPassword(cfg.Username, cfg.Password)}
	if !cfg.AllowAnonymous && cfg.Username == "" {
		log.Warn("no -allow-anonymous and no -username: every client will be refused")
	}
	srv := listener.NewAsync(log, func(c net.Conn, remote string, done func()) {
		ci := info
		ci.RemoteAddr = remote
		sh.Serve(c, ci, done)
	})
	if sopts.Poller != nil {
		// Serve returns at once for a TCP connection (its handshake runs on
		// the shard's workers): accepted without a goroutine each.
		srv.Inline()
	}
	var tcpAddr, wsAddr net.Addr
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return err
		}
		tcpAddr = ln.Addr()
		log.Info("listening", "addr", ln.Addr().String(), "proto", "mqtt")
		if err := srv.ServeTCP(ln); err != nil {
			return err
		}
	}
	if cfg.WSListen != "" {
		ln, err := net.Listen("tcp", cfg.WSListen)
		if err != nil {
			_ = srv.Close()
			return err
		}
		wsAddr = ln.Addr()
		log.Info("listening", "addr", ln.Addr().String(), "proto", "mqtt+ws", "path", "/mqtt")
		if err := srv.ServeWebSocket(ln); err != nil {
			return err
		}
	}

	if ready != nil {
		ready(tcpAddr, wsAddr)
	}
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	// Stop accepting, then disconnect and flush clients, then wait.
	errClose := srv.Close()
	errShut := sh.Shutdown(sctx)
	errWait := srv.Wait(sctx)
	return errors.Join(errClose, errShut, errWait)
}

// checkPassword accepts exactly the configured credentials (none when
// username is empty), comparing in constant time.
func checkPassword(username, password string) func(u, p []byte) bool {
	return func(u, p []byte) bool {
		if username == "" {
			return false
		}
		okU := subtle.ConstantTimeCompare(u, []byte(username)) == 1
		okP := subtle.ConstantTimeCompare(p, []byte(password)) == 1
		return okU && okP
	}
}

func newLogger(cfg Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
