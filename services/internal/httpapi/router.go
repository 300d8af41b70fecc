package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"berth.dev/billing/plan"
	"berth.dev/services/internal/account"
	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/nodeclient"
	"berth.dev/services/internal/openapi"
	"berth.dev/services/internal/ratelimit"
	"berth.dev/services/internal/store"
)

// Options wires the API's parts.
type Options struct {
	Store    *store.Store
	Accounts *account.Service
	Keyring  *credential.Keyring
	Nodes    *nodeclient.Client
	Logger   *slog.Logger
	// Registry receives the request metrics. It is not served here: the
	// public router answers 404 on /metrics; MetricsHandler serves it on
	// an internal listener.
	Registry *prometheus.Registry

	Domain        string // tenant endpoints are <slug>.<Domain>
	MQTTAddr      string // the gateway's host:port, returned with credentials
	MQTTTLSAddr   string // the gateway's MQTT over TLS host:port; empty: none
	MQTTWSURL     string // the gateway's MQTT over WebSocket URL (ws://host:port/mqtt); empty: none
	MQTTWSSURL    string // the gateway's MQTT over secure WebSocket URL (wss://…); empty: none
	Issuer        string // iss claim of credential tokens
	CORSOrigin    string // the dashboard origin; empty disables CORS
	AuthRateLimit int    // signup/login/refresh requests per minute per client address
	// TrustedProxies are the operator's reverse proxies: from a peer in one
	// of them the limiter's client address comes from X-Forwarded-For.
	TrustedProxies []netip.Prefix
	SecureCookies  bool
	// OpenPlans are the plans every account is entitled to put its tenants
	// on, beside those its payment method or an operator's grant entitles
	// it to (entitlement.go); nil: only "free".
	// An account's tenant cap is the largest among them (plan.TenantCap).
	OpenPlans []string
	// Payments is the payment provider (Stripe); nil: payment disabled,
	// paid plans only by -open-plans or an operator's grant.
	Payments Payments
	// AccountWriteRate and AccountWriteBurst are each account's token
	// bucket for authenticated writes (POST, PUT, PATCH, DELETE; not HTTP
	// publish, which the tenant's message quotas meter): writes a second
	// and bucket size; 0 means 20 and 40.
	AccountWriteRate  float64
	AccountWriteBurst int
	// Dashboard, when set, answers GET and HEAD requests that no route
	// matches outside /v1, /healthz, /readyz and /metrics (a 404 here).
	Dashboard http.Handler
}

// api holds the handlers' dependencies.
type api struct {
	store    *store.Store
	accounts *account.Service
	keyring  *credential.Keyring
	nodes    *nodeclient.Client
	writes   *ratelimit.Limiter // per-account authenticated writes
	opts     Options
}

