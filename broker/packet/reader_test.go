package packet

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"testing/iotest"
	"time"
)

// chunkReader returns its data in pieces of pseudo-random size (1..max).
type chunkReader struct {
	data  []byte
	rnd   *rand.Rand
	max   int
	reads int // calls to Read
}

func (c *chunkReader) Read(p []byte) (int, error) {
	c.reads++
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+c.rnd.IntN(c.max), len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

type readResult struct {
	fh   FixedHeader
	body []byte
}

// readAll reads packets until an error and returns them with the error.
func readAll(r *Reader, maxSize int) ([]readResult, error) {
	var out []readResult
	for {
		fh, body, err := r.ReadPacket(maxSize)
		if err != nil {
			return out, err
		}
		out = append(out, readResult{fh, bytes.Clone(body)})
	}
}

// stream concatenates every packet of the good table.
func stream() []byte {
	var all []byte
	for _, tc := range goodPackets {
		all = append(all, mustHex(tc.raw)...)
	}
	return all
}

func TestReaderSplits(t *testing.T) {
	all := stream()
	want, err := readAll(NewReader(bytes.NewReader(all), 4096), 0)
	if err != io.EOF || len(want) != len(goodPackets) {
		t.Fatalf("unsplit read: %d packets, %v", len(want), err)
	}
	readers := map[string]io.Reader{
		"one byte":      iotest.OneByteReader(bytes.NewReader(all)),
		"half":          iotest.HalfReader(bytes.NewReader(all)),
		"data with EOF": iotest.DataErrReader(bytes.NewReader(all)),
		"random chunks": &chunkReader{data: all, rnd: rand.New(rand.NewPCG(1, 2)), max: 7},
	}
	for name, src := range readers {
		t.Run(name, func(t *testing.T) {
			got, err := readAll(NewReader(src, 16), 0)
			if err != io.EOF {
				t.Fatalf("err = %v, want io.EOF", err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d packets, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i].fh != want[i].fh || !bytes.Equal(got[i].body, want[i].body) {
					t.Errorf("packet %d: got %v % x, want %v % x", i, got[i].fh, got[i].body, want[i].fh, want[i].body)
				}
			}
		})
	}
}

// TestReaderTCP reads packets written in small pieces over a real socket.
func TestReaderTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	all := stream()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		for rest := all; len(rest) > 0; {
			n := min(3, len(rest))
			if _, err := c.Write(rest[:n]); err != nil {
				done <- err
				return
			}
			rest = rest[n:]
		}
		done <- nil
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := readAll(NewReader(c, 32), 1024)
	if err != io.EOF {
		t.Fatalf("err = %v, want io.EOF", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != len(goodPackets) {
		t.Fatalf("%d packets, want %d", len(got), len(goodPackets))
	}
	for i, tc := range goodPackets {
		raw := mustHex(tc.raw)
		_, n, _ := ParseFixedHeader(raw)
		if !bytes.Equal(got[i].body, raw[n:]) {
			t.Errorf("%s: body % x, want % x", tc.name, got[i].body, raw[n:])
		}
	}
}

func TestReaderLimits(t *testing.T) {
	t.Run("too large before body", func(t *testing.T) {
		// Declares 268,435,455 bytes, sends none of them.
		r := NewReader(bytes.NewReader([]byte{0x30, 0xff, 0xff, 0xff, 0x7f}), 64)
		_, _, err := r.ReadPacket(1 << 20)
		if !errors.Is(err, ErrPacketTooLarge) {
			t.Fatalf("err = %v, want ErrPacketTooLarge", err)
		}
		if len(r.buf) != 64 {
			t.Errorf("buffer grew to %d", len(r.buf))
		}
	})
	t.Run("max size counts the fixed header", func(t *testing.T) {
		raw := mustHex(`30 0a 00 03 61 2f 62 68 65 6c 6c 6f`) // 12 bytes
		if _, _, err := NewReader(bytes.NewReader(raw), 64).ReadPacket(12); err != nil {
			t.Errorf("12-byte packet with max 12: %v", err)
		}
		if _, _, err := NewReader(bytes.NewReader(raw), 64).ReadPacket(11); !errors.Is(err, ErrPacketTooLarge) {
			t.Errorf("12-byte packet with max 11: %v", err)
		}
	})
	t.Run("huge declared length grows with data only", func(t *testing.T) {
		// Declares 10 MB within the limit but the peer sends 1,000 bytes.
		raw := append([]byte{0x30, 0x80, 0xad, 0xe2, 0x04}, make([]byte, 1000)...)
		r := NewReader(bytes.NewReader(raw), 256)
		_, _, err := r.ReadPacket(16 << 20)
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
		}
		if len(r.buf) > 4096 {
			t.Errorf("buffer grew to %d for 1,005 received bytes", len(r.buf))
		}
	})
	t.Run("malformed length", func(t *testing.T) {
		_, _, err := NewReader(bytes.NewReader([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}), 64).ReadPacket(0)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("err = %v, want ErrMalformed", err)
		}
	})
	t.Run("reserved flags", func(t *testing.T) {
		_, _, err := NewReader(bytes.NewReader([]byte{0x80, 0x00} /* SUBSCRIBE with flags 0000 */), 64).ReadPacket(0)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("err = %v, want ErrMalformed", err)
		}
	})
	t.Run("EOF inside header", func(t *testing.T) {
		_, _, err := NewReader(bytes.NewReader([]byte{0x30, 0x80}), 64).ReadPacket(0)
		if err != io.ErrUnexpectedEOF {
			t.Errorf("err = %v, want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("no progress", func(t *testing.T) {
		_, _, err := NewReader(zeroReader{}, 64).ReadPacket(0)
		if err != ErrNoProgress {
			t.Errorf("err = %v, want ErrNoProgress", err)
		}
	})
	t.Run("large packet after small ones", func(t *testing.T) {
		big := &Publish{Topic: b("t"), Payload: bytes.Repeat([]byte{7}, 100_000)}
		raw, _ := big.Append(mustHex(`c0 00`), Version311)
		raw = append(raw, 0xd0, 0x00)
		got, err := readAll(NewReader(&chunkReader{data: raw, rnd: rand.New(rand.NewPCG(3, 4)), max: 5000}, 16), 200_000)
		if err != io.EOF || len(got) != 3 || !bytes.Equal(got[1].body[3:], big.Payload) || got[2].fh.Type != TypePingresp {
			t.Errorf("got %d packets, %v", len(got), err)
		}
	})
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestReaderReset(t *testing.T) {
	raw := mustHex(`c0 00 d0 00`)
	r := NewReader(bytes.NewReader(raw[:3]), 16)
	if fh, _, err := r.ReadPacket(0); err != nil || fh.Type != TypePingreq || fh.Size() != 2 {
		t.Fatalf("first read: %v %v", fh, err)
	}
	r.Reset(bytes.NewReader(raw[2:]))
	if fh, _, err := r.ReadPacket(0); err != nil || fh.Type != TypePingresp {
		t.Fatalf("after Reset: %v %v", fh, err)
	}
	if _, _, err := r.ReadPacket(0); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// TestReaderReady: Ready is true exactly when ReadPacket would not read
// from the stream, with the packet boundary anywhere in the input.
func TestReaderReady(t *testing.T) {
	one := mustHex(goodPackets[0].raw)
	two := append(bytes.Clone(one), one...)
	for cut := 0; cut <= len(two); cut++ {
		// The stream holds two[:cut]; the rest never arrives.
		r := NewReader(iotest.OneByteReader(bytes.NewReader(two[:cut])), 4096)
		// Fill the buffer with everything the stream has.
		for r.Buffered() < cut {
			if err := r.fill(r.end + 1); err != nil {
				t.Fatal(err)
			}
		}
		for n := 0; ; n++ {
			whole := cut - n*len(one)
			if got, want := r.Ready(), whole >= len(one); got != want {
				t.Fatalf("cut %d, after %d packets: Ready() = %v", cut, n, got)
			}
			if !r.Ready() {
				break
			}
			if _, _, err := r.ReadPacket(0); err != nil {
				t.Fatal(err)
			}
		}
	}
	bad := NewReader(bytes.NewReader([]byte{0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}), 16)
	if err := bad.fill(6); err != nil {
		t.Fatal(err)
	}
	if !bad.Ready() {
		t.Fatal("a malformed fixed header is ready: ReadPacket fails at once")
	}
}

// TestReaderReleaseUse: the buffer is handed back only when nothing is
// buffered, and reading goes on with the buffer given next.
func TestReaderReleaseUse(t *testing.T) {
	one := mustHex(goodPackets[0].raw)
	r := NewReader(bytes.NewReader(append(bytes.Clone(one), one...)), 4096)
	if _, _, err := r.ReadPacket(0); err != nil {
		t.Fatal(err)
	}
	if b := r.Release(); b != nil {
		t.Fatal("released a buffer holding a packet")
	}
	if _, _, err := r.ReadPacket(0); err != nil {
		t.Fatal(err)
	}
	b := r.Release()
	if len(b) != 4096 || r.Release() != nil {
		t.Fatalf("released %d bytes, then again", len(b))
	}
	r.Reset(bytes.NewReader(one))
	r.Use(make([]byte, 0, 64))
	if _, body, err := r.ReadPacket(0); err != nil || len(body)+2 > len(one) {
		t.Fatalf("after Use: %v", err)
	}
}

// TestReaderBodyInto: a body read into the caller's buffer comes straight
// from the stream, without growing the Reader's buffer or reading past
// the packet, so the next packet reads as usual; a body read without its
// header, or into a buffer of the wrong size, is an error.
func TestReaderBodyInto(t *testing.T) {
	big := &Publish{Topic: b("t"), Payload: bytes.Repeat([]byte{7}, 100_000)}
	raw, _ := big.Append(nil, Version311)
	raw = append(raw, 0xc0, 0x00) // PINGREQ
	r := NewReader(&chunkReader{data: raw, rnd: rand.New(rand.NewPCG(5, 6)), max: 7000}, 16)
	if _, err := r.Body(); err != errNoHeader {
		t.Fatalf("Body before Header: %v", err)
	}
	fh, err := r.Header(0)
	if err != nil || fh.Type != TypePublish {
		t.Fatal(fh, err)
	}
	if err := r.BodyInto(make([]byte, fh.Remaining-1)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("BodyInto a short buffer: %v", err)
	}
	dst := make([]byte, fh.Remaining)
	if err := r.BodyInto(dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst[3:], big.Payload) || len(r.buf) != 16 {
		t.Fatalf("payload read: %v, buffer %d bytes", bytes.Equal(dst[3:], big.Payload), len(r.buf))
	}
	if err := r.BodyInto(dst); err != errNoHeader {
		t.Fatalf("a second BodyInto: %v", err)
	}
	if fh, _, err := r.ReadPacket(0); err != nil || fh.Type != TypePingreq {
		t.Fatalf("the next packet: %v %v", fh.Type, err)
	}
}
