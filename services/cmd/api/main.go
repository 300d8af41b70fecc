// Command api serves Berth's control-plane REST API (the design's "REST API
// (services)" and docs/contracts.md): it reads its Config, applies the
// migrations, wires the store, accounts, signing keyring and node client
// into the router, and serves until SIGTERM or SIGINT. GET requests outside
// /v1 get the dashboard embedded by package berth.dev/web (`make web`).
//
//	DATABASE_URL=postgres://… BERTH_KEY_ENCRYPTION_KEY=<32 bytes, hex> \
//	    go run ./services/cmd/api -listen :8080 \
//	    -domain mqtt.example.com -mqtt-addr mqtt.example.com:1883 \
//	    -cors-origin https://dash.example.com -trusted-proxies 10.0.0.0/8
//
// Prometheus /metrics is served on -metrics-listen (127.0.0.1:9102), not on
// the public listener. Without -key-encryption-key it starts only with -dev
// (the local dev stack, `make run`).
//
// Run with -h for every flag; each has a BERTH_* environment fallback.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"berth.dev/billing/payment"
	"berth.dev/migrations"
	"berth.dev/services/internal/account"
	"berth.dev/services/internal/config"
	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/httpapi"
	"berth.dev/services/internal/lifecycle"
	"berth.dev/services/internal/nodeclient"
	"berth.dev/services/internal/store"
	"berth.dev/web"
)

// version and revision are linked in by the image build (infra/images):
// -ldflags "-X main.version=… -X main.revision=…"; -version prints them.
var version, revision = "dev", "unknown"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	showVersion := fs.Bool("version", false, "print the version and revision, and exit")
	cfg, envSet, err := config.Load(fs, os.Args[1:], os.Getenv)
	if *showVersion { // before the error: -version needs no other setting
		fmt.Printf("api %s (revision %s)\n", version, revision)
		return nil
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, nil)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(os.Stderr, nil)
	}
	log := slog.New(h)
	log.Info("starting", slog.Any("config", cfg.Redacted()))
	envSet.Log(log, os.Environ()) // the process's own environment, whatever getenv is

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()

	st := store.New(pool)
	kek, err := credential.ParseKEK(cfg.KeyEncryption)
	if err != nil {
		return err
	}
	if kek == nil { // config allows it only with -dev, where it is expected
		log.Info("-dev without -key-encryption-key: signing keys are stored unsealed (set -key-encryption-key anywhere but a local stack)")
	}
	keyring, err := credential.NewKeyring(st, kek, log)
	if err != nil {
		return err
	}
	// A signing key must exist before the first request: a gateway that
	// fetched an empty JWKS would refuse the first tokens.
	if _, _, err := keyring.Rotate(ctx, cfg.KeyRotation); err != nil {
		return fmt.Errorf("signing key: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hashes := account.NewHashLimiter(cfg.Argon2Concurrency, account.DefaultHashWait)
	openPlans, err := cfg.OpenPlanNames()
	if err != nil {
		return err
	}
	var payments httpapi.Payments
	if cfg.StripeKey == "" {
		log.Info("payment is disabled: no Stripe key (-stripe-key, BERTH_STRIPE_KEY); paid plans only by -open-plans or an operator's `billing grant`", "open_plans", openPlans)
	} else {
		p, err := payment.New(pool, payment.Config{Key: cfg.StripeKey, WebhookSecret: cfg.StripeWebhookSecret, URL: cfg.StripeURL, Grace: cfg.PaymentGrace}, log)
		if err != nil {
			return err
		}
		payments = p
		log.Info("payment through Stripe: paid plans need a payment method; webhooks at POST /v1/billing/webhook", "grace", cfg.PaymentGrace)
	}
	router, err := httpapi.NewRouter(httpapi.Options{
		Store:    st,
		Accounts: account.NewService(st, account.DefaultParams, cfg.SessionTTL, cfg.RefreshTTL, hashes),
		Keyring:  keyring, Nodes: nodeclient.New(nil, cfg.NodeToken), Logger: log, Registry: reg,
		Domain: cfg.Domain, MQTTAddr: cfg.MQTTAddr, Issuer: cfg.Issuer, CORSOrigin: cfg.CORSOrigin,
		MQTTTLSAddr: cfg.MQTTTLSAddr, MQTTWSURL: cfg.MQTTWSURL, MQTTWSSURL: cfg.MQTTWSSURL,
		AuthRateLimit: cfg.AuthRateLimit, TrustedProxies: cfg.TrustedProxyPrefixes(), SecureCookies: cfg.SecureCookies,
		OpenPlans: openPlans, Payments: payments, AccountWriteRate: cfg.AccountWriteRate, AccountWriteBurst: cfg.AccountWriteBurst,
		Dashboard: web.Handler(log),
	})
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(context.Background())
	defer func() { stopBackground(); wg.Wait() }()
	// Background work: signing key rotation; partitions ahead, rollups and
	// retention of spans and minute usage. Both stop (a lifecycle run in
	// progress is cancelled, its transaction rolled back) and are waited
	// for before the pool closes.
	lc := lifecycle.New(pool, lifecycle.Config{
		SpansRetention: cfg.SpansRetention, UsageRetention: cfg.UsageRetention,
		DaysAhead: cfg.PartitionsAhead, Interval: cfg.LifecycleInterval,
	}, log)
	wg.Go(func() { keyring.Run(bgCtx, cfg.KeyCheck, cfg.KeyRotation) })
	wg.Go(func() { lc.Run(bgCtx) })

	srv := &http.Server{
		Addr: cfg.Listen, Handler: router,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second, ErrorLog: slog.NewLogLogger(h, slog.LevelWarn),
	}
	// /metrics on its own internal listener, never the public one. It is
	// shut down last, so a scrape sees the drain.
	var metrics *http.Server
	metricsErr := make(chan error, 1)
	if cfg.MetricsListen != "" {
		ln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		metrics = &http.Server{
			Handler: httpapi.MetricsHandler(reg), ReadHeaderTimeout: 5 * time.Second,
			ErrorLog: slog.NewLogLogger(h, slog.LevelWarn),
		}
		go func() { metricsErr <- metrics.Serve(ln) }()
		defer metrics.Close() // on an early return; after Shutdown a no-op
		log.Info("metrics listening", slog.String("addr", ln.Addr().String()))
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("listening", slog.String("addr", cfg.Listen))

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case err := <-metricsErr:
		return fmt.Errorf("serve metrics: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if metrics != nil {
		if err := metrics.Shutdown(sctx); err != nil {
			return fmt.Errorf("shutdown metrics: %w", err)
		}
		if err := <-metricsErr; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return nil
}
