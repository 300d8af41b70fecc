package node

import (
	"slices"
	"strings"
	"testing"

	"berth.dev/broker/handoff"
)

// frames splits b into its frames' types and bodies.
func frames(t *testing.T, b []byte) (types []byte, bodies [][]byte) {
	t.Helper()
	for len(b) > 0 {
		typ, body, rest, err := handoff.Split(b)
		if err != nil {
			t.Fatalf("greeting: %v after %d frames", err, len(types))
		}
		types, bodies, b = append(types, typ), append(bodies, body), rest
	}
	return types, bodies
}

// TestGreeting: a gateway's connection opens with the hello listing the
// devices taken, then their credentials; when one of them cannot be
// listed (a tenant id too long for any frame), with one whole hello
// listing none and nothing after it, not the frames that fitted (a hello
// promising more, or a credentials frame first, which the gateway takes
// for a broken node and dials again).
func TestGreeting(t *testing.T) {
	live := []handoff.Live{{ID: 1, Tenant: "ten_a", Credential: "cred_a"}, {ID: 2, Tenant: "ten_b", Credential: "cred_b"}}
	b, err := greeting("node_1", live)
	if err != nil {
		t.Fatal(err)
	}
	types, bodies := frames(t, b)
	if !slices.Equal(types, []byte{handoff.TypeHello, handoff.TypeCredentials}) {
		t.Fatalf("frame types %v, want a hello and credentials", types)
	}
	id, more, listed, err := handoff.ParseHello(bodies[0], nil)
	if err != nil || id != "node_1" || more || len(listed) != 2 {
		t.Fatalf("hello: %q more %v %v, %v", id, more, listed, err)
	}

	for _, c := range []struct {
		name string
		live []handoff.Live
	}{
		{"alone", []handoff.Live{{ID: 3, Tenant: strings.Repeat("t", handoff.MaxFrame), Credential: "cred_c"}}},
		{"after some that fit", append(slices.Clone(live), handoff.Live{ID: 3, Tenant: strings.Repeat("t", 0xFFFF), Credential: "cred_c"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := greeting("node_1", c.live)
			if err == nil {
				t.Fatal("no error for a tenant id too long")
			}
			types, bodies := frames(t, b)
			if !slices.Equal(types, []byte{handoff.TypeHello}) {
				t.Fatalf("frame types %v, want one hello", types)
			}
			id, more, listed, err := handoff.ParseHello(bodies[0], nil)
			if err != nil || id != "node_1" || more || len(listed) != 0 {
				t.Fatalf("hello: %q more %v %v, %v; want node_1 listing none, no more", id, more, listed, err)
			}
		})
	}
}
