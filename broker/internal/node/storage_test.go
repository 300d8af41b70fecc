package node

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"berth.dev/testenv"
)

// A tenant's retained messages and a persistent session's queued messages
// live in the node's data directory and survive a restart of the node.
func TestTenantStateSurvivesANodeRestart(t *testing.T) {
	t.Parallel()
	url, dir := testenv.DatabaseURL(t), t.TempDir()
	c := cred{"ten_a", "crd_a", allowAll, 0}

	first := startNodeWith(t, url, dir, true)
	// A persistent session subscribes, then goes away.
	conn := first.dial(t, c, nil)
	durable := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	expiry := uint32(3600)
	if ack, err := durable.Connect(ctx, &paho.Connect{ClientID: "durable", KeepAlive: 30, CleanStart: true, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil || ack.ReasonCode != 0 {
		t.Fatalf("connect: %v %v", ack, err)
	}
	subscribe(t, durable, "jobs/#")
	_ = durable.Disconnect(&paho.Disconnect{})

	pub := first.mqtt5(t, c, "pub", nil)
	if rc, err := publishQoS1(t, pub, "jobs/1", []byte("queued while offline"), false); err != nil || rc >= 0x80 {
		t.Fatalf("publish: %#x %v", rc, err)
	}
	if rc, err := publishQoS1(t, pub, "config/site", []byte("retained"), true); err != nil || rc >= 0x80 {
		t.Fatalf("retained publish: %#x %v", rc, err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := first.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}

	second := startNodeWith(t, url, dir, false)
	got := make(chan string, 10)
	conn = second.dial(t, c, nil)
	back := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(p paho.PublishReceived) (bool, error) {
			got <- p.Packet.Topic + "=" + string(p.Packet.Payload)
			return true, nil
		},
	}})
	ack, err := back.Connect(ctx, &paho.Connect{ClientID: "durable", KeepAlive: 30, CleanStart: false, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil || ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("reconnect after the restart: %+v %v, want the session present", ack, err)
	}
	t.Cleanup(func() { _ = back.Disconnect(&paho.Disconnect{}) })
	expectMsg(t, got, "jobs/1=queued while offline")

	watcher := second.mqtt5(t, c, "watcher", got)
	subscribe(t, watcher, "config/#")
	expectMsg(t, got, "config/site=retained")
}
