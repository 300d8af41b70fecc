package loadgen

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"berth.dev/broker/packet"
)

// dialer opens transports (TCP, TLS or WebSocket) to one broker.
type dialer struct {
	addr    string
	tls     *tls.Config // nil for plain
	ws      bool
	wsURL   string
	timeout time.Duration
	// Local addresses to bind, used in turn (Config.SourceAddrs).
	sources []netip.Addr
	next    atomic.Uint64
}

func newDialer(cfg *Config) (*dialer, error) {
	d := &dialer{addr: cfg.Addr, ws: cfg.WS, timeout: cfg.ConnectTimeout, sources: cfg.SourceAddrs}
	if cfg.TLS {
		host, _, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("loadgen: address %q: %w", cfg.Addr, err)
		}
		d.tls = &tls.Config{ServerName: host, InsecureSkipVerify: cfg.TLSInsecure, MinVersion: tls.VersionTLS12}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("loadgen: read CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("loadgen: no certificates in %s", cfg.CAFile)
			}
			d.tls.RootCAs = pool
		}
	}
	if cfg.WS {
		scheme := "ws"
		if cfg.TLS {
			scheme = "wss"
		}
		d.wsURL = scheme + "://" + cfg.Addr + cfg.WSPath
	}
	return d, nil
}

// dial opens one transport within ctx.
func (d *dialer) dial(ctx context.Context) (net.Conn, error) {
	if d.ws {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: d.tls, DisableKeepAlives: true}}
		c, _, err := websocket.Dial(ctx, d.wsURL, &websocket.DialOptions{
			HTTPClient:   hc,
			Subprotocols: []string{"mqtt"}, // [MQTT-6.0.0-3]
		})
		if err != nil {
			return nil, err
		}
		if c.Subprotocol() != "mqtt" { // [MQTT-6.0.0-4]
			c.Close(websocket.StatusProtocolError, "mqtt subprotocol required")
			return nil, errors.New("loadgen: server did not select the mqtt WebSocket subprotocol")
		}
		c.SetReadLimit(int64(packet.MaxRemaining) + 5)
		// The connection outlives the dial context: NetConn's context
		// bounds the connection's life, so it must not be ctx.
		// Binary frames only [MQTT-6.0.0-1]; NetConn reads across frame
		// boundaries, as packets need not align with them [MQTT-6.0.0-2].
		return websocket.NetConn(context.Background(), c, websocket.MessageBinary), nil
	}
	nd := net.Dialer{}
	if len(d.sources) > 0 {
		src := d.sources[(d.next.Add(1)-1)%uint64(len(d.sources))]
		nd.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
	}
	if d.tls != nil {
		td := tls.Dialer{NetDialer: &nd, Config: d.tls}
		return td.DialContext(ctx, "tcp", d.addr)
	}
	return nd.DialContext(ctx, "tcp", d.addr)
}

// client is one MQTT session. Writes go through w under wmu; one goroutine
// at a time reads through r.
type client struct {
	conn    net.Conn
	version byte
	r       *packet.Reader

	wmu  sync.Mutex
	w    *bufio.Writer
	wbuf []byte // scratch for encoding, under wmu

	recvMax uint16 // server's Receive Maximum (MQTT 5), 65535 when absent
}

// connectOpts is what a CONNECT carries besides the config.
type connectOpts struct {
	clientID  string
	keepAlive uint16
	user      string
	pass      string
	v5        bool
	writeBuf  int
	readBuf   int // initial read buffer; it grows to the largest packet
}

// connect dials and completes CONNECT/CONNACK within ctx. A CONNACK
// refusal is returned as a *rejectError.
func connect(ctx context.Context, d *dialer, o connectOpts) (*client, error) {
	dctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	conn, err := d.dial(dctx)
	if err != nil {
		return nil, err
	}
	deadline, _ := dctx.Deadline()
	conn.SetDeadline(deadline)
	version := packet.Version311
	if o.v5 {
		version = packet.Version5
	}
	c := &client{
		conn:    conn,
		version: version,
		r:       packet.NewReader(conn, cmp.Or(o.readBuf, 4096)),
		w:       bufio.NewWriterSize(conn, max(o.writeBuf, 512)),
		recvMax: 65535,
	}
	cp := packet.Connect{CleanStart: true, KeepAlive: o.keepAlive, ClientID: []byte(o.clientID)}
	if o.user != "" {
		cp.UsernameFlag, cp.Username = true, []byte(o.user)
	}
	if o.pass != "" {
		cp.PasswordFlag, cp.Password = true, []byte(o.pass)
	}
	if o.v5 {
		cp.Props.Has.Set(packet.PropReceiveMaximum)
		cp.Props.ReceiveMaximum = 65535
	}
	if err := c.send(&cp); err != nil {
		conn.Close()
		return nil, err
	}
	fh, body, err := c.r.ReadPacket(0)
	if err != nil {
		conn.Close()
		if ctx.Err() == nil && dctx.Err() != nil {
			return nil, fmt.Errorf("waiting for CONNACK: %w", context.DeadlineExceeded)
		}
		return nil, fmt.Errorf("waiting for CONNACK: %w", err)
	}
	if fh.Type != packet.TypeConnack {
		conn.Close()
		return nil, fmt.Errorf("loadgen: expected CONNACK, got packet type %d", fh.Type)
	}
	var ack packet.Connack
	if err := ack.Decode(version, fh, body); err != nil {
		conn.Close()
		return nil, fmt.Errorf("loadgen: decode CONNACK: %w", err)
	}
	if ack.Reason.IsFailure() {
		conn.Close()
		return nil, &rejectError{code: ack.Reason}
	}
	if ack.Props.Has.Has(packet.PropReceiveMaximum) && ack.Props.ReceiveMaximum > 0 {
		c.recvMax = ack.Props.ReceiveMaximum
	}
	conn.SetDeadline(time.Time{})
	return c, nil
}

