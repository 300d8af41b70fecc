package shard

import (
	"testing"
	"time"

	"berth.dev/broker/internal/acl"
	"berth.dev/broker/internal/wal"
	"berth.dev/broker/packet"
)

// credInfo is the ConnInfo of a connection authenticated as credential
// cred whose ACL lets it subscribe to subs (publish anywhere).
func credInfo(t testing.TB, cred string, subs string) ConnInfo {
	t.Helper()
	rules, err := acl.Parse([]byte(`{"pub":["#"],"sub":` + subs + `}`))
	if err != nil {
		t.Fatal(err)
	}
	return ConnInfo{CredentialID: cred, Authorizer: rules, AllowAnonymous: true}
}

// persistentConnect is a CONNECT that keeps its session: MQTT 5 with a
// Session Expiry Interval, 3.1.1 with clean session 0 (unless clean).
func persistentConnect(version byte, id string, clean bool) *packet.Connect {
	if version == packet.Version5 {
		return sessionConnect(id, 3600, clean)
	}
	return &packet.Connect{ClientID: []byte(id), CleanStart: clean}
}

// TestSessionBelongsToItsCredential: another credential naming a session's
// client id gets CONNACK 0x85 (3.1.1: return code 2), resuming or clean,
// while the owner is connected and while it is offline; the owner's
// connection stays, and its session keeps its subscription and queue.
func TestSessionBelongsToItsCredential(t *testing.T) {
	t.Parallel()
	for name, version := range map[string]byte{"mqtt5": packet.Version5, "mqtt311": packet.Version311} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sh := New(Options{SysInterval: -1})
			ownerAddr := serveHooked(t, sh, credInfo(t, "crd_owner", `["#"]`), nil)
			otherAddr := serveHooked(t, sh, credInfo(t, "crd_other", `["#"]`), nil)

			owner := dialRaw(t, ownerAddr, version)
			// (3.1.1: clean session 0 is what keeps a session.)
			if ack := owner.connect(persistentConnect(version, "dev", version == packet.Version5)); ack.Reason != packet.CodeSuccess {
				t.Fatalf("owner CONNACK %v", ack.Reason)
			}
			owner.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("t/#"), QoS: 1})

			pub := dialRaw(t, ownerAddr, packet.Version5)
			pub.connectOK("pub")
			send := func(id uint16, payload string) {
				t.Helper()
				pub.send(&packet.Publish{QoS: 1, PacketID: id, Topic: []byte("t/x"), Payload: []byte(payload)})
				pub.ack(packet.TypePuback)
			}

			refused := func(when string) {
				t.Helper()
				for _, clean := range []bool{false, true} { // clean: 3.1.1 expiry 0 too
					other := dialRaw(t, otherAddr, version)
					ack := other.connect(persistentConnect(version, "dev", clean))
					if ack.Reason != packet.ErrClientIDNotValid || ack.SessionPresent {
						t.Fatalf("%s, clean %v: other credential got CONNACK %v present %v, want %v",
							when, clean, ack.Reason, ack.SessionPresent, packet.ErrClientIDNotValid)
					}
					other.expectClosed()
				}
			}

			refused("owner connected")
			send(1, "live")
			if p := owner.publish(); string(p.Payload) != "live" {
				t.Fatalf("owner got %q", p.Payload)
			} else {
				owner.send(&packet.Ack{Type: packet.TypePuback, PacketID: p.PacketID})
			}

			owner.send(&packet.Disconnect{})
			eventually(t, "owner offline", func() bool {
				ss, ok := sh.SessionStats("dev")
				return ok && !ss.Connected
			})
			send(2, "queued")
			refused("owner offline")

			back := dialRaw(t, ownerAddr, version)
			if ack := back.connect(persistentConnect(version, "dev", false)); ack.Reason != packet.CodeSuccess || !ack.SessionPresent {
				t.Fatalf("owner resuming: CONNACK %v present %v", ack.Reason, ack.SessionPresent)
			}
			if p := back.publish(); string(p.Payload) != "queued" {
				t.Fatalf("owner got %q after resuming, want the queued message", p.Payload)
			}
			for _, si := range sh.Sessions() {
				if si.ClientID == "dev" && si.CredentialID != "crd_owner" {
					t.Fatalf("session credential %q, want crd_owner", si.CredentialID)
				}
			}
		})
	}
}

