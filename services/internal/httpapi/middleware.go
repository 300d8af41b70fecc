package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/services/internal/account"
	"berth.dev/services/internal/store"
)

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyLogger
	keyPrincipal
	keyTenant
)

func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(keyRequestID).(string)
	return id
}

func loggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(keyLogger).(*slog.Logger); ok {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

func principalFrom(ctx context.Context) account.Principal {
	p, _ := ctx.Value(keyPrincipal).(account.Principal)
	return p
}

func tenantFrom(ctx context.Context) store.Tenant {
	t, _ := ctx.Value(keyTenant).(store.Tenant)
	return t
}

// incomingRequestID accepts a caller's X-Request-Id only when it is short
// and plain, so it cannot forge log lines.
var incomingRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// requestID gives every request an id (the caller's X-Request-Id when
// sane), echoes it in the response and puts a logger carrying it in the
// context.
func requestID(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get("X-Request-Id")
			if !incomingRequestID.MatchString(id) {
				var b [12]byte
				_, _ = rand.Read(b[:])
				id = hex.EncodeToString(b[:])
			}
			w.Header().Set("X-Request-Id", id)
			ctx := context.WithValue(r.Context(), keyRequestID, id)
			ctx = context.WithValue(ctx, keyLogger, log.With(slog.String("request_id", id)))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// metrics holds the request instruments.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_api_requests_total", Help: "HTTP requests by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "berth_api_request_duration_seconds", Help: "HTTP request latency by method and route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpapi: register metrics: %w", err)
		}
	}
	return m, nil
}

// observe logs each request and records its metrics by route pattern (not
// raw path, so ids do not explode the label space).
func (m *metrics) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		d := time.Since(start)
		m.requests.WithLabelValues(r.Method, route, strconv.Itoa(status)).Inc()
		m.latency.WithLabelValues(r.Method, route).Observe(d.Seconds())
		loggerFrom(r.Context()).LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("method", r.Method), slog.String("route", route), slog.Int("status", status),
			slog.Duration("duration", d), slog.Int("bytes", ww.BytesWritten()))
	})
}

// recoverer turns a handler panic into a 500 problem.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				writeProblem(w, r, fmt.Errorf("httpapi: panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// bodyLimit refuses declared-oversized bodies at once and caps the rest.
func bodyLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBody {
			writeProblem(w, r, &http.MaxBytesError{Limit: maxBody})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		next.ServeHTTP(w, r)
	})
}

// cors allows the dashboard origin (and only it) to call the API with
// credentials; preflights are answered here.
func cors(origin string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := r.Header.Get("Origin")
			if origin == "" || got == "" {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Add("Vary", "Origin")
			if got != strings.TrimRight(origin, "/") {
				next.ServeHTTP(w, r) // no CORS headers: the browser refuses
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", got)
			h.Set("Access-Control-Allow-Credentials", "true")
			h.Set("Access-Control-Expose-Headers", "X-Request-Id, Location, Retry-After")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Cookie names.
const (
	cookieSession = "berth_session"
	cookieRefresh = "berth_refresh"
)

// bearer returns the request's token: the Authorization header, else the
// session cookie.
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(token)
		}
		return ""
	}
	if c, err := r.Cookie(cookieSession); err == nil {
		return c.Value
	}
	return ""
}

// authenticate requires a valid session token or API key.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.accounts.Authenticate(r.Context(), bearer(r))
		if err != nil {
			writeProblem(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), keyPrincipal, p)
		ctx = context.WithValue(ctx, keyLogger, loggerFrom(ctx).With(slog.String("account_id", p.AccountID)))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// loadTenant resolves {tid} within the caller's account; anything else is 404.
func (a *api) loadTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := a.store.GetTenant(r.Context(), principalFrom(r.Context()).AccountID, chi.URLParam(r, "tid"))
		if err != nil {
			writeProblem(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), keyTenant, t)
		ctx = context.WithValue(ctx, keyLogger, loggerFrom(ctx).With(slog.String("tenant_id", t.ID)))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
