package node

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"berth.dev/billing/plan"
)

// adminHandler serves the internal admin API (docs/contracts.md). Every
// request must carry the node token.
func (n *Node) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "node_id": n.cfg.ID})
	})
	mux.HandleFunc("GET /admin/tenants/{tid}/usage", n.handleUsage)
	return n.requireToken(mux)
}

func (n *Node) requireToken(next http.Handler) http.Handler {
	want := []byte("Bearer " + n.cfg.NodeToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong node token"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// handleUsage answers the tenant's counters since its shard opened on this
// node (flushed deltas are in Postgres).
func (n *Node) handleUsage(w http.ResponseWriter, r *http.Request) {
	t, ok := n.lookup(r.PathValue("tid"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "tenant not open on this node"})
		return
	}
	s := t.sh.Stats()
	drops := make(map[string]uint64, len(s.Dropped))
	for k, v := range s.Dropped {
		drops[strings.ToLower(k)] = v
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"messages_in":  s.MessagesIn,
		"messages_out": s.MessagesOut,
		"bytes_in":     s.BytesIn,
		"bytes_out":    s.BytesOut,
		"connections":  s.ClientsConnected,
		"sessions":     s.Sessions,
		"retained":     s.Retained,
		"drops":        drops,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// applyQuotas is called when a tenant's quotas change in Postgres.
func (n *Node) applyQuotas(tenantID string, q plan.Quotas) {
	t, ok := n.lookup(tenantID)
	if !ok {
		return
	}
	n.log.Info("quotas updated", "tenant_id", t.id, "max_message_size", q.MaxMessageSize, "max_msgs_per_sec", q.MaxMsgsPerSec)
}