// TestStandaloneSessionsHaveNoOwner: without credentials (standalone mode)
// a client id's session is taken over as before.
func TestStandaloneSessionsHaveNoOwner(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	first := dialRaw(t, b.addr, packet.Version5)
	first.connect(sessionConnect("dev", 3600, true))
	second := dialRaw(t, b.addr, packet.Version5)
	if ack := second.connect(sessionConnect("dev", 3600, false)); ack.Reason != packet.CodeSuccess || !ack.SessionPresent {
		t.Fatalf("take over: CONNACK %v present %v", ack.Reason, ack.SessionPresent)
	}
	first.expectDisconnect(packet.ErrSessionTakenOver)
}

// TestSessionOwnerSurvivesRestart: the owner is kept in the session's
// record, so after a restart on the same data another credential is still
// refused and the owner resumes its session.
func TestSessionOwnerSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := openWALStore(t, dir, wal.SyncAlways)
	sh := newDurableShard(st)
	addr := serveHooked(t, sh, credInfo(t, "crd_owner", `["#"]`), nil)
	c := dialRaw(t, addr, packet.Version5)
	c.connect(sessionConnect("dev", 3600, true))
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("t/#"), QoS: 1})
	c.send(&packet.Disconnect{})
	eventually(t, "dev offline", func() bool {
		ss, ok := sh.SessionStats("dev")
		return ok && !ss.Connected
	})

	sh2, _ := restart(t, sh, st, dir, wal.SyncAlways)
	ownerAddr := serveHooked(t, sh2, credInfo(t, "crd_owner", `["#"]`), nil)
	otherAddr := serveHooked(t, sh2, credInfo(t, "crd_other", `["#"]`), nil)
	other := dialRaw(t, otherAddr, packet.Version5)
	if ack := other.connect(sessionConnect("dev", 3600, false)); ack.Reason != packet.ErrClientIDNotValid {
		t.Fatalf("other credential after restart: CONNACK %v, want %v", ack.Reason, packet.ErrClientIDNotValid)
	}
	back := dialRaw(t, ownerAddr, packet.Version5)
	if ack := back.connect(sessionConnect("dev", 3600, false)); ack.Reason != packet.CodeSuccess || !ack.SessionPresent {
		t.Fatalf("owner after restart: CONNACK %v present %v", ack.Reason, ack.SessionPresent)
	}
	if ss, _ := sh2.SessionStats("dev"); ss.Subscriptions != 1 {
		t.Fatalf("subscriptions after restart: %d, want 1", ss.Subscriptions)
	}
}

// TestOwnerlessRecordGoesToFirstCredential: a session restored from a
// record without an owner (written before owners were kept) belongs to the
// first credential that resumes it.
func TestOwnerlessRecordGoesToFirstCredential(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := openWALStore(t, dir, wal.SyncAlways)
	sh := newDurableShard(st)
	addr := serveHooked(t, sh, ConnInfo{AllowAnonymous: true}, nil) // no credential: no owner
	c := dialRaw(t, addr, packet.Version5)
	c.connect(sessionConnect("dev", 3600, true))
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("t/#"), QoS: 1})
	c.send(&packet.Disconnect{})
	eventually(t, "dev offline", func() bool {
		ss, ok := sh.SessionStats("dev")
		return ok && !ss.Connected
	})

	sh2, _ := restart(t, sh, st, dir, wal.SyncAlways)
	firstAddr := serveHooked(t, sh2, credInfo(t, "crd_first", `["#"]`), nil)
	secondAddr := serveHooked(t, sh2, credInfo(t, "crd_second", `["#"]`), nil)
	first := dialRaw(t, firstAddr, packet.Version5)
	if ack := first.connect(sessionConnect("dev", 3600, false)); ack.Reason != packet.CodeSuccess || !ack.SessionPresent {
		t.Fatalf("first credential: CONNACK %v present %v", ack.Reason, ack.SessionPresent)
	}
	second := dialRaw(t, secondAddr, packet.Version5)
	if ack := second.connect(sessionConnect("dev", 3600, false)); ack.Reason != packet.ErrClientIDNotValid {
		t.Fatalf("second credential: CONNACK %v, want %v", ack.Reason, packet.ErrClientIDNotValid)
	}
}

