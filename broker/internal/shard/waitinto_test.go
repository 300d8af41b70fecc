//go:build linux

package shard

import (
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

// socketEmpty reports whether nothing is left to read in c's socket: a
// non-blocking peek finds nothing.
func socketEmpty(t *testing.T, r *rawIO) bool {
	t.Helper()
	var empty bool
	if err := r.rc.Control(func(fd uintptr) {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		empty = errors.Is(err, syscall.EAGAIN)
	}); err != nil {
		t.Fatal(err)
	}
	return empty
}

// TestWaitInto: a busy reader's wait (rawIO.waitInto) reads what comes
// into its buffer instead of peeking at it, one system call for a lone
// packet: the bytes leave the socket and are what the packet reader's
// next Read returns, where they landed, without the net package's Read.
// Its deadline, the end of the stream and a reset end it as they end
// waitReadable, and the reads after it never wait.
func TestWaitInto(t *testing.T) {
	client, cc, raw, rd := countedRawReader(t)
	var small [smallReadBufSize]byte
	rb := make([]byte, readBufSize)
	ping := []byte{0xC0, 0x00} // PINGREQ

	// A lone packet: read out of the socket, held for the next Read.
	if _, err := client.Write(ping); err != nil {
		t.Fatal(err)
	}
	if err := raw.waitInto(rb); err != nil {
		t.Fatal(err)
	}
	if raw.input != inputMore || !socketEmpty(t, raw) {
		t.Fatalf("input %v, socket empty %v; want input read out of the socket", raw.input, socketEmpty(t, raw))
	}
	if n, err := rd.Read(rb); err != nil || n != len(ping) || rb[0] != 0xC0 || rb[1] != 0 {
		t.Fatalf("read %d, %v (% x); want the PINGREQ", n, err, rb[:n])
	}

	// More than the buffer holds: 64 bytes are read, the rest stays for
	// the reads after them, which copy the 64 into theirs first.
	big := make([]byte, 200)
	for i := range big {
		big[i] = byte(i)
	}
	if _, err := client.Write(big); err != nil {
		t.Fatal(err)
	}
	if err := raw.waitInto(small[:]); err != nil || raw.input != inputMore {
		t.Fatalf("waitInto: %v, input %v; want more", err, raw.input)
	}
	got := make([]byte, 0, len(big))
	for len(got) < len(big) {
		n, err := rd.Read(rb)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rb[:n]...)
	}
	for i := range got {
		if got[i] != big[i] {
			t.Fatalf("byte %d is %d, want %d", i, got[i], big[i])
		}
	}
	if cc.reads.Load() != 0 {
		t.Fatalf("%d reads through nc, want none", cc.reads.Load())
	}

	// Its deadline ends it, and the read after it does not wait.
	if err := cc.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := raw.waitInto(small[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("waitInto past its deadline: %v, want a timeout", err)
	}
	if n := raw.tryRead(rb); n != 0 {
		t.Fatalf("tryRead of an empty socket: %d", n)
	}
	if err := cc.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	// The end of the stream: nothing held, input end.
	client.Close()
	if err := raw.waitInto(small[:]); err != nil || raw.input != inputEnd || raw.inputErr != 0 {
		t.Fatalf("waitInto at the end: %v, input %v %v; want the end, no error", err, raw.input, raw.inputErr)
	}
	if n, err := rd.Read(rb); n != 0 || err != io.EOF {
		t.Fatalf("read after the end: %d, %v; want 0, io.EOF", n, err)
	}
}
