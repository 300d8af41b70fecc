package proxyproto

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hexBytes decodes annotated hex: everything after '#' on a line is a
// comment, spaces and newlines are ignored, and "quoted" runs are literal.
func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	var out []byte
	for _, line := range strings.Split(s, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for len(line) > 0 {
			line = strings.TrimLeft(line, " \t")
			if line == "" {
				break
			}
			if line[0] == '"' {
				end := strings.IndexByte(line[1:], '"')
				if end < 0 {
					t.Fatalf("unterminated quote in %q", line)
				}
				out = append(out, line[1:1+end]...)
				line = line[end+2:]
				continue
			}
			end := strings.IndexAny(line, " \t\"")
			if end < 0 {
				end = len(line)
			}
			b, err := hex.DecodeString(line[:end])
			if err != nil {
				t.Fatalf("bad hex %q: %v", line[:end], err)
			}
			out = append(out, b...)
			line = line[end:]
		}
	}
	return out
}

const sig = "0D0A0D0A000D0A515549540A # signature\n"

// headerCases drive both Parse and Append (when wantErr is nil, encoding
// want must give back exactly the bytes) and seed the fuzz targets.
var headerCases = []struct {
	name    string
	bytes   string
	want    Header
	wantErr error
}{
	{
		name: "IPv4 PROXY, no TLVs",
		bytes: sig + `
			21        # version 2, PROXY
			11        # INET, STREAM
			000C      # 12 bytes follow
			C0A80001  # src 192.168.0.1
			0A000002  # dst 10.0.0.2
			D431      # src port 54321
			075B      # dst port 1883`,
		want: Header{Command: CommandProxy,
			Source: netip.MustParseAddrPort("192.168.0.1:54321"),
			Dest:   netip.MustParseAddrPort("10.0.0.2:1883")},
	},
	{
		name: "IPv6 PROXY with two TLVs",
		bytes: sig + `
			21 21     # v2 PROXY; INET6, STREAM
			0030      # 36 address bytes + 2 TLVs of 3+3 and 3+3
			20010DB8000000000000000000000001  # src 2001:db8::1
			20010DB8000000000000000000000002  # dst 2001:db8::2
			0050 1EDB # ports 80 -> 7899
			E0 0003 "ten"   # tenant id
			E1 0003 "crd"   # credential id`,
		want: Header{Command: CommandProxy,
			Source: netip.MustParseAddrPort("[2001:db8::1]:80"),
			Dest:   netip.MustParseAddrPort("[2001:db8::2]:7899"),
			TLVs:   []TLV{{TLVTenantID, []byte("ten")}, {TLVCredentialID, []byte("crd")}}},
	},
	{
		name: "LOCAL, UNSPEC",
		bytes: sig + `
			20 00 0000 # v2 LOCAL; UNSPEC; no body`,
		want: Header{Command: CommandLocal},
	},
	{
		name:    "no signature",
		bytes:   `0D0A0D0A000D0A515549540B 21 11 0000 # last signature byte wrong`,
		wantErr: ErrNoSignature,
	},
	{
		name:    "version 1",
		bytes:   sig + `11 11 0000 # version nibble 1`,
		wantErr: ErrVersion,
	},
	{
		name:    "unknown command",
		bytes:   sig + `22 11 000C C0A80001 0A000002 D431 075B # command 2`,
		wantErr: ErrCommand,
	},
	{
		name:    "UDP transport",
		bytes:   sig + `21 12 000C C0A80001 0A000002 D431 075B # DGRAM`,
		wantErr: ErrFamily,
	},
	{
		name:    "addresses cut short",
		bytes:   sig + `21 11 0008 C0A80001 0A000002 # only 8 of 12 address bytes`,
		wantErr: ErrShort,
	},
	{
		name:    "TLV header cut short",
		bytes:   sig + `21 11 000E C0A80001 0A000002 D431 075B E0 00 # 2 of 3 TLV header bytes`,
		wantErr: ErrTLV,
	},
	{
		name:    "TLV value runs past the end",
		bytes:   sig + `21 11 0010 C0A80001 0A000002 D431 075B E0 0005 "t" # says 5, has 1`,
		wantErr: ErrTLV,
	},
	{
		name:    "length disagrees with the bytes",
		bytes:   sig + `21 11 000D C0A80001 0A000002 D431 075B # says 13, has 12`,
		wantErr: ErrMalformed,
	},
}

func TestParse(t *testing.T) {
	for _, tc := range headerCases {
		t.Run(tc.name, func(t *testing.T) {
			raw := hexBytes(t, tc.bytes)
			var h Header
			err := h.Parse(raw)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !errors.Is(err, ErrMalformed) {
					t.Fatalf("Parse error = %v, want %v (and ErrMalformed)", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, h, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Fatalf("Parse (-want +got):\n%s", diff)
			}
			enc, err := tc.want.Append(nil)
			if err != nil {
				t.Fatalf("Append: %v", err)
			}
			if string(enc) != string(raw) {
				t.Fatalf("Append = % X\nwant     % X", enc, raw)
			}
		})
	}
}

func TestAppendAddresses(t *testing.T) {
	tests := []struct {
		name     string
		src, dst string
		fam      byte
		wantErr  error
	}{
		{"IPv4", "1.2.3.4:5", "6.7.8.9:10", famInet | transStream, nil},
		{"IPv4-mapped both sides becomes INET", "[::ffff:1.2.3.4]:5", "[::ffff:6.7.8.9]:10", famInet | transStream, nil},
		{"mixed becomes INET6", "1.2.3.4:5", "[2001:db8::1]:10", famInet6 | transStream, nil},
		{"only one side", "1.2.3.4:5", "", 0, ErrAddrMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := Header{Command: CommandProxy, Source: parseAP(tc.src), Dest: parseAP(tc.dst)}
			b, err := h.Append(nil)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Append error = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if b[13] != tc.fam {
				t.Fatalf("family byte = %#x, want %#x", b[13], tc.fam)
			}
			var got Header
			if err := got.Parse(b); err != nil {
				t.Fatal(err)
			}
			if got.Source.Addr().Unmap() != h.Source.Addr().Unmap() || got.Source.Port() != h.Source.Port() ||
				got.Dest.Addr().Unmap() != h.Dest.Addr().Unmap() || got.Dest.Port() != h.Dest.Port() {
				t.Fatalf("round trip %v -> %v gave %v -> %v", h.Source, h.Dest, got.Source, got.Dest)
			}
		})
	}
}

func parseAP(s string) netip.AddrPort {
	if s == "" {
		return netip.AddrPort{}
	}
	return netip.MustParseAddrPort(s)
}
