package nodeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrUnavailable is returned when the node cannot be reached or fails.
var ErrUnavailable = errors.New("nodeclient: node unavailable")

// StatusError is a node's refusal of a request (a 4xx answer).
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nodeclient: node answered %d: %s", e.Status, e.Message)
}

// Client talks to nodes' admin APIs.
type Client struct {
	http  *http.Client
	token string
}

// New returns a Client sending token; hc nil means a client with a 10 s timeout.
func New(hc *http.Client, token string) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Client{http: hc, token: token}
}

// Session is a client session on a node.
type Session struct {
	ClientID        string     `json:"client_id"`
	Connected       bool       `json:"connected"`
	ProtocolVersion int        `json:"protocol_version"`
	RemoteAddr      string     `json:"remote_addr"`
	ConnectedAt     *time.Time `json:"connected_at"` // nil while offline
	Subscriptions   int        `json:"subscriptions"`
	QueuedMessages  int        `json:"queued_messages"`
	Inflight        int        `json:"inflight"`
	Dropped         uint64     `json:"dropped"`
}

// Topic is an active topic with its rates.
type Topic struct {
	Topic       string  `json:"topic"`
	Messages    int64   `json:"messages"`
	Bytes       int64   `json:"bytes"`
	MsgsPerSec  float64 `json:"msgs_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	Subscribers int     `json:"subscribers"`
}

// Retained is a retained message.
type Retained struct {
	Topic         string    `json:"topic"`
	PayloadBase64 string    `json:"payload_base64"`
	QoS           int       `json:"qos"`
	Size          int       `json:"size"`
	StoredAt      time.Time `json:"stored_at"`
}

// Publish is a message to publish through a node.
type Publish struct {
	Topic          string            `json:"topic"`
	Payload        *string           `json:"payload,omitempty"`
	PayloadBase64  *string           `json:"payload_base64,omitempty"`
	QoS            int               `json:"qos"`
	Retain         bool              `json:"retain"`
	ContentType    string            `json:"content_type,omitempty"`
	UserProperties map[string]string `json:"user_properties,omitempty"`
}

// adminURL is path on the admin API at adminAddr (host:port, or a base
// URL).
func adminURL(adminAddr, path string) string {
	base := adminAddr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return strings.TrimRight(base, "/") + path
}

func tenantURL(adminAddr, tid, suffix string) string {
	return adminURL(adminAddr, "/admin/tenants/"+url.PathEscape(tid)+suffix)
}

// send sends a request (body, when not nil, as JSON) and returns the
// answer's status and body, read up to limit bytes.
func (c *Client) send(ctx context.Context, method, u string, body any, limit int64) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("nodeclient: encode: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("nodeclient: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: read: %v", ErrUnavailable, err)
	}
	return resp.StatusCode, data, nil
}

// refusal is a 4xx answer as a StatusError: its "error", else the status
// text.
func refusal(status int, data []byte) *StatusError {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(data, &e)
	if e.Error == "" {
		e.Error = http.StatusText(status)
	}
	return &StatusError{Status: status, Message: e.Error}
}

// do sends a request and decodes a 2xx JSON answer into out (nil: ignore).
func (c *Client) do(ctx context.Context, method, u string, body, out any) error {
	status, data, err := c.send(ctx, method, u, body, 16<<20)
	if err != nil {
		return err
	}
	switch {
	case status >= 500:
		return fmt.Errorf("%w: %s %s answered %d", ErrUnavailable, method, u, status)
	case status >= 300:
		return refusal(status, data)
	}
	if out == nil || status == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: decode %s: %v", ErrUnavailable, u, err)
	}
	return nil
}

// await calls POST path[?timeout=] on the node at adminAddr, a call the
// node answers with its report once done (200) or at the timeout (503),
// and decodes the report into rep; a report without the node's id is the
// node failing.
func (c *Client) await(ctx context.Context, adminAddr, path string, timeout time.Duration, rep any) error {
	u := adminURL(adminAddr, path)
	if timeout > 0 {
		u += "?timeout=" + url.QueryEscape(timeout.String())
	}
	status, data, err := c.send(ctx, http.MethodPost, u, nil, 1<<20)
	if err != nil {
		return err
	}
	switch {
	case status == http.StatusOK || status == http.StatusServiceUnavailable:
		var id struct {
			NodeID string `json:"node_id"`
		}
		if json.Unmarshal(data, &id) != nil || id.NodeID == "" || json.Unmarshal(data, rep) != nil {
			return fmt.Errorf("%w: POST %s answered %d", ErrUnavailable, u, status)
		}
		return nil
	case status >= 500:
		return fmt.Errorf("%w: POST %s answered %d", ErrUnavailable, u, status)
	default:
		return refusal(status, data)
	}
}

// Sessions lists a tenant's sessions.
func (c *Client) Sessions(ctx context.Context, adminAddr, tid string) ([]Session, error) {
	var out struct {
		Sessions []Session `json:"sessions"`
	}
	err := c.do(ctx, http.MethodGet, tenantURL(adminAddr, tid, "/sessions"), nil, &out)
	return out.Sessions, err
}

// KickSession disconnects a client and ends its session.
func (c *Client) KickSession(ctx context.Context, adminAddr, tid, clientID string) error {
	return c.do(ctx, http.MethodDelete, tenantURL(adminAddr, tid, "/sessions/"+url.PathEscape(clientID)), nil, nil)
}

// Topics lists a tenant's active topics.
func (c *Client) Topics(ctx context.Context, adminAddr, tid string) ([]Topic, error) {
	var out struct {
		Topics []Topic `json:"topics"`
	}
	err := c.do(ctx, http.MethodGet, tenantURL(adminAddr, tid, "/topics"), nil, &out)
	return out.Topics, err
}

// Retained lists a tenant's retained messages matching filter.
func (c *Client) Retained(ctx context.Context, adminAddr, tid, filter string) ([]Retained, error) {
	var out struct {
		Retained []Retained `json:"retained"`
	}
	err := c.do(ctx, http.MethodGet, tenantURL(adminAddr, tid, "/retained?filter="+url.QueryEscape(filter)), nil, &out)
	return out.Retained, err
}

// DeleteRetained deletes a tenant's retained messages matching filter and
// returns how many went.
func (c *Client) DeleteRetained(ctx context.Context, adminAddr, tid, filter string) (int64, error) {
	var out struct {
		Deleted int64 `json:"deleted"`
	}
	err := c.do(ctx, http.MethodDelete, tenantURL(adminAddr, tid, "/retained?filter="+url.QueryEscape(filter)), nil, &out)
	return out.Deleted, err
}

// Publish publishes a message into a tenant.
func (c *Client) Publish(ctx context.Context, adminAddr, tid string, p Publish) error {
	return c.do(ctx, http.MethodPost, tenantURL(adminAddr, tid, "/publish"), p, nil)
}

// DrainReport is a node's answer to POST /admin/drain (docs/contracts.md).
type DrainReport struct {
	NodeID    string   `json:"node_id"`
	Drained   bool     `json:"drained"`
	Moved     int      `json:"moved"`
	Remaining []string `json:"remaining"`
	TookMS    int64    `json:"took_ms"`
}

// Drain asks the node at adminAddr to hand every tenant leadership it
// holds to another node and waits (the node bounds the wait by timeout, 0:
// its default). A node that could not move everything in time answers 503
// with its report: Drained false, the report and no error. The Client's
// HTTP timeout must exceed timeout.
func (c *Client) Drain(ctx context.Context, adminAddr string, timeout time.Duration) (DrainReport, error) {
	var rep DrainReport
	err := c.await(ctx, adminAddr, "/admin/drain", timeout, &rep)
	return rep, err
}
