package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/broker/internal/replica"
)

// Raft metrics on the node's /metrics (docs/operations.md, "Replication
// alerts"): read from the groups and the peer transport at scrape time.
// Every series is node-wide (labels: role, reason), so their number does
// not grow with the tenants; a node without -peers has none of them but
// berth_node_ready.

var (
	descRaftGroups    = prometheus.NewDesc("berth_raft_groups", "Tenant Raft groups open on the node, by this node's role in each (leader, follower, learner; none: joining or removed, not cleaned up yet).", []string{"role"}, nil)
	descRaftNoLeader  = prometheus.NewDesc("berth_raft_groups_without_leader", "Tenant Raft groups open on the node in which this node knows no leader (an election runs, or quorum is lost).", nil, nil)
	descRaftLag       = prometheus.NewDesc("berth_raft_follower_lag_entries", "Largest number of committed entries a follower lacks, over the groups this node leads (the leader's commit index minus the follower's match; a dead follower's grows with every commit).", nil, nil)
	descRaftApplyLag  = prometheus.NewDesc("berth_raft_apply_lag_entries", "Largest number of committed entries this node has yet to apply, over its groups.", nil, nil)
	descRaftPending   = prometheus.NewDesc("berth_raft_proposals_pending", "Proposals waiting for their commit, all groups.", nil, nil)
	descRaftSnapshots = prometheus.NewDesc("berth_raft_snapshots_total", "Snapshot streams: sent to followers, received whole, installed into a tenant's store.", []string{"direction"}, nil)
	descRaftMsgs      = prometheus.NewDesc("berth_raft_transport_messages_total", "Frames on the peer transport (raft messages, liveness, snapshot chunks).", []string{"direction"}, nil)
	descRaftBytes     = prometheus.NewDesc("berth_raft_transport_bytes_total", "Bytes of frames on the peer transport (header, body and MAC).", []string{"direction"}, nil)
	descRaftDropped   = prometheus.NewDesc("berth_raft_transport_dropped_total", "Outbound peer frames dropped: the peer's queue full (frames or bytes), or the peer unknown or cut off.", nil, nil)
	descRaftRefused   = prometheus.NewDesc("berth_raft_transport_refused_total", "Peer connections or frames refused: a failed handshake (auth), a frame whose MAC did not verify (mac), a verified frame whose content was refused (message).", []string{"reason"}, nil)
	descRaftCopyErrs  = prometheus.NewDesc("berth_raft_removed_copy_errors_total", "Deletions of a removed replica's copy (its raft log, its tenant's store) that failed; such a group stays removed here, and is not reopened when its leader adds the node back, until one succeeds.", nil, nil)
	descNodeReady     = prometheus.NewDesc("berth_node_ready", "1 when GET /readyz answers 200 (every group held here caught up with its leader), else 0.", nil, nil)
)

// raftCollector reads the node's replication at scrape time.
type raftCollector struct{ n *Node }

func (c raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftGroups, descRaftNoLeader, descRaftLag, descRaftApplyLag, descRaftPending,
		descRaftSnapshots, descRaftMsgs, descRaftBytes, descRaftDropped, descRaftRefused, descRaftCopyErrs, descNodeReady} {
		ch <- d
	}
}

func (c raftCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	n.mu.Lock()
	closing, r := n.closing, n.repl
	n.mu.Unlock()
	ready := !closing && (len(n.cfg.Peers) == 0 || r != nil)
	if r == nil {
		ch <- prometheus.MustNewConstMetric(descNodeReady, prometheus.GaugeValue, b2f(ready))
		return
	}
	_, behind, _, _ := r.readiness()
	ch <- prometheus.MustNewConstMetric(descNodeReady, prometheus.GaugeValue, b2f(ready && behind == 0))

	var roles [4]int
	var noLeader, pending int
	var lag, applyLag uint64
	for _, rg := range r.groupList(nil) {
		s := rg.g.Status()
		roles[s.Role]++
		if s.Leader == 0 && s.Role != replica.RoleNone {
			noLeader++
		}
		pending += s.Pending
		lag, applyLag = max(lag, s.FollowerLag), max(applyLag, s.ApplyLag)
	}
	for role, name := range map[replica.Role]string{replica.RoleLeader: "leader", replica.RoleFollower: "follower", replica.RoleLearner: "learner", replica.RoleNone: "none"} {
		ch <- prometheus.MustNewConstMetric(descRaftGroups, prometheus.GaugeValue, float64(roles[role]), name)
	}
	ch <- prometheus.MustNewConstMetric(descRaftNoLeader, prometheus.GaugeValue, float64(noLeader))
	ch <- prometheus.MustNewConstMetric(descRaftLag, prometheus.GaugeValue, float64(lag))
	ch <- prometheus.MustNewConstMetric(descRaftApplyLag, prometheus.GaugeValue, float64(applyLag))
	ch <- prometheus.MustNewConstMetric(descRaftPending, prometheus.GaugeValue, float64(pending))

	st := r.host.Stats()
	counter := func(d *prometheus.Desc, v uint64, label ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label...)
	}
	counter(descRaftSnapshots, st.SnapshotsSent, "sent")
	counter(descRaftSnapshots, st.SnapshotsReceived, "received")
	counter(descRaftSnapshots, st.SnapshotsInstalled, "installed")
	counter(descRaftMsgs, st.FramesOut, "sent")
	counter(descRaftMsgs, st.FramesIn, "received")
	counter(descRaftBytes, st.BytesOut, "sent")
	counter(descRaftBytes, st.BytesIn, "received")
	counter(descRaftDropped, st.Dropped)
	counter(descRaftRefused, st.AuthFailures, "auth")
	counter(descRaftRefused, st.MACFailures, "mac")
	counter(descRaftRefused, st.BadMessages, "message")
	counter(descRaftCopyErrs, r.copyErrors.Load())
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
