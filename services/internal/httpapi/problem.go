package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
	"berth.dev/services/internal/account"
	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/nodeclient"
	"berth.dev/services/internal/store"
)

const problemBase = "https://berth.dev/problems/"

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail,omitempty"`
	RequestID string       `json:"request_id,omitempty"`
	Errors    []FieldError `json:"errors,omitempty"`
}

// FieldError says why one input field was refused.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// validationError collects field errors (422).
type validationError struct {
	fields []FieldError
}

func (e *validationError) Error() string {
	return fmt.Sprintf("httpapi: invalid input: %v", e.fields)
}

// validator gathers field errors; err returns nil when there are none.
type validator struct {
	fields []FieldError
}

func (v *validator) add(field, reason string) {
	v.fields = append(v.fields, FieldError{Field: field, Reason: reason})
}

func (v *validator) check(ok bool, field, reason string) {
	if !ok {
		v.add(field, reason)
	}
}

func (v *validator) err() error {
	if len(v.fields) == 0 {
		return nil
	}
	return &validationError{fields: v.fields}
}

func invalid(field, reason string) error {
	return &validationError{fields: []FieldError{{field, reason}}}
}

// malformedError is a request that could not be parsed (400).
type malformedError struct{ detail string }

func (e *malformedError) Error() string { return "httpapi: malformed request: " + e.detail }

// nodeUnavailableError is a live view whose tenant has no live node (503).
type nodeUnavailableError struct{ detail string }

func (e *nodeUnavailableError) Error() string { return "httpapi: node unavailable: " + e.detail }

// routeError is a path no route matches (404), or a method the matching
// path does not take (405, method set).
type routeError struct{ method, path string }

func (e *routeError) Error() string {
	if e.method != "" {
		return "httpapi: " + e.path + " does not take " + e.method
	}
	return "httpapi: no route " + e.path
}

// fieldsDetail is a validation problem's detail: each field with its
// reason, so a client that shows only the detail still names them.
func fieldsDetail(fs []FieldError) string {
	const shown = 5
	var b strings.Builder
	for i, f := range fs {
		if i == shown {
			fmt.Fprintf(&b, "; and %d more (see errors)", len(fs)-shown)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Field + ": " + f.Reason)
	}
	return b.String()
}

var (
	errUnsupportedMedia = errors.New("httpapi: body must be application/json")
	errRateLimited      = errors.New("httpapi: rate limited")
	errNeedSession      = errors.New("httpapi: a dashboard session is required")
)

