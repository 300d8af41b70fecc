package handoff

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The annotated bytes of each frame type.
func TestFrameBytes(t *testing.T) {
	hello, err := AppendHellos(nil, "n1", []Live{{ID: 7, Tenant: "ten_a"}})
	if err != nil {
		t.Fatal(err)
	}
	handoff, err := AppendHandoff(nil, 0x0102, []byte("HDR"))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := AppendCredentials(nil, []Live{{ID: 7, Tenant: "ten_a", Credential: "cr_1"}, {ID: 8}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		got  []byte
		want []byte
	}{
		{"hello", hello, []byte{
			0, 0, 0, 20, // length
			0x01,        // hello
			0,           // flags: last
			2, 'n', '1', // node id
			0, 0, 0, 0, 0, 0, 0, 7, // handoff id
			0, 5, 't', 'e', 'n', '_', 'a', // tenant
		}},
		{"handoff", handoff, []byte{0, 0, 0, 12, 0x02, 0, 0, 0, 0, 0, 0, 1, 2, 'H', 'D', 'R'}},
		{"taken", AppendID(nil, TypeTaken, 9), []byte{0, 0, 0, 9, 0x03, 0, 0, 0, 0, 0, 0, 0, 9}},
		{"refused", AppendRefused(nil, 9, RefusedNotLeader), []byte{0, 0, 0, 10, 0x04, 0, 0, 0, 0, 0, 0, 0, 9, 1}},
		{"closed", AppendID(nil, TypeClosed, 9), []byte{0, 0, 0, 9, 0x05, 0, 0, 0, 0, 0, 0, 0, 9}},
		{"close", AppendID(nil, TypeClose, 9), []byte{0, 0, 0, 9, 0x06, 0, 0, 0, 0, 0, 0, 0, 9}},
		{"credentials", creds, []byte{
			0, 0, 0, 23, // length
			0x07,                   // credentials
			0, 0, 0, 0, 0, 0, 0, 7, // handoff id
			4, 'c', 'r', '_', '1', // credential id
			0, 0, 0, 0, 0, 0, 0, 8, // handoff id
			0, // no credential known
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Equal(tc.got, tc.want) {
				t.Fatalf("got  % x\nwant % x", tc.got, tc.want)
			}
		})
	}
}

// A hello too long for one frame is split, every frame within MaxFrame,
// and the entries come back in order.
func TestHelloSplit(t *testing.T) {
	var live []Live
	for i := range 5000 {
		live = append(live, Live{ID: uint64(i), Tenant: "ten_" + strings.Repeat("x", i%40)})
	}
	b, err := AppendHellos(nil, "node-1", live)
	if err != nil {
		t.Fatal(err)
	}
	var got []Live
	frames := 0
	for more := true; more; frames++ {
		typ, body, rest, err := Split(b)
		if err != nil || typ != TypeHello {
			t.Fatalf("frame %d: type %#x, %v", frames, typ, err)
		}
		var id string
		if id, more, got, err = ParseHello(body, got); err != nil || id != "node-1" {
			t.Fatalf("frame %d: node %q, %v", frames, id, err)
		}
		b = rest
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes after the last hello", len(b))
	}
	if frames < 2 {
		t.Fatalf("%d frame(s) for %d entries", frames, len(live))
	}
	if d := cmp.Diff(live, got); d != "" {
		t.Fatalf("entries (-sent +read):\n%s", d)
	}
	t.Logf("%d entries in %d hello frames", len(live), frames)
}

func TestSplitBounds(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want error
	}{
		{[]byte{0, 0, 0}, ErrShort},
		{[]byte{0, 0, 0, 0}, ErrFrameSize},
		{[]byte{0, 1, 0, 1, 1}, ErrFrameSize}, // MaxFrame + 1
		{[]byte{0, 0, 0, 9, 3, 0}, ErrShort},
	} {
		if _, _, _, err := Split(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("% x: %v, want %v", tc.in, err, tc.want)
		}
	}
	if _, err := AppendHandoff(nil, 1, make([]byte, MaxFrame)); !errors.Is(err, ErrFrameSize) {
		t.Fatalf("oversized handoff: %v", err)
	}
}

// Credentials too many for one frame are split, every frame within
// MaxFrame, and come back in order; an oversized credential id or tenant
// id is an error, not a frame that cannot fit.
func TestCredentialsSplit(t *testing.T) {
	var live []Live
	for i := range 3000 {
		live = append(live, Live{ID: uint64(i), Credential: "cr_" + strings.Repeat("y", i%200)})
	}
	b, err := AppendCredentials(nil, live)
	if err != nil {
		t.Fatal(err)
	}
	var got []Live
	frames := 0
	for ; len(b) > 0; frames++ {
		typ, body, rest, err := Split(b)
		if err != nil || typ != TypeCredentials {
			t.Fatalf("frame %d: type %#x, %v", frames, typ, err)
		}
		if got, err = ParseCredentials(body, got); err != nil {
			t.Fatalf("frame %d: %v", frames, err)
		}
		b = rest
	}
	if frames < 2 {
		t.Fatalf("%d frame(s) for %d entries", frames, len(live))
	}
	if d := cmp.Diff(live, got); d != "" {
		t.Fatalf("entries (-sent +read):\n%s", d)
	}
	if b, err := AppendCredentials(nil, nil); err != nil || len(b) != 0 {
		t.Fatalf("no entries: % x, %v", b, err)
	}
	if _, err := AppendCredentials(nil, []Live{{ID: 1, Credential: strings.Repeat("c", MaxCredential+1)}}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversized credential id: %v", err)
	}
	if _, err := AppendHellos(nil, strings.Repeat("n", 255), []Live{{ID: 1, Tenant: strings.Repeat("t", 0xFFFF)}}); !errors.Is(err, ErrFrameSize) {
		t.Fatalf("a tenant id that fits no hello: %v", err)
	}
	if _, err := ParseCredentials([]byte{0, 0, 0, 0, 0, 0, 0, 1, 3, 'a'}, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated entry: %v", err)
	}
}
