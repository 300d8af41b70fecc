package httpapi

import (
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"berth.dev/services/internal/nodeclient"
	"berth.dev/services/internal/store"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// nodeAddr returns the admin address of the tenant's node, placing the
// tenant first if it has none; no live node is a 503 problem.
func (a *api) nodeAddr(r *http.Request) (string, error) {
	t := tenantFrom(r.Context())
	if t.NodeID == nil {
		var err error
		if t, err = a.store.AssignNode(r.Context(), t.AccountID, t.ID); err != nil {
			return "", err
		}
		if t.NodeID == nil {
			return "", &nodeUnavailableError{detail: "the tenant is not placed on a broker node yet (no live node has room); retry shortly"}
		}
	}
	n, err := a.store.TenantNode(r.Context(), t.ID)
	if errors.Is(err, store.ErrNotFound) {
		return "", &nodeUnavailableError{detail: "the tenant's broker node is gone; it will be placed again"}
	}
	if err != nil {
		return "", err
	}
	if !n.Live {
		return "", &nodeUnavailableError{detail: "the tenant's broker node " + n.ID + " has not sent a heartbeat recently"}
	}
	return n.AdminAddr, nil
}

func (a *api) liveTopics(w http.ResponseWriter, r *http.Request) error {
	addr, err := a.nodeAddr(r)
	if err != nil {
		return err
	}
	ts, err := a.nodes.Topics(r.Context(), addr, tenantFrom(r.Context()).ID)
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []nodeclient.Topic{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"items": ts})
}

// filterParam reads ?filter=, defaulting to def ("" makes it required).
func filterParam(r *http.Request, def string) (string, error) {
	f := r.URL.Query().Get("filter")
	if f == "" {
		if def == "" {
			return "", invalid("filter", "is required")
		}
		f = def
	}
	var v validator
	checkTopicFilter(&v, "filter", f)
	return f, v.err()
}

func (a *api) listRetained(w http.ResponseWriter, r *http.Request) error {
	filter, err := filterParam(r, "#")
	if err != nil {
		return err
	}
	addr, err := a.nodeAddr(r)
	if err != nil {
		return err
	}
	rs, err := a.nodes.Retained(r.Context(), addr, tenantFrom(r.Context()).ID, filter)
	if err != nil {
		return err
	}
	if rs == nil {
		rs = []nodeclient.Retained{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"items": rs})
}

// deleteRetained requires an explicit filter: deleting everything takes ?filter=%23.
func (a *api) deleteRetained(w http.ResponseWriter, r *http.Request) error {
	filter, err := filterParam(r, "")
	if err != nil {
		return err
	}
	addr, err := a.nodeAddr(r)
	if err != nil {
		return err
	}
	n, err := a.nodes.DeleteRetained(r.Context(), addr, tenantFrom(r.Context()).ID, filter)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]int64{"deleted": n})
}

type publishRequest struct {
	Topic          string            `json:"topic"`
	Payload        *string           `json:"payload"`
	PayloadBase64  *string           `json:"payload_base64"`
	QoS            int               `json:"qos"`
	Retain         bool              `json:"retain"`
	ContentType    string            `json:"content_type"`
	UserProperties map[string]string `json:"user_properties"`
}

func (a *api) publish(w http.ResponseWriter, r *http.Request) error {
	var req publishRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	if p := topicProblem(req.Topic, true); p != "" {
		v.add("topic", p)
	} else if strings.HasPrefix(req.Topic, "$") {
		v.add("topic", "must not start with $: such topics ($SYS/..., $berth/...) belong to the server")
	}
	v.check(req.QoS >= 0 && req.QoS <= 2, "qos", "must be 0, 1 or 2")
	v.check(req.Payload == nil || req.PayloadBase64 == nil, "payload_base64", "give payload or payload_base64, not both")
	if req.PayloadBase64 != nil {
		_, err := base64.StdEncoding.DecodeString(*req.PayloadBase64)
		v.check(err == nil, "payload_base64", "must be standard base64")
	}
	checkName(&v, "content_type", req.ContentType, false)
	v.check(len(req.UserProperties) <= 32, "user_properties", "at most 32 properties")
	if err := v.err(); err != nil {
		return err
	}
	addr, err := a.nodeAddr(r)
	if err != nil {
		return err
	}
	err = a.nodes.Publish(r.Context(), addr, tenantFrom(r.Context()).ID, nodeclient.Publish{
		Topic: req.Topic, Payload: req.Payload, PayloadBase64: req.PayloadBase64, QoS: req.QoS, Retain: req.Retain,
		ContentType: req.ContentType, UserProperties: req.UserProperties,
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, map[string]bool{"accepted": true})
}

// sessionPages: a tenant may hold many sessions, so its pages are larger.
var sessionPages = pageKind{def: 100, max: 1000, byID: true}

// listSessions pages through the tenant's sessions by client id,
// ascending: ?state=connected|offline (default both), ?prefix= (client
// ids starting with it), ?limit= and ?cursor=. The node answers its whole
// list (its admin API takes no filters); the API filters and pages it.
func (a *api) listSessions(w http.ResponseWriter, r *http.Request) error {
	var v validator
	p, err := parsePageOf(r, sessionPages)
	if verr := (*validationError)(nil); errors.As(err, &verr) {
		v.fields = verr.fields // reported together with state's
	}
	q := r.URL.Query()
	state, prefix := q.Get("state"), q.Get("prefix")
	v.check(state == "" || state == "connected" || state == "offline", "state", "must be connected or offline")
	if err := v.err(); err != nil {
		return err
	}
	addr, err := a.nodeAddr(r)
	if err != nil {
		return err
	}
	ss, err := a.nodes.Sessions(r.Context(), addr, tenantFrom(r.Context()).ID)
	if err != nil {
		return err
	}
	slices.SortFunc(ss, func(x, y nodeclient.Session) int { return strings.Compare(x.ClientID, y.ClientID) })
	from := prefix
	if p.After != nil && p.After.ID >= from {
		from = p.After.ID + "\x00" // the least string after the cursor
	}
	i, _ := slices.BinarySearchFunc(ss, from, func(s nodeclient.Session, id string) int { return strings.Compare(s.ClientID, id) })
	out := make([]nodeclient.Session, 0, min(p.Limit, len(ss)-i))
	var next *store.Cursor
	for _, s := range ss[i:] {
		if !strings.HasPrefix(s.ClientID, prefix) {
			break // sorted: past the prefix, nothing more matches
		}
		if (state == "connected" && !s.Connected) || (state == "offline" && s.Connected) {
			continue
		}
		if len(out) == p.Limit {
			next = &store.Cursor{ID: out[len(out)-1].ClientID}
			break
		}
		out = append(out, s)
	}
	return writeJSON(w, http.StatusOK, newList(out, next))
}

func (a *api) kickSession(w http.ResponseWriter, r *http.Request) error {
	addr, err := a.nodeAddr(r)
	if err != nil {
		return err
	}
	if err := a.nodes.KickSession(r.Context(), addr, tenantFrom(r.Context()).ID, urlParam(r, "clientid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
