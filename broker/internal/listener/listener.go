// Package listener accepts client connections for a broker: plain TCP and
// MQTT over WebSocket (RFC 6455, path /mqtt, subprotocol "mqtt",
// MQTT 5.0 section 6), and hands each one, as a net.Conn, to a handler
// that runs it to completion.
//
// Every connection is owned by the Server: Close stops the accept loops
// and Wait waits for the handlers (an AsyncHandler's done), which the
// broker ends by shutting down its shard.
package listener

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Handler runs one connection to completion and closes it. remoteAddr is
// the client's address as the listener saw it.
type Handler func(conn net.Conn, remoteAddr string)

// AsyncHandler serves one connection that may outlive the call (a shard's
// Serve parks idle connections without a goroutine): it calls done
// exactly once, when the connection has ended and is closed, on any
// goroutine.
type AsyncHandler func(conn net.Conn, remoteAddr string, done func())

// Server owns listeners and the connections handed to its handler.
type Server struct {
	log     *slog.Logger
	handler AsyncHandler

	mu      sync.Mutex
	closed  bool
	lns     []net.Listener
	servers []*http.Server
	accept  sync.WaitGroup // accept loops
	conns   sync.WaitGroup // handlers, until they call done
	// done is conns.Done, bound once: a method value made per connection
	// is 16 B that a parked connection keeps (docs/idle-connections.md).
	done func()
	// inline: ServeTCP's accept loop calls the handler itself (Inline).
	inline bool
}

// Inline tells the Server that its handler returns at once for a TCP
// connection, waiting on nothing the peer does (a shard's Serve with a
// Poller: the handshake runs on the shard's workers), so that ServeTCP's
// accept loop calls it itself instead of starting a goroutine per
// connection: a connect storm then starts no goroutine per connection
// (docs/idle-connections.md, "Handshakes bounded"). Call it before
// ServeTCP. WebSocket connections are served as before.
func (s *Server) Inline() {
	s.mu.Lock()
	s.inline = true
	s.mu.Unlock()
}

// New returns a Server that hands connections to h.
func New(log *slog.Logger, h Handler) *Server {
	return NewAsync(log, func(c net.Conn, remote string, done func()) {
		defer done()
		h(c, remote)
	})
}

// NewAsync returns a Server that hands connections to h; Wait waits for
// every connection's done.
func NewAsync(log *slog.Logger, h AsyncHandler) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{log: log, handler: h}
	s.done = s.conns.Done
	return s
}

// ErrClosed is returned when serving on a closed Server.
var ErrClosed = errors.New("listener: server closed")

// ServeTCP accepts connections on ln in a new goroutine until Close.
func (s *Server) ServeTCP(ln net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.lns = append(s.lns, ln)
	s.accept.Add(1)
	go s.acceptLoop(ln, s.inline)
	return nil
}

func (s *Server) acceptLoop(ln net.Listener, inline bool) {
	defer s.accept.Done()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failures (EMFILE and friends): back off, go on.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed", "err", err, "backoff", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		if !s.track() {
			_ = c.Close()
			return
		}
		if inline {
			s.handler(c, c.RemoteAddr().String(), s.done)
		} else {
			go s.handler(c, c.RemoteAddr().String(), s.done)
		}
	}
}

// track registers one handler goroutine unless the server is closed.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns.Add(1)
	return true
}

// ServeWebSocket serves MQTT over WebSocket on ln (HTTP, path /mqtt) in a
// new goroutine until Close.
func (s *Server) ServeWebSocket(ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/mqtt", s.WebSocketHandler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.servers = append(s.servers, hs)
	s.accept.Add(1)
	go func() {
		defer s.accept.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("websocket listener", "err", err)
		}
	}()
	return nil
}

// WebSocketHandler upgrades a request to a WebSocket speaking the "mqtt"
// subprotocol [MQTT-6.0.0-3] and runs the handler on it; MQTT packets
// travel in binary frames [MQTT-6.0.0-1].
func (s *Server) WebSocketHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.track() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"mqtt"}})
		if err != nil {
			s.conns.Done()
			s.log.Debug("websocket upgrade failed", "err", err)
			return
		}
		if ws.Subprotocol() != "mqtt" {
			s.conns.Done()
			_ = ws.Close(websocket.StatusPolicyViolation, "subprotocol mqtt required")
			return
		}
		ws.SetReadLimit(-1) // the broker bounds packet sizes itself
		nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
		// The HTTP server's goroutine must not return before the
		// connection ends: it owns the hijacked socket until then.
		ended := make(chan struct{})
		s.handler(nc, r.RemoteAddr, func() { close(ended) })
		<-ended
		s.conns.Done()
	})
}

// Close stops accepting: it closes every listener and waits for the
// accept loops. Connections already handed to the handler keep running;
// see Wait.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	lns, servers := s.lns, s.servers
	s.mu.Unlock()
	var errs []error
	for _, ln := range lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for _, hs := range servers {
		// Hijacked WebSocket connections are not closed here; their
		// handlers end when the broker closes them.
		if err := hs.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.accept.Wait()
	return errors.Join(errs...)
}

// Wait waits for every handler to return, or for ctx.
func (s *Server) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.conns.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
