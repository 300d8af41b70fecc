package listener_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
)

// TestAutopahoOverWebSocket runs paho's autopaho client (MQTT 5 over
// WebSocket, subprotocol "mqtt") against the broker: it subscribes when
// the connection comes up and receives its own publish.
func TestAutopahoOverWebSocket(t *testing.T) {
	_, wsURL := start(t)
	u, err := url.Parse(wsURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan *paho.Publish, 1)
	subscribed := make(chan struct{})
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     30,
		CleanStartOnInitialConnection: true,
		ConnectTimeout:                5 * time.Second,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			go func() {
				if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "ws/#", QoS: 1}}}); err == nil {
					close(subscribed)
				}
			}()
		},
		ClientConfig: paho.ClientConfig{
			ClientID: "autopaho-ws",
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(pr paho.PublishReceived) (bool, error) { got <- pr.Packet; return true, nil },
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cm.Disconnect(context.Background()) }()
	select {
	case <-subscribed:
	case <-ctx.Done():
		t.Fatal("not subscribed")
	}
	if _, err := cm.Publish(ctx, &paho.Publish{Topic: "ws/echo", QoS: 1, Payload: []byte("round trip")}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if string(p.Payload) != "round trip" {
			t.Fatalf("payload %q", p.Payload)
		}
	case <-ctx.Done():
		t.Fatal("message not received over WebSocket")
	}
}
