// Package tenantdns is the gateway's authoritative DNS responder for the
// tenant endpoints: <slug>.<zone> (the zone is the API's -domain) answers
// the host of the node that leads the tenant now, so a device lands on the
// host whose co-located gateway can hand its socket to that node
// (bench/README.md, "Handing the device's socket to a co-located node";
// docs/deploy.md, "Tenant endpoint DNS").
//
// The tenant's node comes from the gateway's route table (package route):
// the live leader recorded in tenant_placement, followed through LISTEN
// berth_placement and cached, so a hot tenant's queries cost no Postgres
// round trip. The node's nodes.public_host (its -public-host) is the
// answer: an IP gives A or AAAA, a name gives a CNAME; a node without one,
// or a tenant without a node, gives Config.Fallback (the load balancer),
// so a misconfigured node never makes a tenant unreachable.
//
// Answers, all with Config.TTL (RFC 1035, 2181, 2308, 6891); the SOA in
// the authority section of NXDOMAIN and NODATA, and its MINIMUM, say
// min(TTL, 60 s), so a tenant created under a name probed before is
// reachable within a minute:
//
//	<slug>.<zone>              A / AAAA / CNAME as above (AA); NODATA + SOA
//	                           when the address is of the other family
//	<zone>                     SOA, NS (-dns-ns); other types NODATA + SOA
//	_acme-challenge.<zone>     CNAME -dns-acme-cname (any type), when set
//	unknown slug, deeper name  NXDOMAIN + SOA in authority
//	outside the zone, class
//	not IN, AXFR / IXFR        REFUSED
//	opcode not QUERY           NOTIMP
//	not one question, bad
//	sections, two OPTs         FORMERR
//	EDNS version not 0         BADVERS
//	lookup failed (Postgres),
//	no lookup slot in 2 s      SERVFAIL
//	unreadable header, a
//	response                   no answer
//
// Postgres is asked only for a name whose answer is not cached, at most
// maxLookups at once, one lookup per name (lookup.go); a cached answer
// is sent from the UDP read loop without waiting behind them. The route
// table drops its "no such slug" answers on every berth_placement NOTIFY,
// which the API sends when it creates a tenant.
//
// An OPT record in a query is answered with one (UDP size 1232, no
// options), whatever the RCODE (RFC 6891 section 7). Over UDP a response
// is at most 512 bytes, or the query's EDNS size up to 1232; a longer one
// is sent as header, question and OPT with TC set, and the resolver asks
// again over TCP (length-prefixed, several queries per connection).
package tenantdns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Limits of the listeners.
const (
	maxUDPInFlight = 256              // UDP queries waiting for a lookup at once; more are dropped (the resolver retries)
	maxTCPConns    = 256              // TCP connections at once; more are closed at accept
	tcpIdle        = 10 * time.Second // a TCP connection waiting this long for its next query is closed
	udpReadSize    = 4096
)

// Server serves a Responder on UDP and TCP. Listen, Start, Shutdown.
type Server struct {
	resp *Responder
	log  *slog.Logger
	udp  net.PacketConn
	tcp  net.Listener

	udpSlots chan struct{}
	tcpSlots chan struct{}
	udpBufs  sync.Pool // *[]byte of udpReadSize+udpEDNSMax bytes: a request and its response
	tcpBufs  sync.Pool // *[]byte of 2*(tcpMax+2) bytes: a request and a response

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	once   sync.Once
}

// Listen binds addr on UDP and TCP (the same port; a port 0 is chosen for
// UDP and then taken for TCP).
func Listen(addr string, resp *Responder, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("tenantdns: %w", err)
	}
	var udp net.PacketConn
	var tcp net.Listener
	for try := 0; ; try++ { // with port 0, until both take the same port
		if udp, err = net.ListenPacket("udp", addr); err != nil {
			return nil, fmt.Errorf("tenantdns: listen udp: %w", err)
		}
		_, bound, _ := net.SplitHostPort(udp.LocalAddr().String())
		if tcp, err = net.Listen("tcp", net.JoinHostPort(host, bound)); err == nil {
			break
		}
		udp.Close()
		if port != "0" || try == 9 {
			return nil, fmt.Errorf("tenantdns: listen tcp: %w", err)
		}
	}
	s := &Server{resp: resp, log: log, udp: udp, tcp: tcp,
		udpSlots: make(chan struct{}, maxUDPInFlight), tcpSlots: make(chan struct{}, maxTCPConns),
		conns: map[net.Conn]struct{}{}}
	s.udpBufs.New = func() any { b := make([]byte, udpReadSize+udpEDNSMax); return &b }
	s.tcpBufs.New = func() any { b := make([]byte, 2*(tcpMax+2)); return &b }
	return s, nil
}

// Addr is the bound address (UDP and TCP share it).
func (s *Server) Addr() string { return s.udp.LocalAddr().String() }

// Start serves until Shutdown.
func (s *Server) Start() {
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	s.log.Info("dns listening", "addr", s.Addr(), "zone", s.resp.zone)
}

// Shutdown stops both listeners, closes TCP connections and waits for the
// queries in flight (each bounded by the route lookup's timeout) or ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.udp.Close()
		s.tcp.Close()
	})
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serveUDP answers each query whose answer needs no Postgres lookup at
// once, on this goroutine, so a flood of unknown names waiting for
// lookups never delays a cached tenant; the others are answered on a
// goroutine each, at most maxUDPInFlight at once.
func (s *Server) serveUDP() {
	defer s.wg.Done()
	for {
		bp := s.udpBufs.Get().(*[]byte)
		b := *bp
		req, out := b[:udpReadSize], b[udpReadSize:udpReadSize] // out: udpEDNSMax of capacity
		n, from, err := s.udp.ReadFrom(req)
		if err != nil {
			s.udpBufs.Put(bp)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. an ICMP error reported on the socket
		}
		if resp, ok := s.resp.AnswerCached(req[:n], false, out); ok {
			if resp != nil {
				s.udp.WriteTo(resp, from) // best effort, as UDP is
			}
			s.udpBufs.Put(bp)
			continue
		}
		select {
		case s.udpSlots <- struct{}{}:
		default: // overloaded: drop, as a lost packet
			s.udpBufs.Put(bp)
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.udpSlots; s.udpBufs.Put(bp) }()
			if resp := s.resp.Answer(context.Background(), req[:n], false, out); resp != nil {
				s.udp.WriteTo(resp, from)
			}
		}()
	}
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: do not spin
			continue
		}
		select {
		case s.tcpSlots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			<-s.tcpSlots
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// serveConn answers the queries of one TCP connection in turn (RFC 7766).
func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
		<-s.tcpSlots
	}()
	bp := s.tcpBufs.Get().(*[]byte)
	defer s.tcpBufs.Put(bp)
	req, out := (*bp)[:tcpMax], (*bp)[tcpMax+2:]
	for {
		c.SetReadDeadline(time.Now().Add(tcpIdle))
		if _, err := io.ReadFull(c, req[:2]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(req[:2]))
		if _, err := io.ReadFull(c, req[:n]); err != nil {
			return
		}
		resp := s.resp.Answer(context.Background(), req[:n], true, out)
		if resp == nil {
			return // unreadable: nothing sensible follows on this stream
		}
		var size [2]byte
		binary.BigEndian.PutUint16(size[:], uint16(len(resp)))
		c.SetWriteDeadline(time.Now().Add(tcpIdle))
		bufs := net.Buffers{size[:], resp}
		if _, err := bufs.WriteTo(c); err != nil {
			return
		}
	}
}
