package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// TestReceiveMaximumExceededWithoutReading: an MQTT 5 client that sends
// more QoS 2 PUBLISHes than the Receive Maximum in the CONNACK, and more
// after them, without reading a single PUBREC, is refused with DISCONNECT
// 0x93 after the first one over the limit [MQTT-3.3.4-8]. It must be able
// to send all it meant to (no "broken pipe", no reset) and then read every
// PUBREC, the DISCONNECT and the end of the stream: the broker keeps
// reading (and discarding) its input until it closes, rather than reset
// the connection on it. Against the standalone broker with -data, at
// several speeds and payload sizes.
func TestReceiveMaximumExceededWithoutReading(t *testing.T) {
	addr, _ := runBroker(t, t.TempDir())
	// extra PUBLISHes follow the one over the limit, as from a client
	// that pipelines and learns of the DISCONNECT only when it reads.
	const extra = 256
	for _, size := range []int{0, 1 << 10, 64 << 10} {
		for _, speed := range []string{"burst", "per packet", "paced"} {
			name := fmt.Sprintf("%s %dB", speed, size)
			t.Run(name, func(t *testing.T) {
				nc := dialV5(t, addr, "rm-"+name)
				recvMax := nc.recvMax
				start := time.Now()
				nc.sendQoS2(speed, recvMax+1+extra, recvMax+1, size)
				sent := time.Since(start)
				recs, reason, end := nc.readToEnd()
				if recs != recvMax {
					t.Errorf("%d PUBRECs before the DISCONNECT, want %d (the Receive Maximum)", recs, recvMax)
				}
				if reason != packet.ErrReceiveMaximumExceeded {
					t.Errorf("DISCONNECT reason %v, want %v", reason, packet.ErrReceiveMaximumExceeded)
				}
				if !errors.Is(end, io.EOF) {
					t.Errorf("stream ended with %v, want EOF (the broker closed after the DISCONNECT)", end)
				}
				t.Logf("%d PUBLISHes of %d bytes sent in %v; %d PUBRECs, DISCONNECT %v, then %v", recvMax+1+extra, size, sent, recs, reason, end)
			})
		}
	}
}

// rawV5 is an MQTT 5 client over the codec that reads only when told.
type rawV5 struct {
	t       *testing.T
	nc      net.Conn
	rd      *packet.Reader
	recvMax int // the server's Receive Maximum
}

func dialV5(t *testing.T, addr, clientID string) *rawV5 {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &rawV5{t: t, nc: nc, rd: packet.NewReader(nc, 4096)}
	c.write(mustAppend(t, nil, &packet.Connect{ClientID: []byte(clientID), CleanStart: true}))
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	fh, body, err := c.rd.ReadPacket(0)
	if err != nil || fh.Type != packet.TypeConnack {
		t.Fatalf("CONNACK: %v %v", fh.Type, err)
	}
	var ack packet.Connack
	if err := ack.Decode(packet.Version5, fh, body); err != nil || ack.Reason != packet.CodeSuccess {
		t.Fatalf("CONNACK %v %v", ack.Reason, err)
	}
	c.recvMax = 65535 // MQTT 5.0 section 3.2.2.3.3: absent means 65,535
	if ack.Props.Has.Has(packet.PropReceiveMaximum) {
		c.recvMax = int(ack.Props.ReceiveMaximum)
	}
	return c
}

func mustAppend(t *testing.T, dst []byte, p interface {
	Append([]byte, byte) ([]byte, error)
}) []byte {
	t.Helper()
	b, err := p.Append(dst, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (c *rawV5) write(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err) // a reset or broken pipe while still sending
	}
}

// sendQoS2 sends n QoS 2 PUBLISHes (packet ids 1..n) with size-byte
// payloads without reading: "burst" writes them back to back in chunks
// of up to 1 MiB, "per packet" one write each, "paced" one write each
// with a pause after every 64th and after the one numbered over (so the
// broker ends the connection while the client still has packets to
// send). The pauses shape the load; nothing waits on them.
func (c *rawV5) sendQoS2(speed string, n, over, size int) {
	c.t.Helper()
	payload := make([]byte, size)
	var buf []byte
	for id := 1; id <= n; id++ {
		buf = mustAppend(c.t, buf, &packet.Publish{QoS: 2, PacketID: uint16(id), Topic: []byte("rm/t"), Payload: payload})
		if speed == "burst" && len(buf) < 1<<20 && id < n {
			continue
		}
		c.write(buf)
		buf = buf[:0]
		if speed == "paced" && (id%64 == 0 || id == over) {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// readToEnd reads until the stream ends: the PUBRECs, which must come
// first, then the DISCONNECT, which must be the last packet. It returns
// the number of PUBRECs, the DISCONNECT's reason (0 if none came) and the
// error that ended the stream.
func (c *rawV5) readToEnd() (recs int, reason packet.ReasonCode, end error) {
	c.t.Helper()
	disconnected := false
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		fh, body, err := c.rd.ReadPacket(0)
		if err != nil {
			if !disconnected {
				c.t.Errorf("no DISCONNECT before %v", err)
			}
			return recs, reason, err
		}
		if disconnected {
			c.t.Fatalf("%v after the DISCONNECT", fh.Type)
		}
		switch fh.Type {
		case packet.TypePubrec:
			var a packet.Ack
			if err := a.Decode(packet.Version5, fh, body); err != nil {
				c.t.Fatal(err)
			}
			if recs++; int(a.PacketID) != recs || a.Reason.IsFailure() {
				c.t.Fatalf("PUBREC %d: id %d reason %v", recs, a.PacketID, a.Reason)
			}
		case packet.TypeDisconnect:
			var d packet.Disconnect
			if err := d.Decode(packet.Version5, fh, body); err != nil {
				c.t.Fatal(err)
			}
			reason, disconnected = d.Reason, true
		default:
			c.t.Fatalf("unexpected %v", fh.Type)
		}
	}
}