// problemFor maps an error to its problem document. It is the only place
// that decides statuses.
func problemFor(err error) Problem {
	var (
		verr     *validationError
		merr     *malformedError
		tooBig   *http.MaxBytesError
		conflict *store.ConflictError
		bound    *quotas.BoundError
		nodeDown *nodeUnavailableError
		nodeErr  *nodeclient.StatusError
		entitled *notEntitledError
		tenants  *store.TenantLimitError
		writes   *writeRateError
		planDown *store.PlanBoundsError
		route    *routeError
	)
	p := func(status int, slug, title, detail string) Problem {
		return Problem{Type: problemBase + slug, Title: title, Status: status, Detail: detail}
	}
	if pr, ok := paymentProblem(err); ok {
		return pr
	}
	switch {
	case errors.As(err, &verr):
		pr := p(http.StatusUnprocessableEntity, "validation", "Invalid input", fieldsDetail(verr.fields))
		pr.Errors = verr.fields
		return pr
	case errors.As(err, &planDown):
		b := planDown.Bound
		pr := p(http.StatusConflict, "plan-change-refused", "A quota is above the new plan's bound",
			fmt.Sprintf("%s is %d, above the %s plan's %d: lower it (PUT /v1/tenants/{tid}/quotas) before moving to %s", b.Field, b.Value, planDown.Plan, b.Max, planDown.Plan))
		pr.Errors = []FieldError{{Field: b.Field, Reason: fmt.Sprintf("must be at most %d on the %s plan", b.Max, planDown.Plan)}}
		return pr
	case errors.As(err, &bound):
		pr := p(http.StatusUnprocessableEntity, "quota-out-of-bounds", "Quota outside the plan's bounds",
			fmt.Sprintf("%s = %d is outside this plan's bounds [%d, %d]", bound.Field, bound.Value, bound.Min, bound.Max))
		pr.Errors = []FieldError{{Field: bound.Field, Reason: fmt.Sprintf("must be between %d and %d on this plan", bound.Min, bound.Max)}}
		return pr
	case errors.Is(err, plan.ErrUnknown):
		pr := p(http.StatusUnprocessableEntity, "validation", "Invalid input", "unknown plan")
		pr.Errors = []FieldError{{Field: "plan", Reason: fmt.Sprintf("must be one of %v", plan.Names())}}
		return pr
	case errors.As(err, &entitled):
		pr := p(http.StatusPaymentRequired, "plan-not-entitled", "Plan not available to this account",
			fmt.Sprintf("this account is not entitled to the %q plan; it may use: %s", entitled.plan, strings.Join(entitled.entitled, ", ")))
		pr.Errors = []FieldError{{Field: "plan", Reason: "the account is not entitled to this plan"}}
		return pr
	case errors.As(err, &tenants):
		return p(http.StatusForbidden, "tenant-limit", "Tenant limit reached",
			fmt.Sprintf("this account already has %d tenants, the most its plans allow; delete one first", tenants.Limit))
	case errors.As(err, &writes):
		return p(http.StatusTooManyRequests, "rate-limited", "Too many requests",
			fmt.Sprintf("this account's writes (all its API keys and sessions) are limited to %g a second, in bursts of up to %d; retry after the time in Retry-After",
				writes.rate, writes.burst))
	case errors.As(err, &merr):
		return p(http.StatusBadRequest, "malformed", "Malformed request", merr.detail)
	case errors.As(err, &tooBig):
		return p(http.StatusRequestEntityTooLarge, "too-large", "Request body too large", fmt.Sprintf("the limit is %d bytes", tooBig.Limit))
	case errors.Is(err, errUnsupportedMedia):
		return p(http.StatusUnsupportedMediaType, "unsupported-media-type", "Unsupported media type", "send Content-Type: application/json")
	case errors.Is(err, account.ErrBadCredentials):
		return p(http.StatusUnauthorized, "bad-credentials", "Wrong email or password",
			"no account has this email and password; passwords are case-sensitive (sign up with POST /v1/signup)")
	case errors.Is(err, account.ErrUnauthenticated):
		return p(http.StatusUnauthorized, "unauthenticated", "Authentication required",
			"send Authorization: Bearer <session token or API key>; sessions expire and are renewed with POST /v1/refresh")
	case errors.Is(err, errNeedSession):
		return p(http.StatusBadRequest, "session-required", "A dashboard session is required", "this request ends a session; it was authenticated with an API key")
	case errors.Is(err, store.ErrNotFound):
		// One text for whatever is missing, so an id of another account
		// is answered as one that does not exist.
		return p(http.StatusNotFound, "not-found", "Not found",
			"this account has nothing with the id in this path; the listings (GET without the last id) give the ids")
	case errors.As(err, &route):
		path := route.path
		if len(path) > 100 {
			path = path[:100] + "…"
		}
		if route.method != "" {
			return p(http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
				fmt.Sprintf("%s does not take %s; /v1/openapi.json lists each path's methods", path, route.method))
		}
		return p(http.StatusNotFound, "not-found", "Not found", "no API route "+path+"; /v1/openapi.json lists them")
	case errors.As(err, &conflict):
		detail, reason := conflict.Field+" is already taken", "already taken"
		if conflict.HeldBy != "" {
			detail, reason = conflict.Field+" is already taken by "+conflict.HeldBy, "already taken by "+conflict.HeldBy
		}
		pr := p(http.StatusConflict, "conflict", "Already exists", detail)
		pr.Errors = []FieldError{{Field: conflict.Field, Reason: reason}}
		return pr
	case errors.Is(err, store.ErrRevoked):
		return p(http.StatusConflict, "credential-revoked", "Credential revoked", "a revoked credential gets no new tokens; create a new credential")
	case errors.Is(err, errCredentialExpired):
		return p(http.StatusConflict, "credential-expired", "Credential expired", "an expired credential gets no new tokens; create a new credential")
	case errors.Is(err, errInspectorCredential):
		return p(http.StatusConflict, "inspector-credential", "Inspector credential",
			"an inspector credential gets short-lived tokens only from POST /v1/tenants/{tid}/inspector-token")
	case errors.Is(err, account.ErrBusy):
		return p(http.StatusServiceUnavailable, "busy", "Server busy", "too many password checks in progress; retry after the time in Retry-After")
	case errors.Is(err, errRateLimited):
		return p(http.StatusTooManyRequests, "rate-limited", "Too many requests", "retry after the time in Retry-After")
	case errors.As(err, &nodeDown):
		return p(http.StatusServiceUnavailable, "node-unavailable", "Tenant node unavailable", nodeDown.detail)
	case errors.Is(err, nodeclient.ErrUnavailable):
		return p(http.StatusServiceUnavailable, "node-unavailable", "Tenant node unavailable", "the tenant's broker node did not answer; retry shortly")
	case errors.As(err, &nodeErr):
		switch nodeErr.Status {
		case http.StatusNotFound:
			return p(http.StatusNotFound, "not-found", "Not found", nodeErr.Message)
		case http.StatusBadRequest:
			return p(http.StatusUnprocessableEntity, "validation", "Refused by the broker", nodeErr.Message)
		case http.StatusRequestEntityTooLarge:
			return p(http.StatusRequestEntityTooLarge, "too-large", "Message too large", nodeErr.Message)
		case http.StatusTooManyRequests: // a quota: rate, monthly messages or retained messages
			return p(http.StatusTooManyRequests, "quota-exceeded", "Quota exceeded", nodeErr.Message)
		case http.StatusUnprocessableEntity: // a topic rule refusing RETAIN
			return p(http.StatusUnprocessableEntity, "retain-not-allowed", "Retained messages not allowed on this topic", nodeErr.Message)
		}
		return p(http.StatusBadGateway, "node-error", "The tenant's broker node refused the request", nodeErr.Message)
	case errors.Is(err, credential.ErrKeyEncryption):
		return p(http.StatusInternalServerError, "internal", "Internal error", "signing keys are unavailable")
	case databaseUnavailable(err):
		return p(http.StatusServiceUnavailable, "database-unavailable", "Service temporarily unavailable",
			"the API cannot reach its database; retry after the time in Retry-After")
	}
	return p(http.StatusInternalServerError, "internal", "Internal error", "")
}

