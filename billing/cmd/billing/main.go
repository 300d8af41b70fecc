// Command billing is Berth's billing worker: it rolls the nodes' usage into
// monthly meters per tenant and account and keeps each account's invoice
// per UTC month (a draft while the month runs, issued after it ends). One
// worker leads at a time under a Postgres advisory lock; others wait and
// take over when it stops. See docs/billing.md.
//
//	DATABASE_URL=postgres://… go run ./billing/cmd/billing -interval 1m -grace 1h
//
// Run with -h for every flag; each has a BERTH_* environment fallback.
// SIGTERM or SIGINT ends it: the current account's transaction is rolled
// back (it is redone by the next leader) and the lock released.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/billing/internal/config"
	"berth.dev/billing/internal/metering"
	"berth.dev/billing/internal/webhook"
	"berth.dev/billing/payment"
	"berth.dev/migrations"
)

// version and revision are linked in by the image build (infra/images):
// -ldflags "-X main.version=… -X main.revision=…"; -version prints them.
var version, revision = "dev", "unknown"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "billing:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "grant" {
		return grant(os.Args[2:], os.Getenv, os.Stdout)
	}
	if len(os.Args) > 1 && os.Args[1] == "credit" {
		return credit(os.Args[2:], os.Getenv, time.Now, os.Stdout)
	}
	fs := flag.NewFlagSet("billing", flag.ContinueOnError)
	showVersion := fs.Bool("version", false, "print the version and revision, and exit")
	cfg, envSet, err := config.Load(fs, os.Args[1:], os.Getenv)
	if *showVersion { // before the error: -version needs no other setting
		fmt.Printf("billing %s (revision %s)\n", version, revision)
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

	mc := metering.Config{Interval: cfg.Interval, Grace: cfg.Grace, Poll: cfg.Poll, CorrectionWindow: cfg.CorrectionWindow,
		Webhooks: webhook.New(pool, webhook.Config{AllowPrivate: cfg.WebhookAllowPrivate}, log)}
	if !cfg.Now.IsZero() {
		// The clock runs on from -now (tests and operators only).
		offset := time.Until(cfg.Now)
		mc.Now = func() time.Time { return time.Now().Add(offset) }
		log.Warn("the worker's clock is set: it bills as if the time were -now, and runs on from there", slog.Time("now", cfg.Now))
	}
	if cfg.StripeKey == "" {
		log.Info("payment is disabled: no Stripe key (-stripe-key, BERTH_STRIPE_KEY); invoices are drafted and issued, not charged, and paid plans are granted with `billing grant`")
	} else {
		p, err := payment.New(pool, payment.Config{Key: cfg.StripeKey, URL: cfg.StripeURL}, log)
		if err != nil {
			return err
		}
		mc.Payments = p
		log.Info("payment through Stripe: final invoices are pushed, and accounts capped when their payment grace ends")
	}
	w := metering.New(pool, mc, log)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	select {
	case err := <-done:
		return err
	case <-time.After(cfg.ShutdownTimeout):
		return errors.New("shutdown timed out")
	}
}
