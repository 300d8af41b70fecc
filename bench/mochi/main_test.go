package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// TestServeRoutes starts the peer in process and routes one message
// between two real MQTT 3.1.1 sessions spoken as raw bytes.
func TestServeRoutes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, addr, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	dial := func(id byte) net.Conn {
		t.Helper()
		var c net.Conn
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if c, err = net.Dial("tcp", addr); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("peer not listening: %v", err)
			}
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		// CONNECT: "MQTT" level 4, clean session, keep-alive 60, client id of one byte.
		write(t, c, 0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, 1, id)
		expect(t, c, 0x20, 2, 0, 0) // CONNACK accepted
		return c
	}
	sub, pub := dial('s'), dial('p')
	write(t, sub, 0x82, 6, 0, 1, 0, 1, 't', 0)  // SUBSCRIBE id 1, "t" at QoS 0
	expect(t, sub, 0x90, 3, 0, 1, 0)            // SUBACK granted QoS 0
	write(t, pub, 0x30, 5, 0, 1, 't', 'h', 'i') // PUBLISH "t" "hi"
	expect(t, sub, 0x30, 5, 0, 1, 't', 'h', 'i')
}

func write(t *testing.T, c net.Conn, b ...byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func expect(t *testing.T, c net.Conn, want ...byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != string(want) {
		t.Fatalf("read % x, %v; want % x", got, err, want)
	}
}
