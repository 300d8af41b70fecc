package node

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"berth.dev/broker/internal/quota"
	"berth.dev/broker/internal/shard"
	"berth.dev/broker/packet"
	"berth.dev/quotas"
)

// withTenant resolves {tid} to its shard, opening it if needed (a tenant
// placed on this node may have no connection yet).
func (n *Node) withTenant(h func(http.ResponseWriter, *http.Request, *tenant)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		t, err := n.tenant(ctx, r.PathValue("tid"))
		switch {
		case errors.Is(err, quota.ErrNoTenant):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such tenant"})
			return
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "tenant unavailable"})
			return
		}
		defer n.release(t)
		h(w, r, t)
	}
}

func filterParam(r *http.Request) string {
	if f := r.URL.Query().Get("filter"); f != "" {
		return f
	}
	return "#"
}

// publishRequest is the body of POST /publish.
type publishRequest struct {
	Topic          string            `json:"topic"`
	Payload        *string           `json:"payload"`
	PayloadBase64  *string           `json:"payload_base64"`
	QoS            byte              `json:"qos"`
	Retain         bool              `json:"retain"`
	ContentType    string            `json:"content_type"`
	UserProperties map[string]string `json:"user_properties"`
}

func (n *Node) handlePublish(w http.ResponseWriter, r *http.Request, t *tenant) {
	var req publishRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "malformed JSON body"})
		return
	}
	var payload []byte
	switch {
	case req.Payload != nil && req.PayloadBase64 != nil:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "give payload or payload_base64, not both"})
		return
	case req.PayloadBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*req.PayloadBase64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "payload_base64 is not base64"})
			return
		}
		payload = b
	case req.Payload != nil:
		payload = []byte(*req.Payload)
	}
	var props packet.Properties
	if req.ContentType != "" {
		props.ContentType = []byte(req.ContentType)
	}
	for k, v := range req.UserProperties {
		props.UserProperties = append(props.UserProperties, packet.UserProperty{Key: []byte(k), Value: []byte(v)})
	}
	// The same admission as a device's PUBLISH (the ACL aside: the API
	// has checked the caller).
	l := &httpLimiter{tenantAdmission: tenantAdmission{t.limits}}
	_, err := t.sh.PublishLimited(req.Topic, payload, req.QoS, req.Retain, props, l)
	if rr := (*shard.RuleRefusal)(nil); errors.As(err, &rr) {
		writeRuleRefusal(w, rr) // topicrules.go
		return
	}
	switch {
	case err == nil:
		writeJSON(w, http.StatusAccepted, map[string]bool{"accepted": true})
	case errors.Is(err, packet.ErrPacketTooLarge):
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": l.refusal, "quota": l.quota})
	case errors.Is(err, packet.ErrQuotaExceeded):
		if l.quota == "rate" {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": l.refusal, "quota": l.quota})
	case errors.Is(err, shard.ErrRetainedQuota):
		writeJSON(w, http.StatusTooManyRequests, map[string]string{
			"error": "the tenant's retained messages quota (max_retained_messages or max_retained_bytes) is reached; delete retained messages or publish without retain",
			"quota": "retained"})
	case errors.Is(err, shard.ErrInvalidTopic):
		// The API checks first; this answer is for whoever did not.
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "topic: must be a topic name (no + or #) that does not start with $"})
	case errors.Is(err, packet.ErrQoSNotSupported):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "qos: must be 0, 1 or 2"})
	default:
		// Said for users (the API passes it on): the reason code, never
		// the Go error's package-prefixed text.
		msg := "the broker refused the message"
		if code := packet.ReasonCode(0); errors.As(err, &code) {
			msg = fmt.Sprintf("the broker refused the message with MQTT reason code %#02x", byte(code))
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
	}
}