// appender is any packet that encodes itself.
type appender interface {
	Append(dst []byte, version byte) ([]byte, error)
}

// send encodes p, writes it and flushes.
func (c *client) send(p appender) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.sendLocked(p, true)
}

// sendLocked encodes p into the write buffer, flushing when asked.
func (c *client) sendLocked(p appender, flush bool) error {
	var err error
	c.wbuf, err = p.Append(c.wbuf[:0], c.version)
	if err != nil {
		return err
	}
	if _, err := c.w.Write(c.wbuf); err != nil {
		return err
	}
	if flush {
		return c.w.Flush()
	}
	return nil
}

// writeRaw writes an encoded packet without flushing.
func (c *client) writeRaw(b []byte) error {
	c.wmu.Lock()
	_, err := c.w.Write(b)
	c.wmu.Unlock()
	return err
}

// flush writes out what is buffered.
func (c *client) flush() error {
	c.wmu.Lock()
	err := c.w.Flush()
	c.wmu.Unlock()
	return err
}

// subscribe sends one SUBSCRIBE for filters at qos and waits for its
// SUBACK, failing when any filter is refused.
func (c *client) subscribe(filters []string, qos byte, timeout time.Duration) error {
	sp := packet.Subscribe{PacketID: 1}
	for _, f := range filters {
		sp.Subscriptions = append(sp.Subscriptions, packet.Subscription{Filter: []byte(f), QoS: qos})
	}
	c.conn.SetDeadline(time.Now().Add(timeout))
	defer c.conn.SetDeadline(time.Time{})
	if err := c.send(&sp); err != nil {
		return fmt.Errorf("loadgen: send SUBSCRIBE: %w", err)
	}
	for {
		fh, body, err := c.r.ReadPacket(0)
		if err != nil {
			return fmt.Errorf("loadgen: waiting for SUBACK: %w", err)
		}
		if fh.Type != packet.TypeSuback {
			continue // e.g. a retained or $SYS message; not ours
		}
		var sa packet.Suback
		if err := sa.Decode(c.version, fh, body); err != nil {
			return fmt.Errorf("loadgen: decode SUBACK: %w", err)
		}
		for i, rc := range sa.Reasons {
			if rc.IsFailure() {
				return fmt.Errorf("loadgen: subscription %q refused: %w", filters[min(i, len(filters)-1)], rc)
			}
		}
		return nil
	}
}

// ping sends PINGREQ and waits for PINGRESP within timeout. Only for
// clients without a reader goroutine.
func (c *client) ping(timeout time.Duration) error {
	c.conn.SetDeadline(time.Now().Add(timeout))
	defer c.conn.SetDeadline(time.Time{})
	if err := c.send(&packet.Ping{Type: packet.TypePingreq}); err != nil {
		return err
	}
	for {
		fh, _, err := c.r.ReadPacket(0)
		if err != nil {
			return err
		}
		if fh.Type == packet.TypePingresp {
			return nil
		}
		if fh.Type == packet.TypeDisconnect {
			return errDisconnected
		}
	}
}

// close sends DISCONNECT (best effort, bounded) and closes the transport.
func (c *client) close() {
	c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	c.send(&packet.Disconnect{})
	c.conn.Close()
}

// errDisconnected reports a DISCONNECT from the server.
var errDisconnected = errors.New("loadgen: server sent DISCONNECT")

// rejectError is a CONNACK refusal.
type rejectError struct{ code packet.ReasonCode }

func (e *rejectError) Error() string { return "loadgen: CONNACK refused: " + e.code.Error() }

// Failure classes reported per level and per run.
const (
	failRefused  = "refused"  // TCP connection refused (accept backlog full, nothing listening)
	failTimeout  = "timeout"  // no answer within the timeout
	failReset    = "reset"    // connection reset or closed by the broker
	failRejected = "rejected" // CONNACK with a failure code
	failPorts    = "ports"    // client ran out of ephemeral ports
	failFDs      = "fds"      // client ran out of file descriptors
	failOther    = "other"
)

// classify names the failure class of a dial, CONNECT or PING error.
func classify(err error) string {
	var rej *rejectError
	var ne net.Error
	switch {
	case errors.As(err, &rej):
		return failRejected
	case errors.Is(err, syscall.ECONNREFUSED):
		return failRefused
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return failPorts
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return failFDs
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return failTimeout
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, errDisconnected):
		return failReset
	}
	return failOther
}
