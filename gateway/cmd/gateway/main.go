// Command gateway is Berth's MQTT-aware connection gateway: it accepts
// device connections on TCP (:1883), TLS (:8883), WebSocket (:8083/mqtt)
// and WebSocket over TLS (:8084/mqtt; TLS and WSS only with -tls-cert and
// -tls-key), authenticates each CONNECT against the API's JWKS, admits it
// under the tenant's global connection limit (Redis), and relays it to the
// tenant's broker node behind a signed PROXY v2 header. See package
// berth.dev/gateway/internal/gateway.
//
// Usage:
//
//	gateway -jwks-url http://api:8080/v1/.well-known/jwks.json
//
// with DATABASE_URL, REDIS_URL and BERTH_PROXY_SECRET in the environment
// (every flag also reads BERTH_<FLAG>; gateway -h lists them). Instead of
// REDIS_URL, Redis Sentinel (-redis-sentinel-master NAME -redis-addrs
// s1:26379,…) or Redis Cluster (-redis-cluster -redis-addrs n1:6379,…)
// may be named, passwords in BERTH_REDIS_PASSWORD and
// BERTH_REDIS_SENTINEL_PASSWORD; see package
// berth.dev/gateway/internal/redisconn. A share of
// connects (-trace-sample, default 0.01) is traced: spans are kept per
// tenant in Postgres, and exported over OTLP/HTTP when -otlp-endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT) is set. With -dns-listen it also answers
// DNS for the tenant endpoints <slug>.<zone> with each tenant's leader's
// host (package berth.dev/gateway/internal/tenantdns).
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
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/broker/jwtauth"
	"berth.dev/broker/proxyproto"
	"berth.dev/broker/tracing"
	"berth.dev/gateway/internal/connlimit"
	"berth.dev/gateway/internal/gateway"
	"berth.dev/gateway/internal/revocation"
	"berth.dev/gateway/internal/route"
	"berth.dev/gateway/internal/tenantdns"
)

// version and revision are linked in by the image build (infra/images):
// -ldflags "-X main.version=… -X main.revision=…"; -version prints them.
var version, revision = "dev", "unknown"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg := gateway.DefaultConfig()
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	dnsCfg := tenantdns.DefaultConfig()
	dnsCfg.RegisterFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and revision, and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion { // before the environment: BERTH_VERSION is no switch
		fmt.Printf("gateway %s (revision %s)\n", version, revision)
		return nil
	}
	envSet, err := gateway.EnvRule().Apply(fs, os.Getenv)
	if err != nil {
		return err
	}
	if err := errors.Join(cfg.Validate(), dnsCfg.Validate(cfg.TenantDomain)); err != nil {
		return err
	}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, nil)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(os.Stderr, nil)
	}
	log := slog.New(h).With("gateway_id", cfg.GatewayID)
	envSet.Log(log, os.Environ()) // the process's own environment, whatever getenv is

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	cfg.Redis.DialTimeout, cfg.Redis.ReadTimeout, cfg.Redis.WriteTimeout = time.Second, 500*time.Millisecond, 500*time.Millisecond
	rdb, err := cfg.Redis.NewClient()
	if err != nil {
		return err
	}
	defer rdb.Close()
	log.Info("redis", "mode", cfg.Redis.Mode())

	keys := jwtauth.NewKeySet(jwtauth.KeySetOptions{URL: cfg.JWKSURL, Logger: log})
	keys.Start(ctx)
	revoked := revocation.New(pool, revocation.Options{Logger: log})
	if err := revoked.Start(ctx); err != nil {
		return err
	}
	routes := route.New(pool, route.Options{Logger: log})
	if err := routes.Start(ctx); err != nil {
		return err
	}
	limits, err := connlimit.New(rdb, connlimit.Options{
		GatewayID: cfg.GatewayID, Prefix: cfg.RedisPrefix, HeartbeatTTL: cfg.HeartbeatTTL, FailClosed: cfg.LimitFailClosed, Logger: log,
	})
	if err != nil {
		return err
	}
	limits.Start(ctx)
	signer, err := proxyproto.NewSigner([]byte(cfg.ProxySecret), nil)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	traces, err := tracing.New(ctx, tracing.Options{
		SampleRatio: cfg.TraceSample, OTLPEndpoint: cfg.OTLPEndpoint, Pool: pool,
		InstanceID: cfg.GatewayID, Logger: log, Registerer: reg,
	})
	if err != nil {
		return err
	}
	gw, err := gateway.New(cfg, gateway.Deps{
		Auth:    jwtauth.NewVerifier(keys, jwtauth.VerifierOptions{Issuer: cfg.Issuer}),
		Revoked: revoked, Routes: routes, Limits: limits, Signer: signer, Logger: log,
		Registry: reg, Tracer: traces.TracerProvider(),
	})
	if err != nil {
		return err
	}
	if err := gw.Start(ctx); err != nil {
		return err
	}
	var dns *tenantdns.Server // the tenant endpoints' DNS (-dns-listen), off by default
	if dnsCfg.Listen != "" {
		resp, err := tenantdns.NewResponder(dnsCfg, routes, log)
		if err == nil {
			dns, err = tenantdns.Listen(dnsCfg.Listen, resp, log)
		}
		if err != nil {
			gw.Shutdown(context.Background())
			return err
		}
		dns.Start()
	}
	log.Info("gateway started")
	<-ctx.Done()
	stop()
	log.Info("shutting down", "grace", cfg.DrainGrace)
	if dns != nil { // first: resolvers turn to the other gateways' responders
		dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Second)
		if err := dns.Shutdown(dctx); err != nil {
			log.Error("dns shutdown", "err", err)
		}
		dcancel()
	}

	// Order: stop accepting and drain connections (releasing their leases),
	// then the background parts; spans are flushed (OTLP and Postgres)
	// while the pool is still open.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.DrainGrace)
	defer cancel()
	if err := gw.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Error("gateway shutdown", "err", err)
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer fcancel()
	return errors.Join(traces.Shutdown(fctx), limits.Shutdown(fctx), routes.Shutdown(fctx), revoked.Shutdown(fctx), keys.Shutdown(fctx))
}
