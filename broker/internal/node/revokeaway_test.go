package node

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/packet"
	"berth.dev/testenv"
)

// sessionOwners answers the admin GET /sessions of tenant: client id ->
// owning credential.
func sessionOwners(t *testing.T, n *testNode, tenant string) map[string]string {
	t.Helper()
	code, body := adminDo(t, n, "GET", "/admin/tenants/"+tenant+"/sessions", "")
	if code != http.StatusOK {
		t.Fatalf("GET sessions: %d %s", code, body)
	}
	var out struct {
		Sessions []struct {
			ClientID     string `json:"client_id"`
			CredentialID string `json:"credential_id"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, s := range out.Sessions {
		m[s.ClientID] = s.CredentialID
	}
	return m
}

// offlineSession leaves a persistent session for clientID, owned by c,
// subscribed to jobs/#.
func (n *testNode) offlineSession(t *testing.T, c cred, clientID string) {
	t.Helper()
	cl, ack := n.persistent5(t, c, clientID, true, nil)
	if ack.ReasonCode != 0 {
		t.Fatalf("%s: CONNACK %#x", clientID, ack.ReasonCode)
	}
	subscribe(t, cl, "jobs/#")
	_ = cl.Disconnect(&paho.Disconnect{})
}

// A credential revoked while its node was down: the node, restarted,
// restores its sessions from disk and deletes those of the revoked
// credential before serving the tenant (admin GET /sessions no longer
// lists them); the credential is refused (0x87), its client id is free
// for another credential of the tenant, which gets a fresh session
// without the old queue; another credential's session is untouched.
func TestSessionsOfACredentialRevokedWhileDownGoOnRestart(t *testing.T) {
	t.Parallel()
	url, dir := testenv.DatabaseURL(t), t.TempDir()
	doomed, keeper := cred{"ten_a", "crd_doomed", allowAll, 0}, cred{"ten_a", "crd_keeper", allowAll, 0}
	first := startNodeWith(t, url, dir, true)
	first.offlineSession(t, doomed, "device-7")
	first.offlineSession(t, keeper, "device-8")
	pub := first.mqtt5(t, cred{"ten_a", "crd_pub", allowAll, 0}, "pub", nil)
	if rc := publish(t, pub, "jobs/1", "queued"); rc != 0 {
		t.Fatalf("publish: %#x", rc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// Revoked while no node listens: the notice reaches nobody.
	if _, err := first.pool.Exec(ctx, `UPDATE credentials SET revoked_at = now() WHERE id = $1`, doomed.id); err != nil {
		t.Fatal(err)
	}
	if _, err := first.pool.Exec(ctx, `SELECT pg_notify('berth_credentials', $1)`, doomed.id); err != nil {
		t.Fatal(err)
	}

	second := startNodeWith(t, url, dir, false)
	owners := sessionOwners(t, second, "ten_a")
	if _, ok := owners["device-7"]; ok || owners["device-8"] != keeper.id {
		t.Fatalf("sessions after the restart %v: want device-8 (%s) and not device-7", owners, keeper.id)
	}

	conn := second.dial(t, doomed, nil)
	if _, ack := sendConnect(t, conn, &packet.Connect{Version: packet.Version5, CleanStart: false, KeepAlive: 30, ClientID: []byte("device-7")}); ack.Reason != packet.ErrNotAuthorized {
		t.Fatalf("revoked credential: CONNACK %#x, want 0x87", byte(ack.Reason))
	}
	got := make(chan string, 4)
	_, ack := second.persistent5(t, cred{"ten_a", "crd_new", allowAll, 0}, "device-7", false, got)
	if ack.ReasonCode != 0 || ack.SessionPresent {
		t.Fatalf("another credential as device-7: CONNACK %#x present %v, want a fresh session", ack.ReasonCode, ack.SessionPresent)
	}
	expectNone(t, got, 200*time.Millisecond)

	kept := make(chan string, 4)
	_, ack = second.persistent5(t, keeper, "device-8", false, kept)
	if ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("keeper: CONNACK %#x present %v, want its session back", ack.ReasonCode, ack.SessionPresent)
	}
	expectMsg(t, kept, "jobs/1=queued")
}

// A credential revoked while the node's revocation listener was away: when
// it reconnects it checks the owners of every session of the open shards,
// offline ones included, and deletes the revoked credential's.
func TestSessionsOfACredentialRevokedWhileListenerAwayGoOnReconnect(t *testing.T) {
	t.Parallel()
	n := startNodeWith(t, testenv.DatabaseURL(t), t.TempDir(), true)
	doomed := cred{"ten_a", "crd_doomed", allowAll, 0}
	n.offlineSession(t, doomed, "device-3")
	n.offlineSession(t, cred{"ten_a", "crd_keeper", allowAll, 0}, "device-4")
	ctx := context.Background()

	// Revoked without a notice (as if it was sent while the listener was
	// down), then the listener's connection is cut.
	if _, err := n.pool.Exec(ctx, `UPDATE credentials SET revoked_at = now() WHERE id = $1`, doomed.id); err != nil {
		t.Fatal(err)
	}
	poll(t, 15*time.Second, "the revocation listener's connection cut", func() bool {
		var cut int
		if err := n.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'berth-revocation-listener'`).Scan(&cut); err != nil {
			t.Fatal(err)
		}
		return cut > 0
	})
	poll(t, 15*time.Second, "device-3's session deleted", func() bool {
		_, ok := sessionOwners(t, n, "ten_a")["device-3"]
		return !ok
	})
	if owners := sessionOwners(t, n, "ten_a"); owners["device-4"] != "crd_keeper" {
		t.Fatalf("sessions %v: want device-4 kept", owners)
	}
}