// adminHandler serves the internal admin API (docs/contracts.md). Every
// request must carry the node token but the probes, /healthz and /readyz.
func (n *Node) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "node_id": n.cfg.ID})
	})
	mux.HandleFunc("GET /readyz", n.handleReadyz) // readyz.go
	mux.HandleFunc("GET /admin/tenants/{tid}/usage", n.withTenant(n.handleUsage))
	mux.HandleFunc("GET /admin/tenants/{tid}/sessions", n.withTenant(func(w http.ResponseWriter, _ *http.Request, t *tenant) {
		writeJSON(w, http.StatusOK, map[string]any{"sessions": t.sh.Sessions()})
	}))
	mux.HandleFunc("DELETE /admin/tenants/{tid}/sessions/{client_id}", n.withTenant(func(w http.ResponseWriter, r *http.Request, t *tenant) {
		if err := t.sh.Kick(r.PathValue("client_id"), true); errors.Is(err, shard.ErrNoSession) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "the tenant has no session with this client id; GET /v1/tenants/{tid}/sessions (berthctl sessions) lists them"})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("GET /admin/tenants/{tid}/topics", n.withTenant(func(w http.ResponseWriter, _ *http.Request, t *tenant) {
		writeJSON(w, http.StatusOK, map[string]any{"topics": t.sh.Topics()})
	}))
	mux.HandleFunc("GET /admin/tenants/{tid}/retained", n.withTenant(func(w http.ResponseWriter, r *http.Request, t *tenant) {
		msgs, err := t.sh.RetainedMessages(filterParam(r))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid topic filter"})
			return
		}
		if msgs == nil {
			msgs = []shard.RetainedInfo{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"retained": msgs})
	}))
	mux.HandleFunc("DELETE /admin/tenants/{tid}/retained", n.withTenant(func(w http.ResponseWriter, r *http.Request, t *tenant) {
		k, err := t.sh.DeleteRetained(filterParam(r))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid topic filter"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"deleted": k})
	}))
	mux.HandleFunc("POST /admin/tenants/{tid}/publish", n.withTenant(n.handlePublish))
	mux.Handle("GET /metrics", n.metricsHandler())
	mux.HandleFunc("POST /admin/drain", n.handleDrain) // drain.go
	mux.HandleFunc("DELETE /admin/drain", n.handleUndrain)
	mux.HandleFunc("POST /admin/rebalance", n.handleRebalance) // rebalancehttp.go
	mux.HandleFunc("DELETE /admin/rebalance", n.handleRebalanceAbort)
	return n.requireToken(mux)
}

func (n *Node) requireToken(next http.Handler) http.Handler {
	want := []byte("Bearer " + n.cfg.NodeToken)
	var prev []byte // the previous token, accepted during a rotation
	if n.cfg.NodeTokenPrevious != "" {
		prev = []byte("Bearer " + n.cfg.NodeTokenPrevious)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" { // probes: no token, no tenant data
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 && (prev == nil || subtle.ConstantTimeCompare(got, prev) != 1) {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong node token"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// usageJSON is the answer of GET /usage (docs/contracts.md): the tenant's
// meters since its shard (re)opened on this node (flushed deltas are in
// Postgres), and three gauges.
type usageJSON struct {
	MessagesIn        uint64            `json:"messages_in"`
	MessagesAccepted  uint64            `json:"messages_accepted"`
	MessagesOut       uint64            `json:"messages_out"`
	BytesIn           uint64            `json:"bytes_in"`
	BytesOut          uint64            `json:"bytes_out"`
	ConnectionSeconds float64           `json:"connection_seconds"`
	StoredBytes       int64             `json:"stored_bytes"`
	Drops             map[string]uint64 `json:"drops"`
	Connections       int64             `json:"connections"`
	Sessions          int               `json:"sessions"`
	Retained          int               `json:"retained"`
}

// handleUsage answers the tenant's usage on this node.
func (n *Node) handleUsage(w http.ResponseWriter, _ *http.Request, t *tenant) {
	s := t.sh.Stats()
	drops := make(map[string]uint64, len(s.Dropped))
	for k, v := range s.Dropped {
		drops[strings.ToLower(k)] = v
	}
	writeJSON(w, http.StatusOK, usageJSON{
		MessagesIn: s.MessagesIn, MessagesAccepted: s.MessagesAccepted, MessagesOut: s.MessagesOut, BytesIn: s.BytesIn, BytesOut: s.BytesOut,
		ConnectionSeconds: t.connectionTime(time.Now()).Seconds(),
		StoredBytes:       t.storedBytes(),
		Drops:             drops,
		Connections:       s.ClientsConnected, Sessions: s.Sessions, Retained: s.Retained,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// applyQuotas is called when a tenant's quotas change in Postgres.
func (n *Node) applyQuotas(tenantID string, q quotas.Quotas) {
	t, ok := n.lookup(tenantID)
	if !ok {
		return
	}
	t.limits.set(q)
	t.traces.SetRate(n.quotas.TraceSampleRate(tenantID))
	t.sh.SetLimits(int(q.MaxInflight), int(q.MaxQueuedBytes)) // live sessions follow
	t.sh.SetSessionCaps(sessionCaps(q))                       // new sessions, expiry intervals
	t.sh.SetMaxPacketSize(maxPacketSize(q))                   // the next packet each connection reads
	t.sh.SetRetention(retention(q))                           // applied at the next checkpoint
	n.log.Info("quotas updated", "tenant_id", t.id, "max_message_size", q.MaxMessageSize, "max_msgs_per_sec", q.MaxMsgsPerSec,
		"retention_bytes", q.RetentionBytes, "retention_seconds", q.RetentionSeconds)
}
