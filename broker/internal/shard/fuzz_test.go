package shard

import (
	"io"
	"net"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// FuzzServeConn feeds arbitrary bytes to a connection after a valid
// CONNECT (MQTT 3.1.1 or 5) and checks that the shard neither panics nor
// hangs: the connection ends, and the shard still serves the next one.
func FuzzServeConn(f *testing.F) {
	seeds := [][]byte{
		{0xC0, 0x00}, // PINGREQ
		{0x82, 0x06, 0x00, 0x01, 0x00, 0x00, 0x01, 'a', 0x01},
		{0x30, 0x05, 0x00, 0x01, 'a', 0x00, 'x'},
		{0x32, 0x07, 0x00, 0x01, 'a', 0x00, 0x01, 0x00, 'x'},
		{0x34, 0x07, 0x00, 0x01, 'a', 0x00, 0x01, 0x00, 'x', 0x62, 0x02, 0x00, 0x01},
		{0xA2, 0x05, 0x00, 0x02, 0x00, 0x01, 'a'},
		{0xE0, 0x00},
		{0x10, 0x00},
		{0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01},
	}
	for _, s := range seeds {
		f.Add(byte(packet.Version5), s)
		f.Add(byte(packet.Version311), s)
	}
	sh := New(Options{SysInterval: -1, ConnectTimeout: time.Second})
	f.Cleanup(func() { _ = sh.Shutdown(f.Context()) })
	f.Fuzz(func(t *testing.T, version byte, data []byte) {
		if version != packet.Version5 {
			version = packet.Version311
		}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			sh.ServeConn(server, ConnInfo{AllowAnonymous: true})
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		connect, _ := (&packet.Connect{ClientID: []byte("fuzz"), CleanStart: true}).Append(nil, version)
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write(append(connect, data...))
		_ = client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("ServeConn did not return after the client closed")
		}
	})
}
