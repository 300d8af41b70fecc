package shard

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// TestDisconnectWhileWritesBackUp: a client that never reads sends more
// QoS 2 PUBLISHes than the Receive Maximum, then keeps sending. Its
// PUBRECs outgrow the (small) socket buffers, so the broker's writes
// back up, and the DISCONNECT 0x93 waits behind them. The broker keeps
// reading the client's input meanwhile, so the client is never left
// blocked in a write, nor reset: once it is done sending it reads every
// PUBREC, the DISCONNECT, then the end of the stream [MQTT-3.3.4-8].
func TestDisconnectWhileWritesBackUp(t *testing.T) {
	t.Parallel()
	// 60,000 PUBRECs, about 300 KiB: past the socket buffers, within the
	// bound on control packets waiting for a client (a quarter of
	// MaxQueuedBytes).
	const recvMax = 60000
	sh := New(Options{ReceiveMaximum: recvMax, MaxQueuedBytes: 4 << 20, SysInterval: -1})
	addr := serveHooked(t, sh, ConnInfo{AllowAnonymous: true}, func(nc net.Conn) {
		_ = nc.(*net.TCPConn).SetWriteBuffer(16 << 10) // no autotuning: the output backs up
	})
	c := dialRaw(t, addr, packet.Version5)
	if ack := c.connectOK("backs-up"); int(ack.Props.ReceiveMaximum) != recvMax {
		t.Fatalf("Receive Maximum %d, want %d", ack.Props.ReceiveMaximum, recvMax)
	}

	var buf []byte
	for id := 1; id <= recvMax+1; id++ {
		buf = appendPacket(t, buf, &packet.Publish{QoS: 2, PacketID: uint16(id), Topic: []byte("q")})
	}
	start := time.Now()
	// A client left blocked would be so for ever: the bound is for that,
	// not for how fast the broker reads 60,000 QoS 2 PUBLISHes under
	// -race on a loaded machine (5 s per write, sendBytes's, was not).
	_ = c.nc.SetWriteDeadline(start.Add(2 * time.Minute))
	send := func(b []byte) {
		t.Helper()
		if _, err := c.nc.Write(b); err != nil {
			t.Fatalf("write after %v: %v", time.Since(start), err)
		}
	}
	send(buf)
	// More, as from a client that learns of the DISCONNECT only when it
	// reads: 4 MiB that the broker must read for the client to get to
	// reading.
	payload := make([]byte, 64<<10)
	for id := recvMax + 2; id < recvMax+2+64; id++ {
		send(appendPacket(t, nil, &packet.Publish{QoS: 2, PacketID: uint16(id), Topic: []byte("q"), Payload: payload}))
	}
	t.Logf("sent %d PUBLISHes and 4 MiB after them in %v", recvMax+1, time.Since(start))
	c.expectRefusalAfterAcks(packet.TypePubrec, recvMax, packet.ErrReceiveMaximumExceeded)
}

// TestPacketTooLargeWithUnreadInput: a PUBLISH over the Maximum Packet
// Size ends the connection with DISCONNECT 0x95 (MQTT 5.0 section
// 3.1.2.11.4) after its fixed header is read; the client is still sending
// its body, and more. It must be able to send all of it and then read the
// DISCONNECT and the end of the stream, not a reset.
func TestPacketTooLargeWithUnreadInput(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{MaxPacketSize: 1024}, ConnInfo{})
	for _, size := range []int{4 << 10, 1 << 20, 8 << 20} {
		c := v5Client(t, b, "too-large")
		big := appendPacket(t, nil, &packet.Publish{Topic: []byte("big"), Payload: make([]byte, size)})
		for len(big) > 0 {
			n := min(len(big), 64<<10)
			c.sendBytes(big[:n])
			big = big[n:]
		}
		c.expectRefusalAfterAcks(packet.TypePuback, 0, packet.ErrPacketTooLarge)
		_ = c.nc.Close() // ends the broker's linger at once
	}
}

func appendPacket(t *testing.T, dst []byte, p appender) []byte {
	t.Helper()
	b, err := p.Append(dst, packet.Version5)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectRefusalAfterAcks reads n acknowledgements of type ack (packet
// ids 1..n, none refused), then a DISCONNECT with reason, then the end
// of the stream: EOF, not a reset.
func (r *rawClient) expectRefusalAfterAcks(ack packet.Type, n int, reason packet.ReasonCode) {
	r.t.Helper()
	for i := 1; i <= n; i++ {
		a := r.ack(ack)
		if int(a.PacketID) != i || a.Reason.IsFailure() {
			r.t.Fatalf("%v %d: id %d reason %v", ack, i, a.PacketID, a.Reason)
		}
	}
	fh, body := r.read(packet.TypeDisconnect)
	var d packet.Disconnect
	if err := d.Decode(r.version, fh, body); err != nil {
		r.t.Fatalf("decoding DISCONNECT: %v", err)
	}
	if d.Reason != reason {
		r.t.Fatalf("DISCONNECT reason %v, want %v", d.Reason, reason)
	}
	if fh, _, err := r.next(); !errors.Is(err, io.EOF) {
		r.t.Fatalf("after the DISCONNECT: %v %v, want EOF", fh.Type, err)
	}
}
