package nodeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// RebalanceNode is one node in a rebalance's answer: its target share
// (replicas, leaderships) and what it announced last.
type RebalanceNode struct {
	ID          string `json:"id"`
	Zone        string `json:"zone,omitempty"`
	Replicas    int    `json:"replicas"`
	Leaderships int    `json:"leaderships"`
	Alive       bool   `json:"alive"`
	Following   bool   `json:"following"`
	Work        bool   `json:"work"`
}

// RebalanceReport is a node's answer to POST /admin/rebalance
// (docs/contracts.md).
type RebalanceReport struct {
	NodeID           string          `json:"node_id"`
	Balanced         bool            `json:"balanced"`
	Tenants          int             `json:"tenants"`
	Nodes            []RebalanceNode `json:"nodes"`
	LeadershipsMoved int64           `json:"leaderships_moved"`
	ReplicasMoved    int64           `json:"replicas_moved"`
	TookMS           int64           `json:"took_ms"`
}

// Rebalance asks the node at adminAddr to move the cluster's replicas and
// leaderships to their target spread and waits (the node bounds the wait
// by timeout, 0: its default). A cluster not balanced in time answers 503
// with the report: Balanced false, the report and no error. The Client's
// HTTP timeout must exceed timeout.
func (c *Client) Rebalance(ctx context.Context, adminAddr string, timeout time.Duration) (RebalanceReport, error) {
	base := adminAddr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimRight(base, "/") + "/admin/rebalance"
	if timeout > 0 {
		u += "?timeout=" + url.QueryEscape(timeout.String())
	}
	var rep RebalanceReport
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return rep, fmt.Errorf("nodeclient: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return rep, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rep, fmt.Errorf("%w: read: %v", ErrUnavailable, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusServiceUnavailable:
		if err := json.Unmarshal(data, &rep); err != nil || rep.NodeID == "" {
			return rep, fmt.Errorf("%w: POST %s answered %d", ErrUnavailable, u, resp.StatusCode)
		}
		return rep, nil
	case resp.StatusCode >= 500:
		return rep, fmt.Errorf("%w: POST %s answered %d", ErrUnavailable, u, resp.StatusCode)
	default:
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		if e.Error == "" {
			e.Error = http.StatusText(resp.StatusCode)
		}
		return rep, &StatusError{Status: resp.StatusCode, Message: e.Error}
	}
}
