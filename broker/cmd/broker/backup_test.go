package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/node"
	"berth.dev/broker/internal/tenanttest"
	"berth.dev/broker/proxyproto"
	"berth.dev/testenv"
)

const backupTenant = "ten_backup"

// dialAsGateway opens a connection to n's MQTT listener and sends the
// PROXY header a gateway signing with secret would, for tenant and
// credential (every topic allowed). The caller closes the connection.
func dialAsGateway(t *testing.T, n *node.Node, secret, tenant, credential string) net.Conn {
	t.Helper()
	s, err := proxyproto.NewSigner([]byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := s.Append(nil, netip.MustParseAddrPort("203.0.113.7:40000"), netip.MustParseAddrPort("127.0.0.1:7883"),
		&proxyproto.Info{TenantID: tenant, CredentialID: credential, ACL: []byte(`{"pub":["#"],"sub":["#"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(hdr); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn
}

// mqttVia connects a paho.golang client to n as a gateway would (a PROXY
// header signed with the current proxy secret), for backupTenant.
func mqttVia(t *testing.T, n *node.Node, clientID string, clean bool, got chan<- string) *paho.Client {
	t.Helper()
	conn := dialAsGateway(t, n, newProxySecret, backupTenant, "crd_backup")
	t.Cleanup(func() { conn.Close() })
	cl := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(p paho.PublishReceived) (bool, error) {
			if got != nil {
				got <- string(p.Packet.Payload)
			}
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	expiry := uint32(3600)
	ack, err := cl.Connect(ctx, &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: clean,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil || ack.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %+v", clientID, err, ack)
	}
	return cl
}

// TestBackupRestoreUnderLoad: broker backup copies a running node's data
// directory while a publisher keeps writing QoS 1 messages; broker restore
// puts the copy into a fresh directory; a node started on it delivers to
// the persistent session every message acknowledged before the backup
// started.
func TestBackupRestoreUnderLoad(t *testing.T) {
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	q := tenanttest.Pro()
	q.MaxMsgsPerSec, q.ClientMsgsPerSec = 1_000_000, 1_000_000 // the load is not throttled
	tenanttest.Seed(t, pool, backupTenant, q)
	if _, err := pool.Exec(context.Background(), `INSERT INTO credentials (id, tenant_id, name, acl) VALUES ('crd_backup', $1, 'backup', '{}')`, backupTenant); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	live, backupDir, restored := filepath.Join(root, "live"), filepath.Join(root, "backup"), filepath.Join(root, "restored")
	env := func(data string) map[string]string {
		return map[string]string{"BERTH_PROXY_SECRET": newProxySecret, "BERTH_NODE_TOKEN": newNodeToken, "BERTH_DATA": data,
			"BERTH_FSYNC": "interval", "BERTH_USAGE_INTERVAL": "1h"}
	}
	a := startRotationNode(t, url, "backup-a", env(live))

	sub := mqttVia(t, a, "sub", true, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "load/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := sub.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}

	// The load: QoS 1 publishes one after another; acked counts those the
	// node answered with a successful PUBACK (payloads 0 .. acked-1).
	pub := mqttVia(t, a, "pub", true, nil)
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 50_000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := pub.Publish(ctx, &paho.Publish{Topic: "load/" + strconv.Itoa(i%8), QoS: 1, Payload: []byte(strconv.Itoa(i))})
			cancel()
			if err != nil || (r != nil && r.ReasonCode != 0) {
				t.Errorf("publish %d: %v", i, err)
				return
			}
			acked.Store(int64(i + 1))
		}
	}()
	waitFor(t, 10*time.Second, func() bool { return acked.Load() >= 500 })

	before := acked.Load() // acknowledged before the backup starts
	var out, errOut bytes.Buffer
	code := runBackup(false, []string{"-out", backupDir}, func(k string) string { return env(live)[k] }, &out, &errOut)
	during := acked.Load()
	close(stop)
	wg.Wait()
	if code != 0 {
		t.Fatalf("broker backup: exit %d: %s", code, errOut.String())
	}
	t.Logf("%s(%d messages acknowledged before the backup started, %d more during it)", out.String(), before, during-before)
	if during == before {
		t.Log("no message was acknowledged while the backup ran")
	}
	_ = pub.Disconnect(&paho.Disconnect{})
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := a.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	scancel()

	out.Reset()
	if code := runBackup(true, []string{"-from", backupDir, "-data", restored}, func(string) string { return "" }, &out, &errOut); code != 0 {
		t.Fatalf("broker restore: exit %d: %s", code, errOut.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	if code := runBackup(true, []string{"-from", backupDir, "-data", restored}, func(string) string { return "" }, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "not empty") {
		t.Fatalf("restore into a non-empty directory: exit %d: %s", code, errOut.String())
	}

	b := startRotationNode(t, url, "backup-b", env(restored))
	got := make(chan string, 60_000)
	mqttVia(t, b, "sub", false, got)
	seen := make(map[int]bool)
	remaining := int(before) // acknowledged before the backup, not yet delivered
	deadline := time.After(20 * time.Second)
	for remaining > 0 {
		select {
		case p := <-got:
			i, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("payload %q", p)
			}
			if !seen[i] && i < int(before) {
				remaining--
			}
			seen[i] = true
		case <-deadline:
			t.Fatalf("%d of the %d messages acknowledged before the backup are missing after the restore", remaining, before)
		}
	}
	t.Logf("restored node delivered %d messages, all %d acknowledged before the backup among them", len(seen), before)
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