// TestResumeDropsSubscriptionsOutsideTheACL: a session resumed with a
// token whose ACL no longer covers one of its subscriptions loses that
// one (counted in the session info), keeps the other, and gets no message
// on the dropped filter.
func TestResumeDropsSubscriptionsOutsideTheACL(t *testing.T) {
	t.Parallel()
	sh := New(Options{SysInterval: -1})
	wideAddr := serveHooked(t, sh, credInfo(t, "crd_a", `["a/#","b/#"]`), nil)
	narrowAddr := serveHooked(t, sh, credInfo(t, "crd_a", `["a/#"]`), nil)

	c := dialRaw(t, wideAddr, packet.Version5)
	c.connect(sessionConnect("dev", 3600, true))
	c.subscribe(1, packet.Properties{},
		packet.Subscription{Filter: []byte("a/#"), QoS: 1}, packet.Subscription{Filter: []byte("b/#"), QoS: 1})
	c.send(&packet.Disconnect{})
	eventually(t, "dev offline", func() bool {
		ss, ok := sh.SessionStats("dev")
		return ok && !ss.Connected
	})

	again := dialRaw(t, narrowAddr, packet.Version5)
	if ack := again.connect(sessionConnect("dev", 3600, false)); !ack.SessionPresent {
		t.Fatal("session not present")
	}
	if ss, _ := sh.SessionStats("dev"); ss.Subscriptions != 1 {
		t.Fatalf("subscriptions after resume: %d, want 1", ss.Subscriptions)
	}
	for _, si := range sh.Sessions() {
		if si.ClientID == "dev" && si.SubscriptionsRevoked != 1 {
			t.Fatalf("subscriptions_revoked %d, want 1", si.SubscriptionsRevoked)
		}
	}
	if got := sh.Stats().SubscriptionsRevoked; got != 1 {
		t.Fatalf("shard SubscriptionsRevoked %d, want 1", got)
	}
	pub := dialRaw(t, wideAddr, packet.Version5)
	pub.connectOK("pub")
	for i, topicName := range []string{"b/x", "a/x"} {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: []byte(topicName), Payload: []byte(topicName)})
		pub.ack(packet.TypePuback)
	}
	if p := again.publish(); string(p.Topic) != "a/x" {
		t.Fatalf("got a message on %q, want only a/x", p.Topic)
	}
}

// TestEndSessionsOfCredential: ending a credential's sessions (its
// revocation) disconnects its live connection with the reason, deletes
// its offline session with its queue, and leaves other credentials'
// sessions alone; the client id is then free for a fresh session.
func TestEndSessionsOfCredential(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := openWALStore(t, dir, wal.SyncAlways)
	sh := newDurableShard(st)
	doomedAddr := serveHooked(t, sh, credInfo(t, "crd_doomed", `["#"]`), nil)
	keptAddr := serveHooked(t, sh, credInfo(t, "crd_kept", `["#"]`), nil)

	offline := dialRaw(t, doomedAddr, packet.Version5)
	offline.connect(sessionConnect("off", 3600, true))
	offline.subscribe(1, packet.Properties{}, packet.Subscription{Filter: []byte("t/#"), QoS: 1})
	offline.send(&packet.Disconnect{})
	live := dialRaw(t, doomedAddr, packet.Version5)
	live.connect(sessionConnect("on", 3600, true))
	kept := dialRaw(t, keptAddr, packet.Version5)
	kept.connect(sessionConnect("kept", 3600, true))
	eventually(t, "off offline", func() bool {
		ss, ok := sh.SessionStats("off")
		return ok && !ss.Connected
	})
	kept.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("t/x"), Payload: []byte("x")})
	kept.ack(packet.TypePuback)

	if n := sh.EndSessionsOf("crd_doomed", packet.ErrNotAuthorized); n != 2 {
		t.Fatalf("ended %d sessions, want 2", n)
	}
	live.expectDisconnect(packet.ErrNotAuthorized)
	eventually(t, "sessions gone", func() bool {
		_, off := sh.SessionStats("off")
		_, on := sh.SessionStats("on")
		return !off && !on
	})
	if ss, ok := sh.SessionStats("kept"); !ok || !ss.Connected {
		t.Fatal("another credential's session was touched")
	}

	// After a restart the records are gone too; a new credential gets a
	// fresh session under the client id.
	sh2, _ := restart(t, sh, st, dir, wal.SyncAlways)
	addr := serveHooked(t, sh2, credInfo(t, "crd_new", `["#"]`), nil)
	fresh := dialRaw(t, addr, packet.Version5)
	if ack := fresh.connect(sessionConnect("off", 3600, false)); ack.Reason != packet.CodeSuccess || ack.SessionPresent {
		t.Fatalf("new credential: CONNACK %v present %v, want a fresh session", ack.Reason, ack.SessionPresent)
	}
	fresh.expectSilence(100 * time.Millisecond)
}
