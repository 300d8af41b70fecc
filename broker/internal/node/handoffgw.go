package node

import (
	"fmt"
	"net"
	"os"
	"time"
)

// A gateway's Unix connection: the queue of frames to it and its writer
// (handoff.go).

// send queues a frame for the gateway; one that lets handoffQueue frames
// pile up unread is disconnected.
func (g *handoffGateway) send(frame []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	select {
	case g.out <- frame:
	default:
		g.stopLocked()
		_ = g.c.Close()
	}
}

// stop ends the queue: the writer writes what is in it, then closes the
// connection.
func (g *handoffGateway) stop() {
	g.mu.Lock()
	g.stopLocked()
	g.mu.Unlock()
}

func (g *handoffGateway) stopLocked() {
	if !g.stopped {
		g.stopped = true
		close(g.out)
	}
}

func (g *handoffGateway) isStopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopped
}

// write writes the gateway's frames, each within the header timeout, and
// closes the connection when the queue ends or a write fails.
func (h *handoffs) write(g *handoffGateway) {
	defer h.wg.Done()
	defer g.c.Close()
	for f := range g.out {
		_ = g.c.SetWriteDeadline(time.Now().Add(h.n.cfg.HeaderTimeout))
		if err := g.c.Write(f); err != nil {
			h.n.log.Warn("handoff: writing to the gateway", "err", err)
			g.stop()
			_ = g.c.Close() // the reader ends; the queue is dropped below
			for range g.out {
			}
			return
		}
	}
}

// tcpFromFD makes a net.TCPConn of a received descriptor, which it
// closes (the conn holds a duplicate).
func tcpFromFD(fd int) (*net.TCPConn, error) {
	f := os.NewFile(uintptr(fd), "handoff")
	nc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		_ = nc.Close()
		return nil, fmt.Errorf("a %T", nc)
	}
	return tc, nil
}