// statusClientClosedRequest is nginx's 499: the client closed the
// connection before the answer, so the request ended without one.
const statusClientClosedRequest = 499

// writeProblem writes err as a problem document and logs server errors.
func writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client left (a browser changing pages) before the answer was
		// ready: nobody reads it, and it is not a server error.
		loggerFrom(r.Context()).LogAttrs(context.WithoutCancel(r.Context()), slog.LevelDebug, "client went away", slog.Any("err", err))
		w.WriteHeader(statusClientClosedRequest)
		return
	}
	pr := problemFor(err)
	pr.RequestID = requestIDFrom(r.Context())
	log := loggerFrom(r.Context())
	if pr.Status >= 500 {
		log.LogAttrs(r.Context(), slog.LevelError, "request failed", slog.Int("status", pr.Status), slog.Any("err", err))
	} else {
		log.LogAttrs(r.Context(), slog.LevelDebug, "request refused", slog.Int("status", pr.Status), slog.Any("err", err))
	}
	if errors.Is(err, account.ErrBusy) {
		w.Header().Set("Retry-After", "1")
	}
	if pr.Type == problemBase+"database-unavailable" {
		w.Header().Set("Retry-After", "2")
	}
	if wr := (*writeRateError)(nil); errors.As(err, &wr) {
		w.Header().Set("Retry-After", wr.retryAfterSeconds())
	}
	if pr.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="berth"`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(pr.Status)
	_ = json.NewEncoder(w).Encode(pr)
}

// handler adapts a handler that returns an error.
func handler(fn func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			writeProblem(w, r, err)
		}
	}
}

// writeJSON writes v with status. It encodes before writing anything, so
// an encoding error still becomes a problem answer; a failed write (the
// client went away) is not an error of the handler.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("httpapi: encode answer: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return nil
}
