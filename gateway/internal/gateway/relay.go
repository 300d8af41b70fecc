package gateway

import (
	"io"
	"net"
	"sync"
	"time"
)

// relayBufSize is the buffer for relays the kernel cannot splice.
const relayBufSize = 32 << 10

// maxPooledBufs bounds the memory the pool keeps (1024 x 32 KiB = 32 MiB).
const maxPooledBufs = 1024

// bufPool is a bounded free list of relay buffers for TLS and WebSocket
// connections, and of the pipes plain TCP relays splice through while
// bytes flow (splice_linux.go). Unlike sync.Pool it never drops buffers at
// GC, so a steady number of relays allocates nothing.
type bufPool struct {
	free  chan *[]byte
	pipes chan *pipe
}

func newBufPool() *bufPool {
	return &bufPool{free: make(chan *[]byte, maxPooledBufs), pipes: make(chan *pipe, maxPooledPipes)}
}

func (p *bufPool) get() *[]byte {
	select {
	case b := <-p.free:
		return b
	default:
		b := make([]byte, relayBufSize)
		return &b
	}
}

func (p *bufPool) put(b *[]byte) {
	select {
	case p.free <- b:
	default: // full: let the GC have it
	}
}

// relay copies both ways between client and node until they end, then
// closes both and returns the bytes copied client->node and node->client.
//
// A device that hangs up ends the relay at once. A node that ends its side
// (refusing a token, shutting down, kicking the client with a DISCONNECT)
// must not leave the device connected to nothing; but closing the device's
// socket while its input is unread makes the kernel reset the connection,
// which can discard the node's last packet, the DISCONNECT that says why
// (docs/contracts.md, "How a connection ends"). So the node's end of stream
// is passed on as a half-close, and what the device still sends goes on to
// the node, which reads and discards it, until the device closes too, the
// node closes, or lingerAfterNode passes.
func relay(client, node net.Conn, bufs *bufPool) (up, down int64) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); node.Close() }) }
	done := make(chan int64, 1)
	go func() {
		n, _ := copyConn(client, node, bufs)
		if cw, ok := client.(closeWriter); ok && cw.CloseWrite() == nil {
			_ = client.SetReadDeadline(time.Now().Add(lingerAfterNode))
		} else {
			closeBoth()
		}
		done <- n
	}()
	up, _ = copyConn(node, client, bufs)
	closeBoth()
	down = <-done
	return up, down
}

// lingerAfterNode bounds how long a device may go on sending after its
// node ended the connection (the node's own linger is shorter).
const lingerAfterNode = 3 * time.Second

type closeWriter interface{ CloseWrite() error }

// copyConn copies src to dst. Between two *net.TCPConn it is
// spliceCopy: splice(2) through a pipe taken only while bytes flow, the
// bytes never entering user space (splice_linux.go). Anything else (TLS,
// WebSocket) goes through a pooled buffer; the wrappers hide
// ReadFrom/WriteTo so io.CopyBuffer really uses it instead of allocating
// its own.
func copyConn(dst, src net.Conn, bufs *bufPool) (int64, error) {
	if d, ok := dst.(*net.TCPConn); ok {
		if s, ok := src.(*net.TCPConn); ok {
			return spliceCopy(d, s, bufs)
		}
	}
	bp := bufs.get()
	defer bufs.put(bp)
	return io.CopyBuffer(writerOnly{dst}, readerOnly{src}, *bp)
}

type writerOnly struct{ io.Writer }
type readerOnly struct{ io.Reader }
