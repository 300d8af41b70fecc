package nodeclient

import (
	"context"
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
	var rep RebalanceReport
	err := c.await(ctx, adminAddr, "/admin/rebalance", timeout, &rep)
	return rep, err
}
