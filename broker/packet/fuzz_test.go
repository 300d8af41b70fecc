package packet

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func addSeeds(f *testing.F) {
	for _, tc := range goodPackets {
		f.Add(tc.version, mustHex(tc.raw))
	}
	for _, tc := range badPackets {
		f.Add(tc.version, mustHex(tc.raw))
	}
}

// FuzzDecode: any bytes decode without panicking into a ReasonCode error or
// a packet; a decoded packet re-encodes, and the re-encoding decodes to the
// same packet and encodes to the same bytes again.
func FuzzDecode(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, version byte, raw []byte) {
		version = Version31 + version%3
		p, err := decodeInto(nil, version, raw)
		if err != nil {
			var code ReasonCode
			if !errors.As(err, &code) || !code.IsFailure() {
				t.Fatalf("error %v is not a failure ReasonCode", err)
			}
			return
		}
		ev := encodeVersion(p, version)
		enc, err := p.Append(nil, ev)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", p, err)
		}
		p2, err := decodeInto(nil, ev, enc)
		if err != nil {
			t.Fatalf("re-decode % x: %v", enc, err)
		}
		if diff := cmp.Diff(p, p2, equateEmpty); diff != "" {
			t.Fatalf("re-decoded packet differs (-first +second):\n%s", diff)
		}
		enc2, err := p2.Append(nil, ev)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable: % x vs % x (%v)", enc, enc2, err)
		}
	})
}

// FuzzReader: a stream read in randomly sized pieces yields the same packets
// and the same final error as the stream read whole, also when bodies are
// read in two steps, some of them straight into a buffer of their own
// (Header, BodyInto), as the broker reads big PUBLISH packets.
func FuzzReader(f *testing.F) {
	all := stream()
	f.Add(all, uint64(1))
	for _, tc := range badPackets {
		f.Add(append(bytes.Clone(all[:40]), mustHex(tc.raw)...), uint64(len(tc.name)))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		const maxSize = 1 << 16
		want, wantErr := readAll(NewReader(bytes.NewReader(data), 1<<17), maxSize)
		src := &chunkReader{data: data, rnd: rand.New(rand.NewPCG(seed, seed>>7)), max: 1 + int(seed%61)}
		got, gotErr := readAllIdle(t, NewReader(src, 16), src, maxSize)
		if !sameErr(wantErr, gotErr) {
			t.Fatalf("final error %v, want %v", gotErr, wantErr)
		}
		if len(got) != len(want) {
			t.Fatalf("%d packets, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i].fh != want[i].fh || !bytes.Equal(got[i].body, want[i].body) {
				t.Fatalf("packet %d differs", i)
			}
		}
	})
}

// readAllIdle is readAll as a connection's reader does it: whenever
// nothing is buffered it hands its buffer back and takes another (Release,
// Use), and Ready must promise exactly that reading the next packet does
// not read from the stream. Packets are read whole (ReadPacket), or in two
// steps with the body in the Reader's buffer (Header, Body) or straight
// into one of the caller's (Header, BodyInto), at random.
func readAllIdle(t *testing.T, r *Reader, src *chunkReader, maxSize int) ([]readResult, error) {
	var out []readResult
	for {
		if b := r.Release(); b != nil {
			r.Use(make([]byte, 16+src.rnd.IntN(48)))
		}
		ready, reads := r.Ready(), src.reads
		var fh FixedHeader
		var body []byte
		var err error
		switch src.rnd.IntN(3) {
		case 0:
			fh, body, err = r.ReadPacket(maxSize)
		case 1:
			if fh, err = r.Header(maxSize); err == nil {
				body, err = r.Body()
			}
		default:
			if fh, err = r.Header(maxSize); err != nil {
				break
			}
			if again, _ := r.Header(maxSize); again != fh {
				t.Fatalf("Header again returned %v, want %v", again, fh)
			}
			n := len(r.buf)
			// A buffer with bytes before and after the body's, which
			// BodyInto must leave alone.
			dst := bytes.Repeat([]byte{0xA5}, fh.Remaining+2)
			if err = r.BodyInto(dst[1 : 1+fh.Remaining]); err != nil {
				break
			}
			if dst[0] != 0xA5 || dst[len(dst)-1] != 0xA5 {
				t.Fatalf("BodyInto wrote outside its buffer")
			}
			if len(r.buf) != n {
				t.Fatalf("BodyInto grew the buffer from %d to %d bytes", n, len(r.buf))
			}
			body = dst[1 : 1+fh.Remaining]
		}
		if ready && src.reads != reads {
			t.Fatalf("Ready() was true, yet reading the packet read from the stream")
		}
		if err != nil {
			return out, err
		}
		out = append(out, readResult{fh, bytes.Clone(body)})
	}
}

func sameErr(a, b error) bool {
	if a == b {
		return true
	}
	if a == io.EOF || b == io.EOF || a == io.ErrUnexpectedEOF || b == io.ErrUnexpectedEOF {
		return false
	}
	var ca, cb ReasonCode
	return errors.As(a, &ca) && errors.As(b, &cb) && ca == cb
}
