package shard

import (
	"fmt"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// paho3 connects a paho.mqtt.golang (MQTT 3.1.1) client.
func paho3(t *testing.T, b *testBroker, id string, clean bool, configure ...func(*mqtt.ClientOptions)) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + b.addr).SetClientID(id).SetCleanSession(clean).
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
	for _, f := range configure {
		f(o)
	}
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c
}

func wait3(t *testing.T, tok mqtt.Token) {
	t.Helper()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("token: %v", tok.Error())
	}
}

func TestPahoV311PubSub(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	for _, qos := range []byte{0, 1, 2} {
		t.Run(fmt.Sprintf("QoS %d", qos), func(t *testing.T) {
			t.Parallel()
			topic := fmt.Sprintf("paho3/%d", qos)
			got := make(chan mqtt.Message, 10)
			sub := paho3(t, b, "p3sub"+topic, true)
			wait3(t, sub.Subscribe(topic, qos, func(_ mqtt.Client, m mqtt.Message) { got <- m }))
			pub := paho3(t, b, "p3pub"+topic, true)
			for i := range 5 {
				wait3(t, pub.Publish(topic, qos, false, fmt.Sprint(i)))
			}
			for i := range 5 {
				select {
				case m := <-got:
					if string(m.Payload()) != fmt.Sprint(i) || m.Qos() != qos {
						t.Fatalf("message %d: %q qos %d", i, m.Payload(), m.Qos()) // [MQTT-4.6.0-6] in order
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("message %d not delivered", i)
				}
			}
		})
	}
}

func TestPahoV311PersistentSession(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	got := make(chan string, 10)
	handler := func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }
	sub := paho3(t, b, "p3persist", false, func(o *mqtt.ClientOptions) { o.SetDefaultPublishHandler(handler) })
	wait3(t, sub.Subscribe("persist/#", 1, nil))
	sub.Disconnect(50)
	eventually(t, "offline", func() bool { st, ok := b.shard.SessionStats("p3persist"); return ok && !st.Connected })

	pub := paho3(t, b, "p3persist-pub", true)
	wait3(t, pub.Publish("persist/a", 1, false, "while away"))
	wait3(t, pub.Publish("persist/b", 0, false, "qos0 not kept"))

	paho3(t, b, "p3persist", false, func(o *mqtt.ClientOptions) { o.SetDefaultPublishHandler(handler) })
	select {
	case m := <-got:
		if m != "while away" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("queued message not delivered")
	}
}

func TestPahoV311WillAndRetained(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	pub := paho3(t, b, "p3ret-pub", true)
	wait3(t, pub.Publish("status/config", 1, true, "v1"))

	got := make(chan mqtt.Message, 10)
	watch := paho3(t, b, "p3watch", true)
	handler := func(_ mqtt.Client, m mqtt.Message) { got <- m }
	wait3(t, watch.SubscribeMultiple(map[string]byte{"status/#": 1, "will/#": 1}, handler))
	select {
	case m := <-got:
		if !m.Retained() || string(m.Payload()) != "v1" {
			t.Fatalf("retained %q retained=%v", m.Payload(), m.Retained())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("retained message not delivered")
	}

	// A will published when the connection drops without DISCONNECT.
	dev := dialRaw(t, b.addr, 4)
	dev.connect(willConnect("device", 4, 0, 0))
	_ = dev.nc.Close()
	select {
	case m := <-got:
		if m.Topic() != "will/device" {
			t.Fatalf("got %s", m.Topic())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("will not delivered")
	}
}
