package proxyproto

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns the two ends of a real loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { client.Close(); r.c.Close() })
	return client, r.c
}

func TestReadHeaderExact(t *testing.T) {
	s, v, _ := newPair(t, VerifierOptions{})
	raw, err := s.Append(nil, src, dstAddr, &info)
	if err != nil {
		t.Fatal(err)
	}
	mqtt := []byte("\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")
	client, server := tcpPair(t)
	// Header and MQTT bytes in one write: the reader must stop exactly at
	// the end of the header.
	if _, err := client.Write(append(append([]byte(nil), raw...), mqtt...)); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHeader(server, time.Second, 1024, nil)
	if err != nil {
		t.Fatalf("ReadHeader: %v", err)
	}
	if string(got) != string(raw) {
		t.Fatalf("ReadHeader returned %d bytes, want the %d header bytes", len(got), len(raw))
	}
	var h Header
	var in Info
	if err := v.Verify(got, &h, &in); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	rest := make([]byte, len(mqtt))
	if _, err := io.ReadFull(server, rest); err != nil {
		t.Fatal(err)
	}
	if string(rest) != string(mqtt) {
		t.Fatalf("bytes after the header = % X, want % X", rest, mqtt)
	}
}

func TestReadHeaderRefusals(t *testing.T) {
	big := Header{Command: CommandProxy, Source: src, Dest: dstAddr, TLVs: []TLV{{0xE2, make([]byte, 2000)}}}
	bigRaw, _ := big.Append(nil)
	mid := Header{Command: CommandProxy, Source: src, Dest: dstAddr, TLVs: []TLV{{0xE2, make([]byte, 500)}}}
	midRaw, _ := mid.Append(nil)
	tests := []struct {
		name    string
		send    []byte
		close   bool
		wantErr error
	}{
		{"stalls inside the fixed part", []byte(Signature[:8]), false, os.ErrDeadlineExceeded},
		{"stalls inside the body", midRaw[:40], false, os.ErrDeadlineExceeded},
		{"larger than allowed, refused before its body", bigRaw[:FixedLen], false, ErrTooLarge},
		{"plain MQTT instead", []byte("\x10\x12\x00\x04MQTT\x04\x02\x00\x3c\x00\x06client"), false, ErrNoSignature},
		{"closed early", []byte(Signature), true, io.ErrUnexpectedEOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			if _, err := client.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			if tc.close {
				client.Close()
			}
			start := time.Now()
			_, err := ReadHeader(server, 200*time.Millisecond, 1024, nil)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ReadHeader error = %v, want %v", err, tc.wantErr)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("ReadHeader took %v with a 200 ms deadline", el)
			}
		})
	}
}
