package node

import (
	"context"
	"net"
	"sync"
	"time"

	"berth.dev/broker/packet"
)

// Devices move at a bounded rate (docs/replication.md, "Moving devices"):
// when a tenant's leadership leaves this node (a drain, a rebalance, an
// election), its devices are disconnected with DISCONNECT 0x9C (use
// another server; 3.1.1 clients are closed) one at a time, at most
// Config.MoveDisconnectRate a second across the node, not all of a group
// at once: a tenant with 10,000 devices does not send 10,000 reconnections
// to the gateway and the new leader in the same millisecond. A device
// waiting for its turn loses nothing: the node no longer acknowledges
// anything for the tenant (its group has another leader), so what it
// publishes meanwhile is not acknowledged and is sent again after it
// reconnects; a persistent session's messages are queued by the new
// leader. A device that publishes at QoS 1/2 meanwhile is told at once
// (its message cannot be acknowledged here): that one is not paced.

// defaultMoveDisconnectRate is Config.MoveDisconnectRate's default (EMQX's
// rebalance evicts 500 connections a second by default too).
const defaultMoveDisconnectRate = 500

// movePacer hands out disconnect slots at most one per every, in order,
// to every tenant moving off the node: any second holds at most
// 1/every of them.
type movePacer struct {
	every time.Duration

	mu   sync.Mutex
	next time.Time // the next free slot
	// onSlot, when set (observe; tests), is told each slot handed out.
	onSlot func(at time.Time)
}

// observe has f told the time of every slot handed out from now on.
func (p *movePacer) observe(f func(at time.Time)) {
	p.mu.Lock()
	p.onSlot = f
	p.mu.Unlock()
}

func newMovePacer(perSecond int) *movePacer {
	return &movePacer{every: time.Second / time.Duration(max(perSecond, 1))}
}

// wait takes the next slot and waits for it; ctx's error if ctx ends first.
func (p *movePacer) wait(ctx context.Context) error {
	p.mu.Lock()
	now := time.Now()
	at := p.next
	if at.Before(now) {
		at = now
	}
	p.next = at.Add(p.every)
	if p.onSlot != nil {
		p.onSlot(at)
	}
	p.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// moveOff disconnects the devices of t, a tenant this node no longer
// serves, one per slot of the node's pacer (DISCONNECT 0x9C; 3.1.1:
// close). It returns when each has been told, or when the node shuts
// down (closeTenant then ends the rest at once).
func (n *Node) moveOff(t *tenant) {
	type device struct {
		cred string
		c    net.Conn
	}
	t.mu.Lock()
	var devices []device
	for cred, m := range t.conns {
		for c := range m {
			devices = append(devices, device{cred, c})
		}
	}
	t.mu.Unlock()
	if len(devices) > 0 {
		n.log.Info("moving the tenant's devices to its new leader", "tenant_id", t.id, "devices", len(devices), "per_second", n.cfg.MoveDisconnectRate)
	}
	for _, d := range devices {
		t.mu.Lock()
		_, live := t.conns[d.cred][d.c] // untrack has not run: still served
		t.mu.Unlock()
		if !live {
			continue // gone by itself (a publish it sent could not be acknowledged)
		}
		if n.pacer.wait(n.ctx) != nil {
			return
		}
		t.sh.End(d.c, packet.ErrUseAnotherServer)
	}
}
