package proxyheader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"berth.dev/broker/proxyproto"
)

// countingReader hands out at most chunk bytes per Read and counts what
// it gave, so a test sees whether Read took a byte past the header.
type countingReader struct {
	b     []byte
	chunk int
	read  int
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.read == len(r.b) {
		return 0, io.EOF
	}
	n := min(len(p), r.chunk, len(r.b)-r.read)
	copy(p, r.b[r.read:r.read+n])
	r.read += n
	return n, nil
}

// v2 builds a version 2 header: command, family/transport byte, then the
// address block and TLVs as given.
func v2(cmd, fam byte, rest ...[]byte) []byte {
	body := bytes.Join(rest, nil)
	b := append([]byte(proxyproto.Signature), 0x20|cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// mqttConnect is what follows a header in the tests: the start of an
// MQTT CONNECT, which Read must leave unread.
var mqttConnect = []byte{0x10, 0x0d, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x3c, 0x00, 0x01, 'a'}

func TestRead(t *testing.T) {
	inet := []byte{203, 0, 113, 7, 10, 0, 0, 5, 0xC8, 0x22, 0x07, 0x5B} // 203.0.113.7:51234 -> 10.0.0.5:1883
	inet6 := append(append(netip.MustParseAddr("2001:db8::7").AsSlice(), netip.MustParseAddr("2001:db8::5").AsSlice()...), 0xC8, 0x22, 0x07, 0x5B)
	awsTLV := append([]byte{0xEA, 0x00, 0x17, 0x01}, "vpce-08d2bf15fac5001c9"...)
	tests := []struct {
		name string
		in   []byte
		want Header
		err  error
	}{
		{"v1 TCP4", []byte("PROXY TCP4 203.0.113.7 10.0.0.5 51234 1883\r\n"),
			Header{Version: 1, Source: ap("203.0.113.7:51234"), Dest: ap("10.0.0.5:1883")}, nil},
		{"v1 TCP6", []byte("PROXY TCP6 2001:db8::7 2001:db8::5 51234 1883\r\n"),
			Header{Version: 1, Source: ap("[2001:db8::7]:51234"), Dest: ap("[2001:db8::5]:1883")}, nil},
		{"v1 shortest TCP4", []byte("PROXY TCP4 1.1.1.1 2.2.2.2 1 2\r\n"),
			Header{Version: 1, Source: ap("1.1.1.1:1"), Dest: ap("2.2.2.2:2")}, nil},
		{"v1 longest", []byte("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"),
			Header{Version: 1, Source: ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"), Dest: ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")}, nil},
		{"v1 UNKNOWN", []byte("PROXY UNKNOWN\r\n"), Header{Version: 1, Local: true}, nil},
		{"v1 UNKNOWN with addresses", []byte("PROXY UNKNOWN ffff:: ffff:: 1 2\r\n"), Header{Version: 1, Local: true}, nil},
		{"v2 INET", v2(1, 0x11, inet), Header{Version: 2, Source: ap("203.0.113.7:51234"), Dest: ap("10.0.0.5:1883")}, nil},
		{"v2 INET6", v2(1, 0x21, inet6), Header{Version: 2, Source: ap("[2001:db8::7]:51234"), Dest: ap("[2001:db8::5]:1883")}, nil},
		{"v2 INET with an AWS TLV", v2(1, 0x11, inet, awsTLV), Header{Version: 2, Source: ap("203.0.113.7:51234"), Dest: ap("10.0.0.5:1883")}, nil},
		{"v2 LOCAL (health check)", v2(0, 0x00), Header{Version: 2, Local: true}, nil},
		{"v2 PROXY UNSPEC", v2(1, 0x00), Header{Version: 2, Local: true}, nil},

		{"MQTT, no header", mqttConnect, Header{}, ErrNoHeader},
		{"TLS ClientHello, no header", []byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03abcdefgh"), Header{}, ErrNoHeader},
		{"v1 lower case", []byte("proxy TCP4 1.1.1.1 2.2.2.2 1 2\r\n"), Header{}, ErrNoHeader},
		{"v1 unknown protocol", []byte("PROXY UDP4 1.1.1.1 2.2.2.2 1 2\r\n"), Header{}, ErrMalformed},
		{"v1 IPv6 as TCP4", []byte("PROXY TCP4 2001:db8::7 2001:db8::5 1 2\r\n"), Header{}, ErrMalformed},
		{"v1 IPv4 as TCP6", []byte("PROXY TCP6 1.1.1.1 2.2.2.2 1 2\r\n"), Header{}, ErrMalformed},
		{"v1 zone", []byte("PROXY TCP6 fe80::1%eth0 fe80::2 1 2\r\n"), Header{}, ErrMalformed},
		{"v1 port too big", []byte("PROXY TCP4 1.1.1.1 2.2.2.2 65536 2\r\n"), Header{}, ErrMalformed},
		{"v1 signed port", []byte("PROXY TCP4 1.1.1.1 2.2.2.2 +1 2\r\n"), Header{}, ErrMalformed},
		{"v1 two spaces", []byte("PROXY TCP4 1.1.1.1  2.2.2.2 1 2\r\n"), Header{}, ErrMalformed},
		{"v1 missing port", []byte("PROXY TCP4 1.1.1.1 2.2.2.2 1\r\n"), Header{}, ErrMalformed},
		{"v1 LF only", []byte("PROXY TCP4 1.1.1.1 2.2.2.2 1 2\n0123456789"), Header{}, ErrMalformed},
		{"v1 no end", append([]byte("PROXY UNKNOWN "), bytes.Repeat([]byte{'x'}, 200)...), Header{}, ErrMalformed},
		{"v1 UNKNOWN run on", []byte("PROXY UNKNOWNX\r\n"), Header{}, ErrMalformed},
		{"v2 version 1 nibble", append([]byte(proxyproto.Signature), 0x11, 0x11, 0, 0), Header{}, ErrMalformed},
		{"v2 UDP", v2(1, 0x12, inet), Header{}, ErrMalformed},
		{"v2 unix", v2(1, 0x31, make([]byte, 216)), Header{}, ErrMalformed},
		{"v2 short addresses", v2(1, 0x11, inet[:8]), Header{}, ErrMalformed},
		{"v2 torn TLV", v2(1, 0x11, inet, []byte{0xEA, 0x00, 0x05, 1}), Header{}, ErrMalformed},
		{"v2 too large", append([]byte(proxyproto.Signature), 0x21, 0x11, 0x10, 0x00), Header{}, ErrTooLarge},
		{"short", []byte("PROXY TCP4"), Header{}, io.ErrUnexpectedEOF},
		{"empty", nil, Header{}, io.EOF},
	}
	for _, tc := range tests {
		for _, chunk := range []int{1, 7, 1 << 20} {
			r := &countingReader{b: append(bytes.Clone(tc.in), mqttConnect...), chunk: chunk}
			if tc.err != nil {
				r.b = tc.in
			}
			got, err := Read(r)
			if !errors.Is(err, tc.err) {
				t.Errorf("%s (reads of %d): error %v, want %v", tc.name, chunk, err, tc.err)
				continue
			}
			if err != nil {
				continue
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("%s (reads of %d): header (-want +got):\n%s", tc.name, chunk, diff)
			}
			if r.read != len(tc.in) {
				t.Errorf("%s (reads of %d): read %d bytes, the header is %d", tc.name, chunk, r.read, len(tc.in))
			}
		}
	}
}
