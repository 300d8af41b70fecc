package httpapi

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"berth.dev/billing/plan"
	"berth.dev/quotas"
	"berth.dev/services/internal/store"
)

// urlParam returns a path parameter, unescaped (chi matches on the raw
// path, so a client id holding "/" arrives as %2F).
func urlParam(r *http.Request, name string) string {
	raw := chi.URLParam(r, name)
	if s, err := url.PathUnescape(raw); err == nil {
		return s
	}
	return raw
}

type tenantJSON struct {
	ID        string        `json:"id"`
	Slug      string        `json:"slug"`
	Plan      string        `json:"plan"`
	Endpoint  string        `json:"endpoint"`
	Endpoints endpointsJSON `json:"endpoints"`
	NodeID    *string       `json:"node_id"`
	CreatedAt time.Time     `json:"created_at"`
	// TraceSampleRate is the share of messages traced on the message path.
	TraceSampleRate float64 `json:"trace_sample_rate"`
}

// endpointsJSON is where clients reach the gateway, one entry per
// listener; a listener the API was not told about (-mqtt-tls-addr,
// -mqtt-ws-url, -mqtt-wss-url left empty) is left out.
type endpointsJSON struct {
	MQTT  string `json:"mqtt,omitempty"`  // host:port, MQTT over TCP
	MQTTS string `json:"mqtts,omitempty"` // host:port, MQTT over TLS
	WS    string `json:"ws,omitempty"`    // ws:// URL, MQTT over WebSocket
	WSS   string `json:"wss,omitempty"`   // wss:// URL, MQTT over secure WebSocket
}

func (a *api) endpoint(slug string) string { return slug + "." + a.opts.Domain }

// SlugPlaceholder in the gateway addresses the API hands out (Options'
// MQTTAddr, MQTTTLSAddr, MQTTWSURL, MQTTWSSURL) stands for the tenant's
// slug: with the gateways' tenant DNS each tenant's devices dial
// <slug>.<domain>, which resolves to the host of the node leading it
// (docs/deploy.md, "Tenant endpoint DNS").
const SlugPlaceholder = "{slug}"

// forTenant is addr (one of the gateway addresses) for the tenant slug.
func forTenant(addr, slug string) string {
	return strings.ReplaceAll(addr, SlugPlaceholder, slug)
}

func (a *api) endpoints(slug string) endpointsJSON {
	return endpointsJSON{MQTT: forTenant(a.opts.MQTTAddr, slug), MQTTS: forTenant(a.opts.MQTTTLSAddr, slug),
		WS: forTenant(a.opts.MQTTWSURL, slug), WSS: forTenant(a.opts.MQTTWSSURL, slug)}
}

func (a *api) tenantOut(t store.Tenant) tenantJSON {
	return tenantJSON{ID: t.ID, Slug: t.Slug, Plan: t.Plan, Endpoint: a.endpoint(t.Slug), Endpoints: a.endpoints(t.Slug), NodeID: t.NodeID, CreatedAt: t.CreatedAt, TraceSampleRate: t.TraceSampleRate}
}

func (a *api) listTenants(w http.ResponseWriter, r *http.Request) error {
	p, err := parsePage(r)
	if err != nil {
		return err
	}
	ts, next, err := a.store.ListTenants(r.Context(), principalFrom(r.Context()).AccountID, p)
	if err != nil {
		return err
	}
	out := make([]tenantJSON, len(ts))
	for i, t := range ts {
		out[i] = a.tenantOut(t)
	}
	return writeJSON(w, http.StatusOK, newList(out, next))
}

type createTenantRequest struct {
	Slug string `json:"slug"`
	Plan string `json:"plan"`
}

// createTenant creates a tenant with its plan's default quotas, placed on
// the least-loaded live node (or none yet: placement is retried lazily).
// The plan must be one the account is entitled to (402), and the account
// must be below its tenant cap (403).
func (a *api) createTenant(w http.ResponseWriter, r *http.Request) error {
	var req createTenantRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	checkSlug(&v, "slug", req.Slug)
	if req.Plan == "" {
		req.Plan = "free"
	}
	p, err := plan.Lookup(req.Plan)
	if err != nil {
		v.add("plan", "must be one of "+strings.Join(plan.Names(), ", "))
	}
	if err := v.err(); err != nil {
		return err
	}
	accountID := principalFrom(r.Context()).AccountID
	if err := a.checkEntitled(r.Context(), accountID, p.Name); err != nil {
		return err
	}
	limit, err := a.tenantCap(r.Context(), accountID)
	if err != nil {
		return err
	}
	t := store.Tenant{ID: store.NewID(store.PrefixTenant), AccountID: accountID, Slug: req.Slug, Plan: p.Name}
	if err := a.store.CreateTenant(r.Context(), &t, p.Defaults, limit); err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/tenants/"+t.ID)
	return writeJSON(w, http.StatusCreated, a.tenantOut(t))
}

