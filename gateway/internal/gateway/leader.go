package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"time"

	"berth.dev/broker/packet"
	"berth.dev/gateway/internal/route"
)

// A replicated tenant is served by its Raft leader only (docs/replication.md).
// A node that does not lead the tenant answers an MQTT 5 CONNECT with CONNACK
// 0x9C (Use another server) or 0x9D (Server moved). The device must not see
// that: the gateway is the server it should use. The gateway reads the
// tenant's route again (Refresh: the placement's NOTIFY may not have
// arrived yet) and sends the CONNECT to the leader it names, at most
// maxLeaderRetries times and within the connect deadline; then it answers
// the device 0x88 Server unavailable (it will retry later).
const maxLeaderRetries = 2

// leaderRetryWait is how long a retry waits, times its number, when the
// re-read route still names the node that refused (no successor recorded
// yet, an election under way).
const leaderRetryWait = 100 * time.Millisecond

// maxAnswerSize bounds the node's first packet (a CONNACK, at most a few
// hundred bytes with a reason string and user properties).
const maxAnswerSize = 64 << 10

// errNotLeader: every node tried answered that it does not lead the tenant.
var errNotLeader = errors.New("gateway: no node tried leads the tenant")

// forward dials rt's node, sends it the signed PROXY header (a fresh one per
// attempt: the node refuses a replayed nonce) followed by the CONNECT raw,
// and reads the node's answer byte-exact, so nothing after it is consumed
// and the rest of the stream can be spliced. It retries the tenant's leader
// as described above. It returns the node connection (registered on s), the
// answer to relay to the device, the route finally used, or the refusal and
// its cause.
func (g *Gateway) forward(ctx context.Context, log *slog.Logger, s *session, rt route.Route, version byte,
	header func() ([]byte, error), raw []byte) (net.Conn, []byte, route.Route, refusal, error) {
	deadline, _ := ctx.Deadline()
	dialer := net.Dialer{Timeout: g.cfg.DialTimeout}
	for attempt := 0; ; attempt++ {
		node, err := dialer.DialContext(ctx, "tcp", rt.NodeAddr)
		if err != nil {
			return nil, nil, rt, refuseNodeDown, err
		}
		s.setNode(node)
		answer, reason, err := exchange(node, deadline, version, header, raw)
		if err != nil {
			node.Close()
			return nil, nil, rt, refuseNodeDown, err
		}
		if reason != packet.ErrUseAnotherServer && reason != packet.ErrServerMoved {
			return node, answer, rt, refusal{}, nil
		}
		node.Close()
		if attempt == maxLeaderRetries {
			return nil, nil, rt, refuseNoLeader, errNotLeader
		}
		log.Info("node does not lead the tenant; retrying its leader", "node", rt.NodeID, "epoch", rt.Epoch,
			"reason", reason.Error(), "attempt", attempt+1)
		var r refusal
		if rt, r, err = g.nextLeader(ctx, rt, attempt); err != nil {
			return nil, nil, rt, r, err
		}
	}
}

// nextLeader re-reads the route of a tenant whose node (prev's) answered
// that it does not lead it, waiting a little (leaderRetryWait times
// attempt+1) when the route still names that node. On an error it
// returns the route to report and the refusal.
func (g *Gateway) nextLeader(ctx context.Context, prev route.Route, attempt int) (route.Route, refusal, error) {
	rt, err := g.d.Routes.Refresh(ctx, prev.TenantID)
	switch {
	case errors.Is(err, route.ErrNoTenant):
		return prev, refuseNoTenant, err
	case err != nil:
		return prev, refuseNoRoute, err
	}
	if rt.NodeAddr == prev.NodeAddr {
		wait := time.NewTimer(time.Duration(attempt+1) * leaderRetryWait)
		select {
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return rt, refuseNoLeader, errNotLeader
		}
		if rt, err = g.d.Routes.Refresh(ctx, rt.TenantID); err != nil {
			return prev, refuseNoRoute, err
		}
	}
	return rt, refusal{}, nil
}

// exchange writes a fresh header and the CONNECT to node and reads its first
// packet. reason is the CONNACK's reason code when the client speaks MQTT 5
// and the answer is a CONNACK, 0 otherwise (3.1.1 has no "use another
// server"; its answers are relayed as they are).
func exchange(node net.Conn, deadline time.Time, version byte, header func() ([]byte, error), raw []byte) ([]byte, packet.ReasonCode, error) {
	out, err := header()
	if err != nil {
		return nil, 0, err
	}
	out = append(out, raw...)
	node.SetDeadline(deadline)
	defer node.SetDeadline(time.Time{})
	if _, err := node.Write(out); err != nil {
		return nil, 0, err
	}
	answer, fh, body, err := readPacket(node, maxAnswerSize)
	if err != nil {
		return nil, 0, err
	}
	if version != packet.Version5 || fh.Type != packet.TypeConnack {
		return answer, 0, nil
	}
	var ack packet.Connack
	if ack.Decode(packet.Version5, fh, body) != nil {
		return answer, 0, nil // relayed as it is: the device judges it
	}
	return answer, ack.Reason, nil
}

// readPacket reads exactly one MQTT packet of at most maxSize bytes from r.
func readPacket(r io.Reader, maxSize int) (raw []byte, fh packet.FixedHeader, body []byte, err error) {
	hdr := make([]byte, 2, 5)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fh, nil, err
	}
	var n int
	for {
		if fh, n, err = packet.ParseFixedHeader(hdr); err != nil {
			return nil, fh, nil, err
		}
		if n > 0 {
			break
		}
		if len(hdr) == 5 {
			return nil, fh, nil, packet.ErrMalformed
		}
		hdr = hdr[:len(hdr)+1]
		if _, err := io.ReadFull(r, hdr[len(hdr)-1:]); err != nil {
			return nil, fh, nil, err
		}
	}
	if n+fh.Remaining > maxSize {
		return nil, fh, nil, packet.ErrPacketTooLarge
	}
	raw = make([]byte, n+fh.Remaining)
	copy(raw, hdr)
	if _, err := io.ReadFull(r, raw[n:]); err != nil {
		return nil, fh, nil, err
	}
	return raw, fh, raw[n:], nil
}
