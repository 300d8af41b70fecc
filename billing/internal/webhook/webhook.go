// Package webhook delivers Berth's own webhooks to an account's endpoint:
// today the budget notices (docs/billing.md, "Budget webhooks"). Each event
// is a JSON body fixed when the event was recorded
// (budget_webhook_deliveries), POSTed with a signature header
//
//	Berth-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//
// (Stripe's scheme: the receiver recomputes the HMAC over the timestamp, a
// dot and the raw body with the endpoint's secret, compares in constant
// time and refuses old timestamps). A 2xx answer delivers it; anything else
// (another status, a timeout, a refused address) is retried with backoff
// until MaxAttempts, each attempt signed afresh.
//
// An attempt claims its delivery first (attempts + 1, next attempt a lease
// ahead) in its own short transaction, then POSTs with no lock held, then
// records the outcome: two workers never send the same attempt, and a
// worker killed mid-POST leaves the delivery to be retried when the lease
// ends. A receiver may see an event again only then; the event id is the
// key to drop it.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Header carries the signature.
const Header = "Berth-Signature"

// Sign returns the Berth-Signature value for body sent at t with secret
// (its UTF-8 bytes are the HMAC key).
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Config tunes delivery; zero fields take their defaults.
type Config struct {
	// Timeout bounds one POST; default 10s.
	Timeout time.Duration
	// MaxAttempts after which a delivery is given up ("failed"); default 12.
	MaxAttempts int
	// Backoff is the wait after the attempt-th failed attempt (from 1);
	// default one minute doubled each time, at most an hour (1m, 2m, 4m, …,
	// 32m, 1h: twelve attempts span about six hours).
	Backoff func(attempt int) time.Duration
	// Lease is how long a claimed attempt keeps others off; default 2m.
	Lease time.Duration
	// PerRun bounds the attempts of one DeliverDue; default 50.
	PerRun int
	// AllowPrivate lets deliveries reach the addresses Public refuses
	// (development and tests); by default an endpoint resolving to one is
	// refused at dial time, so an account cannot make the worker call into
	// Berth's own network.
	AllowPrivate bool
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 12
	}
	if c.Backoff == nil {
		c.Backoff = func(n int) time.Duration { return min(time.Minute<<min(n-1, 10), time.Hour) }
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Minute
	}
	if c.PerRun <= 0 {
		c.PerRun = 50
	}
	return c
}

// ErrPrivateAddress refuses an endpoint inside Berth's network (Public).
var ErrPrivateAddress = errors.New("webhook: endpoint resolves to a private or loopback address")

var errBadURL = errors.New("webhook: invalid endpoint URL")

// Deliverer sends due deliveries.
type Deliverer struct {
	pool   *pgxpool.Pool
	cfg    Config
	client *http.Client
	log    *slog.Logger
}

// New returns a Deliverer over pool.
func New(pool *pgxpool.Pool, cfg Config, log *slog.Logger) *Deliverer {
	cfg = cfg.withDefaults()
	d := &net.Dialer{Timeout: cfg.Timeout}
	if !cfg.AllowPrivate {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s", ErrPrivateAddress, address)
			}
			if !Public(ap.Addr()) {
				return fmt.Errorf("%w: %s", ErrPrivateAddress, ap.Addr())
			}
			return nil
		}
	}
	tr := &http.Transport{DialContext: d.DialContext, TLSHandshakeTimeout: cfg.Timeout, MaxIdleConns: 16,
		IdleConnTimeout: time.Minute, ResponseHeaderTimeout: cfg.Timeout}
	client := &http.Client{Transport: tr, Timeout: cfg.Timeout,
		// A redirect is not a delivery: the endpoint is the registered URL.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Deliverer{pool: pool, cfg: cfg, client: client, log: log}
}

// Report says what one DeliverDue did.
type Report struct{ Delivered, Retried, Failed int }

// DeliverDue makes an attempt at each pending delivery due by now (at most
// PerRun), to its account's current endpoint, signed with its current
// secret; deliveries of an account without an endpoint wait.
func (d *Deliverer) DeliverDue(ctx context.Context, now time.Time) (Report, error) {
	var r Report
	for range d.cfg.PerRun {
		var id, body, url, secret string
		var attempt int
		err := d.pool.QueryRow(ctx, `UPDATE budget_webhook_deliveries d SET attempts = d.attempts + 1, next_attempt_at = $2
			FROM budget_webhooks w
			WHERE d.event_id = (SELECT x.event_id FROM budget_webhook_deliveries x JOIN budget_webhooks y ON y.account_id = x.account_id
				WHERE x.state = 'pending' AND x.next_attempt_at <= $1 ORDER BY x.next_attempt_at, x.event_id
				LIMIT 1 FOR UPDATE OF x SKIP LOCKED)
			  AND w.account_id = d.account_id
			RETURNING d.event_id, d.body, d.attempts, w.url, w.secret`, now, now.Add(d.cfg.Lease)).
			Scan(&id, &body, &attempt, &url, &secret)
		if errors.Is(err, pgx.ErrNoRows) {
			return r, nil
		}
		if err != nil {
			return r, fmt.Errorf("webhook: claim: %w", err)
		}
		status, perr := d.post(ctx, url, secret, now, []byte(body))
		if ctx.Err() != nil {
			return r, ctx.Err() // the lease retries it
		}
		var errText *string // shown to the account: no addresses (accountError)
		if perr != nil {
			s := accountError(perr)
			errText = &s
		}
		switch {
		case perr == nil && status >= 200 && status < 300:
			_, err = d.pool.Exec(ctx, `UPDATE budget_webhook_deliveries SET state = 'delivered', delivered_at = $2,
				last_status = $3, last_error = NULL WHERE event_id = $1`, id, now, status)
			r.Delivered++
			d.log.Info("webhook delivered", slog.String("event_id", id), slog.Int("attempt", attempt), slog.Int("status", status))
		case attempt >= d.cfg.MaxAttempts:
			_, err = d.pool.Exec(ctx, `UPDATE budget_webhook_deliveries SET state = 'failed', last_status = $2, last_error = $3
				WHERE event_id = $1`, id, nullStatus(status), errText)
			r.Failed++
			d.log.Warn("webhook given up", slog.String("event_id", id), slog.Int("attempts", attempt), slog.Int("status", status), slog.Any("err", perr))
		default:
			_, err = d.pool.Exec(ctx, `UPDATE budget_webhook_deliveries SET next_attempt_at = $2, last_status = $3, last_error = $4
				WHERE event_id = $1`, id, now.Add(d.cfg.Backoff(attempt)), nullStatus(status), errText)
			r.Retried++
			d.log.Info("webhook attempt failed; will retry", slog.String("event_id", id), slog.Int("attempt", attempt),
				slog.Int("status", status), slog.Any("err", perr))
		}
		if err != nil {
			return r, fmt.Errorf("webhook: record %s: %w", id, err)
		}
	}
	return r, nil
}

func nullStatus(s int) *int {
	if s == 0 {
		return nil
	}
	return &s
}

// post sends body to url signed at now and returns the answer's status.
func (d *Deliverer) post(ctx context.Context, url, secret string, now time.Time, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errBadURL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Berth-Webhooks/1")
	req.Header.Set(Header, Sign(secret, now, body))
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}
