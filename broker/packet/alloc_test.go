package packet

import (
	"bytes"
	"fmt"
	"testing"
)

// samplePublish is a QoS 1 PUBLISH with a payload of size bytes; for MQTT 5
// it carries a message expiry and two user properties.
func samplePublish(version byte, size int) *Publish {
	p := &Publish{QoS: 1, PacketID: 42, Topic: b("tenants/acme/devices/sensor-17/temp"),
		Payload: bytes.Repeat([]byte{'p'}, size)}
	if version == Version5 {
		p.Props.Has.Set(PropMessageExpiry)
		p.Props.MessageExpiry = 3600
		p.Props.UserProperties = []UserProperty{{b("trace"), b("abc123")}, {b("unit"), b("celsius")}}
	}
	return p
}

func encoded(t testing.TB, p codec, version byte) (FixedHeader, []byte) {
	t.Helper()
	raw, err := p.Append(nil, version)
	if err != nil {
		t.Fatal(err)
	}
	fh, n, err := ParseFixedHeader(raw)
	if err != nil || n == 0 {
		t.Fatalf("parse header: %v", err)
	}
	return fh, raw[n:]
}

// loopReader returns data over and over, never EOF.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

func TestZeroAllocs(t *testing.T) {
	for _, v := range []byte{Version311, Version5} {
		t.Run(fmt.Sprintf("PUBLISH decode v%d", v), func(t *testing.T) {
			fh, body := encoded(t, samplePublish(v, 256), v)
			var p Publish
			if err := p.Decode(v, fh, body); err != nil { // warm-up grows UserProperties
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(100, func() {
				if err := p.Decode(v, fh, body); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 || (v == Version5 && len(p.Props.UserProperties) != 2) {
				t.Errorf("%v allocs per decode, %d user properties", allocs, len(p.Props.UserProperties))
			}
		})
		t.Run(fmt.Sprintf("PUBLISH encode v%d", v), func(t *testing.T) {
			p := samplePublish(v, 256)
			buf := make([]byte, 0, 1024)
			allocs := testing.AllocsPerRun(100, func() {
				out, err := p.Append(buf[:0], v)
				if err != nil || len(out) < 256 {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocs per encode", allocs)
			}
		})
		t.Run(fmt.Sprintf("Reader PUBLISH v%d", v), func(t *testing.T) {
			raw, _ := samplePublish(v, 300).Append(nil, v)
			r := NewReader(&loopReader{data: raw}, 4096)
			for range 10 {
				if _, _, err := r.ReadPacket(0); err != nil {
					t.Fatal(err)
				}
			}
			allocs := testing.AllocsPerRun(100, func() {
				fh, body, err := r.ReadPacket(1 << 20)
				if err != nil || fh.Type != TypePublish || len(body) != fh.Remaining {
					t.Fatal(fh, err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocs per ReadPacket", allocs)
			}
		})
		t.Run(fmt.Sprintf("Reader PUBLISH into a buffer v%d", v), func(t *testing.T) {
			raw, _ := samplePublish(v, 20000).Append(nil, v)
			r := NewReader(&loopReader{data: raw}, 4096)
			dst := make([]byte, len(raw))
			allocs := testing.AllocsPerRun(100, func() {
				fh, err := r.Header(1 << 20)
				if err != nil || fh.Type != TypePublish {
					t.Fatal(fh, err)
				}
				if err := r.BodyInto(dst[:fh.Remaining]); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocs per Header and BodyInto", allocs)
			}
		})
	}
	for _, name := range []string{"CONNECT 3.1.1 minimal", "CONNECT 3.1 will user password", "CONNECT 5 properties will",
		"SUBSCRIBE 5 options", "PUBCOMP 5 user property", "DISCONNECT 5 properties"} {
		t.Run("decode "+name, func(t *testing.T) {
			tc := findCase(t, name)
			raw := mustHex(tc.raw)
			fh, n, _ := ParseFixedHeader(raw)
			p := newCodec(fh.Type)
			if err := p.Decode(tc.version, fh, raw[n:]); err != nil {
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(100, func() {
				if err := p.Decode(tc.version, fh, raw[n:]); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocs per decode", allocs)
			}
		})
	}
}

func findCase(t *testing.T, name string) goodCase {
	t.Helper()
	for _, tc := range goodPackets {
		if tc.name == name {
			return tc
		}
	}
	t.Fatalf("no table case %q", name)
	return goodCase{}
}

var sizes = []struct {
	name string
	n    int
}{{"64B", 64}, {"1KiB", 1024}}

func BenchmarkPublishDecode(b *testing.B) {
	for _, v := range []byte{Version311, Version5} {
		for _, sz := range sizes {
			b.Run(fmt.Sprintf("v%d/%s", v, sz.name), func(b *testing.B) {
				fh, body := encoded(b, samplePublish(v, sz.n), v)
				var p Publish
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if err := p.Decode(v, fh, body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkPublishEncode(b *testing.B) {
	for _, v := range []byte{Version311, Version5} {
		for _, sz := range sizes {
			b.Run(fmt.Sprintf("v%d/%s", v, sz.name), func(b *testing.B) {
				p := samplePublish(v, sz.n)
				buf := make([]byte, 0, 4096)
				out, _ := p.Append(buf, v)
				b.ReportAllocs()
				b.SetBytes(int64(len(out)))
				for b.Loop() {
					if _, err := p.Append(buf[:0], v); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkPublishHeader(b *testing.B) {
	p := samplePublish(Version5, 1024)
	buf := make([]byte, 0, 256)
	hdr, _ := p.AppendHeader(buf, Version5)
	b.ReportAllocs()
	b.SetBytes(int64(len(hdr)))
	for b.Loop() {
		h, _ := p.AppendHeader(buf[:0], Version5)
		SetPacketID(h, 7)
	}
}

func BenchmarkReader(b *testing.B) {
	for _, v := range []byte{Version311, Version5} {
		for _, sz := range sizes {
			b.Run(fmt.Sprintf("v%d/%s", v, sz.name), func(b *testing.B) {
				raw, _ := samplePublish(v, sz.n).Append(nil, v)
				// 64 packets per loop so reads are buffer-sized.
				r := NewReader(&loopReader{data: bytes.Repeat(raw, 64)}, 32<<10)
				b.ReportAllocs()
				b.SetBytes(int64(len(raw)))
				for b.Loop() {
					if _, _, err := r.ReadPacket(0); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkConnectDecode(b *testing.B) {
	raw := mustHex(findCaseB(b, "CONNECT 5 properties will").raw)
	fh, n, _ := ParseFixedHeader(raw)
	var c Connect
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if err := c.Decode(0, fh, raw[n:]); err != nil {
			b.Fatal(err)
		}
	}
}

func findCaseB(b *testing.B, name string) goodCase {
	for _, tc := range goodPackets {
		if tc.name == name {
			return tc
		}
	}
	b.Fatalf("no table case %q", name)
	return goodCase{}
}
