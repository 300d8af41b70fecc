package shard

import (
	"slices"
	"testing"

	"berth.dev/broker/packet"
)

// TestSessionOwners: the credentials owning sessions, connected or
// offline, each once; a session that ended is no one's.
func TestSessionOwners(t *testing.T) {
	t.Parallel()
	sh := New(Options{SysInterval: -1})
	a := serveHooked(t, sh, credInfo(t, "crd_a", `["#"]`), nil)
	b := serveHooked(t, sh, credInfo(t, "crd_b", `["#"]`), nil)

	live := dialRaw(t, a, packet.Version5)
	live.connectOK("a-live")
	for _, id := range []string{"a-offline", "b-offline"} {
		addr := a
		if id == "b-offline" {
			addr = b
		}
		c := dialRaw(t, addr, packet.Version5)
		if ack := c.connect(sessionConnect(id, 3600, true)); ack.Reason != packet.CodeSuccess {
			t.Fatalf("%s: CONNACK %v", id, ack.Reason)
		}
		c.send(&packet.Disconnect{})
		c.expectClosed()
	}
	eventually(t, "three sessions", func() bool { return len(sh.Sessions()) == 3 })
	if got := sh.SessionOwners(); !slices.Equal(got, []string{"crd_a", "crd_b"}) {
		t.Fatalf("owners %v, want [crd_a crd_b]", got)
	}
	if n := sh.EndSessionsOf("crd_b", packet.ErrNotAuthorized); n != 1 {
		t.Fatalf("ended %d sessions of crd_b, want 1", n)
	}
	if got := sh.SessionOwners(); !slices.Equal(got, []string{"crd_a"}) {
		t.Fatalf("owners after crd_b's session ended %v, want [crd_a]", got)
	}
}
