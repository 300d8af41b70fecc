package node

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/broker/internal/shard"
	"berth.dev/testenv"
)

// waitClosed waits until the tenant's shard has closed for idleness.
func (n *testNode) waitClosed(t *testing.T, tenant string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.mu.Lock()
		_, open := n.tenants[tenant]
		_, closing := n.closingTenants[tenant]
		n.mu.Unlock()
		if !open && !closing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant %s still open after 10 s idle", tenant)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *testNode) shardOf(t *testing.T, tenant string) *shard.Shard {
	t.Helper()
	tn, ok := n.lookup(tenant)
	if !ok {
		t.Fatalf("tenant %s not open", tenant)
	}
	return tn.sh
}

// With a data directory an idle tenant's shard closes, and the next
// connection or admin call finds its sessions and retained messages back.
func TestIdleShardClosesAndReopensFromTheWAL(t *testing.T) {
	t.Parallel()
	n := startNodeCfg(t, testenv.DatabaseURL(t), t.TempDir(), true, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	c := cred{"ten_a", "crd_a", allowAll, 0}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	expiry := uint32(3600)
	durable := paho.NewClient(paho.ClientConfig{Conn: n.dial(t, c, nil)})
	if ack, err := durable.Connect(ctx, &paho.Connect{ClientID: "durable", KeepAlive: 30, CleanStart: true, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil || ack.ReasonCode != 0 {
		t.Fatalf("connect: %v %v", ack, err)
	}
	subscribe(t, durable, "jobs/#")
	_ = durable.Disconnect(&paho.Disconnect{})
	pub := paho.NewClient(paho.ClientConfig{Conn: n.dial(t, c, nil)})
	if _, err := pub.Connect(ctx, &paho.Connect{ClientID: "pub", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	publishQoS1(t, pub, "jobs/1", []byte("queued while idle"), false)
	publishQoS1(t, pub, "config/site", []byte("retained"), true)
	first := n.shardOf(t, "ten_a")
	_ = pub.Disconnect(&paho.Disconnect{})

	n.waitClosed(t, "ten_a")
	// The old shard is shut down: it closes a connection handed to it.
	a, b := net.Pipe()
	go first.ServeConn(a, shard.ConnInfo{AllowAnonymous: true})
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("reading from a connection to the closed shard: %v, want EOF", err)
	}

	// An admin call reopens it, with the retained message.
	code, body := adminDo(t, n, "GET", "/admin/tenants/ten_a/retained", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"topic":"config/site"`) {
		t.Fatalf("retained after reopening: %d %s", code, body)
	}
	if n.shardOf(t, "ten_a") == first {
		t.Fatal("the admin call found the old shard; want a reopened one")
	}
	n.waitClosed(t, "ten_a")

	// So does a connection, with the persistent session and its queue.
	got := make(chan string, 10)
	back := paho.NewClient(paho.ClientConfig{Conn: n.dial(t, c, nil), OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(p paho.PublishReceived) (bool, error) {
			got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			return true, nil
		},
	}})
	ack, err := back.Connect(ctx, &paho.Connect{ClientID: "durable", KeepAlive: 30, CleanStart: false, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil || ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("reconnect after the idle close: %+v %v, want the session present", ack, err)
	}
	t.Cleanup(func() { _ = back.Disconnect(&paho.Disconnect{}) })
	expectMsg(t, got, "jobs/1=queued while idle")
}

// Without a data directory only a shard with nothing to lose closes: one
// holding a retained message stays open.
func TestIdleShardWithoutStorageKeepsState(t *testing.T) {
	t.Parallel()
	n := startNodeCfg(t, testenv.DatabaseURL(t), "", true, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connectAndLeave := func(c cred, retained bool) *shard.Shard {
		cl := paho.NewClient(paho.ClientConfig{Conn: n.dial(t, c, nil)})
		if _, err := cl.Connect(ctx, &paho.Connect{ClientID: "c", KeepAlive: 30, CleanStart: true}); err != nil {
			t.Fatal(err)
		}
		if retained {
			publishQoS1(t, cl, "config/site", []byte("kept in memory"), true)
		}
		sh := n.shardOf(t, c.tenant)
		_ = cl.Disconnect(&paho.Disconnect{})
		return sh
	}
	connectAndLeave(cred{"ten_b", "crd_b", allowAll, 0}, false)
	kept := connectAndLeave(cred{"ten_a", "crd_a", allowAll, 0}, true)
	n.waitClosed(t, "ten_b") // nothing to lose: closed
	// ten_a, once its connection has gone, is passed over by the closer
	// however long it has been idle.
	deadline := time.Now().Add(10 * time.Second)
	for {
		tn, _ := n.lookup("ten_a")
		n.mu.Lock()
		held := tn.refs
		n.mu.Unlock()
		if held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ten_a still held 10 s after its client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.closeIdle(time.Now().Add(time.Hour))
	if n.shardOf(t, "ten_a") != kept {
		t.Fatal("a memory-only shard holding a retained message was closed")
	}
	code, body := adminDo(t, n, "GET", "/admin/tenants/ten_a/retained", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"topic":"config/site"`) {
		t.Fatalf("retained: %d %s", code, body)
	}
}
