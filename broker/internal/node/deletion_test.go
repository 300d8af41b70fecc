package node

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/store"
	"berth.dev/broker/packet"
	"berth.dev/testenv"
)

// deleteTenantAsAPI deletes a tenant as DELETE /v1/tenants/{tid} does
// (services/internal/store.DeleteTenant): the row goes, its tombstone
// stays, and both channels are notified, in one transaction.
func deleteTenantAsAPI(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `WITH gone AS (DELETE FROM tenants WHERE id = $1 RETURNING id, account_id, slug, created_at)
		INSERT INTO deleted_tenants (id, account_id, slug, created_at) SELECT * FROM gone`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify('berth_placement', $1), pg_notify('berth_tenants_deleted', $1)`, id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// connEnd is how a raw connection ended: the DISCONNECT it got, if any,
// then the error that ended reading.
type connEnd struct {
	sawDisconnect bool
	reason        packet.ReasonCode
	err           error
}

// watchEnd reads r (a connection past its CONNACK) in the background until
// the connection ends.
func watchEnd(r *packet.Reader, version byte) <-chan connEnd {
	ended := make(chan connEnd, 1)
	go func() {
		var e connEnd
		for {
			fh, body, err := r.ReadPacket(0)
			if err != nil {
				e.err = err
				ended <- e
				return
			}
			if fh.Type == packet.TypeDisconnect {
				var d packet.Disconnect
				if err := d.Decode(version, fh, body); err == nil {
					e.sawDisconnect, e.reason = true, d.Reason
				}
			}
		}
	}()
	return ended
}

func waitEnd(t *testing.T, ended <-chan connEnd, what string) connEnd {
	t.Helper()
	select {
	case e := <-ended:
		var ne net.Error
		if errors.As(e.err, &ne) && ne.Timeout() {
			t.Fatalf("%s: still open after the deletion", what)
		}
		return e
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: still open 15 s after the deletion", what)
		return connEnd{}
	}
}

func dirExists(t *testing.T, dir string) bool {
	t.Helper()
	_, err := os.Stat(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// Deleting a tenant ends its connections at once (MQTT 5: DISCONNECT 0x87;
// 3.1.1: closed without a word), closes its shard, erases its directory,
// flushes its last usage (messages, bytes, per credential, latency) under
// its id, and refuses it from then on (CONNACK 0x87 / return code 5, admin
// 404). A neighbour on the node notices nothing, and a deletion notice for
// a tenant that still exists (say, one that moved) is ignored.
func TestDeletedTenantIsDisconnectedErasedAndFlushed(t *testing.T) {
	t.Parallel()
	url, dir := testenv.DatabaseURL(t), t.TempDir()
	n := startNodeWith(t, url, dir, true)
	seedTenant(t, n.pool, "ten_c")
	ctx := context.Background()
	a := cred{"ten_a", "crd_a", allowAll, 0}

	// ten_a's traffic, retained message and offline session, all in its
	// log and in its usage counters, none flushed yet (the test node
	// flushes hourly).
	got := make(chan string, 10)
	sub := n.mqtt5(t, a, "sub", got)
	subscribe(t, sub, "d/#")
	pub := n.mqtt5(t, a, "pub", nil)
	for _, p := range []string{"0", "1", "2"} {
		publish(t, pub, "d/x", p)
		expectMsg(t, got, "d/x="+p)
	}
	if rc, err := publishQoS1(t, pub, "keep/site", []byte("retained"), true); err != nil || rc >= 0x80 {
		t.Fatalf("retained publish: %#x %v", rc, err)
	}
	durable := packet.Connect{Version: packet.Version5, ClientID: []byte("durable"), KeepAlive: 30}
	durable.Props.Has.Set(packet.PropSessionExpiry)
	durable.Props.SessionExpiry = 3600
	dc := n.dial(t, a, nil)
	sendConnect(t, dc, &durable)
	dc.Close()

	// The connections to watch, both protocol versions.
	c5 := n.dial(t, a, nil)
	r5, _ := sendConnect(t, c5, &packet.Connect{Version: packet.Version5, CleanStart: true, KeepAlive: 30, ClientID: []byte("watch5")})
	end5 := watchEnd(r5, packet.Version5)
	c3 := n.dial(t, a, nil)
	r3, _ := sendConnect(t, c3, &packet.Connect{Version: packet.Version311, CleanStart: true, KeepAlive: 30, ClientID: []byte("watch3")})
	end3 := watchEnd(r3, packet.Version311)

	// A neighbour on the same node.
	gotB := make(chan string, 10)
	nb := n.mqtt5(t, cred{"ten_b", "crd_b", allowAll, 0}, "neighbour", gotB)
	subscribe(t, nb, "n/#")

	dirA := store.TenantDir(dir, "ten_a")
	if !dirExists(t, dirA) {
		t.Fatalf("ten_a has no directory %s before the deletion", dirA)
	}

	deleteTenantAsAPI(t, n.pool, "ten_a")

	if e := waitEnd(t, end5, "MQTT 5 client"); !e.sawDisconnect || e.reason != packet.ErrNotAuthorized {
		t.Fatalf("MQTT 5 client: DISCONNECT seen %v reason %#x (%v), want 0x87 before the close", e.sawDisconnect, byte(e.reason), e.err)
	}
	if e := waitEnd(t, end3, "MQTT 3.1.1 client"); e.sawDisconnect {
		t.Fatalf("MQTT 3.1.1 client: DISCONNECT seen %v (%v), want the connection just closed", e.sawDisconnect, e.err)
	}
	poll(t, 10*time.Second, "ten_a's directory erased", func() bool { return !dirExists(t, dirA) })

	// Its last usage is flushed and stays under its id.
	type usageRow struct{ in, out, bin, bout int64 }
	var u usageRow
	poll(t, 10*time.Second, "ten_a's last usage flushed", func() bool {
		if err := n.pool.QueryRow(ctx, `SELECT coalesce(sum(messages_in), 0), coalesce(sum(messages_out), 0),
			coalesce(sum(bytes_in), 0), coalesce(sum(bytes_out), 0) FROM usage WHERE tenant_id = 'ten_a'`).Scan(&u.in, &u.out, &u.bin, &u.bout); err != nil {
			t.Fatal(err)
		}
		return u.in > 0
	})
	if u.in != 4 || u.out != 3 || u.bin == 0 || u.bout == 0 {
		t.Fatalf("ten_a's flushed usage %+v, want 4 messages in (3 + the retained one), 3 out, bytes both ways", u)
	}
	var credIn, delivery, connects int64
	if err := n.pool.QueryRow(ctx, `SELECT coalesce(sum(messages_in), 0) FROM usage_credentials
		WHERE tenant_id = 'ten_a' AND credential_id = 'crd_a'`).Scan(&credIn); err != nil {
		t.Fatal(err)
	}
	if err := n.pool.QueryRow(ctx, `SELECT coalesce(sum(count) FILTER (WHERE metric = 'delivery'), 0),
		coalesce(sum(count) FILTER (WHERE metric = 'connect'), 0) FROM latency WHERE tenant_id = 'ten_a'`).Scan(&delivery, &connects); err != nil {
		t.Fatal(err)
	}
	if credIn != 4 || delivery != 3 || connects != 5 {
		t.Fatalf("ten_a's usage by credential %d messages in, latency %d deliveries and %d connects; want 4, 3, 5", credIn, delivery, connects)
	}

	// Refused from now on, in both versions, and unknown to the admin API.
	again := n.dial(t, a, nil)
	if _, ack := sendConnect(t, again, &packet.Connect{Version: packet.Version5, CleanStart: true, ClientID: []byte("back")}); ack.Reason != packet.ErrNotAuthorized {
		t.Fatalf("MQTT 5 reconnect: CONNACK %#x, want 0x87", byte(ack.Reason))
	}
	again3 := n.dial(t, a, nil)
	if _, ack := sendConnect(t, again3, &packet.Connect{Version: packet.Version311, CleanStart: true, ClientID: []byte("back3")}); ack.Reason.ConnackV3() != 5 {
		t.Fatalf("MQTT 3.1.1 reconnect: return code %d, want 5 (not authorized)", ack.Reason.ConnackV3())
	}
	if code, body := adminDo(t, n, "GET", "/admin/tenants/ten_a/sessions", ""); code != 404 {
		t.Fatalf("admin sessions of the deleted tenant: %d %s, want 404", code, body)
	}
	if dirExists(t, dirA) {
		t.Fatal("a refused connection recreated the deleted tenant's directory")
	}

	// A deletion notice for a tenant that still exists is ignored; the
	// listener handles notices in order, so once ten_c's real deletion has
	// taken effect, ten_b's notice has been read.
	if _, err := n.pool.Exec(ctx, `SELECT pg_notify('berth_tenants_deleted', 'ten_b')`); err != nil {
		t.Fatal(err)
	}
	deleteTenantAsAPI(t, n.pool, "ten_c")
	poll(t, 10*time.Second, "ten_c deleted", func() bool { return n.isDeleted("ten_c") })
	if n.isDeleted("ten_b") {
		t.Fatal("ten_b taken for deleted on a notice alone")
	}
	other := n.mqtt5(t, cred{"ten_b", "crd_b", allowAll, 0}, "other", nil)
	publish(t, other, "n/1", "still here")
	expectMsg(t, gotB, "n/1=still here")
}

// A tenant deleted while its node was down: the node, started again on the
// same data directory, erases the tenant's directory without opening its
// shard and refuses its connections; a live tenant's directory stays.
func TestTenantDeletedWhileTheNodeWasDown(t *testing.T) {
	t.Parallel()
	url, dir := testenv.DatabaseURL(t), t.TempDir()
	first := startNodeWith(t, url, dir, true)
	for _, c := range []cred{{"ten_a", "crd_a", allowAll, 0}, {"ten_b", "crd_b", allowAll, 0}} {
		pub := first.mqtt5(t, c, "pub", nil)
		if rc, err := publishQoS1(t, pub, "keep/site", []byte("retained"), true); err != nil || rc >= 0x80 {
			t.Fatalf("%s: retained publish: %#x %v", c.tenant, rc, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	dirA, dirB := store.TenantDir(dir, "ten_a"), store.TenantDir(dir, "ten_b")
	if !dirExists(t, dirA) || !dirExists(t, dirB) {
		t.Fatal("the tenants have no directories after the first run")
	}

	deleteTenantAsAPI(t, first.pool, "ten_a") // nobody listens

	second := startNodeWith(t, url, dir, false)
	poll(t, 10*time.Second, "the deleted tenant's directory erased on start", func() bool { return !dirExists(t, dirA) })
	if !dirExists(t, dirB) {
		t.Fatal("the live tenant's directory was erased too")
	}
	conn := second.dial(t, cred{"ten_a", "crd_a", allowAll, 0}, nil)
	if _, ack := sendConnect(t, conn, &packet.Connect{Version: packet.Version5, CleanStart: true, ClientID: []byte("back")}); ack.Reason != packet.ErrNotAuthorized {
		t.Fatalf("reconnect to the deleted tenant: CONNACK %#x, want 0x87", byte(ack.Reason))
	}
	if _, ok := second.lookup("ten_a"); ok || dirExists(t, dirA) {
		t.Fatal("the deleted tenant's shard was opened again")
	}
	// The live tenant's state came through.
	got := make(chan string, 10)
	w := second.mqtt5(t, cred{"ten_b", "crd_b", allowAll, 0}, "watcher", got)
	subscribe(t, w, "keep/#")
	expectMsg(t, got, "keep/site=retained")
}

// A re-authentication is refused (DISCONNECT 0x87) once the tenant's row is
// gone, even before the node has heard of the deletion.
func TestReauthenticationRefusedForADeletedTenant(t *testing.T) {
	t.Parallel()
	keys := serveJWKS(t)
	n := startNodeCfg(t, testenv.DatabaseURL(t), "", true, func(c *Config) { c.JWKSURL = keys.url })
	hour := time.Now().Add(time.Hour)
	conn := n.dial(t, cred{"ten_a", "crd_a", allowAll, hour.Unix()}, nil)
	r := rawConnect(t, conn, "renewer")
	reauth := func() {
		t.Helper()
		a := packet.Auth{Reason: packet.CodeReAuthenticate}
		a.Props.AuthMethod, a.Props.AuthData = []byte(AuthMethodJWT), keys.sign(t, nil, claimsFor("ten_a", "crd_a", hour))
		b, err := a.Append(nil, packet.Version5)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	reauth() // accepted while the tenant exists
	fh, body, err := r.ReadPacket(0)
	var ans packet.Auth
	if err != nil || fh.Type != packet.TypeAuth || ans.Decode(packet.Version5, fh, body) != nil || ans.Reason != packet.CodeSuccess {
		t.Fatalf("re-authentication of a live tenant: %v %v reason %#x, want AUTH 0x00", fh.Type, err, byte(ans.Reason))
	}
	// The row goes without a notice: the node has not heard of it.
	if _, err := n.pool.Exec(context.Background(), `DELETE FROM tenants WHERE id = 'ten_a'`); err != nil {
		t.Fatal(err)
	}
	reauth()
	expectDisconnect(t, r, packet.ErrNotAuthorized)
}