// tenantDetailJSON is GET /v1/tenants/{tid}'s answer: the tenant and its
// replicated placement (null when the tenant has none).
type tenantDetailJSON struct {
	tenantJSON
	Placement *placementJSON `json:"placement"`
}

// placementJSON is tenant_placement's row (docs/replication.md): the node
// leading the tenant's Raft group (null when that node's row is gone), the
// nodes holding a replica, and the epoch (the leader's Raft term).
type placementJSON struct {
	Leader    *string   `json:"leader"`
	Replicas  []string  `json:"replicas"`
	Epoch     int64     `json:"epoch"`
	UpdatedAt time.Time `json:"updated_at"`
}

// getTenant answers the tenant, placing it first if it has no node yet,
// with its replicated placement.
func (a *api) getTenant(w http.ResponseWriter, r *http.Request) error {
	t := tenantFrom(r.Context())
	if t.NodeID == nil {
		var err error
		if t, err = a.store.AssignNode(r.Context(), t.AccountID, t.ID); err != nil {
			return err
		}
	}
	out := tenantDetailJSON{tenantJSON: a.tenantOut(t)}
	p, err := a.store.TenantPlacement(r.Context(), t.ID)
	if err != nil {
		return err
	}
	if p != nil {
		out.Placement = &placementJSON{Leader: p.Leader, Replicas: p.Replicas, Epoch: p.Epoch, UpdatedAt: p.UpdatedAt}
		if out.Placement.Replicas == nil {
			out.Placement.Replicas = []string{}
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

type updateTenantRequest struct {
	Slug            *string  `json:"slug"`
	Plan            *string  `json:"plan"`
	TraceSampleRate *float64 `json:"trace_sample_rate"`
}

// updateTenant changes slug and/or plan. A new plan must be one the
// account is entitled to (402); the change clamps quotas into the new
// plan's bounds, so a downgrade lowers whatever is above them
// to the new plan's maxima and an upgrade changes no quota.
func (a *api) updateTenant(w http.ResponseWriter, r *http.Request) error {
	var req updateTenantRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	if req.Slug != nil {
		checkSlug(&v, "slug", *req.Slug)
	}
	if req.Plan != nil {
		if _, err := plan.Lookup(*req.Plan); err != nil {
			v.add("plan", "must be one of "+strings.Join(plan.Names(), ", "))
		}
	}
	if r := req.TraceSampleRate; r != nil && !(*r >= 0 && *r <= 1) {
		v.add("trace_sample_rate", "must be a number from 0 to 1")
	}
	if err := v.err(); err != nil {
		return err
	}
	t := tenantFrom(r.Context())
	if req.Plan != nil && *req.Plan != t.Plan {
		if err := a.checkEntitled(r.Context(), t.AccountID, *req.Plan); err != nil {
			return err
		}
	}
	t, err := a.store.UpdateTenant(r.Context(), t.AccountID, t.ID, store.TenantUpdate{Slug: req.Slug, Plan: req.Plan, TraceSampleRate: req.TraceSampleRate})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, a.tenantOut(t))
}

func (a *api) deleteTenant(w http.ResponseWriter, r *http.Request) error {
	t := tenantFrom(r.Context())
	if err := a.store.DeleteTenant(r.Context(), t.AccountID, t.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type quotasJSON struct {
	Plan      string        `json:"plan"`
	Quotas    quotas.Quotas `json:"quotas"`
	Max       quotas.Quotas `json:"max"`
	UpdatedAt time.Time     `json:"updated_at"`
}

func (a *api) getQuotas(w http.ResponseWriter, r *http.Request) error {
	t := tenantFrom(r.Context())
	p, err := plan.Lookup(t.Plan)
	if err != nil {
		return err
	}
	q, updated, err := a.store.Quotas(r.Context(), t.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, quotasJSON{Plan: p.Name, Quotas: q, Max: p.Max, UpdatedAt: updated})
}

// putQuotas sets quotas within the plan's bounds. The body is a quotas
// object; fields left out keep their current values. Nodes apply the
// change live (NOTIFY berth_quotas).
func (a *api) putQuotas(w http.ResponseWriter, r *http.Request) error {
	t := tenantFrom(r.Context())
	p, err := plan.Lookup(t.Plan)
	if err != nil {
		return err
	}
	q, _, err := a.store.Quotas(r.Context(), t.ID)
	if err != nil {
		return err
	}
	if err := decodeJSON(w, r, &q); err != nil { // decodes onto the current values
		return err
	}
	if err := p.Check(q); err != nil {
		return err
	}
	updated, err := a.store.SetQuotas(r.Context(), t.ID, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, quotasJSON{Plan: p.Name, Quotas: q, Max: p.Max, UpdatedAt: updated})
}