// NewRouter returns the API's router.
func NewRouter(o Options) (chi.Router, error) {
	if o.Store == nil || o.Accounts == nil || o.Keyring == nil || o.Nodes == nil || o.Registry == nil {
		return nil, errors.New("httpapi: Store, Accounts, Keyring, Nodes and Registry are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AuthRateLimit < 1 {
		o.AuthRateLimit = 20
	}
	if o.OpenPlans == nil {
		o.OpenPlans = []string{"free"}
	}
	if _, err := plan.TenantCap(o.OpenPlans); err != nil {
		return nil, fmt.Errorf("httpapi: OpenPlans: %w", err)
	}
	if o.AccountWriteRate <= 0 {
		o.AccountWriteRate = defaultAccountWriteRate
	}
	if o.AccountWriteBurst < 1 {
		o.AccountWriteBurst = defaultAccountWriteBurst
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	a := &api{store: o.Store, accounts: o.Accounts, keyring: o.Keyring, nodes: o.Nodes, opts: o,
		writes: ratelimit.New(o.AccountWriteRate, o.AccountWriteBurst, writeLimiterKeys)}

	r := chi.NewRouter()
	r.Use(requestID(o.Logger), m.observe, recoverer, cors(o.CORSOrigin), bodyLimit)
	r.NotFound(withDashboard(o.Dashboard, handler(func(_ http.ResponseWriter, r *http.Request) error { return &routeError{path: r.URL.Path} })))
	r.MethodNotAllowed(handler(func(_ http.ResponseWriter, r *http.Request) error {
		return &routeError{method: r.Method, path: r.URL.Path}
	}))

	r.Get("/healthz", a.healthz)
	r.Get("/readyz", handler(a.readyz))

	r.Route("/v1", func(r chi.Router) {
		r.Get("/openapi.json", a.openapi)
		r.Get("/.well-known/jwks.json", handler(a.jwks))

		r.Group(func(r chi.Router) {
			r.Use(httprate.LimitBy(o.AuthRateLimit, time.Minute,
				func(r *http.Request) (string, error) {
					return httprate.CanonicalizeIP(clientAddr(r, o.TrustedProxies)), nil
				},
				httprate.WithLimitHandler(func(w http.ResponseWriter, r *http.Request) { writeProblem(w, r, errRateLimited) })))
			r.Post("/signup", handler(a.signup))
			r.Post("/login", handler(a.login))
			r.Post("/refresh", handler(a.refresh))
		})

		// Stripe's calls: authenticated by their signature, not a session.
		r.Post("/billing/webhook", handler(a.stripeWebhook))

		// HTTP publish is a message, not a change of configuration: the
		// tenant's message quotas on its node meter it (429
		// quota-exceeded), as they do a device's PUBLISH, so it is outside
		// the account's write rate.
		r.Group(func(r chi.Router) {
			r.Use(a.authenticate, a.loadTenant)
			r.Post("/tenants/{tid}/publish", handler(a.publish))
		})

		r.Group(func(r chi.Router) {
			r.Use(a.authenticate, a.limitWrites)
			r.Post("/logout", handler(a.logout))
			r.Get("/account", handler(a.getAccount))
			r.Get("/api-keys", handler(a.listAPIKeys))
			r.Post("/api-keys", handler(a.createAPIKey))
			r.Delete("/api-keys/{id}", handler(a.revokeAPIKey))
			r.Get("/tenants", handler(a.listTenants))
			r.Post("/tenants", handler(a.createTenant))
			r.Get("/usage", handler(a.accountUsage))
			r.Get("/invoices", handler(a.listInvoices))
			r.Get("/invoices/{id}", handler(a.getInvoice("json")))
			r.Get("/invoices/{id}.csv", handler(a.getInvoice("csv")))
			r.Get("/invoices/{id}.html", handler(a.getInvoice("html")))
			r.Get("/invoices/{id}.pdf", handler(a.getInvoice("pdf")))
			r.Post("/billing/setup-intent", handler(a.setupIntent))
			r.Post("/billing/checkout-session", handler(a.checkoutSession))
			r.Get("/billing/budget", handler(a.getBudget))
			r.Put("/billing/budget", handler(a.putBudget))
			r.Delete("/billing/budget", handler(a.deleteBudget))
			r.Get("/billing/budget/webhook", handler(a.getBudgetWebhook))
			r.Put("/billing/budget/webhook", handler(a.putBudgetWebhook))
			r.Delete("/billing/budget/webhook", handler(a.deleteBudgetWebhook))

			r.Group(func(r chi.Router) {
				r.Use(a.loadTenant)
				r.Get("/tenants/{tid}", handler(a.getTenant))
				r.Patch("/tenants/{tid}", handler(a.updateTenant))
				r.Delete("/tenants/{tid}", handler(a.deleteTenant))

				r.Get("/tenants/{tid}/credentials", handler(a.listCredentials))
				r.Post("/tenants/{tid}/credentials", handler(a.createCredential))
				r.Get("/tenants/{tid}/credentials/{cid}", handler(a.getCredential))
				r.Delete("/tenants/{tid}/credentials/{cid}", handler(a.revokeCredential))
				r.Post("/tenants/{tid}/credentials/{cid}/token", handler(a.issueToken))
				r.Post("/tenants/{tid}/inspector-token", handler(a.inspectorToken))

				r.Get("/tenants/{tid}/quotas", handler(a.getQuotas))
				r.Put("/tenants/{tid}/quotas", handler(a.putQuotas))

				r.Get("/tenants/{tid}/topics", handler(a.listTopicRules))
				r.Post("/tenants/{tid}/topics", handler(a.createTopicRule))
				r.Patch("/tenants/{tid}/topics/{id}", handler(a.updateTopicRule))
				r.Delete("/tenants/{tid}/topics/{id}", handler(a.deleteTopicRule))

				r.Get("/tenants/{tid}/topics/live", handler(a.liveTopics))
				r.Get("/tenants/{tid}/retained", handler(a.listRetained))
				r.Delete("/tenants/{tid}/retained", handler(a.deleteRetained))
				r.Get("/tenants/{tid}/sessions", handler(a.listSessions))
				r.Delete("/tenants/{tid}/sessions/{clientid}", handler(a.kickSession))

				r.Get("/tenants/{tid}/usage", handler(a.usage))
				r.Get("/tenants/{tid}/latency", handler(a.latency))
				r.Get("/tenants/{tid}/traces", handler(a.listTraces))
				r.Get("/tenants/{tid}/traces/{trace_id}", handler(a.getTrace))
			})
		})
	})
	return r, nil
}

// MetricsHandler serves reg at /metrics, for the API's internal listener
// (cmd/api -metrics-listen), never the public router.
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

func (a *api) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 200 when Postgres answers within 2 s, else 503.
func (a *api) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := a.store.Ping(ctx); err != nil {
		loggerFrom(ctx).LogAttrs(ctx, slog.LevelWarn, "not ready", slog.Any("err", err))
		return writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "postgres": "unreachable"})
	}
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "postgres": "ok"})
}

func (a *api) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapi.Document())
}

func (a *api) jwks(w http.ResponseWriter, r *http.Request) error {
	set, err := a.keyring.JWKS(r.Context())
	if err != nil {
		return err
	}
	b, err := json.Marshal(set)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "public, max-age=60")
	_, _ = w.Write(b)
	return nil
}
